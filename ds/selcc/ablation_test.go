package selcc_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/farmem/farmem/ds/selcc"
	"github.com/farmem/farmem/farmem/local"
)

// TestCoherenceSimAblation: the coherence workload (SWMR, exact counters, register histories,
// quiescent latch words) with forwarding off, dirty bounds off, and batched eviction off
// (EvictBatch 1), each alone and all at once: the paper's ablation configurations stay
// correct.
func TestCoherenceSimAblation(t *testing.T) {
	t.Parallel() // a simulation: virtual time, unmoved by other tests
	for _, c := range []struct {
		name string
		o    selcc.Options
	}{
		{"no-forwarding", selcc.Options{NoForwarding: true}},
		{"no-dirty-bounds", selcc.Options{NoDirtyBounds: true}},
		{"no-batching", selcc.Options{EvictBatch: 1}},
		{"all-off", selcc.Options{NoForwarding: true, NoDirtyBounds: true, EvictBatch: 1}},
	} {
		for seed := uint64(1); seed <= 2 && (seed == 1 || c.name == "all-off"); seed++ {
			t.Run(fmt.Sprintf("%s/seed%d", c.name, seed), func(t *testing.T) {
				o := c.o
				o.LineSize, o.Frames = 128, 4
				if o.EvictBatch == 0 {
					o.EvictBatch = 2
				}
				r := coherenceSim(t, 4, 2, 6, 100, seed, o)
				require.Positive(t, r.last.Evicted)
			})
		}
	}
}

// TestAblationCosts asserts what each switch changes, on local with two compute nodes. Under
// WriteBackOnRelease a warm exclusive hit that writes one word writes back that word (dirty
// bounds) or the whole line (NoDirtyBounds). Under WriteBack a writer on the other node that
// finds the line dirty in M gets it forwarded after one round trip (its failed CAS and READ) and
// far memory never sees the holder's write; with NoForwarding the holder writes back and
// releases, and the writer's retry makes two round trips.
func TestAblationCosts(t *testing.T) {
	const line = 512
	for _, c := range []struct {
		name         string
		o            selcc.Options
		wbMin, wbMax uint64 // bytes out of the releasing writer
		peerRTs      uint64
		far          uint64 // far memory's word after the hand-over
	}{
		{"paper", selcc.Options{}, 8, 64, 1, 0},
		{"no-dirty-bounds", selcc.Options{NoDirtyBounds: true}, line, line + 64, 1, 0},
		{"no-forwarding", selcc.Options{NoForwarding: true}, 8, 64, 2, 9},
	} {
		t.Run(c.name, func(t *testing.T) {
			ctx := context.Background()
			o := c.o
			o.LineSize, o.Frames, o.Durability = line, 8, selcc.WriteBackOnRelease
			r := localRig(t, local.Options{Shape: local.Shape{MemoryNodes: 1, ComputeNodes: 1}}, o)
			g := r.lines(t, 1)[0]
			ma, a := r.client(t, 0)
			gd, err := a.Lock(ctx, g) // a holds it M now
			require.NoError(t, err)
			require.NoError(t, gd.Unlock(ctx))
			before := ma.Stats()
			gd, err = a.Lock(ctx, g)
			require.NoError(t, err)
			require.NoError(t, gd.WriteUint64(ctx, 0, 7))
			require.NoError(t, gd.Unlock(ctx))
			d := ma.Stats().Sub(before)
			require.Equal(t, uint64(1), d.RoundTrips, "a hit and its write-back")
			require.GreaterOrEqual(t, d.BytesOut, c.wbMin)
			require.Less(t, d.BytesOut, c.wbMax)

			o.Durability = selcc.WriteBack
			r = localRig(t, local.Options{Shape: local.Shape{MemoryNodes: 1, ComputeNodes: 2}}, o)
			g = r.lines(t, 1)[0]
			_, a = r.client(t, 0)
			mb, b := r.client(t, 1)
			gd, err = a.Lock(ctx, g)
			require.NoError(t, err)
			require.NoError(t, gd.WriteUint64(ctx, 8, 9)) // dirty in a's cache only
			require.NoError(t, gd.Unlock(ctx))
			before = mb.Stats()
			gd, err = b.Lock(ctx, g)
			require.NoError(t, err)
			v, err := gd.ReadUint64(ctx, 8)
			require.NoError(t, err)
			require.Equal(t, uint64(9), v)
			require.NoError(t, gd.Unlock(ctx))
			d = mb.Stats().Sub(before)
			require.Equal(t, c.peerRTs, d.RoundTrips, "%v", d)
			buf := make([]byte, 8)
			require.NoError(t, mb.Read(ctx, g.Body().Add(8), buf))
			require.Equal(t, c.far, getU64(buf), "far memory after the hand-over")
		})
	}
}
