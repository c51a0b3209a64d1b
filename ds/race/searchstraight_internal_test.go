package race

import (
	"context"
	"encoding/binary"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/farmem/farmem/farmem/local"
)

// A Search from a fresh handle of a key whose subtable is half way through a region split (the
// move word set, the header still covering the key) hands the view it read over when one or
// both of the key's regions moved, and the general path hops to the new half, where the key was
// updated since it moved (an Update moves its key's regions first, so few keys, if any, stay
// mixed); a key of unmoved regions is answered on the straight path. Each
// finds the key's latest value, and no view is read twice (one look per Search, one more per
// hop).
func TestSearchStraightSplitInProgress(t *testing.T) {
	ctx := context.Background()
	_, m, a, _, tab := regionTable(t, local.Options{Shape: local.Shape{MemorySize: 16 << 20}, Strict: true})
	keys := insertUntil(t, tab, "key-%d", []byte("v"), 1000, func() bool { return tab.stats.Moves >= 3 })
	require.Zero(t, tab.stats.Splits, "the split ended")
	st := tab.pending
	require.NotZero(t, st)
	for _, k := range keys {
		require.NoError(t, tab.Update(ctx, k, append([]byte("new-"), k...)))
	}
	require.Zero(t, tab.stats.Splits, "the split ended")

	b, err := Open(ctx, m, a, tab.root, Options{})
	require.NoError(t, err)
	hb := make([]byte, lookupHeaderLen)
	require.NoError(t, m.Read(ctx, st, hb))
	hdr, move := binary.LittleEndian.Uint64(hb), binary.LittleEndian.Uint64(hb[stMoveOff:])
	require.NotZero(t, move)
	seen := map[ownership]int{}
	for _, k := range keys {
		op := b.newOp(k)
		if b.subtableFor(op.k.h1) != st {
			continue
		}
		kr := b.keyRegions(op)
		o := owner(hdr, move, op.k.h1, kr[0], kr[1])
		before := b.stats
		v, err := b.Search(ctx, k)
		require.NoError(t, err, "key %s", k)
		require.Equal(t, append([]byte("new-"), k...), v, "key %s (%v)", k, o)
		d := b.stats
		require.EqualValues(t, 1, d.SearchStraight-before.SearchStraight)
		require.Equal(t, 1+d.Hops-before.Hops, d.Lookups-before.Lookups, "key %s (%v): a view read twice", k, o)
		if o != ownsAll {
			require.EqualValues(t, 1, d.SearchHandovers-before.SearchHandovers, "key %s (%v)", k, o)
			require.EqualValues(t, 1, d.Hops-before.Hops, "key %s (%v)", k, o)
		}
		seen[o]++
	}
	t.Logf("keys by ownership (all %d, moved %d, mixed %d)", seen[ownsAll], seen[ownsMoved], seen[ownsMixed])
	require.NotZero(t, seen[ownsAll])
	require.NotZero(t, seen[ownsMoved]+seen[ownsMixed])
}

// A Search on a handle that has not seen the fabric's last adoption (its cached directory may
// name subtables that were lost and replaced) hands over before reading anything: the general
// path reloads the directory first, then looks once, with no per-entry refresh. The handle's
// entry for the key is made to name another subtable, as a replaced one would.
func TestSearchStraightAdoption(t *testing.T) {
	ctx := context.Background()
	_, m, a, _, tab := regionTable(t, local.Options{Shape: local.Shape{MemorySize: 16 << 20}, Strict: true})
	keys := insertUntil(t, tab, "key-%d", []byte("v"), 5000, func() bool { return tab.stats.Splits >= 1 })
	b, err := Open(ctx, m, a, tab.root, Options{})
	require.NoError(t, err)
	k := keys[0]
	op := b.newOp(k)
	i := op.k.h1 & uint64(len(b.dir)-1)
	other := -1
	for j, e := range b.dir {
		if unpackAddr(e) != unpackAddr(b.dir[i]) {
			other = j
			break
		}
	}
	require.GreaterOrEqual(t, other, 0, "one subtable")
	b.dir[i] = b.dir[other]
	b.adoptions++ // an adoption the handle has not seen
	before := b.stats
	v, err := b.Search(ctx, k)
	require.NoError(t, err)
	require.Equal(t, "v", string(v))
	require.Equal(t, b.adoptionCount(), b.adoptions, "the adoption was not seen")
	require.EqualValues(t, 1, b.stats.SearchStraight-before.SearchStraight)
	require.EqualValues(t, 1, b.stats.SearchHandovers-before.SearchHandovers)
	require.EqualValues(t, 1, b.stats.Lookups-before.Lookups, "looked in the stale entry's subtable")
	require.Zero(t, b.stats.Refreshes-before.Refreshes)
}

// fpMask (in assembly on amd64) and fpMaskGeneric mark exactly the words whose top byte is the
// fingerprint asked for, in buffers of 0 to 64 words at any 8-byte alignment, whatever the
// other bytes hold (the fingerprint's value among them).
func TestFPMask(t *testing.T) {
	le := binary.LittleEndian
	seed := uint64(0x9e3779b97f4a7c15)
	back := make([]byte, fpMaskMax+8)
	for words := 0; words <= 64; words++ {
		for trial := range 40 {
			fp := uint8(trial * 37)
			off := 8 * (trial % 2)
			b := back[off : off+8*words]
			var want uint64
			for k := range words {
				seed = fmix(seed + mulA)
				w := seed&^(0xff<<slotFPShift) | uint64(fp)*0x0101010101010101>>8&uint64(seed>>3)
				if seed%5 == 0 {
					w |= uint64(fp) << slotFPShift
					want |= 1 << uint(k)
				} else {
					w |= uint64(fp+1+uint8(seed>>50)%255) << slotFPShift
				}
				le.PutUint64(b[8*k:], w)
			}
			require.Equal(t, want, fpMaskGeneric(b, fp), "generic: %d words, fingerprint %d", words, fp)
			require.Equal(t, want, fpMask(b, fp), "%d words, fingerprint %d", words, fp)
		}
	}
}
