package blink_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/farmem/farmem/ds/blink"
	"github.com/farmem/farmem/ds/selcc"
	"github.com/farmem/farmem/farmem"
	"github.com/farmem/farmem/farmem/farmemtest"
	"github.com/farmem/farmem/farmem/lincheck"
	"github.com/farmem/farmem/farmem/local"
)

var kvModel = lincheck.KV[string, uint64]()

type kvHistory = lincheck.History[lincheck.KVInput[string, uint64], lincheck.KVOutput[string, uint64]]

// body is value v's bytes: v, then filler up to n bytes (a torn copy shows).
func body(v uint64, n int) []byte {
	b := binary.LittleEndian.AppendUint64(nil, v)
	for i := 8; i < n; i++ {
		b = append(b, byte(v)+byte(i))
	}
	return b
}

func unbody(b []byte) (uint64, error) {
	if len(b) < 8 || !bytes.Equal(b, body(binary.LittleEndian.Uint64(b), len(b))) {
		return 0, fmt.Errorf("torn value %x", b)
	}
	return binary.LittleEndian.Uint64(b), nil
}

// workload is a random mix over a small key space of YCSB-style keys of several lengths.
type workload struct {
	ops, keys                 int
	scan, get, insert, update int // percent; the rest deletes
	// stopOnDown ends a client at its first error wrapping farmem.ErrNodeDown or ErrClosed
	// (recorded as an unknown outcome): a run with a crashed compute node.
	stopOnDown bool
	// goOnDown records an operation that fails with farmem.ErrNodeDown as an unknown outcome
	// and goes on (a peer that did not answer within ReplyTimeout: the operation may or may
	// not have taken effect, and the next one tries again).
	goOnDown bool
}

func wkey(i int) string { return fmt.Sprintf("user%d", i*7919%100003) }

func (w workload) run(ctx context.Context, c *client, h *kvHistory, id int) error {
	rec := h.Client(id)
	rng := c.m.Runtime().Rand()
	for n := range w.ops {
		k := wkey(rng.IntN(w.keys))
		v := uint64(id)<<32 | uint64(n+1)
		p := rng.IntN(100)
		var op lincheck.Op[lincheck.KVInput[string, uint64], lincheck.KVOutput[string, uint64]]
		var out lincheck.KVOutput[string, uint64]
		var err error
		switch {
		case p < w.scan:
			to := wkey(rng.IntN(w.keys))
			if to <= k {
				k, to = to, k+"~"
			}
			limit := rng.IntN(3) * 6
			op = rec.Call(kvModel.Scan(k, to, limit))
			var got []blink.Pair
			got, err = c.t.Scan(ctx, []byte(k), []byte(to), limit)
			var ps []lincheck.Pair[string, uint64]
			for _, p := range got {
				x, terr := unbody(p.Value)
				if terr != nil {
					return terr
				}
				ps = append(ps, lincheck.Pair[string, uint64]{Key: string(p.Key), Value: x})
			}
			out = kvModel.Pairs(ps)
		case p < w.scan+w.get:
			op = rec.Call(kvModel.Get(k))
			var b []byte
			var x uint64
			if b, err = c.t.Get(ctx, []byte(k)); err == nil {
				if x, err = unbody(b); err != nil {
					return err
				}
			}
			out = kvModel.Found(x)
			if errors.Is(err, blink.ErrNotFound) {
				out, err = kvModel.Missing(), nil
			}
		case p < w.scan+w.get+w.insert:
			op = rec.Call(kvModel.Insert(k, v))
			err = c.t.Insert(ctx, []byte(k), body(v, 8+rng.IntN(24)))
			out = kvModel.OK()
			if errors.Is(err, blink.ErrExists) {
				out, err = kvModel.Exists(), nil
			}
		case p < w.scan+w.get+w.insert+w.update:
			op = rec.Call(kvModel.Update(k, v))
			err = c.t.Update(ctx, []byte(k), body(v, 8+rng.IntN(24)))
			out = kvModel.OK()
			if errors.Is(err, blink.ErrNotFound) {
				out, err = kvModel.Missing(), nil
			}
		default:
			op = rec.Call(kvModel.Delete(k))
			err = c.t.Delete(ctx, []byte(k))
			out = kvModel.OK()
			if errors.Is(err, blink.ErrNotFound) {
				out, err = kvModel.Missing(), nil
			}
		}
		op.End(out, err)
		c.ops.Add(1)
		if err != nil && w.stopOnDown && (errors.Is(err, farmem.ErrNodeDown) || errors.Is(err, farmem.ErrClosed)) {
			return nil
		}
		if err != nil && w.goOnDown && errors.Is(err, farmem.ErrNodeDown) {
			c.downs.Add(1)
			continue
		}
		if err != nil {
			return err
		}
	}
	return nil
}

var splitLoad = workload{ops: 300, keys: 300, scan: 10, get: 30, insert: 40, update: 10}

// lincheckRun runs n clients of the workload on r and checks the history.
func lincheckRun(t *testing.T, r *rig, n int, w workload) {
	var h *kvHistory
	r.do(func() {
		cs := make([]*client, n)
		for i := range cs {
			cs[i] = r.client(t, i)
		}
		ctx, cancel := r.f.Runtime().WithTimeout(context.Background(), 10*time.Minute)
		defer cancel()
		run := ctx
		var watch *stallWatch
		if r.lf != nil {
			run, watch = watchStalls(ctx, cs)
		}
		h = kvModel.NewHistory(r.f.Runtime())
		err := farmemtest.Parallel(r.f.Runtime(), n, func(i int) error { return w.run(run, cs[i], h, i) })
		if watch != nil {
			if s := watch.stop(); s != "" {
				t.Fatalf("%v (the clients ended with: %v)\n%s", "stuck run", err, s)
			}
		}
		require.NoError(t, err)
		// The tree is large enough to have split: a full scan walks several leaves.
		ps, err := cs[0].t.Scan(ctx, nil, nil, 0)
		for try := 0; w.goOnDown && errors.Is(err, farmem.ErrNodeDown) && try < 100; try++ {
			ps, err = cs[0].t.Scan(ctx, nil, nil, 0) // a peer late again: read on
		}
		require.NoError(t, err)
		var st blink.Stats
		var downs int64
		for _, c := range cs {
			st.Splits += c.t.Stats().Splits
			st.MovesRight += c.t.Stats().MovesRight
			downs += c.downs.Load()
		}
		t.Logf("%d keys at the end; %+v; %d operations failed with ErrNodeDown", len(ps), st, downs)
		require.Positive(t, st.Splits, "no split")
		require.Positive(t, st.MovesRight, "no reader moved right")
	})
	h.Check(t)
}

// TestLinearizableLocal: 6 clients on 2 compute nodes, tearing, jitter and strict mode, over
// 256-byte lines (splits all the time, readers moving right) and a 24-frame cache per node
// (evictions), under both durability modes.
func TestLinearizableLocal(t *testing.T) {
	for _, d := range []selcc.Durability{selcc.WriteBackOnRelease, selcc.WriteBack} {
		t.Run(fmt.Sprint(d), func(t *testing.T) {
			r := localRig(t, local.Options{Shape: local.Shape{MemoryNodes: 2, ComputeNodes: 2}, Tearing: true, Jitter: 5 * time.Microsecond},
				selcc.Options{LineSize: 256, Frames: 24, Durability: d})
			lincheckRun(t, r, 6, splitLoad)
		})
	}
}

// TestLinearizableSim: 3 compute nodes x 2 clients on sim, seeds 1-2.
func TestLinearizableSim(t *testing.T) {
	for seed := uint64(1); seed <= 2; seed++ {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) {
			r := simRig(t, 3, 2, seed, selcc.Options{LineSize: 256, Frames: 32, Durability: selcc.WriteBackOnRelease})
			lincheckRun(t, r, 6, splitLoad)
		})
	}
}
