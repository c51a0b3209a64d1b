package basetest

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"

	"github.com/farmem/farmem/farmem"
	"github.com/farmem/farmem/farmem/lincheck"
)

// Tree is a baseline tree as a Mix drives it, with keys of type K as the lincheck model sees
// them (a tree with other keys converts in its functions). ErrNotFound and ErrExists are the
// tree's sentinels, which the model records as its answers.
type Tree[K cmp.Ordered] struct {
	Get                    func(ctx context.Context, k K) (uint64, error)
	Insert, Update         func(ctx context.Context, k K, v uint64) error
	Delete                 func(ctx context.Context, k K) error
	Scan                   func(ctx context.Context, from, to K, limit int) ([]lincheck.Pair[K, uint64], error)
	ErrNotFound, ErrExists error
}

// History is a lincheck KV history over keys K and uint64 values.
type History[K cmp.Ordered] = lincheck.History[lincheck.KVInput[K, uint64], lincheck.KVOutput[K, uint64]]

// Mix is a random mix of Ops operations over the keys Key(i), i < Span: Scan, Get, Insert and
// Update percent of each (the rest deletes). ScanEnd draws a scan's end and limit for a scan
// from key index i (key k).
type Mix[K cmp.Ordered] struct {
	Ops, Span                 int
	Scan, Get, Insert, Update int
	Key                       func(i int) K
	ScanEnd                   func(rng *rand.Rand, i int, k K) (to K, limit int)
}

// Run performs the mix on tr as the client of m (its ID names it in h, its runtime's Rand draws
// the mix; values are the ID in the high bits and a counter in the low ones) and records every
// operation in h against kv. It stops at the first error other than the sentinels.
func (w Mix[K]) Run(ctx context.Context, m farmem.Memory, tr Tree[K], kv *lincheck.KVModel[K, uint64], h *History[K]) error {
	id := uint64(m.Info().ID)
	rec := h.Client(int(id))
	rng := m.Runtime().Rand()
	for n := range w.Ops {
		i := rng.IntN(w.Span)
		k := w.Key(i)
		v := id<<32 | uint64(n+1)
		var op lincheck.Op[lincheck.KVInput[K, uint64], lincheck.KVOutput[K, uint64]]
		var out lincheck.KVOutput[K, uint64]
		var err error
		switch p := rng.IntN(100); {
		case p < w.Scan:
			to, limit := w.ScanEnd(rng, i, k)
			op = rec.Call(kv.Scan(k, to, limit))
			var ps []lincheck.Pair[K, uint64]
			ps, err = tr.Scan(ctx, k, to, limit)
			out = kv.Pairs(ps)
		case p < w.Scan+w.Get:
			op = rec.Call(kv.Get(k))
			var got uint64
			got, err = tr.Get(ctx, k)
			out = kv.Found(got)
			if errors.Is(err, tr.ErrNotFound) {
				out, err = kv.Missing(), nil
			}
		case p < w.Scan+w.Get+w.Insert:
			op = rec.Call(kv.Insert(k, v))
			err = tr.Insert(ctx, k, v)
			out = kv.OK()
			if errors.Is(err, tr.ErrExists) {
				out, err = kv.Exists(), nil
			}
		case p < w.Scan+w.Get+w.Insert+w.Update:
			op = rec.Call(kv.Update(k, v))
			err = tr.Update(ctx, k, v)
			out = kv.OK()
			if errors.Is(err, tr.ErrNotFound) {
				out, err = kv.Missing(), nil
			}
		default:
			op = rec.Call(kv.Delete(k))
			err = tr.Delete(ctx, k)
			out = kv.OK()
			if errors.Is(err, tr.ErrNotFound) {
				out, err = kv.Missing(), nil
			}
		}
		op.End(out, err)
		if err != nil {
			return fmt.Errorf("op %d: %w", n, err)
		}
	}
	return nil
}
