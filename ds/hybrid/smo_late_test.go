package hybrid_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/farmem/farmem/ds/hybrid"
	"github.com/farmem/farmem/farmem"
	"github.com/farmem/farmem/farmem/farmemtest"
	"github.com/farmem/farmem/farmem/local"
)

// An SMO executor paused after marking its leaf dead, past its lease: another client takes the
// claim over and publishes the recorded plan, and the leaf that replaced the dead one is then
// split in turn. When the paused executor resumes, its publish finds, on the dead leaf's key
// path, neither the dead leaf nor its plan's leaves: the swap was made already (a dead leaf
// leaves its slot only through its plan's swap, and never comes back), so the publish is done,
// not a corrupt tree. (Before, the executor's Insert failed with ErrCorrupt: "the path to
// leaf ... ends at ...", as an update helping an SMO did in the kvstore matrix under load.)
func TestLateExecutorAfterReplacementSplit(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, local.Options{}, hybrid.Params{LeafSlots: 8})
	const lease = time.Millisecond
	var b *client
	var actErr atomic.Value
	a := e.openWith(t, 0, hybrid.Options{Lease: lease}, func(m farmem.Memory) farmem.Memory {
		tm, _ := atStep(m, stepDead, func() {
			// The executor is paused here, its plan recorded, the leaf dead, nothing published.
			time.Sleep(5 * lease) // past the claim's lease (a lower bound only)
			// b helps (its IDU finds the leaf dead and the claim expired), then fills the
			// replacement leaf until it splits.
			for k := uint64(100); k < 106; k++ {
				if err := b.tree.Insert(ctx, key(k), k); err != nil {
					actErr.Store(err)
					return
				}
			}
		})
		return tm
	})
	b = e.open(t, 1, hybrid.Options{Lease: lease})
	// One leaf for the prefix 0 (keys 1-255): 8 keys, 4 deleted, so the next insert compacts it.
	for k := uint64(1); k <= 8; k++ {
		require.NoError(t, a.tree.Insert(ctx, key(k), k))
	}
	for k := uint64(1); k <= 4; k++ {
		require.NoError(t, a.tree.Delete(ctx, key(k)))
	}
	before := b.tree.Stats()
	require.NoError(t, a.tree.Insert(ctx, key(9), 9), "the late executor's insert")
	if err, _ := actErr.Load().(error); err != nil {
		require.NoError(t, err, "the helper's inserts")
	}
	after := b.tree.Stats()
	require.Equal(t, uint64(1), after.Helps-before.Helps, "the helper finished the paused SMO")
	require.Equal(t, uint64(1), after.Splits-before.Splits, "the replacement leaf was split")
	census := audit(t, b)
	want := []uint64{5, 6, 7, 8, 9, 100, 101, 102, 103, 104, 105}
	var got []uint64
	for _, l := range census.Leaves {
		got = append(got, l.Keys...)
	}
	require.ElementsMatch(t, want, got)
	for _, k := range want {
		v, err := b.tree.Get(ctx, key(k))
		require.NoError(t, err)
		require.Equal(t, k, v)
	}
}

// A helper that took an expired claim over and read the leaf before its plan was recorded: the
// executor it took over from then records its plan and publishes it (its lease had run out, not
// its work), and the replacement is split in turn, all before the helper looks for the leaf's
// slot. The helper finds the leaf off its path with a plan recorded and the leaf dead: the SMO
// is done. (Before, the helper's Insert failed with ErrCorrupt.)
func TestHelperAfterExecutorPublished(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, local.Options{}, hybrid.Params{LeafSlots: 8})
	const lease = time.Millisecond
	paused, resumeA := make(chan struct{}), make(chan struct{})
	a := e.openWith(t, 0, hybrid.Options{Lease: lease}, func(m farmem.Memory) farmem.Memory {
		tm, _ := atStep(m, stepExclusive, func() {
			close(paused)
			<-resumeA
		})
		return tm
	})
	const leafBytes = 72 + 16*8 + 8 // a whole leaf of 8 slots, as runSMO reads it after the drain
	bRead, resumeB := make(chan struct{}), make(chan struct{})
	var fired atomic.Bool
	b := e.openWith(t, 1, hybrid.Options{Lease: lease}, func(m farmem.Memory) farmem.Memory {
		return &farmemtest.Interposer{Memory: m, After: func(_ context.Context, v farmemtest.Verb, _ uint64, err error) {
			if err == nil && v.Single && v.Op().Kind == farmem.OpRead && len(v.Op().Buf) == leafBytes && !fired.Swap(true) {
				close(bRead)
				<-resumeB
			}
		}}
	})
	c := e.open(t, 0, hybrid.Options{Lease: lease})
	for k := uint64(1); k <= 8; k++ {
		require.NoError(t, a.tree.Insert(ctx, key(k), k))
	}
	for k := uint64(1); k <= 4; k++ {
		require.NoError(t, a.tree.Delete(ctx, key(k)))
	}
	errA, errB := make(chan error, 1), make(chan error, 1)
	go func() { errA <- a.tree.Insert(ctx, key(9), 9) }() // compacts the full leaf
	<-paused                                              // a holds the leaf exclusive, its drain not begun
	time.Sleep(5 * lease)                                 // past a's claim (a lower bound only)
	before := b.tree.Stats()
	go func() { errB <- b.tree.Insert(ctx, key(100), 100) }() // takes the claim over
	<-bRead                                                   // b read the leaf: no plan yet
	close(resumeA)
	require.NoError(t, <-errA, "the executor's insert")
	for k := uint64(101); k <= 104; k++ { // 8 keys in the replacement, then a split
		require.NoError(t, c.tree.Insert(ctx, key(k), k))
	}
	require.Equal(t, uint64(1), c.tree.Stats().Splits, "the replacement leaf was split")
	close(resumeB)
	require.NoError(t, <-errB, "the helper's insert")
	require.Equal(t, uint64(1), b.tree.Stats().Helps-before.Helps, "b took the SMO over")
	census := audit(t, c)
	want := []uint64{5, 6, 7, 8, 9, 100, 101, 102, 103, 104}
	var got []uint64
	for _, l := range census.Leaves {
		got = append(got, l.Keys...)
	}
	require.ElementsMatch(t, want, got)
}
