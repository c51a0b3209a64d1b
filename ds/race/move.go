package race

// The move word and the owner rule: the layout a split moved region by region needs
// (SPLIT-DESIGN.md). Lookups read a subtable's move word with its header (the same 32-byte
// read) and decide with owner whether the slots they read are where the key lives.

// stMoveOff is the offset of a subtable's move word: a depth tag in its top byte and a bitmap
// of moved regions below it. Region r's bit set, with the tag equal to the header's depth d,
// means the split of the subtable at depth d has moved region r to the new half (child[d]).
// A subtable is created with 0 there (tag 0), and only a layout version 4 table's splits set
// it: in a version 2 or 3 table it is always 0.
const stMoveOff = 24

// lookupHeaderLen is the bytes of a subtable's header area a lookup reads after its slots:
// the header, lock, parent and move words (one line, one read).
const lookupHeaderLen = stMoveOff + 8

// Move word fields.
const (
	moveTagShift = 56
	// maxRegions is the number of regions a subtable is moved in: a bit of the move word each.
	maxRegions   = 56
	moveBitsMask = 1<<maxRegions - 1
)

// moveWord builds a move word: tag d and the moved regions' bitmap.
func moveWord(d uint, bits uint64) uint64 { return uint64(d)<<moveTagShift | bits&moveBitsMask }

// moveTag returns a move word's depth tag.
func moveTag(w uint64) uint { return uint(w >> moveTagShift) }

// moveBits returns a move word's bitmap of moved regions.
func moveBits(w uint64) uint64 { return w & moveBitsMask }

// unbornSlot is the word every slot of a new half holds until its region is moved: frozen (so
// writers wait) and tentative (so readers skip it), of length 0. No other word is both
// tentative and of length 0 (a tentative word names its block), so a slot that held it and was
// released never holds it again: a lapsed splitter's late copy, a CAS expecting it, fails.
const unbornSlot = SlotFrozen | SlotTentative

// regions returns how many regions a subtable of g is moved in: a bucket group each, or
// maxRegions when there are more groups than that.
func (g *geometry) regions() uint64 { return min(g.groups, maxRegions) }

// regionOf returns the region of bucket group grp.
func (g *geometry) regionOf(grp uint64) uint {
	if g.groups <= maxRegions {
		return uint(grp)
	}
	return uint(grp * maxRegions / g.groups)
}

// regionOfSlot returns the region of the group slot index i lies in.
func (g *geometry) regionOfSlot(i uint64) uint { return g.regionOf(i / (3 * g.perB)) }

// ownership is what a subtable's header and move word, read after a key's slots, say about
// where the key lives.
type ownership uint8

const (
	// ownsNot: the header does not cover the key (the directory cache is stale).
	ownsNot ownership = iota
	// ownsAll: the subtable holds the key's slot, if any, in the slots read.
	ownsAll
	// ownsMoved: the subtable's split in progress moved both of the key's regions: the new half
	// (child[d]) holds its slot.
	ownsMoved
	// ownsMixed: that split moved one of the key's regions: its slot is in the unmoved
	// region's group here or in the moved one's in the new half.
	ownsMixed
	// ownsTorn: the move word was read after a later split began than the header read shows;
	// read again.
	ownsTorn
)

// owner applies the owner rule to a subtable whose header word hdr and move word move were
// read (in any order, each at its own time) after a key's slots, for a key with first hash h1
// whose two candidate buckets lie in regions r1 and r2. The subtable (depth d) owns the key if
// its header covers it and either bit d of h1 is 0 (the key stays in a split at d), or no split
// at d has begun (tag below d), or neither of the key's regions is moved. A tag above d is a
// torn read: the split at d ended between the two reads.
//
// Why a decision holds at the time the slots were read (before either word): ownership is
// monotone, since bits are only set under one tag and the tag only grows, at the start of the
// next split, which needs the header at d+1. With tag d, a region unset at the move word's
// read was unset at the slots' read; with tag below d the split at d had not begun when the
// move word was read, nor therefore when the slots were; and a header covering the key at d
// means every earlier split of the subtable kept the key.
func owner(hdr, move, h1 uint64, r1, r2 uint) ownership {
	if !covers(hdr, h1) {
		return ownsNot
	}
	d, tag := headerDepth(hdr), moveTag(move)
	switch {
	case tag > d:
		return ownsTorn
	case tag < d || h1>>d&1 == 0:
		return ownsAll
	}
	bits := moveBits(move)
	m1, m2 := bits>>r1&1 == 1, bits>>r2&1 == 1
	switch {
	case m1 && m2:
		return ownsMoved
	case m1 || m2:
		return ownsMixed
	}
	return ownsAll
}

// headerReadLen is the bytes of a subtable's header area a lookup of t reads after its slots:
// lookupHeaderLen for a table split region by region, which needs the move word; the header
// word alone for the others (layout versions 2 and 3: their move words are always 0), so that
// their lookups cost the bytes they always did.
func (t *Table) headerReadLen() int {
	if t.regionSplit() {
		return lookupHeaderLen
	}
	return 8
}
