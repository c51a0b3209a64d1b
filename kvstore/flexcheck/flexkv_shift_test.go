package flexcheck_test

import (
	"context"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/farmem/farmem/farmem"
	"github.com/farmem/farmem/farmem/farmemtest"
	"github.com/farmem/farmem/kvstore"
)

// TestFlexKVManagerShift: a workload shift that falls in the middle of a manager period
// restarts the knob's round once. The clients only read for several periods, then only
// write from an eighth into a period: that period's read share (about two thirds) shows the
// shift, and the next period, all writes, differs from it by as much again; it is the
// restarted round's reference sample (its throughput at the ratio in force), not a second
// shift. The round then probes and settles.
func TestFlexKVManagerShift(t *testing.T) {
	t.Parallel()
	const period = 400 * time.Microsecond
	// One seed: the shift falls at a set point of a period (an eighth into it, after 12), so the
	// periods' trace differs between seeds only in jitter; a manager that took the restarted
	// round's reference sample for a second shift fails on seed 1 as on seed 2.
	for seed := uint64(1); seed <= 1; seed++ {
		sm := crashSim(t, seed)
		sm.Run(func() {
			ctx := context.Background()
			rt := sm.Runtime()
			nodes := sm.Topology().ComputeNodes()
			k := managerKind()
			s, err := kvstore.Open(ctx, sm, kvstore.Options{Index: k, Alloc: shortLeases, Nodes: nodes})
			require.NoError(t, err)
			keys := make([][]byte, 32)
			for i := range keys {
				keys[i] = fmt.Appendf(nil, "key%02d", i)
				require.NoError(t, s.Put(ctx, keys[i], []byte("v")))
			}
			var writes, stop atomic.Bool
			var mu sync.Mutex
			var trace []kvstore.ManagerPeriod
			shiftAt, settledAt := -1, -1
			var switchAt farmem.Time
			mctx, stopManager := sm.WithCancel(ctx)
			const workers = 6
			err = farmemtest.Parallel(rt, workers+2, func(g int) error {
				switch g {
				case workers:
					return s.RunManager(mctx, kvstore.ManagerOptions{Period: period, Ratio: 0.5, NodeMemory: 4 << 10, EntryBytes: 128,
						// Algorithm 1 assigns once: a reassignment would restart the round too.
						Threshold: 1e9,
						Trace: func(p kvstore.ManagerPeriod) {
							mu.Lock()
							trace = append(trace, p)
							n := len(trace)
							if p.Shift && shiftAt < 0 {
								shiftAt = n - 1
							}
							if shiftAt >= 0 && n-1 > shiftAt && p.Settled && settledAt < 0 {
								settledAt = n - 1
							}
							mu.Unlock()
							// Four periods past the restarted round's settling (a second shift
							// would show in the period after the first), or 40 in all.
							if (settledAt >= 0 && n > settledAt+4) || n > 40 {
								stop.Store(true)
								stopManager()
							}
						}})
				case workers + 1:
					// Switch an eighth into a period once the manager has run 12 (writes are slower than
					// reads, so the straddling period's read share is still well under 0.9).
					for {
						mu.Lock()
						n := len(trace)
						var last farmem.Time
						if n > 0 {
							last = trace[n-1].At
						}
						mu.Unlock()
						if n >= 12 {
							if err := rt.Sleep(ctx, last.Add(period/8).Sub(rt.Now())); err != nil {
								return err
							}
							switchAt = rt.Now()
							writes.Store(true)
							return nil
						}
						if err := rt.Sleep(ctx, period/8); err != nil {
							return err
						}
					}
				}
				ss, end, err := openSession(ctx, sm, s, nodes[g%len(nodes)])
				if err != nil {
					return err
				}
				defer end()
				r := rt.NewRand()
				for i := 0; !stop.Load(); i++ {
					key := keys[r.IntN(len(keys))]
					if writes.Load() {
						err = ss.Put(ctx, key, fmt.Appendf(nil, "%d-%d", g, i))
					} else {
						_, err = ss.Get(ctx, key)
					}
					if err != nil {
						return err
					}
				}
				return nil
			})
			stopManager()
			require.NoError(t, err)
			require.NotZero(t, switchAt)
			var shifts []int
			straddle := -1
			for i, p := range trace {
				if p.Shift {
					shifts = append(shifts, i)
				}
				if straddle < 0 && p.At > switchAt {
					straddle = i
				}
			}
			t.Logf("seed %d: switch at %v, periods %d, shifts at %v (the straddling period %d)", seed, switchAt, len(trace), shifts, straddle)
			for i := straddle - 1; i < len(trace) && i < straddle+3; i++ {
				p := trace[i]
				t.Logf("  period %d: ops %d reads %d ratio %.1f next %.1f settled %v shift %v reassigned %v", i, p.Ops, p.Reads, p.Ratio, p.Next, p.Settled, p.Shift, p.Reassigned)
			}
			require.Len(t, shifts, 1, "one shift restarts the round")
			require.Equal(t, straddle, shifts[0], "the period the switch falls in shows the shift")
			require.Less(t, float64(trace[straddle].Reads), 0.9*float64(trace[straddle].Ops))
			ref := trace[shifts[0]+1]
			require.False(t, trace[shifts[0]].Settled, "the shift restarted the round")
			require.False(t, ref.Shift)
			require.Equal(t, trace[shifts[0]].Next, ref.Ratio, "the reference sample runs at the ratio the round restarted at")
			require.InDelta(t, 0.1, math.Abs(ref.Next-ref.Ratio), 1e-9, "after the reference sample the round probes one step")
			settled := false
			for _, p := range trace[shifts[0]+1:] {
				settled = settled || p.Settled
			}
			require.True(t, settled, "the restarted round settled")
			require.NoError(t, s.Close())
		})
	}
}
