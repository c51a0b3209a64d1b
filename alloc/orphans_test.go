package alloc

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/farmem/farmem/farmem"
	"github.com/farmem/farmem/farmem/local"
)

// An allocation that finds no room takes over what a closed client of another id handed over
// (its free blocks, or its retired blocks once their epochs allow), instead of failing while
// that record waits for its own id: the heap is full of client 1's blocks, client 1 frees (or
// retires) every other one and closes, and a client of another id then gets them all. The
// record's word is cleared, so a later allocator of client 1's id adopts nothing.
func TestOrphanedRecordsAdopted(t *testing.T) {
	for _, retire := range []bool{false, true} {
		name := "freed"
		if retire {
			name = "retired"
		}
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			c, a, ma, blocks := fullHeap(t)
			require.Greater(t, len(blocks), 100)
			given := 0
			for i := 0; i < len(blocks); i += 2 {
				if retire {
					require.NoError(t, a.Retire(ctx, blocks[i], 1000))
				} else {
					require.NoError(t, a.Free(blocks[i], 1000))
				}
				given++
			}
			require.NoError(t, a.Close())
			require.NotZero(t, handWord(t, ma, a.Home(), ma.Info().ID), "client 1 published a record")

			b, mb := c.allocator(t, 1, Options{})
			require.NotEqual(t, ma.Info().ID, mb.Info().ID)
			for i := range given {
				_, err := b.Alloc(ctx, 1000, 8)
				require.NoError(t, err, "allocation %d of the %d blocks client %d handed over", i, given, ma.Info().ID)
			}
			require.Equal(t, uint64(1), b.Stats().Orphans)
			require.Zero(t, b.Stats().OrphanErrors)
			require.Zero(t, handWord(t, mb, a.Home(), ma.Info().ID), "the record was taken")
			_, err := b.Alloc(ctx, 1000, 8)
			require.ErrorIs(t, err, farmem.ErrNoSpace, "no more than was handed over")

			// A later allocator of client 1's id starts with nothing to adopt.
			m2 := c.successor(t, nil, ma)
			a2, err := New(ctx, m2, Options{})
			require.NoError(t, err)
			t.Cleanup(func() { _ = a2.Close() })
			require.Zero(t, a2.Adopted().Records)
		})
	}
}

// An adopter gives back what a Reclaim would: a record holding much of a heap as free blocks
// (Close hands them over uncoalesced) is rebuilt into whole chunks at adoption, and those
// beyond the one per node an allocator keeps go to the node's pool, where a client of another
// id finds them. Without it the adopter holds the heap privately and the other client runs out
// with the heap nearly all free (cmd/farmem's two-process bench on 16 MiB nodes did).
func TestAdopterShedsWholeChunks(t *testing.T) {
	ctx := context.Background()
	c, a, ma, blocks := fullHeap(t)
	require.Greater(t, len(blocks), 500)
	for _, p := range blocks {
		require.NoError(t, a.Free(p, 1000))
	}
	require.NoError(t, a.Close())

	// Client 1's successor adopts the record: every block, free.
	m2 := c.successor(t, nil, ma)
	a2, err := New(ctx, m2, Options{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = a2.Close() })
	require.Equal(t, 1, a2.Adopted().Records)
	require.NoError(t, a2.Adopted().Err)

	// A client of another id allocates all but the adopter's kept chunk.
	b, mb := c.allocator(t, 1, Options{})
	require.NotEqual(t, ma.Info().ID, mb.Info().ID)
	perChunk := (16 << 10) / 1024
	got := 0
	for {
		if _, err := b.Alloc(ctx, 1000, 8); err != nil {
			require.ErrorIs(t, err, farmem.ErrNoSpace)
			break
		}
		got++
	}
	require.GreaterOrEqual(t, got, len(blocks)-2*perChunk, "the adopter kept the heap: another client got %d of %d blocks", got, len(blocks))
}

// fullHeap starts a cluster of one 1 MiB memory node (16 KiB chunks) and has client 0's
// allocator fill its heap with blocks of 1,000 bytes, which it returns.
func fullHeap(t *testing.T) (*testCluster, *Allocator, farmem.Memory, []farmem.Addr) {
	t.Helper()
	c := newCluster(t, local.Options{Shape: local.Shape{MemoryNodes: 1, MemorySize: 1 << 20, ComputeNodes: 2, ClientsPerNode: 16}},
		FormatOptions{ChunkSize: 16 << 10, SymmetricSize: 64 << 10})
	a, ma := c.allocator(t, 0, Options{})
	var blocks []farmem.Addr
	for {
		p, err := a.Alloc(context.Background(), 1000, 8)
		if err != nil {
			require.ErrorIs(t, err, farmem.ErrNoSpace)
			return c, a, ma, blocks
		}
		blocks = append(blocks, p)
	}
}
