package hybrid_test

import (
	"context"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/farmem/farmem/alloc"
	"github.com/farmem/farmem/ds/hybrid"
	"github.com/farmem/farmem/ds/ptrsync"
	"github.com/farmem/farmem/farmem"
	"github.com/farmem/farmem/farmem/farmemtest"
	"github.com/farmem/farmem/farmem/local"
	"github.com/farmem/farmem/internal/dstest"
)

// env is a formatted local fabric (strict mode on) holding one tree.
type env struct {
	f    *local.Fabric
	root farmem.Addr
	comp []farmem.NodeID
	ao   alloc.Options
}

func newEnv(t testing.TB, lo local.Options, p hybrid.Params) *env {
	t.Helper()
	f, root := dstest.Local(t, lo, func(ctx context.Context, m farmem.Memory, a *alloc.Allocator) (farmem.Addr, error) {
		return hybrid.Create(ctx, m, a, p)
	})
	e := &env{f: f, root: root, comp: f.Topology().ComputeNodes(), ao: dstest.AllocOptions}
	return e
}

// client is one client's Memory, allocator and tree handle.
type client struct {
	m    farmem.Memory
	a    *alloc.Allocator
	tree *hybrid.Tree
	// killed, if set, reports that the test crashed the client on purpose.
	killed *atomic.Bool
	// sync is the tree's synchronizer, if it was opened with one (sync_test.go).
	sync ptrsync.Synchronizer
}

// smoStep names a verb of an SMO a test crashes a client right after.
type smoStep int

const (
	stepNone      smoStep = iota
	stepExclusive         // the FAA taking the leaf's Spear exclusive (before the drain)
	stepDead              // the FAA marking the leaf dead (plan recorded, not published)
)

// isStep reports whether verb v is step s of an SMO.
func isStep(v farmemtest.Verb, s smoStep) bool {
	if len(v.Batch.Ops) != 1 || v.Op().Kind != farmem.OpFAA {
		return false
	}
	switch s {
	case stepExclusive:
		return v.Op().Swap == 1<<40-1
	case stepDead:
		return v.Op().Swap == 1<<48
	}
	return false
}

// atStep returns m seen through an Interposer that runs act once, right after the first verb
// of step s that succeeds, and a flag set just before act runs.
func atStep(m farmem.Memory, s smoStep, act func()) (farmem.Memory, *atomic.Bool) {
	fired := new(atomic.Bool)
	return &farmemtest.Interposer{Memory: m, After: func(_ context.Context, v farmemtest.Verb, _ uint64, err error) {
		if err == nil && !fired.Load() && isStep(v, s) {
			fired.Store(true)
			act()
		}
	}}, fired
}

func (e *env) open(t testing.TB, i int, opts hybrid.Options) *client {
	return e.openWith(t, i, opts, nil)
}

// openWith is open with the tree's Memory seen through wrap, if set.
func (e *env) openWith(t testing.TB, i int, opts hybrid.Options, wrap func(farmem.Memory) farmem.Memory) *client {
	t.Helper()
	ctx := context.Background()
	m, err := e.f.Open(ctx, e.comp[i%len(e.comp)])
	require.NoError(t, err)
	a, err := alloc.New(ctx, m, e.ao)
	require.NoError(t, err)
	tm := m
	if wrap != nil {
		tm = wrap(m)
	}
	tr, err := hybrid.Open(ctx, tm, a, e.root, opts)
	require.NoError(t, err)
	t.Cleanup(func() {
		_ = tr.Close()
		_ = a.Close()
		_ = m.Close()
	})
	return &client{m: m, a: a, tree: tr}
}

func key(k uint64) []byte { return hybrid.Key(k) }

func audit(t testing.TB, c *client) hybrid.Census {
	t.Helper()
	census, err := c.tree.Audit(context.Background())
	require.NoError(t, err)
	return census
}

// flushPosts returns once every unsignaled verb the clients posted has been applied (an IDU's
// release FAA is posted unsignaled and may still be on its way, under jitter, when the
// workload's goroutines have returned): a client's verbs to a node apply in order, so a read
// of each memory node by each client waits for them.
func flushPosts(t testing.TB, cs []*client) {
	t.Helper()
	ctx := context.Background()
	var w [8]byte
	for _, c := range cs {
		for _, mn := range c.m.Topology().MemoryNodes() {
			require.NoError(t, c.m.Read(ctx, farmem.MakeAddr(mn, 0), w[:]))
		}
	}
}
