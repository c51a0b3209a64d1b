package race

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/farmem/farmem/farmem"
)

// Census is what Audit found in a table.
type Census struct {
	// Subtables counts the subtables reachable from the directory and their child words, Keys
	// the committed slots.
	Subtables, Keys int
	// Frozen counts frozen slots, Tentative tentative ones, and Locked subtables whose split
	// lock is held: all zero in a quiescent table, unless a client died in a split (nobody has
	// written to that subtable since) or in an insert (its tentative slot stays until the
	// subtable's next split).
	Frozen, Tentative, Locked int
	// Moving counts splits in progress (layout version 4: moved region by region), which a
	// quiescent table may hold, and Unborn the slots of their new halves not moved into yet;
	// neither counts in Frozen, Tentative or Locked (nor does such a half's parent lock).
	Moving, Unborn int
	// Depths counts subtables by local depth.
	Depths map[int]int
}

// Audit reads the whole table and checks its invariants: every subtable's header is
// consistent with its parent's child word; every committed slot's block is valid, its key is
// covered by the subtable's header and the slot is one of the key's candidates with the key's
// fingerprint; and no key is held by two slots. It returns what it counted and, if an
// invariant fails, an error wrapping ErrCorrupt naming the first problems. It is for a
// quiescent table (tests, inspection tools): concurrent writers make it report problems that
// are not. Cost: one round trip per subtable and one per subtable's blocks.
func (t *Table) Audit(ctx context.Context) (Census, error) {
	c := Census{Depths: make(map[int]int)}
	if err := t.usable(); err != nil {
		return c, err
	}
	if err := t.pin(ctx); err != nil {
		return c, err
	}
	defer t.unpin()
	if err := t.refreshAll(ctx); err != nil {
		return c, err
	}
	var problems []error
	bad := func(format string, args ...any) {
		if len(problems) < 8 {
			problems = append(problems, fmt.Errorf(format, args...))
		}
	}
	// Subtables, breadth first from the directory's entries along child words; want holds the
	// header each child must have (0 for those found in the directory).
	type todo struct {
		st   farmem.Addr
		want uint64
		half bool   // the new half of a split in progress (layout version 4)
		move uint64 // then its parent's move word
	}
	var queue []todo
	seen := make(map[farmem.Addr]bool)
	for _, e := range t.dir {
		if st := unpackAddr(e); !seen[st] {
			seen[st] = true
			queue = append(queue, todo{st: st})
		}
	}
	keys := make(map[string]farmem.Addr)
	for len(queue) > 0 {
		q := queue[0]
		queue = queue[1:]
		s, err := t.readSubtable(ctx, q.st, true)
		if err != nil {
			return c, err
		}
		c.Subtables++
		d, suffix := headerDepth(s.hdr), headerSuffix(s.hdr)
		c.Depths[int(d)]++
		if d > uint(t.p.MaxDepth) || suffix >= 1<<d {
			bad("subtable %v: header depth %d suffix %#x", q.st, d, suffix)
			continue
		}
		if q.want != 0 && (headerDepth(q.want) > d || suffix&(1<<headerDepth(q.want)-1) != headerSuffix(q.want)) {
			bad("subtable %v: header depth %d suffix %#x under a child word for depth %d suffix %#x",
				q.st, d, suffix, headerDepth(q.want), headerSuffix(q.want))
		}
		moving := t.regionSplit() && s.splitting()
		if moving {
			c.Moving++
		}
		if s.lock != 0 && !(q.half && s.lock == lockParent) {
			c.Locked++
		}
		for l, cw := range s.child {
			if cw == 0 {
				continue
			}
			if uint(l) >= d && cw&childDone != 0 {
				bad("subtable %v: finished child for depth %d at depth %d", q.st, l, d)
			}
			child := unpackAddr(cw)
			if !seen[child] {
				seen[child] = true
				queue = append(queue, todo{child, headerWord(uint(l)+1, suffix&(1<<l-1)|1<<l), moving && uint(l) == d, s.move})
			}
		}
		blocks := make([][]byte, len(s.words))
		var b farmem.Batch
		for i, w := range s.words {
			switch {
			case q.half && w == unbornSlot:
				c.Unborn++
				continue
			case w.Tentative():
				c.Tentative++
			case w.Committed():
				blocks[i] = make([]byte, w.Size())
				b.Read(w.Addr(), blocks[i])
			}
			if w.Frozen() {
				c.Frozen++
			}
		}
		if len(b.Ops) > 0 {
			if err := doChunked(ctx, t.m, &b); err != nil {
				return c, fmt.Errorf("race: audit: read blocks: %w", err)
			}
		}
		for i, w := range s.words {
			if blocks[i] == nil {
				continue
			}
			c.Keys++
			blk, err := DecodeBlock(w.Addr(), blocks[i])
			if err != nil {
				bad("subtable %v slot %d (%v): %v", q.st, i, w, err)
				continue
			}
			op := &opState{}
			t.initOp(op, blk.Key)
			if !covers(s.hdr, op.k.h1) && !w.Frozen() {
				bad("subtable %v (depth %d, suffix %#x) slot %d: key %q (hash %#x) belongs elsewhere",
					q.st, d, suffix, i, blk.Key, op.k.h1)
			}
			// A split in progress: a leaving key's slot in a moved region is the new half's,
			// and the new half holds only moved regions' slots.
			r := t.geo.regionOfSlot(uint64(i))
			if moving && !w.Frozen() && op.k.h1>>d&1 == 1 && moveBits(s.move)>>r&1 == 1 {
				bad("subtable %v (depth %d) slot %d: key %q left in moved region %d", q.st, d, i, blk.Key, r)
			}
			if q.half && moveBits(q.move)>>r&1 == 0 {
				bad("new half %v slot %d: key %q in region %d, not moved yet", q.st, i, blk.Key, r)
			}
			in := false
			for r, start := range op.ranges {
				in = in || (r == 0 || !op.same) && uint64(i) >= start && uint64(i) < start+2*t.geo.perB
			}
			if !in || op.fp != w.Fingerprint() {
				bad("subtable %v slot %d: key %q is not a candidate there (fingerprint %#x, slot's %#x)",
					q.st, i, blk.Key, op.fp, w.Fingerprint())
			}
			if prev, dup := keys[string(blk.Key)]; dup && !w.Frozen() {
				bad("key %q in subtable %v slot %d and in subtable %v", blk.Key, q.st, i, prev)
			}
			if !w.Frozen() {
				keys[string(blk.Key)] = q.st
			}
		}
	}
	if len(problems) > 0 {
		return c, fmt.Errorf("race: audit: %w: %w", errors.Join(problems...), ErrCorrupt)
	}
	return c, nil
}

// refreshAll reloads the whole directory.
func (t *Table) refreshAll(ctx context.Context) error {
	var rb [8]byte
	if err := t.m.Read(ctx, t.root.Add(rootDirOff), rb[:]); err != nil {
		return fmt.Errorf("race: read root: %w", err)
	}
	return t.loadDir(ctx, binary.LittleEndian.Uint64(rb[:]))
}
