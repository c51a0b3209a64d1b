package hybrid_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/farmem/farmem/ds/hybrid"
	"github.com/farmem/farmem/farmem"
	"github.com/farmem/farmem/farmem/farmemtest"
	"github.com/farmem/farmem/farmem/local"
)

// An IDU stalled inside a leaf (holding its Spear count) keeps an SMO from draining: the SMO
// gives up after half its lease, undoes its hold, and the insert fails with ErrBusy, leaving
// the leaf usable (the stalled update completes, its Spear count is given back); once the
// stall ends, the split goes through and the Spear words are all back to zero.
func TestStalledIDUMakesSMOBusy(t *testing.T) {
	e := newEnv(t, local.Options{}, hybrid.Params{LeafSlots: 8})
	ctx := context.Background()
	paused, resume := make(chan struct{}), make(chan struct{})
	var once sync.Once
	a := e.openWith(t, 0, hybrid.Options{}, func(m farmem.Memory) farmem.Memory {
		return &farmemtest.Interposer{Memory: m, Before: func(_ context.Context, v farmemtest.Verb) {
			if isValueWrite(v) {
				once.Do(func() { close(paused); <-resume })
			}
		}}
	})
	const lease = 40 * time.Millisecond
	b := e.open(t, 1, hybrid.Options{Lease: lease})
	const p = 0x0808080808080800
	for i := uint64(1); i <= 8; i++ {
		require.NoError(t, b.tree.Insert(ctx, key(p|i), i))
	}
	done := make(chan error, 1)
	go func() { done <- a.tree.Update(ctx, key(p|1), 100) }()
	<-paused
	err := b.tree.Insert(ctx, key(p|9), 9)
	require.ErrorIs(t, err, hybrid.ErrBusy)
	require.Positive(t, b.tree.Stats().DrainReads)
	census := audit(t, b)
	require.Equal(t, 1, census.Held, "only the stalled update's count")
	v, err := b.tree.Get(ctx, key(p|2))
	require.NoError(t, err)
	require.Equal(t, uint64(2), v)
	close(resume)
	require.NoError(t, <-done)
	require.NoError(t, b.tree.Insert(ctx, key(p|9), 9))
	census = audit(t, b)
	require.Zero(t, census.Held)
	require.Equal(t, 9, census.Keys)
	v, err = b.tree.Get(ctx, key(p|1))
	require.NoError(t, err)
	require.Equal(t, uint64(100), v)
}
