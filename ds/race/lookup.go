package race

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/bits"
	"slices"
	"time"

	"github.com/farmem/farmem/farmem"
)

// errStale asks an operation to look again: a block read failed validation, or the view it
// acted on changed in a way that needs a fresh read.
var errStale = errors.New("race: stale view")

// opState is one operation's key and what it learnt about blocks.
type opState struct {
	key []byte
	k   keyHash
	fp  uint8
	// ranges are the slot index ranges of the key's two combined buckets ([start, start+2B)).
	ranges [2]uint64
	same   bool // both candidates are the same combined bucket
	// keepValue makes learn copy the value of a block holding the key into its blockInfo
	// (Search returns it; block buffers are scratch).
	keepValue bool
	// dst, with keepValue, is what the value is appended to (AppendSearch); nil makes a copy.
	dst []byte
	// dstTaken: a value learnt (learn) was appended to dst since the last forget; any other
	// block of the key gets a copy of its own, so that appends do not overwrite each other in
	// dst's spare capacity.
	dstTaken bool
	// known maps a slot word (unique while pinned: its block cannot be reused) to what its
	// block holds; a handful of entries, searched in order.
	known []knownBlock
	meta  []slotMeta // prefetched metadata entries of the last learn that read them
	// waited is the subtable whose split lock this operation last found free while waiting.
	waited farmem.Addr
	// invalidate makes learn set the valid word of every committed block it reads (an Update
	// or Delete under Options.Invalidate: one of them is the block it replaces).
	invalidate bool
	// matchOnly makes decodeView keep only the committed slots with op's fingerprint (a
	// Search, an Update and a Delete look at nothing else; an Insert needs the empty slots).
	matchOnly bool
	// search marks a Search: it never writes, and reads a mixed key's slots in both halves of
	// a split in progress (locate's hop) instead of moving its regions.
	search bool
	// backoff is the pause before looking again at a split step another client holds.
	backoff time.Duration
	// keyOnly marks an Update or Delete that needs of its candidate blocks only their heads,
	// the header and the key (findOne): decodeView hints those lines alone.
	keyOnly bool
}

// blockInfo is what a block holds, as far as an operation cares.
type blockInfo struct {
	isKey    bool
	value    []byte // only with keepValue: a copy, the caller's
	deadline farmem.Time
	stamp    uint32
}

// knownBlock is an entry of opState.known.
type knownBlock struct {
	w Slot // blockKey of the slot word
	blockInfo
}

// slotMeta is a prefetched metadata entry: slot index i's bytes.
type slotMeta struct {
	i   uint64
	buf []byte
}

// info returns what op knows of the block of slot word w (a blockKey).
func (op *opState) info(w Slot) (blockInfo, bool) {
	for k := range op.known {
		if op.known[k].w == w {
			return op.known[k].blockInfo, true
		}
	}
	return blockInfo{}, false
}

// learnt records what the block of w holds.
func (op *opState) learnt(w Slot, info blockInfo) {
	for k := range op.known {
		if op.known[k].w == w {
			op.known[k].blockInfo = info
			return
		}
	}
	op.known = append(op.known, knownBlock{w, info})
}

// metaOf returns the prefetched metadata of slot index i, or nil.
func (op *opState) metaOf(i uint64) []byte {
	for _, m := range op.meta {
		if m.i == i {
			return m.buf
		}
	}
	return nil
}

// forget drops what op learnt about blocks (their words may be reused once unpinned). The
// entries are cut off, not cleared: an entry's value (a copy, with keepValue) and a meta
// entry's buffer stay referenced until entries are appended over them, a handful at most.
func (op *opState) forget() {
	op.dstTaken = false
	op.known = op.known[:0]
	op.meta = op.meta[:0]
}

// view is one read of a key's candidate slots and of its subtable's header, the header read
// after the slots (same batch, same node, so in order).
type view struct {
	st   farmem.Addr
	hdr  uint64
	move uint64 // the subtable's move word, read with the header
	// from, in a view of a split's new half reached through its parent's move word (hop), is
	// the parent; such a view of a mixed key (Search only) holds slots of both.
	from  farmem.Addr
	idx   []uint64 // candidate slot indices, ascending, without duplicates
	words []Slot   // their words as read
}

// word returns the word of slot index i in the view (ok false if i is not a candidate).
func (v *view) word(i uint64) (Slot, bool) {
	for j, x := range v.idx {
		if x == i {
			return v.words[j], true
		}
	}
	return 0, false
}

// newOp prepares an operation on key, in the handle's scratch: the previous operation's state
// is gone.
func (t *Table) newOp(key []byte) *opState {
	op := &t.scr.op
	op.forget()
	// Field by field (initOp sets the key's): a literal assignment zeroes and copies the whole
	// struct, its pointers through write barriers. TestNewOpResets checks that none is missed.
	op.keepValue, op.invalidate, op.matchOnly, op.search, op.keyOnly = false, false, false, false, false
	if op.dst != nil {
		op.dst = nil
	}
	op.waited, op.backoff = 0, 0
	t.initOp(op, key)
	return op
}

// hashOf hashes a key with the table's seed.
func (t *Table) hashOf(key []byte) keyHash {
	return hashKey(t.p.Seed, key)
}

// initOp sets op's key and what derives from it.
func (t *Table) initOp(op *opState, key []byte) { initOp(&t.p, &t.geo, op, key) }

// initOp sets op's key and what derives from it, for a table of parameters p and geometry geo.
func initOp(p *Params, geo *geometry, op *opState, key []byte) {
	// In locals, stored once each: every operation's critical path runs this before its
	// first hint.
	k := hashKey(p.Seed, key)
	op.key, op.k = key, k
	// FingerprintBits is 1..8 (validated): the shift is 0..7.
	op.fp = uint8(k.h2>>slotFPShift) >> (uint(8-p.FingerprintBits) & 7)
	twoG, perB := 2*geo.groups, geo.perB
	first, second := reduce(uint32(k.h1>>32), twoG), reduce(uint32(k.h2), twoG)
	// Main bucket mb starts group mb/2's three buckets, or ends them when odd.
	r0, r1 := (first>>1)*3*perB+(first&1)*perB, (second>>1)*3*perB+(second&1)*perB
	if r1 < r0 {
		r0, r1 = r1, r0
	}
	op.ranges, op.same = [2]uint64{r0, r1}, r0 == r1
}

// addReads appends to b the reads of op's candidate slots in st, then of st's header area
// (headerReadLen bytes: the move word too in a table split region by region), into the
// scratch bucket buffer (decodeView decodes it), and returns the index of the first read.
func (t *Table) addReads(b *farmem.Batch, op *opState, st farmem.Addr) int {
	n := int(2 * t.geo.perB * 8)
	hl := t.headerReadLen()
	buf := grow(t.scr.bkt, 2*n+lookupHeaderLen)
	t.scr.bkt = buf
	first := b.Read(t.geo.slotAddr(st, op.ranges[0]), buf[:n:n])
	if !op.same {
		b.Read(t.geo.slotAddr(st, op.ranges[1]), buf[n:2*n:2*n])
	}
	b.Read(st.Add(stHeaderOff), buf[2*n:2*n+hl])
	return first
}

// decodeView builds the view of what addReads read, in vb's storage (the view's slices are
// valid until the next decode into vb). With op.matchOnly it keeps only the committed slots
// with op's fingerprint.
func (t *Table) decodeView(op *opState, st farmem.Addr, vb *viewBuf) view {
	var v view
	t.decodeInto(op, st, vb, &v)
	return v
}

// decodeInto is decodeView into *v (every field set): a view is ten words, returned through
// memory and copied by the caller, which searchStraight spares.
func (t *Table) decodeInto(op *opState, st farmem.Addr, vb *viewBuf, v *view) {
	le := binary.LittleEndian
	n := 2 * t.geo.perB
	buf := t.scr.bkt
	v.st, v.hdr, v.move, v.from = st, le.Uint64(buf[16*n:]), 0, 0
	if t.regionSplit() {
		v.move = le.Uint64(buf[16*n+stMoveOff:])
	}
	idx, words := vb.idx[:0], vb.words[:0]
	// ranges[1] > ranges[0] unless op.same: the second range's slots below ranges[0]+n are
	// in the first already.
	from := n
	if !op.same {
		from = 0
		if end := op.ranges[0] + n; op.ranges[1] < end {
			from = end - op.ranges[1]
		}
	}
	if op.matchOnly {
		// A slot's fingerprint is its word's top byte (little-endian: its last byte), so a
		// word is decoded only when that byte matches: fpMask marks such words (up to 64 a
		// call, in SSE2 on amd64), and only those are looked at (a loop that called the hint
		// and appended in its body kept its state in memory: some 16 instructions a word).
		// Both ranges are scanned as one (the second follows the first in buf), the second's
		// first from words, read in the first already, passed over. A committed match's block
		// is hinted at once (see prefetcher): its read's batch follows, after the rest of this
		// decoding.
		all := buf[: 8*(n+n) : 8*(n+n)]
		r0, r1 := op.ranges[0], op.ranges[1]-n // slot index = r0 + word, or r1 + word past n
		for base := 0; base < len(all); base += fpMaskMax {
			chunk := all[base:]
			if len(chunk) > fpMaskMax {
				chunk = chunk[:fpMaskMax]
			}
			for m := fpMask(chunk, op.fp); m != 0; m &= m - 1 {
				k := uint64(base/8) + uint64(bits.TrailingZeros64(m)) // the word
				i := r0 + k
				if k >= n {
					if k < n+from {
						continue
					}
					i = r1 + k
				}
				if w := Slot(le.Uint64(all[8*k:])); w.Committed() {
					idx, words = append(idx, i), append(words, w)
					t.hintBlock(op, w)
				}
			}
		}
		vb.idx, vb.words = idx, words
		v.idx, v.words = idx, words
		return
	}
	for j := range n {
		idx = append(idx, op.ranges[0]+j)
		words = append(words, Slot(le.Uint64(buf[8*j:])))
	}
	for j := from; j < n; j++ {
		idx = append(idx, op.ranges[1]+j)
		words = append(words, Slot(le.Uint64(buf[8*(n+j):])))
	}
	vb.idx, vb.words = idx, words
	v.idx, v.words = idx, words
}

// locate reads op's candidate buckets in the subtable the directory cache names (one round
// trip), refreshing the cache until the subtable owns the key (owner). nb, if not nil, is
// written in the first batch (an Insert's or Update's KV block). The view is valid until the
// next locate.
func (t *Table) locate(ctx context.Context, op *opState, nb *newBlock) (view, error) {
	if err := t.checkAdoptions(ctx); err != nil {
		return view{}, err
	}
	return t.locateFrom(ctx, op, nb, nil)
}

// locateFrom is locate after its adoption check. With first set, the first attempt's batch
// was made already (searchStraight's, with no block to write: nb is nil) and first is its
// view, in the lookup's storage: that attempt goes on from the owner check.
func (t *Table) locateFrom(ctx context.Context, op *opState, nb *newBlock, first *view) (view, error) {
	for attempt := 0; ; attempt++ {
		if attempt >= maxAttempts {
			return view{}, fmt.Errorf("race: no subtable covers the key after %d lookups: %w", attempt, ErrCorrupt)
		}
		var v view
		var st farmem.Addr
		if first != nil {
			v, st, first = *first, first.st, nil
		} else {
			st = t.subtableFor(op.k.h1)
			b := t.batch()
			if nb != nil {
				addBlockWrites(b, nb)
			}
			t.addReads(b, op, st)
			t.stats.Lookups++
			if err := t.m.Do(ctx, b); err != nil {
				t.lost()
				return view{}, fmt.Errorf("race: read buckets of %v: %w", st, err)
			}
			nb = nil
			v = t.decodeView(op, st, &t.scr.lv)
		}
		switch o := t.owner(op, &v); o {
		case ownsAll:
			return v, nil
		case ownsTorn:
			continue
		case ownsMoved, ownsMixed:
			if !t.regionSplit() {
				return view{}, t.badMove(&v)
			}
			t.notePending(st)
			if o == ownsMixed && !op.search {
				// A writer works in one half only: it moves the key's unmoved region first.
				held, _, err := t.stepSplit(ctx, st, stepKey, op, false, 0)
				if err != nil {
					return view{}, err
				}
				if !held {
					if err := t.splitPause(ctx, &op.backoff); err != nil {
						return view{}, err
					}
				}
				continue
			}
			nv, ok, err := t.hop(ctx, op, &v, o)
			if err != nil {
				return view{}, err
			}
			if ok {
				return nv, nil
			}
			continue
		}
		if err := t.refresh(ctx, op.k.h1); err != nil {
			return view{}, err
		}
		if t.subtableFor(op.k.h1) == st {
			// The directory itself lags behind the split: follow the subtables' child words.
			nst, d, err := t.walk(ctx, st, op.k.h1)
			if err != nil {
				return view{}, err
			}
			p, err := packAddr(nst)
			if err != nil {
				return view{}, err
			}
			t.dir[op.k.h1&uint64(len(t.dir)-1)] = entryWord(p, d)
		}
	}
}

// hop reads op's buckets in the new half of the split in progress of v.st, which moved one
// (o ownsMixed, a Search only) or both (ownsMoved) of the key's regions (1 round trip, and 1
// more to read the child word when the handle has not cached it). It returns false when the
// new half does not own the key by its own owner rule (it split in turn since): the caller
// looks again. A mixed key's view holds the slots of the unmoved region's group as v read
// them and the moved one's as read in the new half: the key's slot is in one of those (a
// writer never works in the other two), the first read valid at its time for the first and
// the second at its (later) time for the second, and a key absent from both was absent at
// some time between them (present at the first, it was in the moved group, which it leaves
// only by a delete).
func (t *Table) hop(ctx context.Context, op *opState, v *view, o ownership) (view, bool, error) {
	d := headerDepth(v.hdr)
	s1, err := t.childOf(ctx, v.st, d)
	if err != nil || s1 == 0 {
		return view{}, false, err
	}
	b := t.batch()
	t.addReads(b, op, s1)
	t.stats.Lookups++
	if err := t.m.Do(ctx, b); err != nil {
		t.lost()
		return view{}, false, fmt.Errorf("race: read buckets of %v: %w", s1, err)
	}
	t.stats.Hops++
	nv := t.decodeView(op, s1, &t.scr.hv)
	if t.owner(op, &nv) != ownsAll {
		return view{}, false, nil
	}
	nv.from = v.st
	if o == ownsMoved {
		return nv, true, nil
	}
	t.stats.MixedReads++
	moved := moveBits(v.move)
	mb := &t.scr.mv
	idx, words := mb.idx[:0], mb.words[:0]
	for j, i := range v.idx {
		if moved>>t.geo.regionOfSlot(i)&1 == 0 {
			idx, words = append(idx, i), append(words, v.words[j])
		}
	}
	for j, i := range nv.idx {
		if moved>>t.geo.regionOfSlot(i)&1 == 1 {
			idx, words = append(idx, i), append(words, nv.words[j])
		}
	}
	mb.idx, mb.words = idx, words
	nv.idx, nv.words = idx, words
	return nv, true, nil
}

// childOf returns the new half of st's split at depth d: from the handle's cache, or read
// from st's child word (1 round trip; 0 if not set). A child word is written once per depth
// (Purge rewrites one that named a lost subtable, and the cache is dropped on an adoption).
func (t *Table) childOf(ctx context.Context, st farmem.Addr, d uint) (farmem.Addr, error) {
	for _, k := range t.kids {
		if k.st == st && k.d == d && k.s1 != 0 {
			return k.s1, nil
		}
	}
	var b [8]byte
	if err := t.m.Read(ctx, st.Add(childOff(d)), b[:]); err != nil {
		t.lost()
		return 0, fmt.Errorf("race: read child word of %v: %w", st, err)
	}
	s1 := unpackAddr(binary.LittleEndian.Uint64(b[:]))
	if s1 != 0 {
		t.kids[t.kidNext%len(t.kids)] = kid{st, d, s1}
		t.kidNext++
	}
	return s1, nil
}

// kid is an entry of the handle's cache of new halves (childOf).
type kid struct {
	st farmem.Addr
	d  uint
	s1 farmem.Addr
}

// notePending makes st's split in progress the one this handle's inserts move a region of
// before returning, unless it knows of one already.
func (t *Table) notePending(st farmem.Addr) {
	if t.pending == 0 {
		t.pending, t.pendingBegin = st, false
	}
}

// owner applies the owner rule (see owner) to view v of op's key.
func (t *Table) owner(op *opState, v *view) ownership {
	if v.move == 0 {
		// No split has begun in this subtable (every move word of a table of layout version
		// 2 or 3): owner's answer without the key's regions.
		if covers(v.hdr, op.k.h1) {
			return ownsAll
		}
		return ownsNot
	}
	r := t.keyRegions(op)
	return owner(v.hdr, v.move, op.k.h1, r[0], r[1])
}

// keyRegions returns the regions (geometry.regionOf) of the bucket groups of op's two
// combined buckets.
func (t *Table) keyRegions(op *opState) [2]uint {
	return [2]uint{t.geo.regionOfSlot(op.ranges[0]), t.geo.regionOfSlot(op.ranges[1])}
}

// badMove is the error of a view whose move word says a split moved regions in a table whose
// layout version (below 4) never moves regions: its move words are always 0.
func (t *Table) badMove(v *view) error {
	return fmt.Errorf("race: subtable %v: move word %#x in a layout version %d table: %w", v.st, v.move, t.version, ErrCorrupt)
}

// matching returns the view's slots whose fingerprint is op's and that sel accepts. The
// result is scratch, valid until the next matching.
func (t *Table) matching(op *opState, v *view, sel func(Slot) bool) []int {
	js := t.scr.js[:0]
	fp := Slot(op.fp)
	for j, w := range v.words {
		// The fingerprint first: one shift, and an empty word (0) matches only fingerprint 0.
		if w>>slotFPShift == fp && !w.Empty() && sel(w) {
			js = append(js, j)
		}
	}
	t.scr.js = js
	return js
}

// learn reads the blocks of the view's slots js that op does not know yet (one round trip,
// none if it knows them all) and, when meta is set, the metadata entries of those slots. It
// returns errStale if a block fails validation: its slot changed under the read, or the
// block is being reused, and the caller must look again.
func (t *Table) learn(ctx context.Context, op *opState, v *view, js []int, meta bool) error {
	sc := t.scr
	need := 0
	for _, j := range js {
		if w := blockKey(v.words[j]); !op.knows(w) {
			need += int(w.Size())
		}
	}
	metaSize := 0
	if meta && t.lockSize > 0 {
		metaSize = t.lockSize
	}
	if need == 0 && metaSize == 0 {
		return nil
	}
	b := t.batch()
	blocks := grow(sc.blocks, need)
	sc.blocks = blocks
	ps := sc.ps[:0]
	off := 0
	for _, j := range js {
		w := blockKey(v.words[j])
		if op.knows(w) {
			continue
		}
		n := int(w.Size())
		buf := blocks[off : off+n : off+n]
		off += n
		ri := b.Read(w.Addr(), buf)
		inv := -1
		if op.invalidate && w.Committed() {
			// After the read (same node, in order); a block of another key with the same
			// fingerprint is invalidated too, which costs its address-cache readers a miss.
			inv = b.Write(w.Addr().Add(ValidOffset), invalidBytes[:])
		}
		ps = append(ps, pendingBlock{w: w, buf: buf, op: ri, inv: inv})
	}
	sc.ps = ps
	blockOps := len(b.Ops)
	var mbuf []byte
	if metaSize > 0 {
		mbuf = grow(sc.meta, metaSize*len(js))
		sc.meta = mbuf
		for k, j := range js {
			b.Read(t.geo.metaAddr(v.st, v.idx[j]), mbuf[k*metaSize:(k+1)*metaSize:(k+1)*metaSize])
		}
	}
	if len(b.Ops) == 0 {
		return nil
	}
	var lostErr error
	if op.matchOnly && metaSize == 0 {
		lostErr = t.doHinted(ctx, b) // decodeView hinted the blocks of a matchOnly view
	} else {
		lostErr = t.m.Do(ctx, b)
	}
	if lostErr != nil && !onlyBlocksDown(b, blockOps) {
		t.lost()
		return fmt.Errorf("race: read KV blocks: %w", lostErr)
	}
	stale := false
	var failed []bool
	if lostErr != nil {
		failed = make([]bool, len(ps))
		var down []bool
		for i, p := range ps {
			_, err := b.Result(p.op)
			failed[i] = err != nil
			if err != nil && !errors.Is(err, farmem.ErrNodeLost) {
				down = append(down, true)
			} else {
				down = append(down, false)
			}
		}
		if t.replicated() && !op.invalidate {
			// Readers only: a writer must invalidate the primary's valid word, which address
			// caches read, so it fails as without replication.
			t.readBackups(ctx, ps, down)
		}
		lostErr = nil
		for i := range ps {
			if failed[i] && ps[i].backup == 0 {
				_, lostErr = b.Result(ps[i].op)
				break
			}
		}
	}
	for i, p := range ps {
		at := p.w.Addr()
		if failed != nil && failed[i] {
			if p.backup == 0 {
				continue // in lost memory, or no copy answered: unknown
			}
			at = p.backup
		}
		blk, err := t.decode(at, p.buf)
		if err != nil {
			t.stats.BadBlocks++
			stale = true
			continue
		}
		info := blockInfo{isKey: bytes.Equal(blk.Key, op.key), deadline: blk.Deadline, stamp: blk.Stamp}
		if info.isKey && op.keepValue {
			switch {
			case op.dst == nil:
				info.value = make([]byte, len(blk.Value))
				copy(info.value, blk.Value)
			case op.dstTaken:
				// The caller's buffer in a new array: a second block of the key the operation
				// learns (findKey answers the first) must not be appended over the first's
				// value, which the buffer's spare capacity holds.
				info.value = append(op.dst[:len(op.dst):len(op.dst)], blk.Value...)
			default:
				// Appended to the caller's buffer: a retry appends to its original length again.
				info.value = append(op.dst, blk.Value...)
				op.dstTaken = true
			}
		}
		op.learnt(p.w, info)
	}
	if metaSize > 0 && len(js) > 0 {
		clear(op.meta)
		op.meta = op.meta[:0]
		for k, j := range js {
			op.meta = append(op.meta, slotMeta{v.idx[j], mbuf[k*metaSize : (k+1)*metaSize : (k+1)*metaSize]})
		}
	}
	if lostErr != nil {
		// A writer must not CAS over a block of its key whose invalidation failed (its read
		// did not): an address cache could go on reading it.
		for _, p := range ps {
			if p.inv < 0 {
				continue
			}
			if _, err := b.Result(p.inv); err != nil {
				if info, ok := op.info(p.w); ok && info.isKey {
					return fmt.Errorf("race: invalidate block: %w", err)
				}
			}
		}
	}
	if stale {
		return errStale
	}
	if lostErr != nil {
		// Some candidate blocks are on a node that is down or lost its memory. If the key is
		// among those read, the answer is known (one committed slot at most holds a key);
		// otherwise it may have been in one of the others.
		for _, p := range ps {
			if info, ok := op.info(p.w); ok && info.isKey {
				return nil
			}
		}
		return fmt.Errorf("race: read KV blocks: %w", lostErr)
	}
	return nil
}

// readBackups reads, for each block read of ps that failed because its node is down (and not
// because it restarted and lost its memory: those keys fail with farmem.ErrNodeLost until
// Adopt), a backup copy: the copies on the next memory nodes in id order, one after another
// (one round trip each), taking the first that validates for its own address; it records the
// copy's address in the pending block. Copies of a block a committed slot names never disagree
// in their checksummed bytes (each is written whole before the CAS that publishes the block,
// and never changed after), so any valid copy is the block; a copy that fails validation is
// one no committed slot named (a writer died between its writes and its CAS) and is skipped.
// A backup's valid word means nothing and is not read by anyone. A block without a copy that
// answered stays unknown.
func (t *Table) readBackups(ctx context.Context, ps []pendingBlock, down []bool) {
	for i := range ps {
		if down[i] {
			_ = t.readBackup(ctx, &ps[i])
		}
	}
}

// readBackup reads a backup copy of p's block into p.buf (see readBackups).
func (t *Table) readBackup(ctx context.Context, p *pendingBlock) error {
	a := p.w.Addr()
	primary := slices.Index(t.memNodes, a.Node())
	if primary < 0 {
		return fmt.Errorf("race: block %v on no memory node: %w", a, ErrCorrupt)
	}
	err := fmt.Errorf("race: no backup copy of block %v: %w", a, farmem.ErrNodeDown)
	// A fresh buffer: the failed read's may still be the transport's.
	buf := make([]byte, len(p.buf))
	for i := 1; i < min(t.p.Replicas, len(t.memNodes)); i++ {
		ra := farmem.MakeAddr(t.memNodes[(primary+i)%len(t.memNodes)], a.Offset())
		if rerr := t.m.Read(ctx, ra, buf); rerr != nil {
			err = rerr
			continue
		}
		if _, derr := t.decode(ra, buf); derr != nil {
			t.stats.BadBlocks++
			continue
		}
		t.stats.BackupReads++
		p.backup, p.buf = ra, buf
		return nil
	}
	return err
}

// invalidBytes is InvalidWord's bytes.
var invalidBytes = [8]byte{byte(InvalidWord)}

// onlyBlocksDown reports whether every failed op of b is one of its first n (the block reads)
// and failed because its node is down or lost its memory (farmem.ErrNodeDown, which
// farmem.ErrNodeLost wraps).
func onlyBlocksDown(b *farmem.Batch, n int) bool {
	for i := range b.Ops {
		if _, err := b.Result(i); err != nil && (i >= n || !errors.Is(err, farmem.ErrNodeDown)) {
			return false
		}
	}
	return true
}

// knows reports whether op knows the block of w (a blockKey).
func (op *opState) knows(w Slot) bool {
	_, ok := op.info(w)
	return ok
}

// blockKey is the part of a slot word that names its block: the word without its frozen and
// tentative bits (an insert commits by clearing the tentative bit of the same block).
func blockKey(w Slot) Slot { return w &^ (SlotFrozen | SlotTentative) }

// decode validates a block.
func (t *Table) decode(a farmem.Addr, b []byte) (Block, error) { return DecodeBlock(a, b) }

// findKey returns the position in v of a committed slot holding op's key, or -1: it reads the
// blocks of committed fingerprint matches it does not know yet (and their metadata when meta
// is set). A key is in at most one committed slot at a time; if the reads, spread over time,
// saw it in two (deleted from one and inserted into another in between), either is a value it
// had during the read, and the first is taken.
func (t *Table) findKey(ctx context.Context, op *opState, v *view, meta bool) (int, error) {
	js := t.matching(op, v, Slot.Committed)
	if len(js) == 0 {
		return -1, nil
	}
	if err := t.learn(ctx, op, v, js, meta); err != nil {
		return -1, err
	}
	for _, j := range js {
		if info, _ := op.info(blockKey(v.words[j])); info.isKey {
			return j, nil
		}
	}
	return -1, nil
}

// frozen reports whether any slot of the view is frozen.
func (v *view) frozen() bool {
	for _, w := range v.words {
		if w.Frozen() {
			return true
		}
	}
	return false
}
