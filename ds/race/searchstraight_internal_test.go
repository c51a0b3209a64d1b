package race

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/farmem/farmem/farmem"
	"github.com/farmem/farmem/farmem/local"
	"github.com/farmem/farmem/farmem/transport"
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

// failDo is a Memory whose second Do while err is set (a Search's block batch) fails every op
// with err, running none.
type failDo struct {
	farmem.Memory
	err error
	n   int
}

func (m *failDo) Do(ctx context.Context, b *farmem.Batch) error {
	if m.err != nil {
		m.n++
	}
	if m.err != nil && m.n == 2 {
		for i := range b.Ops {
			transport.SetResult(&b.Ops[i], 0, m.err)
		}
		return m.err
	}
	return m.Memory.Do(ctx, b)
}

// A batch of several candidates' blocks that fails other than by its reads' nodes being down
// drops the handle's scratch (the transport may still own its buffers) and fails the Search,
// as learn does; one whose reads fail because their node is down keeps it.
func TestSearchSeveralDropsScratch(t *testing.T) {
	ctx := context.Background()
	_, m, a, root, _ := regionTable(t, local.Options{Shape: local.Shape{MemorySize: 16 << 20}, Strict: true})
	fm := &failDo{Memory: m}
	tab, err := Open(ctx, fm, a, root, Options{})
	require.NoError(t, err)
	var k []byte
	for i := 0; k == nil; i++ {
		require.Less(t, i, 10000)
		kk := fmt.Appendf(nil, "key-%d", i)
		require.NoError(t, tab.Insert(ctx, kk, []byte("v")))
		// A key with several candidates once inserted.
		op := tab.newOp(kk)
		st := tab.subtableFor(op.k.h1)
		b := tab.batch()
		tab.addReads(b, op, st)
		require.NoError(t, tab.m.Do(ctx, b))
		op.matchOnly = true
		if v := tab.decodeView(op, st, &tab.scr.lv); len(v.words) > 1 && v.move == 0 && covers(v.hdr, op.k.h1) {
			k = kk
		}
	}
	for _, c := range []struct {
		err  error
		kept bool
	}{{errors.New("injected"), false}, {fmt.Errorf("injected: %w", farmem.ErrNodeDown), true}} {
		scr := tab.scr
		fm.err, fm.n = c.err, 0
		_, err := tab.Search(ctx, k)
		fm.err = nil
		require.ErrorIs(t, err, c.err)
		require.Equal(t, c.kept, tab.scr == scr, "scratch kept after %v", c.err)
	}
}

// When two committed slots of a view hold the key (reads spread over time may see it in two,
// deleted from one and inserted into another in between), the Search takes the first in slot
// order, as findKey does.
func TestSearchSeveralTakesFirst(t *testing.T) {
	ctx := context.Background()
	_, _, _, _, tab := regionTable(t, local.Options{Shape: local.Shape{MemorySize: 16 << 20}, Strict: true})
	k := []byte("the-key")
	require.NoError(t, tab.Insert(ctx, k, []byte("inserted")))
	op := tab.newOp(k)
	op.matchOnly = true
	st := tab.subtableFor(op.k.h1)
	b := tab.batch()
	tab.addReads(b, op, st)
	require.NoError(t, tab.m.Do(ctx, b))
	v := tab.decodeView(op, st, &tab.scr.lv)
	require.Len(t, v.words, 1)
	at := v.idx[0]
	other := []byte("written-beside")
	i := placeAnotherBlock(t, tab, k, other)
	want := "inserted"
	if i < at {
		want = string(other)
	}
	got, err := tab.Search(ctx, k)
	require.NoError(t, err)
	require.Equal(t, want, string(got), "slots %d (inserted) and %d", at, i)
}

// placeAnotherBlock writes a block of key k with value other and puts its slot word, committed,
// in the first empty slot of k's ranges; it returns that slot's index.
func placeAnotherBlock(t *testing.T, tab *Table, k, other []byte) uint64 {
	t.Helper()
	ctx := context.Background()
	op := tab.newOp(k)
	st := tab.subtableFor(op.k.h1)
	blk := encodeBlock(0, k, other, 0, 7)
	size := uint64(len(blk)+Unit-1) &^ (Unit - 1)
	addr, err := tab.a.Alloc(ctx, size, Unit)
	require.NoError(t, err)
	require.NoError(t, tab.m.Write(ctx, addr, encodeBlock(addr, k, other, 0, 7)))
	w, err := MakeSlot(op.fp, uint64(len(blk)), addr)
	require.NoError(t, err)
	for _, start := range op.ranges {
		for i := start; i < start+2*tab.geo.perB; i++ {
			var wb [8]byte
			require.NoError(t, tab.m.Read(ctx, tab.geo.slotAddr(st, i), wb[:]))
			if binary.LittleEndian.Uint64(wb[:]) == 0 {
				prev, err := tab.m.CAS(ctx, tab.geo.slotAddr(st, i), 0, uint64(w))
				require.NoError(t, err)
				require.Zero(t, prev)
				return i
			}
		}
	}
	require.Fail(t, "no empty slot")
	return 0
}
