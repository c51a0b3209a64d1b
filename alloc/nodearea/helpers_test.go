package nodearea_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/farmem/farmem/cxl"
	"github.com/farmem/farmem/farmem"
	"github.com/farmem/farmem/farmem/local"
	"github.com/farmem/farmem/sim"
)

// cluster is a fabric (or, on cxl, one attachment per compute node) with two compute nodes.
type cluster struct {
	name   string
	nodes  []farmem.NodeID
	open   []func(ctx context.Context) (farmem.Memory, error) // per node
	within func(func())
	par    func(n int, fn func(i int))
	sim    *sim.Sim
}

// smallShared is the shared area of the test clusters: small enough to exhaust quickly.
const smallShared = 64 << 10

// clusters returns the three transports' clusters, each with two compute nodes of
// smallShared bytes of shared area. cxl is skipped (and left out) where it cannot run.
func clusters(t *testing.T) []*cluster {
	t.Helper()
	var cs []*cluster

	lf, err := local.New(local.Options{Shape: local.Shape{ComputeNodes: 2, SharedSize: smallShared, MemorySize: 1 << 20}, Strict: true})
	require.NoError(t, err)
	t.Cleanup(func() {
		require.Zero(t, lf.Violations(), "strict-mode violations")
		_ = lf.Close()
	})
	cs = append(cs, fabricCluster("local", lf, nil))

	r, err := cxl.CreateTemp("", "nodearea-test-*", cxl.Options{Shape: cxl.Shape{ComputeNodes: 2, SharedSize: smallShared, MemorySize: 1 << 20}})
	if err != nil {
		t.Logf("cxl left out: %v", err)
	} else {
		t.Cleanup(func() { _ = r.Close() })
		c := &cluster{name: "cxl", within: func(f func()) { f() }, par: goParallel}
		for range 2 {
			f, err := r.Attach(cxl.OpenOptions{})
			require.NoError(t, err)
			t.Cleanup(func() { _ = f.Close() })
			id := f.Hosted()[0]
			c.nodes = append(c.nodes, id)
			c.open = append(c.open, func(ctx context.Context) (farmem.Memory, error) { return f.Open(ctx, id) })
		}
		cs = append(cs, c)
	}

	m := sim.ConnectX6()
	m.ComputeNodes, m.SharedSize, m.MemorySize = 2, smallShared, 1<<20
	s, err := sim.New(m, 7)
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	c := fabricCluster("sim", s, s)
	c.sim = s
	cs = append(cs, c)
	return cs
}

func fabricCluster(name string, f farmem.Fabric, s *sim.Sim) *cluster {
	c := &cluster{name: name, within: func(fn func()) { fn() }, par: goParallel}
	if s != nil {
		c.within = s.Run
		c.par = func(n int, fn func(int)) {
			if err := s.Parallel(n, fn); err != nil {
				panic(err)
			}
		}
	}
	for _, id := range f.Topology().ComputeNodes() {
		c.nodes = append(c.nodes, id)
		c.open = append(c.open, func(ctx context.Context) (farmem.Memory, error) { return f.Open(ctx, id) })
	}
	return c
}

func goParallel(n int, fn func(int)) {
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			fn(i)
		}()
	}
	wg.Wait()
}

// client opens a client on node i of c; it is closed at the end of the test.
func (c *cluster) client(t *testing.T, i int) farmem.Memory {
	t.Helper()
	m, err := c.open[i](context.Background())
	require.NoError(t, err)
	t.Cleanup(func() { _ = m.Close() })
	return m
}

// errs collects failures from goroutines (require must not be called off the test's
// goroutine, and a simulated goroutine must not exit early).
type errs struct {
	mu   sync.Mutex
	list []error
}

func (e *errs) add(format string, args ...any) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if len(e.list) < 20 {
		e.list = append(e.list, fmt.Errorf(format, args...))
	}
}

func (e *errs) check(t *testing.T) {
	t.Helper()
	require.NoError(t, errors.Join(e.list...))
}
