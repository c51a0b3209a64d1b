package far_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/farmem/farmem/alloc"
	"github.com/farmem/farmem/far"
	"github.com/farmem/farmem/farmem"
	"github.com/farmem/farmem/farmem/farmemtest"
	"github.com/farmem/farmem/farmem/local"
	"github.com/farmem/farmem/sim"
)

// quiet keeps the allocator's announcements fresh for the length of a test, so that round-trip
// counts are not disturbed by a pin refresh.
var quiet = far.Options{Alloc: alloc.Options{Lease: time.Minute, Refresh: 30 * time.Second}}

// rig is a fabric on local or sim, with helpers to run clients inside it.
type rig struct {
	f farmem.Fabric
	s *sim.Sim // nil on local
}

func localRig(t *testing.T, o local.Options) *rig {
	t.Helper()
	o.Strict = true
	if o.ComputeNodes == 0 {
		o.ComputeNodes = 2
	}
	f, err := local.New(o)
	require.NoError(t, err)
	t.Cleanup(func() {
		require.Zero(t, f.Violations(), "strict-mode violations")
		_ = f.Close()
	})
	return &rig{f: f}
}

func simRig(t *testing.T, seed uint64, tearing bool) *rig {
	t.Helper()
	m := sim.ConnectX6()
	m.ComputeNodes, m.ClientsPerNode, m.MaxHandlers = 2, 16, 1
	m.Jitter = 300 * time.Nanosecond
	m.Tearing = tearing
	s, err := sim.New(m, seed)
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	return &rig{f: s, s: s}
}

// do runs body inside the fabric (inside the simulation on sim).
func (r *rig) do(body func()) { farmemtest.Within(r.f, body) }

// memories opens n clients' Memories, round robin over the compute nodes.
func (r *rig) memories(t *testing.T, n int) []farmem.Memory {
	t.Helper()
	comp := r.f.Topology().ComputeNodes()
	ms := make([]farmem.Memory, n)
	for i := range ms {
		m, err := r.f.Open(context.Background(), comp[i%len(comp)])
		require.NoError(t, err)
		t.Cleanup(func() { _ = m.Close() })
		ms[i] = m
	}
	return ms
}

// parallel runs n clients inside the fabric, each with its own far.Client, and returns their
// Memories' ids. setup runs first, on client 0, inside the fabric too.
func (r *rig) parallel(t *testing.T, n int, setup func(c *far.Client), body func(i int, c *far.Client) error) {
	t.Helper()
	ms := r.memories(t, n)
	r.do(func() {
		ctx := context.Background()
		cs := make([]*far.Client, n)
		for i, m := range ms {
			c, err := far.NewClient(ctx, m, quiet)
			require.NoError(t, err)
			cs[i] = c
		}
		if setup != nil {
			setup(cs[0])
		}
		err := farmemtest.Parallel(r.f.Runtime(), n, func(i int) error { return body(i, cs[i]) })
		require.NoError(t, err)
		for _, c := range cs {
			require.NoError(t, c.Close())
		}
	})
}

// client opens one far.Client outside any simulation (local only).
func (r *rig) client(t *testing.T) *far.Client {
	t.Helper()
	m := r.memories(t, 1)[0]
	c, err := far.NewClient(context.Background(), m, quiet)
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// rtts returns the round trips fn spends on c's Memory.
func rtts(t *testing.T, c *far.Client, fn func() error) uint64 {
	t.Helper()
	before := c.Memory().Stats()
	require.NoError(t, fn())
	return c.Memory().Stats().Sub(before).RoundTrips
}

// quad is a 32-byte value: four words, all equal in every value a test writes, so that a torn
// read would show as unequal words.
type quad struct{ A, B, C, D uint64 }

func q(v uint64) quad { return quad{v, v, v, v} }

func (x quad) whole() bool { return x.A == x.B && x.B == x.C && x.C == x.D }

// point64 is a 64-byte struct, with a hand-written codec for the benchmark.
type point64 struct {
	X, Y, Z, W int64
	T          uint64
	ID         uint32
	Flags      uint32
	Sum        float64
	Tag        [8]byte
}

// wide is a 512-byte value, all of whose words are equal in every value a test writes.
type wide struct{ W [64]uint64 }

func wideOf(v uint64) wide {
	var w wide
	for i := range w.W {
		w.W[i] = v
	}
	return w
}

func (w wide) whole() bool {
	for _, x := range w.W {
		if x != w.W[0] {
			return false
		}
	}
	return true
}
