package race_test

import (
	"context"
	"fmt"
	"sync/atomic"
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
	for _, pr := range protos {
		for step := 1; step <= pr.steps; step++ {
			t.Run(fmt.Sprintf("%s/step%d", pr.name, step), func(t *testing.T) { splitterDies(t, pr, step) })
		}
	}
}

// splitterDies is TestSplitterDies for one protocol and step.
func splitterDies(t *testing.T, pr splitProto, step int) {
	e := newEnvProto(t, local.Options{}, collide, pr)
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
	// split wait, or a retry (a second lookup; a split moved by regions reads a
	// moved key in its new half, a second lookup, as well).
	st := live.tab.Stats()
	require.Zero(t, st.SplitWaits, "searches waited for the split")
	if pr.version < race.LayoutVersion {
		require.Equal(t, n, st.Lookups, "searches retried")
	} else {
		require.LessOrEqual(t, st.Lookups, 2*n, "searches retried")
	}
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
	if pr.holdsLock(step) {
		require.NotZero(t, live.tab.Stats().Recoveries, "no split was taken over")
	}
	require.Equal(t, int(n)+100, audit(t, live, true).Keys)
	info, err := live.tab.Info(ctx)
	require.NoError(t, err)
	t.Logf("step %d: %d keys before the crash; %d splits, %d doublings; %+v", step, n, info.Splits, info.Doublings, live.tab.Stats())
}

// TestSplitterStalls pauses a splitter at each step of its split for longer than its lease:
// another client takes the split over and finishes it, and when the first resumes, its
// renewals are refused or its CASes find the work done; both go on, and nothing is lost.
func TestSplitterStalls(t *testing.T) {
	for _, pr := range protos {
		for step := 1; step <= pr.steps; step++ {
			t.Run(fmt.Sprintf("%s/step%d", pr.name, step), func(t *testing.T) { splitterStalls(t, pr, step) })
		}
	}
}

// TestLateSplitVerbs pauses a splitter of a table split region by region right before it
// posts each kind of step verb (the new half's image, the child and move words, a freeze, the
// copies, a bit, a release, the header, the parent lock), for longer than its lease, after
// its last renewal: another client takes the split over and finishes it, and then the paused
// verb lands late. Nothing may be lost or duplicated (the unborn word refuses a late copy,
// the move word's CAS a late bit, the released words a late release; a late freeze is thawed
// by the next waiter).
func TestLateSplitVerbs(t *testing.T) {
	for _, step := range []int{1, 2, 3, 4, 5, 6, 8, 9} {
		t.Run(fmt.Sprintf("step%d", step), func(t *testing.T) { splitterStallsAt(t, regionSplit, step, true) })
	}
}

// splitterStalls is TestSplitterStalls for one protocol and step.
func splitterStalls(t *testing.T, pr splitProto, step int) { splitterStallsAt(t, pr, step, false) }

// splitterStallsAt is splitterStalls; with before set the splitter stalls before the verb of
// the step rather than after it (beforeSplitStep).
func splitterStallsAt(t *testing.T, pr splitProto, step int, before bool) {
	e := newEnvProto(t, local.Options{}, collide, pr)
	if before {
		// Regions, so that other regions' steps run while one is paused.
		e = newEnvProto(t, local.Options{}, regions, pr)
	}
	opts := race.Options{Lease: 10 * time.Millisecond}
	stalled, resume := make(chan struct{}), make(chan struct{})
	stall := func() {
		close(stalled)
		<-resume
	}
	slow := e.openWith(t, 0, opts, func(m farmem.Memory) farmem.Memory {
		if before {
			return beforeSplitStep(m, e.root, pr, step, stall)
		}
		w, _ := atSplitStep(m, e.root, pr, step, stall)
		return w
	})
	fast := e.open(t, 1, opts)
	ctx := context.Background()
	done := make(chan error, 1)
	var inserted atomic.Uint64 // keys the slow client inserted (0 up to it)
	go func() {
		for i := range uint64(100) {
			if err := slow.tab.Insert(ctx, key(i), val(i, 8)); err != nil {
				done <- err
				return
			}
			inserted.Store(i + 1)
		}
		done <- nil
	}()
	<-stalled
	time.Sleep(15 * time.Millisecond) // past the lease
	gone := uint64(0)
	if before {
		// Delete what the slow client inserted before it stalled: a late verb that brought a
		// key back (a stale copy, a release over a word since changed) is caught below.
		gone = inserted.Load()
		for i := range gone {
			require.NoError(t, fast.tab.Delete(ctx, key(i)), "delete %d", i)
		}
	}
	for i := uint64(1000); i < 1100; i++ {
		require.NoError(t, fast.tab.Insert(ctx, key(i), val(i, 8)), "insert %d", i)
	}
	close(resume)
	require.NoError(t, <-done)
	for _, i := range append(seq(0, 100), seq(1000, 1100)...) {
		v, err := fast.tab.Search(ctx, key(i))
		if i < gone {
			require.ErrorIs(t, err, race.ErrNotFound, "deleted key %d", i)
			continue
		}
		require.NoError(t, err, "key %d", i)
		require.Equal(t, i, unval(v))
	}
	if pr.holdsLock(step) || before {
		require.NotZero(t, fast.tab.Stats().Recoveries, "the stalled split was not taken over")
	}
	require.Equal(t, 200-int(gone), audit(t, fast, true).Keys)
	t.Logf("step %d: %d keys deleted; slow %+v", step, gone, slow.tab.Stats())
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
	e := newEnvProto(t, local.Options{}, collide, wholeSplit)
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
