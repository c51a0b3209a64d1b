package nodearea_test

import (
	"context"
	"encoding/binary"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/farmem/farmem/alloc/nodearea"
	"github.com/farmem/farmem/farmem"
)

// TestLatchTakeover: a live client of the node releases the holds of one that lost its access:
// an exclusive hold only if the word names that client, shared holds by count, and a stale
// pending bit only when nothing else is in the word.
func TestLatchTakeover(t *testing.T) {
	for _, c := range clusters(t) {
		t.Run(c.name, func(t *testing.T) {
			ctx := context.Background()
			gone, live, other := c.client(t, 0), c.client(t, 0), c.client(t, 0)
			c.within(func() {
				a, err := nodearea.Open(ctx, live)
				require.NoError(t, err)
				blk, err := a.AllocZeroed(ctx, 8)
				require.NoError(t, err)
				lg, err := nodearea.NewLatch(gone, blk)
				require.NoError(t, err)
				ll, err := nodearea.NewLatch(live, blk)
				require.NoError(t, err)
				lo, err := nodearea.NewLatch(other, blk)
				require.NoError(t, err)
				word := func() uint64 {
					b := make([]byte, 8)
					require.NoError(t, live.Read(ctx, blk, b))
					return binary.LittleEndian.Uint64(b)
				}

				require.NoError(t, lo.Lock(ctx))
				ok, err := ll.ReleaseFor(ctx, gone.Info().ID)
				require.NoError(t, err)
				require.False(t, ok, "another client's exclusive hold is not released")
				require.True(t, nodearea.HeldBy(word(), other.Info().ID))
				require.NoError(t, lo.Unlock(ctx))

				require.NoError(t, lg.Lock(ctx))
				require.True(t, nodearea.HeldBy(word(), gone.Info().ID))
				require.False(t, nodearea.HeldBy(word(), live.Info().ID))
				ok, err = ll.ReleaseFor(ctx, gone.Info().ID)
				require.NoError(t, err)
				require.True(t, ok)
				require.Zero(t, word())
				require.NoError(t, lo.Lock(ctx), "free again")
				require.NoError(t, lo.Unlock(ctx))

				require.NoError(t, lg.RLock(ctx))
				require.NoError(t, lg.RLock(ctx))
				require.NoError(t, lo.RLock(ctx))
				require.ErrorIs(t, ll.RReleaseFor(ctx, 4), farmem.ErrInvalid, "more than are held")
				require.NoError(t, ll.RReleaseFor(ctx, 2))
				require.NoError(t, lo.RUnlock(ctx))
				require.Zero(t, word())

				ok, err = ll.ClearStalePending(ctx)
				require.NoError(t, err)
				require.False(t, ok, "no pending bit")
				require.NoError(t, lo.RLock(ctx))
				ok, err = ll.ClearStalePending(ctx)
				require.NoError(t, err)
				require.False(t, ok, "a reader is in")
				require.NoError(t, lo.RUnlock(ctx))
			})
		})
	}
}
