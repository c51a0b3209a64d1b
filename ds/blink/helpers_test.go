package blink_test

import (
	"context"
	"fmt"
	"runtime/pprof"
	"strings"
	"sync/atomic"
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
	ops   atomic.Int64 // operations completed, for the stall watchdog
	downs atomic.Int64 // operations that failed with farmem.ErrNodeDown and were gone past
	m     farmem.Memory
	a     *alloc.Allocator
	t     *blink.Tree
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

// stallLimit is how long a local run may go without any client completing an operation
// before the watchdog declares it stuck: far beyond an operation's cost on a machine 10x
// slower than the development VM.
const stallLimit = 2 * time.Minute

// stallWatch ends a run's context if no client completes an operation for stallLimit of wall
// time, and keeps a summary of what every goroutine of the tree and the cache was doing then,
// so that a stuck run fails at once with the evidence instead of running into the test
// binary's timeout (a CI log keeps only the tail of a timed-out binary's dump). Only for
// wall-clock fabrics: on sim a stuck run ends at its virtual deadline.
type stallWatch struct {
	done, stopped chan struct{}
	cancel        context.CancelFunc
	summary       string
}

func watchStalls(ctx context.Context, cs []*client) (context.Context, *stallWatch) {
	ctx, cancel := context.WithCancel(ctx)
	w := &stallWatch{done: make(chan struct{}), stopped: make(chan struct{}), cancel: cancel}
	go func() {
		defer close(w.stopped)
		total := func() int64 {
			var n int64
			for _, c := range cs {
				n += c.ops.Load()
			}
			return n
		}
		last, since := total(), time.Now()
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		for {
			select {
			case <-w.done:
				return
			case <-tick.C:
			}
			if n := total(); n != last {
				last, since = n, time.Now()
				continue
			}
			if time.Since(since) < stallLimit {
				continue
			}
			w.summary = fmt.Sprintf("no operation completed for %v after %d operations; the goroutines in ds/blink and ds/selcc, innermost call first:\n%s",
				stallLimit, last, stacks())
			cancel()
			return
		}
	}()
	return ctx, w
}

// stop ends the watch and returns its summary if it fired ("" otherwise).
func (w *stallWatch) stop() string {
	close(w.done)
	<-w.stopped
	w.cancel()
	return w.summary
}

// stacks summarizes every goroutine that runs code of ds/blink or ds/selcc: one line each,
// its state and its calls (package-qualified names, innermost first).
func stacks() string {
	var b strings.Builder
	_ = pprof.Lookup("goroutine").WriteTo(&b, 2)
	var out strings.Builder
	for _, g := range strings.Split(b.String(), "\n\n") {
		if !strings.Contains(g, "ds/blink.") && !strings.Contains(g, "ds/selcc.") {
			continue
		}
		lines := strings.Split(g, "\n")
		out.WriteString(lines[0])
		for _, l := range lines[1:] {
			if strings.HasPrefix(l, "\t") || l == "" {
				continue // a file:line
			}
			if i := strings.LastIndex(l, "/"); i >= 0 {
				l = l[i+1:]
			}
			if i := strings.Index(l, "("); i > 0 && !strings.HasPrefix(l[i:], "(*") {
				l = l[:i]
			} else if j := strings.LastIndex(l, "("); j > 0 {
				l = l[:j]
			}
			out.WriteString(" < " + l)
		}
		out.WriteString("\n")
	}
	return out.String()
}
