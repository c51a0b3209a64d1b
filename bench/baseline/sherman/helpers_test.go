package sherman_test

import (
	"context"
	"encoding/binary"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/farmem/farmem/alloc"
	"github.com/farmem/farmem/bench/baseline/internal/basetest"
	"github.com/farmem/farmem/bench/baseline/sherman"
	"github.com/farmem/farmem/farmem"
	"github.com/farmem/farmem/farmem/lincheck"
	"github.com/farmem/farmem/farmem/local"
	"github.com/farmem/farmem/internal/dstest"
)

var allocOpts = dstest.AllocOptions

// env is a formatted strict-mode local fabric holding one tree.
type env struct {
	f    *local.Fabric
	root farmem.Addr
	comp []farmem.NodeID
}

func newEnv(t testing.TB, lo local.Options, p sherman.Params) *env {
	t.Helper()
	f, root := dstest.Local(t, lo, func(ctx context.Context, m farmem.Memory, a *alloc.Allocator) (farmem.Addr, error) {
		return sherman.Create(ctx, m, a, p)
	})
	return &env{f: f, root: root, comp: f.Topology().ComputeNodes()}
}

type client struct {
	m    farmem.Memory
	a    *alloc.Allocator
	tree *sherman.Tree
}

func openClient(t testing.TB, ctx context.Context, f farmem.Fabric, node farmem.NodeID, root farmem.Addr, cache *sherman.Cache) *client {
	return openClientOpts(t, ctx, f, node, root, sherman.Options{Cache: cache})
}

func openClientOpts(t testing.TB, ctx context.Context, f farmem.Fabric, node farmem.NodeID, root farmem.Addr, o sherman.Options) *client {
	t.Helper()
	m, err := f.Open(ctx, node)
	require.NoError(t, err)
	a, err := alloc.New(ctx, m, allocOpts)
	require.NoError(t, err)
	tr, err := sherman.Open(ctx, m, a, root, o)
	require.NoError(t, err)
	t.Cleanup(func() { _ = tr.Close(); _ = a.Close(); _ = m.Close() })
	return &client{m: m, a: a, tree: tr}
}

func (e *env) open(t testing.TB, i int, cache *sherman.Cache) *client {
	return e.openLocks(t, i, cache, nil)
}

func (e *env) openLocks(t testing.TB, i int, cache *sherman.Cache, locks *sherman.LockTable) *client {
	return openClientOpts(t, context.Background(), e.f, e.comp[i%len(e.comp)], e.root, sherman.Options{Cache: cache, Locks: locks})
}

func k8(k uint64) []byte { return binary.BigEndian.AppendUint64(nil, k) }

var kvModel = lincheck.KV[string, uint64]()

type kvHistory = basetest.History[string]

// workload is a random mix over keys drawn by key(i), i < span.
type workload struct {
	ops                       int
	span                      int
	scan, get, insert, update int // percent; the rest deletes
	key                       func(i int) []byte
}

// run performs w on c's tree as c's client, recording it in h (see basetest.Mix): a scan
// reaches up to 30 keys further, with a limit of 0, 8 or 16.
func (w workload) run(ctx context.Context, c *client, h *kvHistory) error {
	key := func(i int) string { return string(w.key(i)) }
	mix := basetest.Mix[string]{Ops: w.ops, Span: w.span, Scan: w.scan, Get: w.get, Insert: w.insert, Update: w.update, Key: key,
		ScanEnd: func(rng *rand.Rand, i int, _ string) (string, int) {
			to := key(min(w.span, i+1+rng.IntN(30)))
			return to, rng.IntN(3) * 8
		}}
	return mix.Run(ctx, c.m, treeOps(c.tree), kvModel, h)
}

// treeOps is tr as a mix drives it, its byte-string keys as the model's strings.
func treeOps(tr *sherman.Tree) basetest.Tree[string] {
	return basetest.Tree[string]{
		Get:    func(ctx context.Context, k string) (uint64, error) { return tr.Get(ctx, []byte(k)) },
		Insert: func(ctx context.Context, k string, v uint64) error { return tr.Insert(ctx, []byte(k), v) },
		Update: func(ctx context.Context, k string, v uint64) error { return tr.Update(ctx, []byte(k), v) },
		Delete: func(ctx context.Context, k string) error { return tr.Delete(ctx, []byte(k)) },
		Scan: func(ctx context.Context, from, to string, limit int) ([]lincheck.Pair[string, uint64], error) {
			got, err := tr.Scan(ctx, []byte(from), []byte(to), limit)
			var ps []lincheck.Pair[string, uint64]
			for _, p := range got {
				ps = append(ps, lincheck.Pair[string, uint64]{Key: string(p.Key), Value: p.Value})
			}
			return ps, err
		},
		ErrNotFound: sherman.ErrNotFound, ErrExists: sherman.ErrExists,
	}
}

func sumStats(cs []*client) sherman.Stats {
	var s sherman.Stats
	for _, c := range cs {
		x := c.tree.Stats()
		s.Gets += x.Gets
		s.Inserts += x.Inserts
		s.Updates += x.Updates
		s.Deletes += x.Deletes
		s.Scans += x.Scans
		s.LockRetries += x.LockRetries
		s.LocalWaits += x.LocalWaits
		s.Handovers += x.Handovers
		s.TornReads += x.TornReads
		s.SiblingHops += x.SiblingHops
		s.Splits += x.Splits
		s.RootGrowths += x.RootGrowths
	}
	return s
}

func formatAll(ctx context.Context, m farmem.Memory) error {
	return alloc.FormatAll(ctx, m, alloc.FormatOptions{})
}

func openAlloc(t testing.TB, ctx context.Context, m farmem.Memory) *alloc.Allocator {
	a, err := alloc.New(ctx, m, allocOpts)
	require.NoError(t, err)
	return a
}

// newCache returns a cache of budget bytes: Sherman's (NewShermanCache) if ranged, else one
// copy per node (NewCache).
func newCache(ranged bool, budget int64) *sherman.Cache {
	if ranged {
		return sherman.NewShermanCache(budget)
	}
	return sherman.NewCache(budget)
}
