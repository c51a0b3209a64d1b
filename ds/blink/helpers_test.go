package blink_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/farmem/farmem/alloc"
	"github.com/farmem/farmem/ds/blink"
	"github.com/farmem/farmem/ds/selcc"
	"github.com/farmem/farmem/farmem"
	"github.com/farmem/farmem/farmem/farmemtest"
	"github.com/farmem/farmem/farmem/local"
	"github.com/farmem/farmem/sim"
)

// rig is a fabric with SELCC open on it and an empty tree, on local or sim.
type rig struct {
	f    farmem.Fabric
	lf   *local.Fabric
	comp []farmem.NodeID
	c    *selcc.Cluster
	root selcc.GCL
}

func localRig(t *testing.T, o local.Options, so selcc.Options) *rig {
	t.Helper()
	o.Strict = true
	f, err := local.New(o)
	require.NoError(t, err)
	r := &rig{f: f, lf: f, comp: f.Topology().ComputeNodes()}
	t.Cleanup(func() {
		if r.c != nil {
			_ = r.c.Close()
		}
		require.Zero(t, f.Violations(), "strict-mode violations")
		_ = f.Close()
	})
	r.open(t, so)
	return r
}

func simRig(t *testing.T, nodes, clients int, seed uint64, so selcc.Options) *rig {
	t.Helper()
	m := sim.ConnectX6()
	m.ComputeNodes, m.ClientsPerNode, m.MaxHandlers = nodes, clients+4, 1
	m.Jitter = 200 * time.Nanosecond
	m.SharedSize = 256 << 10
	m.SliceSize = 4 << 10
	s, err := sim.New(m, seed)
	require.NoError(t, err)
	r := &rig{f: s, comp: s.Topology().ComputeNodes()}
	t.Cleanup(func() {
		if r.c != nil {
			r.do(func() { _ = r.c.Close() })
		}
		_ = s.Close()
	})
	r.open(t, so)
	return r
}

func (r *rig) open(t *testing.T, so selcc.Options) {
	r.do(func() {
		ctx := context.Background()
		c, err := selcc.Open(ctx, r.f, so)
		require.NoError(t, err)
		r.c = c
		m, err := r.f.Open(ctx, r.comp[0])
		require.NoError(t, err)
		defer m.Close()
		require.NoError(t, alloc.FormatAll(ctx, m, alloc.FormatOptions{}))
		cl, err := c.Client(ctx, m)
		require.NoError(t, err)
		a, err := alloc.New(ctx, m, alloc.Options{})
		require.NoError(t, err)
		defer a.Close()
		r.root, err = blink.Create(ctx, c, cl, a)
		require.NoError(t, err)
	})
}

// do runs body inside the fabric (inside the simulation on sim).
func (r *rig) do(body func()) { farmemtest.Within(r.f, body) }

// client is one client's memory and tree handle.
type client struct {
	m farmem.Memory
	a *alloc.Allocator
	t *blink.Tree
}

// client opens client i (round robin over the compute nodes); call inside the fabric.
func (r *rig) client(t *testing.T, i int) *client {
	t.Helper()
	ctx := context.Background()
	m, err := r.f.Open(ctx, r.comp[i%len(r.comp)])
	require.NoError(t, err)
	cl, err := r.c.Client(ctx, m)
	require.NoError(t, err)
	a, err := alloc.New(ctx, m, alloc.Options{})
	require.NoError(t, err)
	tr, err := blink.Open(r.c, cl, a, r.root)
	require.NoError(t, err)
	t.Cleanup(func() { _ = tr.Close(); _ = a.Close(); _ = m.Close() })
	return &client{m: m, a: a, t: tr}
}
