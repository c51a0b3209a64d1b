package race_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/farmem/farmem/ds/race"
	"github.com/farmem/farmem/farmem"
	"github.com/farmem/farmem/farmem/farmemtest"
	"github.com/farmem/farmem/sim"
)

// TestSplitNewHalfClosedUntilReleased: a split's new half holds frozen slots only where keys
// moved and one per overflow bucket, its other slots empty; still, no insert commits into it
// before the split releases it, whichever way the inserter reaches it. Client 0 fills the
// first bucket group only (keys whose candidate buckets are all there), so the split moves
// keys into that group alone; its first split stalls (within its lease) after each of steps 2
// to 6; client 1 then opens a fresh handle (whose directory names the new half once step 4 has
// published it) and inserts a key the new half covers whose buckets are in the other groups,
// where no slot moved: the insert waits for the split and completes only after step 7, the
// new half's release, in the simulator's virtual time. An insert committed into the published but
// unreleased half would be missed by a reader whose directory still names the old half, whose
// header covers the key until step 5.
func TestSplitNewHalfClosedUntilReleased(t *testing.T) {
	const stall = 2 * time.Millisecond
	for step := 2; step <= 6; step++ {
		t.Run(fmt.Sprintf("step%d", step), func(t *testing.T) {
			var fired atomic.Bool
			var half atomic.Uint64 // the new half's header word, from the image client 0 wrote
			var released farmem.Time
			var steps *race.SplitSteps // set once the table's root is known, before client 0 inserts
			wrap := func(s *sim.Sim, m farmem.Memory) farmem.Memory {
				return &farmemtest.Interposer{Memory: m, After: func(ctx context.Context, v farmemtest.Verb, _ uint64, err error) {
					if err != nil || steps == nil {
						return
					}
					n := steps.Step(v)
					if n == 2 && half.Load() == 0 {
						half.Store(binary.LittleEndian.Uint64(v.Op().Buf))
					}
					if n == 7 && released == 0 {
						released = s.Now()
					}
					if n == step && !fired.Load() {
						fired.Store(true)
						_ = s.Runtime().Sleep(ctx, stall)
					}
				}}
			}
			splitSim(t, race.Params{Groups: 8}, race.Options{Lease: 50 * time.Millisecond}, wrap, func(s *sim.Sim, cs []*client) {
				ctx := context.Background()
				var done farmem.Time
				var waits uint64
				var splitterDone atomic.Bool
				steps = race.NewSplitSteps(cs[0].tab.Root())
				errs := make([]error, 2)
				require.NoError(t, s.Parallel(2, func(i int) {
					c := cs[i]
					if i == 0 {
						for k := uint64(0); c.tab.Stats().Splits == 0 && errs[0] == nil; k++ {
							if inGroup0(c.tab.Layout(), key(k)) {
								errs[0] = c.tab.Insert(ctx, key(k), val(k, 8))
							}
						}
						splitterDone.Store(true)
						return
					}
					for !fired.Load() {
						if splitterDone.Load() {
							errs[1] = fmt.Errorf("client 0 split without stalling after step %d", step)
							return
						}
						if errs[1] = s.Runtime().Sleep(ctx, time.Microsecond); errs[1] != nil {
							return
						}
					}
					tab, err := race.Open(ctx, c.m, c.a, c.tab.Root(), race.Options{Lease: 50 * time.Millisecond})
					if errs[1] = err; err != nil {
						return
					}
					defer tab.Close()
					k := uint64(1 << 20)
					for !race.CoversHeader(half.Load(), tab.Layout().Place(key(k)).H1) || tab.Layout().Place(key(k)).Candidates[0] < groupSlots {
						k++
					}
					errs[1] = tab.Insert(ctx, key(k), val(k, 8))
					done, waits = s.Now(), tab.Stats().SplitWaits
				}))
				require.NoError(t, errs[0])
				require.NoError(t, errs[1])
				t.Logf("stalled after step %d: the insert into the new half waited %d times and completed %v after the release", step, waits, done.Sub(released))
				require.NotZero(t, released, "the split never released its new half")
				require.NotZero(t, waits, "the insert into the new half did not wait for the split")
				require.GreaterOrEqual(t, done, released, "an insert into the new half completed %v before the split released it (stalled after step %d)", released.Sub(done), step)
				audit(t, cs[1], true)
			})
		})
	}
}

// groupSlots is the number of slots of a bucket group with the geometry of
// TestSplitNewHalfClosedUntilReleased (8 slots per bucket, 3 buckets).
const groupSlots = 3 * 8

// inGroup0 reports whether all of key's candidate slots are in the first bucket group.
func inGroup0(l *race.Layout, key []byte) bool {
	c := l.Place(key).Candidates
	return c[len(c)-1] < groupSlots
}
