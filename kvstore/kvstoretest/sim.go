package kvstoretest

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/farmem/farmem/farmem"
	"github.com/farmem/farmem/kvstore"
	"github.com/farmem/farmem/sim"
)

// Mix is the mixed workload of the store's linearizability checks: 12 keys (so operations
// collide), 250 operations per goroutine, 35% gets, 15% inserts, 15% updates, 20% puts and
// 15% deletes, values up to 208 bytes.
var Mix = Workload{Keys: 12, Ops: 250, Get: 35, Insert: 15, Update: 15, Put: 20, MaxVal: 200, Unknown: 4}

// CrashedSim is a store's run on the simulator with memory nodes crashing mid-run: six clients
// run Mix (Ops operations each, stopping at the first unknown outcome) while the nodes in Down
// crash Gap apart from the start, then the store is opened again with them down. Check runs it
// twice (seed 5, a ConnectX-6 model with tearing) and requires a linearizable history with no
// failed or unknown operation and the same digest (virtual time and the store's stats) both
// times; Strict also requires the crashes to land mid-run and every key to be read back at the
// end. It is what the replicated stores (index and metadata) and SWARM-KV are checked with.
type CrashedSim struct {
	MemNodes int
	MemSize  uint64
	Opts     kvstore.Options
	Down     []farmem.NodeID
	Gap      time.Duration
	Ops      int
	Strict   bool
}

// Check runs c twice and checks it as the type's doc says.
func (c CrashedSim) Check(t *testing.T) {
	t.Helper()
	run := func() (string, error) {
		model := sim.ConnectX6()
		model.MemoryNodes, model.ComputeNodes, model.MemorySize = c.MemNodes, 2, c.MemSize
		model.Tearing = true
		s := StartSim(t, model, 5)
		h := Model.NewHistory(s.Runtime())
		w := Mix
		w.Ops, w.Unknown = c.Ops, 1
		var digest string
		s.Run(func() {
			ctx := context.Background()
			st, err := kvstore.Open(ctx, s, c.Opts)
			require.NoError(t, err)
			start := s.Now()
			for i, n := range c.Down {
				s.At(start.Add(time.Duration(i+1)*c.Gap), func() { _ = s.Crash(n) })
			}
			require.NoError(t, s.Parallel(6, func(g int) {
				require.NoError(t, w.Run(ctx, st, g, s.Runtime().NewRand(), h))
			}))
			if c.Strict {
				require.Greater(t, s.Now(), start.Add(time.Duration(len(c.Down))*c.Gap), "the crashes came mid-run")
				require.NoError(t, ReadAll(ctx, st, 100, w.Keys, h), "every key read at the end")
			}
			st2, err := kvstore.Open(ctx, s, c.Opts)
			require.NoError(t, err, "open again with the nodes down")
			require.NoError(t, st2.Close())
			digest = fmt.Sprint(s.Now(), st.Stats())
			require.NoError(t, st.Close())
		})
		sum, verdict := h.Verify()
		t.Logf("%d nodes, down %v: %v", c.MemNodes, c.Down, sum)
		if verdict == nil && sum.Failed+sum.Unknown > 0 {
			verdict = fmt.Errorf("%d failed, %d unknown: %w", sum.Failed, sum.Unknown, farmem.ErrNodeDown)
		}
		return digest, verdict
	}
	d1, err := run()
	require.NoError(t, err, "%d nodes, down %v", c.MemNodes, c.Down)
	d2, err := run()
	require.NoError(t, err)
	require.Equal(t, d1, d2, "deterministic")
}

// ReadAll reads every key of a workload over keys 0..keys-1 (encoded by Key) as history client
// g, recording each Get in h; it returns the first error that is not kvstore.ErrNotFound.
func ReadAll(ctx context.Context, s *kvstore.Store, g int, keys uint64, h *History) error {
	rec := h.Client(g)
	for k := range keys {
		op := rec.Call(Model.Get(k))
		got, err := s.Get(ctx, Key(k))
		out := Model.Missing()
		switch {
		case err == nil:
			x, err := Unval(got)
			if err != nil {
				return err
			}
			out = Model.Found(x)
		case errors.Is(err, kvstore.ErrNotFound):
		default:
			op.End(out, err)
			return fmt.Errorf("kvstoretest: read key %d: %w", k, err)
		}
		op.End(out, nil)
	}
	return nil
}
