package race

import (
	"bytes"
	"context"
	"fmt"
)

// searchStraight is a Search's pinned section (AppendSearch's, after the address cache) for the
// common case, written out in one function: a table without block copies and an unreplicated
// index (straightSearch), whose first look at the key's buckets, in the subtable the directory
// cache names, finds that subtable owning the key with no split under way (the owner rule's
// ownsAll for a move word of 0) and at most one committed slot with the key's fingerprint. It
// reads the buckets and the subtable's header in one batch, as locate does, through doHinted
// (AppendSearch hinted those lines already: prefetchLookup, from the same directory entry,
// with no refresh in between), decodes the view (decodeView, which hints a match's block),
// and, for one match, reads the block in a second batch of one read and answers as searchOne
// would; for none, ErrNotFound at once (findKey's answer for a view without matches). The
// verbs, round trips, bytes and counts (Lookups, BadBlocks) are locate's and searchOne's;
// what it saves is their layering: search's and locate's attempt loops, the owner switch,
// searchOne's, readOne's and readBlockInv's calls and the errors.Is checks between them.
//
// Anything else goes back to the general path in the state it would have reached itself
// (Stats.SearchHandovers): a pending adoption before any read (search, whose locate checks
// it); a view not owned outright or with several matches, after the read (searchFrom with
// that view: locate's attempt 0 goes on from its owner check, so no batch is repeated); a
// block that fails validation (search from the next attempt, as searchOne's errStale makes
// it). A failed batch ends the Search with locate's or readBlock's error, as the general path
// would. A lease that ran out is AppendSearch's (it re-pins and calls this again).
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
	var v view
	t.decodeInto(op, st, &t.scr.lv, &v)
	if len(v.words) > 1 || v.move != 0 || !covers(v.hdr, op.k.h1) {
		t.stats.SearchHandovers++
		return t.searchFrom(ctx, op, &v)
	}
	if len(v.words) == 0 {
		return nil, ErrNotFound
	}
	// searchOne's read (readBlockInv without the invalidation), its block hinted by decodeView.
	w := blockKey(v.words[0])
	n := int(w.Size())
	sc := t.scr
	sc.blocks = grow(sc.blocks, n)
	buf := sc.blocks[:n:n]
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
	t.ac.keep(op, w, st, v.idx[0], blk.Stamp)
	if op.dst == nil {
		return bytes.Clone(blk.Value), nil
	}
	return append(op.dst, blk.Value...), nil
}

// straightSearch reports whether a Search may take searchStraight: a table without block
// copies (a failed read has no backup to fall back on) and an unreplicated index, search's
// condition for searchOne.
func (t *Table) straightSearch() bool { return !t.replicated() && indexReplicas(t.root) <= 1 }
