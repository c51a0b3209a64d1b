package alloc

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/farmem/farmem/farmem"
)

// PinCoarse decides on the refresh by the allocator's last clock reading: an idle time past the
// lease goes unnoticed at PinCoarse, and the Unpin that follows reports the lease ran out (the
// section is unsafe); the next PinCoarse refreshes. A short idle time costs nothing.
func TestPinCoarseAfterIdle(t *testing.T) {
	ctx := context.Background()
	c := epochCluster(t)
	w, mw := c.allocator(t, 0, Options{Lease: time.Hour, Refresh: time.Minute})
	r, _ := c.allocator(t, 1, Options{Lease: 200 * time.Millisecond, Refresh: 100 * time.Millisecond})
	rt := mw.Runtime()

	_, err := r.PinCoarse(ctx)
	require.NoError(t, err)
	require.NoError(t, r.Unpin())
	refreshes := r.Stats().Refreshes
	require.NoError(t, rt.Sleep(ctx, 300*time.Millisecond))

	// Pinned with the stale reading: no refresh, so a block retired now may be reused while
	// the reader is still in its section, and Unpin must say so.
	at, err := r.PinCoarse(ctx)
	require.NoError(t, err)
	require.Less(t, int64(at), int64(rt.Now().Add(-250*time.Millisecond)), "the time is the reading before the idle time")
	require.Equal(t, refreshes, r.Stats().Refreshes, "no refresh by the stale reading")
	x, err := w.Alloc(ctx, 64, 0)
	require.NoError(t, err)
	require.NoError(t, w.Retire(ctx, x, 64))
	require.NoError(t, w.Quiesce(ctx))
	n, err := w.Reclaim(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, n, "the reader's lease ran out: the block is reusable")
	require.ErrorIs(t, r.Unpin(), ErrPinExpired)

	// The retry refreshes (Unpin's reading shows the lease over) and holds.
	_, err = r.PinCoarse(ctx)
	require.NoError(t, err)
	require.Greater(t, r.Stats().Refreshes, refreshes)
	require.NoError(t, r.Unpin())

	// Nested, and idle times well within the lease: no refresh, no error.
	q, _ := c.allocator(t, 1, Options{Lease: time.Hour, Refresh: time.Minute})
	_, err = q.PinCoarse(ctx)
	require.NoError(t, err)
	_, err = q.PinCoarse(ctx)
	require.NoError(t, err)
	require.NoError(t, q.Unpin())
	require.NoError(t, q.Unpin())
	refreshes = q.Stats().Refreshes
	for range 3 {
		require.NoError(t, rt.Sleep(ctx, 2*time.Millisecond))
		_, err = q.PinCoarse(ctx)
		require.NoError(t, err)
		require.NoError(t, q.Unpin())
	}
	require.Equal(t, refreshes, q.Stats().Refreshes)
}

// PinAt uses the caller's reading as Pin would its own.
func TestPinAt(t *testing.T) {
	ctx := context.Background()
	c := epochCluster(t)
	a, m := c.allocator(t, 0, Options{Lease: time.Hour, Refresh: time.Minute})
	rt := m.Runtime()
	require.NoError(t, a.PinAt(ctx, rt.Now()))
	require.EqualValues(t, 1, a.Stats().Refreshes)
	require.NoError(t, a.Unpin())
	// A reading a Refresh later makes it refresh.
	require.NoError(t, a.PinAt(ctx, rt.Now().Add(time.Minute)))
	require.EqualValues(t, 2, a.Stats().Refreshes)
	require.NoError(t, a.Unpin())
	require.ErrorIs(t, a.Unpin(), farmem.ErrInvalid, "unpin without pin")
}

// NoteClock's reading is what UnpinSeen judges the section by and what the next PinCoarse
// starts from; an earlier reading changes nothing.
func TestNoteClock(t *testing.T) {
	ctx := context.Background()
	c := epochCluster(t)
	a, m := c.allocator(t, 0, Options{Lease: time.Hour, Refresh: time.Minute})
	rt := m.Runtime()

	_, err := a.PinCoarse(ctx)
	require.NoError(t, err)
	now := rt.Now()
	a.NoteClock(now)
	a.NoteClock(now.Add(-time.Second)) // an earlier reading: ignored
	require.NoError(t, a.UnpinSeen())
	at, err := a.PinCoarse(ctx)
	require.NoError(t, err)
	require.Equal(t, now, at, "the next section starts from the noted reading")

	// A noted reading past the lease is the section's end: UnpinSeen reports the lapse.
	a.NoteClock(a.ep.deadline.Add(time.Second))
	require.ErrorIs(t, a.UnpinSeen(), ErrPinExpired)
}
