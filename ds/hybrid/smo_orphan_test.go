package hybrid_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/farmem/farmem/ds/hybrid"
	"github.com/farmem/farmem/farmem"
	"github.com/farmem/farmem/farmem/farmemtest"
	"github.com/farmem/farmem/farmem/local"
)

// pauseAfter returns m seen through an Interposer that, once, right after the first verb match
// accepts completes without error, closes reached and waits for resume.
func pauseAfter(m farmem.Memory, match func(farmemtest.Verb, uint64) bool, reached, resume chan struct{}) farmem.Memory {
	var fired atomic.Bool
	return &farmemtest.Interposer{Memory: m, After: func(_ context.Context, v farmemtest.Verb, w uint64, err error) {
		if err == nil && match(v, w) && !fired.Swap(true) {
			close(reached)
			<-resume
		}
	}}
}

// An SMO that cannot drain undoes its claim (CAS to 0), then its exclusive hold (FAA). A waiter
// that has waited past a lease and reads the leaf between the two takes it for the hold of a
// holder that died undoing it, and runs the SMO. The undoer is alive, though: its FAA then
// makes the leaf writable while the waiter's SMO copies it, and a delete that lands on the old
// leaf after the copy was lost (the key came back in the replacement; the kvstore matrix's
// hybrid/spin history showed an insert finding a key a delete had removed). The waiter now
// takes an exclusive hold of its own with its claim, so the leaf stays frozen whatever the
// undoer does.
func TestOrphanTakeoverWhileUndoerAlive(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, local.Options{}, hybrid.Params{LeafSlots: 8})
	const lease = 2 * time.Millisecond
	// p: an update paused holding its Spear count, so that a's SMO cannot drain.
	pPaused, resumeP := make(chan struct{}), make(chan struct{})
	p := e.openWith(t, 1, hybrid.Options{Lease: lease}, func(m farmem.Memory) farmem.Memory {
		return pauseAfter(m, func(v farmemtest.Verb, _ uint64) bool {
			return !v.Single && len(v.Batch.Ops) > 1 && v.Batch.Ops[0].Kind == farmem.OpFAA && v.Batch.Ops[0].Swap == 1
		}, pPaused, resumeP)
	})
	// a: the SMO executor, paused after its undo's claim CAS, before its hold's FAA.
	aUndone, resumeA := make(chan struct{}), make(chan struct{})
	a := e.openWith(t, 0, hybrid.Options{Lease: lease}, func(m farmem.Memory) farmem.Memory {
		return pauseAfter(m, func(v farmemtest.Verb, w uint64) bool {
			op := v.Op()
			return v.Single && op.Kind == farmem.OpCAS && op.Swap == 0 && op.Cmp != 0 && w == op.Cmp && op.Cmp>>48 != 0 && op.Cmp != ^uint64(0)
		}, aUndone, resumeA)
	})
	// b: the waiter, paused after it read the frozen leaf in the SMO it took over.
	const leafBytes = 72 + 16*8 + 8
	bRead, resumeB := make(chan struct{}), make(chan struct{})
	b := e.openWith(t, 1, hybrid.Options{Lease: lease}, func(m farmem.Memory) farmem.Memory {
		return pauseAfter(m, func(v farmemtest.Verb, _ uint64) bool {
			return v.Single && v.Op().Kind == farmem.OpRead && len(v.Op().Buf) == leafBytes
		}, bRead, resumeB)
	})
	c := e.open(t, 0, hybrid.Options{Lease: lease})
	for k := uint64(1); k <= 8; k++ {
		require.NoError(t, c.tree.Insert(ctx, key(k), k))
	}
	errP, errA, errB, errC := make(chan error, 1), make(chan error, 1), make(chan error, 1), make(chan error, 1)
	go func() { errP <- p.tree.Update(ctx, key(5), 50) }()
	<-pPaused
	go func() { errA <- a.tree.Insert(ctx, key(9), 9) }() // splits: cannot drain, undoes
	<-aUndone
	close(resumeP)
	require.NoError(t, <-errP)
	beforeB := b.tree.Stats()
	go func() { errB <- b.tree.Delete(ctx, key(2)) }() // waits past a lease, takes the leaf over
	<-bRead
	close(resumeA)
	require.ErrorIs(t, <-errA, hybrid.ErrBusy, "the executor that could not drain")
	go func() { errC <- c.tree.Delete(ctx, key(1)) }()
	cDone := false
	select {
	case err := <-errC: // the leaf was writable under b's SMO (the defect)
		require.NoError(t, err)
		cDone = true
	case <-time.After(20 * time.Millisecond): // c waits for b's SMO (any delay will do)
	}
	close(resumeB)
	require.NoError(t, <-errB)
	if !cDone {
		require.NoError(t, <-errC)
	}
	require.Equal(t, uint64(1), b.tree.Stats().Helps-beforeB.Helps, "b took the orphaned hold over")
	for _, k := range []uint64{1, 2} {
		_, err := c.tree.Get(ctx, key(k))
		require.True(t, errors.Is(err, hybrid.ErrNotFound), "key %d deleted, read: %v", k, err)
	}
	v, err := c.tree.Get(ctx, key(5))
	require.NoError(t, err)
	require.Equal(t, uint64(50), v)
	census := audit(t, c)
	var got []uint64
	for _, l := range census.Leaves {
		got = append(got, l.Keys...)
	}
	require.ElementsMatch(t, []uint64{3, 4, 5, 6, 7, 8}, got)
}
