package alloc

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A client's own announcement holds back only what it retired in its current section: with an
// announcement that stands for a minute (so it is never renewed during the test), a scan
// reuses a block retired in an ended section, whether the client is unpinned or pinned in a
// later section, and never one retired in the section it is in.
func TestOwnEndedSectionsReused(t *testing.T) {
	ctx := context.Background()
	c := epochCluster(t)
	long := Options{Lease: time.Hour, Refresh: time.Minute}
	w, _ := c.allocator(t, 0, long)

	x, err := w.Alloc(ctx, 64, 0)
	require.NoError(t, err)
	require.NoError(t, w.Pin(ctx))
	require.NoError(t, w.Retire(ctx, x, 64))
	n, err := w.Reclaim(ctx)
	require.NoError(t, err)
	require.Zero(t, n, "retired in the current section: the section may still reach it")
	require.NoError(t, w.Unpin())
	require.True(t, w.ep.announced, "the announcement stands (younger than Refresh)")
	n, err = w.Reclaim(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, n, "the section that could reach it ended")
	z, err := w.Alloc(ctx, 64, 0)
	require.NoError(t, err)
	require.Equal(t, x, z)

	// Retired in one section, scanned from the next.
	require.NoError(t, w.Pin(ctx))
	require.NoError(t, w.Retire(ctx, z, 64))
	require.NoError(t, w.Unpin())
	require.NoError(t, w.Pin(ctx))
	y, err := w.Alloc(ctx, 64, 0)
	require.NoError(t, err)
	require.NoError(t, w.Retire(ctx, y, 64))
	n, err = w.Reclaim(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, n, "only the earlier section's block")
	require.Equal(t, 1, w.Stats().Pending)
	require.NoError(t, w.Unpin())
}

// Another client's live announcement still holds the blocks it could reach, and the scans an
// allocation makes when a chunk runs out with scanBacklog retired blocks waiting stop at the
// first that frees nothing: a writer churning through many chunks while a reader stays pinned
// scans once, not once per chunk.
func TestBacklogScansStopWhileHeld(t *testing.T) {
	ctx := context.Background()
	c := epochCluster(t)
	long := Options{Lease: time.Hour, Refresh: time.Minute}
	w, _ := c.allocator(t, 0, long)
	r, _ := c.allocator(t, 1, long)

	// A first scan that frees something arms the backlog scans.
	x, err := w.Alloc(ctx, 64, 0)
	require.NoError(t, err)
	require.NoError(t, w.Retire(ctx, x, 64))
	n, err := w.Reclaim(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, n)

	require.NoError(t, r.Pin(ctx)) // r could reach every block w unlinks from now on
	before := w.Stats()
	const blocks = 4 * scanBacklog // 64 KiB of 64-byte blocks: several 16 KiB chunks
	for range blocks {
		require.NoError(t, w.Pin(ctx))
		y, err := w.Alloc(ctx, 64, 0)
		require.NoError(t, err)
		require.NoError(t, w.Retire(ctx, y, 64))
		require.NoError(t, w.Unpin())
	}
	after := w.Stats()
	require.Equal(t, blocks, after.Pending, "r holds every one")
	require.Greater(t, after.Chunks-before.Chunks, uint64(2), "the churn took new chunks")
	require.Equal(t, uint64(1), after.Scans-before.Scans, "one backlog scan, which freed nothing")
	require.Equal(t, before.Reclaimed, after.Reclaimed)

	require.NoError(t, r.Unpin())
	require.NoError(t, r.Quiesce(ctx))
	n, err = w.Reclaim(ctx)
	require.NoError(t, err)
	require.Equal(t, blocks, n, "r gone: every block w retired in its ended sections")
}
