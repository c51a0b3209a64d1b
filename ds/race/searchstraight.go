package race

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"math/bits"

	"github.com/farmem/farmem/farmem"
)

// searchStraight is a Search's pinned section (AppendSearch's, after the address cache) for the
// common case, written out in one function: a table without block copies and an unreplicated index
// (straightSearch), whose first look at the key's buckets, in the subtable the directory cache
// names, finds that subtable owning the key with no split under way (the owner rule's ownsAll for
// a move word of 0). It reads the buckets and the subtable's header in one batch, as locate does,
// through doHinted (AppendSearch hinted those lines already: prefetchLookup, from the same
// directory entry, with no refresh in between), finds the committed fingerprint matches, hinting
// each one's block (committedMatches: bits, no view unless there are several; decodeView for
// buckets of more than 16 slots), and, for one match, reads the block in a second batch of one
// read and answers as searchOne would; for several, reads them all in one batch and answers as
// findKey would (searchSeveral); for none, ErrNotFound at once (findKey's answer for a view
// without matches). The verbs, round trips, bytes and counts (Lookups, BadBlocks) are locate's and
// searchOne's; what it saves is their layering: search's and locate's attempt loops, the owner
// switch, searchOne's, readOne's and readBlockInv's calls and the errors.Is checks between them,
// and for several matches findKey's and learn's bookkeeping (the candidate list, the pending
// reads, what the operation learnt of each block).
//
// Anything else goes back to the general path in the state it would have reached itself
// (Stats.SearchHandovers): a pending adoption before any read (search, whose locate checks it); a
// view not owned outright, after the read (searchFrom with that view: locate's attempt 0 goes on
// from its owner check, so no batch is repeated); a block that fails validation (search from the
// next attempt, as searchOne's and learn's errStale makes it). A failed batch ends the Search with
// locate's, readBlock's or learn's error, as the general path would. A lease that ran out is
// AppendSearch's (it re-pins and calls this again).
func (t *Table) searchStraight(ctx context.Context, op *opState) ([]byte, error) {
	t.stats.SearchStraight++
	if t.adoptionCount() != t.adoptions {
		t.stats.SearchHandovers++
		return t.search(ctx, op)
	}
	st := t.subtableFor(op.k.h1)
	b := t.batch()
	t.addReads(b, op, st)
	t.stats.Lookups++
	if err := t.doHinted(ctx, b); err != nil {
		t.lost()
		return nil, fmt.Errorf("race: read buckets of %v: %w", st, err)
	}
	// The one match (a blockKey) and its slot index.
	var w Slot
	var i uint64
	le := binary.LittleEndian
	bkt, n := t.scr.bkt, 2*t.geo.perB
	hdr := le.Uint64(bkt[16*n:])
	if n <= 32 && (!t.regionSplit() || le.Uint64(bkt[16*n+stMoveOff:]) == 0) && covers(hdr, op.k.h1) {
		// Owned outright: the matches as bits, no view unless there are several.
		m := t.committedMatches(op, bkt, n)
		if m&(m-1) != 0 {
			var v view
			t.matchView(op, st, hdr, m, &v)
			return t.searchSeveral(ctx, op, &v)
		}
		if m == 0 {
			return nil, ErrNotFound
		}
		k := uint64(bits.TrailingZeros64(m))
		w, i = blockKey(Slot(le.Uint64(bkt[8*k:]))), op.ranges[0]+k
		if k >= n {
			i = op.ranges[1] + k - n
		}
	} else {
		var v view
		t.decodeInto(op, st, &t.scr.lv, &v)
		if v.move != 0 || !covers(v.hdr, op.k.h1) {
			t.stats.SearchHandovers++
			return t.searchFrom(ctx, op, &v)
		}
		if len(v.words) != 1 {
			if len(v.words) == 0 {
				return nil, ErrNotFound
			}
			return t.searchSeveral(ctx, op, &v)
		}
		w, i = blockKey(v.words[0]), v.idx[0]
	}
	// searchOne's read (readBlockInv without the invalidation), its block hinted already.
	size := int(w.Size())
	sc := t.scr
	sc.blocks = grow(sc.blocks, size)
	buf := sc.blocks[:size:size]
	b = t.batch()
	b.Read(w.Addr(), buf)
	if err := t.doHinted(ctx, b); err != nil {
		if !onlyBlocksDown(b, 1) {
			t.lost()
			return nil, fmt.Errorf("race: read KV blocks: %w", err)
		}
		if _, rerr := b.Result(0); rerr != nil {
			return nil, fmt.Errorf("race: read KV blocks: %w", rerr)
		}
	}
	blk, err := DecodeBlock(w.Addr(), buf)
	if err != nil {
		t.stats.BadBlocks++
		t.stats.SearchHandovers++
		return t.search(ctx, op)
	}
	if !bytes.Equal(blk.Key, op.key) {
		return nil, ErrNotFound
	}
	t.ac.keep(op, w, st, i, blk.Stamp)
	if op.dst == nil {
		return bytes.Clone(blk.Value), nil
	}
	return append(op.dst, blk.Value...), nil
}

// committedMatches returns the committed slots with op's fingerprint among the n words of each
// of op's two ranges in bkt (the lookup's scratch, as addReads read it; n at most 32), bit k
// for word k (the second range's words from n on), the second range's words that are the
// first's (op.same, or ranges that overlap) left out: decodeView's matches, as bits, in the
// same order, each match's block hinted as decodeView hints it.
func (t *Table) committedMatches(op *opState, bkt []byte, n uint64) uint64 {
	le := binary.LittleEndian
	all := bkt[: 16*n : 16*n]
	m := fpMask(all, op.fp)
	if op.same {
		m &= 1<<n - 1
	} else if end := op.ranges[0] + n; op.ranges[1] < end {
		m &^= (1<<(end-op.ranges[1]) - 1) << n
	}
	for mm := m; mm != 0; mm &= mm - 1 {
		k := uint(bits.TrailingZeros64(mm))
		if w := Slot(le.Uint64(all[8*k:])); w.Committed() {
			t.hintBlock(op, w)
		} else {
			m &^= 1 << k
		}
	}
	return m
}

// matchView sets v to the view of subtable st (header word hdr, no move word) whose slots are
// the matches m (committedMatches' bits), in the lookup's storage (scr.lv), as decodeView
// would have built it.
func (t *Table) matchView(op *opState, st farmem.Addr, hdr uint64, m uint64, v *view) {
	le := binary.LittleEndian
	bkt, n := t.scr.bkt, 2*t.geo.perB
	vb := &t.scr.lv
	idx, words := vb.idx[:0], vb.words[:0]
	for ; m != 0; m &= m - 1 {
		k := uint64(bits.TrailingZeros64(m))
		i := op.ranges[0] + k
		if k >= n {
			i = op.ranges[1] + k - n
		}
		idx, words = append(idx, i), append(words, Slot(le.Uint64(bkt[8*k:])))
	}
	vb.idx, vb.words = idx, words
	*v = view{st: st, hdr: hdr, idx: idx, words: words}
}

// straightSearch reports whether a Search may take searchStraight: a table without block
// copies (a failed read has no backup to fall back on) and an unreplicated index, search's
// condition for searchOne.
func (t *Table) straightSearch() bool { return !t.replicated() && indexReplicas(t.root) <= 1 }

// searchSeveral is searchStraight's read of a view v with several fingerprint matches, each
// hinted already (decodeView): findKey's and learn's for a Search of a fresh operation on a
// table without copies, written out. One batch reads every match's block, in the view's
// order, into the scratch; the answer is the first block that holds the key (one committed
// slot at most holds a key at a time; reads spread over time that saw it in two saw two of
// its values, either one it had during the reads), its value appended once. As learn: a
// batch whose failure is not only block reads failing because their node is down (or lost its
// memory) drops the scratch and fails; a block that fails validation counts a bad block and
// makes the Search look again (here: search, a hand-over), even when another block holds the
// key; with reads that failed so, the key found among the others is the answer, and its
// absence from them is the failed read's error, not ErrNotFound.
func (t *Table) searchSeveral(ctx context.Context, op *opState, v *view) ([]byte, error) {
	sc := t.scr
	need := 0
	for _, w := range v.words {
		need += int(blockKey(w).Size())
	}
	sc.blocks = grow(sc.blocks, need)
	b := t.batch()
	off := 0
	for _, w := range v.words {
		w = blockKey(w)
		n := int(w.Size())
		b.Read(w.Addr(), sc.blocks[off:off+n:off+n])
		off += n
	}
	err := t.doHinted(ctx, b)
	if err != nil && !onlyBlocksDown(b, len(b.Ops)) {
		t.lost()
		return nil, fmt.Errorf("race: read KV blocks: %w", err)
	}
	var val []byte
	found, stale := false, false
	var lostErr error
	var kw Slot // the key's block (a blockKey) and its slot index and stamp, once found
	var ki uint64
	var kstamp uint32
	off = 0
	for i, w := range v.words {
		w = blockKey(w)
		n := int(w.Size())
		buf := sc.blocks[off : off+n : off+n]
		off += n
		if err != nil {
			if _, rerr := b.Result(i); rerr != nil {
				if lostErr == nil {
					lostErr = rerr
				}
				continue
			}
		}
		blk, derr := DecodeBlock(w.Addr(), buf)
		if derr != nil {
			t.stats.BadBlocks++
			stale = true
			continue
		}
		if !found && bytes.Equal(blk.Key, op.key) {
			found, kw, ki, kstamp = true, w, v.idx[i], blk.Stamp
			if op.dst == nil {
				val = bytes.Clone(blk.Value)
			} else {
				val = append(op.dst, blk.Value...)
			}
		}
	}
	switch {
	case stale:
		t.stats.SearchHandovers++
		return t.search(ctx, op)
	case found:
		t.ac.keep(op, kw, v.st, ki, kstamp)
		return val, nil
	case lostErr != nil:
		return nil, fmt.Errorf("race: read KV blocks: %w", lostErr)
	}
	return nil, ErrNotFound
}
