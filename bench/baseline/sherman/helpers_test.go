package sherman_test

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/farmem/farmem/alloc"
	"github.com/farmem/farmem/bench/baseline/internal/basetest"
	"github.com/farmem/farmem/bench/baseline/sherman"
	"github.com/farmem/farmem/farmem"
	"github.com/farmem/farmem/farmem/lincheck"
	"github.com/farmem/farmem/farmem/local"
)

var allocOpts = basetest.AllocOptions

// env is a formatted strict-mode local fabric holding one tree.
type env struct {
	f    *local.Fabric
	root farmem.Addr
	comp []farmem.NodeID
}

func newEnv(t testing.TB, lo local.Options, p sherman.Params) *env {
	t.Helper()
	f, root := basetest.LocalFabric(t, lo, func(ctx context.Context, m farmem.Memory, a *alloc.Allocator) (farmem.Addr, error) {
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

type kvHistory = lincheck.History[lincheck.KVInput[string, uint64], lincheck.KVOutput[string, uint64]]

// workload is a random mix over keys drawn by key(i), i < span.
type workload struct {
	ops                       int
	span                      int
	scan, get, insert, update int // percent; the rest deletes
	key                       func(i int) []byte
}

func (w workload) run(ctx context.Context, c *client, h *kvHistory) error {
	id := uint64(c.m.Info().ID)
	rec := h.Client(int(id))
	rng := c.m.Runtime().Rand()
	for n := range w.ops {
		i := rng.IntN(w.span)
		k := w.key(i)
		v := id<<32 | uint64(n+1)
		p := rng.IntN(100)
		var op lincheck.Op[lincheck.KVInput[string, uint64], lincheck.KVOutput[string, uint64]]
		var out lincheck.KVOutput[string, uint64]
		var err error
		switch {
		case p < w.scan:
			to := w.key(min(w.span, i+1+rng.IntN(30)))
			limit := rng.IntN(3) * 8
			op = rec.Call(kvModel.Scan(string(k), string(to), limit))
			var got []sherman.Pair
			got, err = c.tree.Scan(ctx, k, to, limit)
			var ps []lincheck.Pair[string, uint64]
			for _, p := range got {
				ps = append(ps, lincheck.Pair[string, uint64]{Key: string(p.Key), Value: p.Value})
			}
			out = kvModel.Pairs(ps)
		case p < w.scan+w.get:
			op = rec.Call(kvModel.Get(string(k)))
			var got uint64
			got, err = c.tree.Get(ctx, k)
			out = kvModel.Found(got)
			if errors.Is(err, sherman.ErrNotFound) {
				out, err = kvModel.Missing(), nil
			}
		case p < w.scan+w.get+w.insert:
			op = rec.Call(kvModel.Insert(string(k), v))
			err = c.tree.Insert(ctx, k, v)
			out = kvModel.OK()
			if errors.Is(err, sherman.ErrExists) {
				out, err = kvModel.Exists(), nil
			}
		case p < w.scan+w.get+w.insert+w.update:
			op = rec.Call(kvModel.Update(string(k), v))
			err = c.tree.Update(ctx, k, v)
			out = kvModel.OK()
			if errors.Is(err, sherman.ErrNotFound) {
				out, err = kvModel.Missing(), nil
			}
		default:
			op = rec.Call(kvModel.Delete(string(k)))
			err = c.tree.Delete(ctx, k)
			out = kvModel.OK()
			if errors.Is(err, sherman.ErrNotFound) {
				out, err = kvModel.Missing(), nil
			}
		}
		op.End(out, err)
		if err != nil {
			return fmt.Errorf("op %d: %w", n, err)
		}
	}
	return nil
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
