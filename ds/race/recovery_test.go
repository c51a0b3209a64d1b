package race_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/farmem/farmem/ds/race"
	"github.com/farmem/farmem/farmem"
	"github.com/farmem/farmem/farmem/farmemtest"
	"github.com/farmem/farmem/farmem/local"
)

// TestSplitterDies crashes a splitting client (fault injection) right after each step of its
// split in turn, so that it keeps the split lock, and checks that another client searches without waiting, and that its writes
// take the split over once the lease expires and finish it, losing nothing.
func TestSplitterDies(t *testing.T) {
	for step := 1; step <= 7; step++ {
		t.Run(fmt.Sprintf("step%d", step), func(t *testing.T) {
			e := newEnv(t, local.Options{}, collide)
			opts := race.Options{Lease: 20 * time.Millisecond}
			dead := e.crashAtSplitStep(t, 0, opts, step)
			ctx := context.Background()
			var n uint64
			for ; ; n++ {
				err := dead.tab.Insert(ctx, key(n), val(n, 8))
				if err != nil {
					require.ErrorIs(t, err, farmem.ErrNodeDown)
					require.True(t, dead.killed.Load(), "failed before the crash: %v", err)
					break
				}
				require.Less(t, n, uint64(100), "no split")
			}
			require.NoError(t, dead.tab.Close())

			live := e.open(t, 1, opts)
			for i := range n {
				v, err := live.tab.Search(ctx, key(i))
				require.NoError(t, err, "key %d", i)
				require.Equal(t, i, unval(v))
			}
			// Counted, not timed: a search that waited for the split would have counted a
			// split wait, or a retry (a second lookup).
			st := live.tab.Stats()
			require.Zero(t, st.SplitWaits, "searches waited for the split")
			require.Equal(t, n, st.Lookups, "searches retried")
			// Writes to every key, then many more inserts (more splits, over the dead one's).
			for i := range n {
				require.NoError(t, live.tab.Update(ctx, key(i), val(i+100, 8)), "update %d", i)
			}
			for i := n; i < n+100; i++ {
				require.NoError(t, live.tab.Insert(ctx, key(i), val(i+100, 8)), "insert %d", i)
			}
			for i := range n + 100 {
				v, err := live.tab.Search(ctx, key(i))
				require.NoError(t, err, "key %d", i)
				require.Equal(t, i+100, unval(v))
			}
			require.NotZero(t, live.tab.Stats().Recoveries, "no split was taken over")
			require.Equal(t, int(n)+100, audit(t, live, true).Keys)
			info, err := live.tab.Info(ctx)
			require.NoError(t, err)
			t.Logf("step %d: %d keys before the crash; %d splits, %d doublings; %+v", step, n, info.Splits, info.Doublings, live.tab.Stats())
		})
	}
}

// TestSplitterStalls pauses a splitter at each step of its split for longer than its lease:
// another client takes the split over and finishes it, and when the first resumes, its
// renewals are refused or its CASes find the work done; both go on, and nothing is lost.
func TestSplitterStalls(t *testing.T) {
	for step := 1; step <= 7; step++ {
		t.Run(fmt.Sprintf("step%d", step), func(t *testing.T) {
			e := newEnv(t, local.Options{}, collide)
			opts := race.Options{Lease: 10 * time.Millisecond}
			stalled, resume := make(chan struct{}), make(chan struct{})
			slow := e.openWith(t, 0, opts, func(m farmem.Memory) farmem.Memory {
				w, _ := atSplitStep(m, e.root, step, func() {
					close(stalled)
					<-resume
				})
				return w
			})
			fast := e.open(t, 1, opts)
			ctx := context.Background()
			done := make(chan error, 1)
			go func() {
				for i := range uint64(100) {
					if err := slow.tab.Insert(ctx, key(i), val(i, 8)); err != nil {
						done <- err
						return
					}
				}
				done <- nil
			}()
			<-stalled
			time.Sleep(15 * time.Millisecond) // past the lease
			for i := uint64(1000); i < 1100; i++ {
				require.NoError(t, fast.tab.Insert(ctx, key(i), val(i, 8)), "insert %d", i)
			}
			close(resume)
			require.NoError(t, <-done)
			for _, i := range append(seq(0, 100), seq(1000, 1100)...) {
				v, err := fast.tab.Search(ctx, key(i))
				require.NoError(t, err, "key %d", i)
				require.Equal(t, i, unval(v))
			}
			require.NotZero(t, fast.tab.Stats().Recoveries, "the stalled split was not taken over")
			require.Equal(t, 200, audit(t, fast, true).Keys)
			t.Logf("step %d: slow %+v", step, slow.tab.Stats())
		})
	}
}

func seq(from, to uint64) []uint64 {
	var s []uint64
	for i := from; i < to; i++ {
		s = append(s, i)
	}
	return s
}

// TestSplitSteps checks the recogniser the tests above stop splits with: an uncontended
// client's first split ends steps 1 to 7, each once, in order.
func TestSplitSteps(t *testing.T) {
	e := newEnv(t, local.Options{}, collide)
	var seen []int
	c := e.openWith(t, 0, race.Options{}, func(m farmem.Memory) farmem.Memory {
		steps := race.NewSplitSteps(e.root)
		return &farmemtest.Interposer{Memory: m, After: func(_ context.Context, v farmemtest.Verb, _ uint64, err error) {
			if n := steps.Step(v); err == nil && n != 0 {
				seen = append(seen, n)
			}
		}}
	})
	ctx := context.Background()
	for i := uint64(0); c.tab.Stats().Splits == 0; i++ {
		require.Less(t, i, uint64(100), "no split")
		require.NoError(t, c.tab.Insert(ctx, key(i), val(i, 8)))
	}
	require.Equal(t, []int{1, 2, 3, 4, 5, 6, 7}, seen)
}
