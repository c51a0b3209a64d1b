package selcc_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/farmem/farmem/ds/selcc"
)

// evictionRoundTrips reads 64 lines cyclically three times through one client of a cache of
// frames frames, pausing between reads, and returns the round trips of each read after the
// first pass and the node's evictions.
func evictionRoundTrips(t *testing.T, frames, batch int) ([]uint64, uint64) {
	r := simRig(t, simModel(1, 2), 1, selcc.Options{LineSize: 256, Frames: frames, EvictBatch: batch})
	gs := r.lines(t, 64)
	m, cl := r.client(t, 0)
	var rts []uint64
	r.do(func() {
		ctx := context.Background()
		for pass := range 3 {
			for _, g := range gs {
				before := m.Stats().RoundTrips
				gd, err := cl.RLock(ctx, g)
				require.NoError(t, err)
				_, err = gd.ReadUint64(ctx, 0)
				require.NoError(t, err)
				require.NoError(t, gd.Unlock(ctx))
				if pass > 0 {
					rts = append(rts, m.Stats().RoundTrips-before)
				}
				m.Runtime().Compute(20 * time.Microsecond) // the client's work between accesses
			}
		}
	})
	return rts, r.c.NodeStats(r.comp[0]).Evicted
}

// The background evictor keeps frames free, so that a miss on a full cache pays one round
// trip (its latch atomic and READ) and no eviction; a cache too small for an evictor (under 8
// frames) evicts on the miss's own critical path, the test's negative control.
func TestBackgroundEviction(t *testing.T) {
	rts, evicted := evictionRoundTrips(t, 32, 4)
	require.Positive(t, evicted)
	for i, n := range rts {
		require.Equal(t, uint64(1), n, "read %d of a full cache: the miss paid for an eviction", i)
	}
	rts, evicted = evictionRoundTrips(t, 4, 1)
	require.Positive(t, evicted)
	extra := 0
	for _, n := range rts {
		if n > 1 {
			extra++
		}
	}
	require.Greater(t, extra, len(rts)/2, "without an evictor most misses evict for themselves")
}
