package blink_test

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/farmem/farmem/ds/blink"
	"github.com/farmem/farmem/ds/selcc"
	"github.com/farmem/farmem/farmem/farmemtest"
	"github.com/farmem/farmem/sim"
)

// long runs the longer versions of this package's sim tests (more seeds).
var long = flag.Bool("blink.long", false, "run the longer sim tests (more seeds)")

// TestCrashMidRunSim crashes one of three compute nodes (two clients each) in the middle of a
// run under WriteBackOnRelease, on sim. The survivors repair the dead node's holds on the lines
// they meet online (a survivor operation that still fails, on a holder that died after taking
// its message and before answering, is an unknown outcome and ends its client); then a survivor
// sweeps the tree with Repair (whatever no walk needed), the survivors run the workload again,
// and one reads every key. The whole history, the dead node's acknowledged writes included,
// must be linearizable: no acknowledged write is lost.
func TestCrashMidRunSim(t *testing.T) {
	// Seeds 2-4 stranded a survivor's share (a failed upgrade forgot it: 7ee4c49); seed 20
	// crashes the victim between a hand-over's FAA and its forward (the survivor's hold is an
	// orphan). With the failed upgrade's release taken out again, seeds 1-4 all hang, so the
	// suite runs seeds 2 and 20; -blink.long runs 1-4 and 20.
	seeds := []uint64{2, 20}
	if *long {
		seeds = []uint64{1, 2, 3, 4, 20}
	}
	for _, seed := range seeds {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) {
			r := simRig(t, 3, 2, seed, selcc.Options{LineSize: 256, Frames: 32, Durability: selcc.WriteBackOnRelease})
			s := r.f.(*sim.Sim)
			w := splitLoad
			w.ops, w.stopOnDown = 400, true
			var h *kvHistory
			r.do(func() {
				cs := make([]*client, 6)
				for i := range cs {
					cs[i] = r.client(t, i)
				}
				ctx, cancel := r.f.Runtime().WithTimeout(context.Background(), 10*time.Minute)
				defer cancel()
				h = kvModel.NewHistory(r.f.Runtime())
				dead := r.comp[0]
				s.At(s.Now().Add(1500*time.Microsecond), func() { _ = s.Crash(dead) })
				require.NoError(t, farmemtest.Parallel(r.f.Runtime(), len(cs), func(i int) error { return w.run(ctx, cs[i], h, i) }))
				// Clients 1 and 4 are on the second node, a survivor.
				n, err := cs[1].t.Repair(ctx, cs[1].m, dead.ComputeID())
				require.NoError(t, err)
				t.Logf("repair removed %d holds", n)
				// The survivors (clients 1, 2, 4, 5) run on, splitting lines the dead node held.
				w2 := w
				w2.ops, w2.stopOnDown = 100, false
				live := []int{1, 2, 4, 5}
				require.NoError(t, farmemtest.Parallel(r.f.Runtime(), len(live), func(i int) error {
					return w2.run(ctx, cs[live[i]], h, 10+live[i])
				}))
				rec := h.Client(100)
				for i := range w.keys {
					k := wkey(i)
					op := rec.Call(kvModel.Get(k))
					b, err := cs[1].t.Get(ctx, []byte(k))
					if errors.Is(err, blink.ErrNotFound) {
						op.End(kvModel.Missing(), nil)
						continue
					}
					require.NoError(t, err, "get %s after the repair", k)
					x, err := unbody(b)
					require.NoError(t, err)
					op.End(kvModel.Found(x), nil)
				}
			})
			h.Check(t)
		})
	}
}
