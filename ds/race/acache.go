package race

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"

	"github.com/farmem/farmem/farmem"
)

// MaxAddressCache is the largest Options.AddressCache: 2^24 entries, 512 MiB per handle.
const MaxAddressCache = 1 << 24

// acEntry is one entry of a handle's address cache (Options.AddressCache): the committed slot
// word a Search found for a key (a blockKey: the block's address and size), the subtable and
// index of the slot that held it (what an Update through the entry needs to find the slot's
// lock entry, and the slot's address), the block's stamp, a tag of the key's hash that spares
// most reads of another key's block, and the key's miss count (acMisses). An entry whose word
// is 0 but that is in use (acLive) is the key's history alone: its entry went stale or was
// taken, and its miss count waits for the key's next entry. 32 bytes.
type acEntry struct {
	word  Slot
	st    farmem.Addr
	stamp uint32
	tag   uint32
	idx   uint32
	state uint32 // acLive | misses
}

const (
	// acLive marks an entry in use (word set, or the key's history alone).
	acLive = 1 << 31
	// acMaxMisses caps an entry's miss count.
	acMaxMisses = 3
	// acVolatile is the miss count from which the key's entry is no longer used to spare a
	// lookup (volatile).
	acVolatile = 2
)

// misses returns the entry's miss count: a saturating count (0 to acMaxMisses) of the looks
// through the entry that found the key's block replaced by another client, less those that
// found it unchanged. A key other clients keep updating (a hot key of a write-heavy workload)
// reaches acVolatile within two such looks; its entry is then volatile and no longer used
// (each use would cost a round trip and a block read for nothing, then the lookup anyway),
// but the lookups that replace its uses still count: one that finds the entry's block still
// the key's value takes one miss back, so a key that went quiet is cached again after two.
func (e *acEntry) misses() uint32 { return e.state &^ acLive }

// volatile reports whether the entry's miss count keeps it from being used.
func (e *acEntry) volatile() bool { return e.misses() >= acVolatile }

// count adds d (+1 or -1) to the entry's miss count, within [0, acMaxMisses].
func (e *acEntry) count(d int) {
	m := int(e.misses()) + d
	e.state = acLive | uint32(min(max(m, 0), acMaxMisses))
}

// slot returns the address of the entry's slot.
func (e *acEntry) slot(g *geometry) farmem.Addr { return g.slotAddr(e.st, uint64(e.idx)) }

// acSet is a set of two entries: one 64-byte cache line (the cache's backing array, a large
// allocation, is line-aligned), so that a lookup touches one line.
type acSet [2]acEntry

// addrCache is a handle's address cache: sets of two entries chosen by the key's second hash,
// allocated at the first entry it keeps (a handle that never searches pays nothing). Two ways
// rather than one keep the keys that share a set: with n keys and 2^16 entries, a
// direct-mapped cache misses about 1-(65536/n)(1-e^(-n/65536)) of a uniform workload's Gets for
// conflicts alone (7% at n = 10^4), two ways about 1% there.
type addrCache struct {
	sets []acSet
	size int // entries to allocate, a power of 2 of at least 2; 0: no cache
	// stale estimates the share of this handle's looks through an entry that find the key's
	// block replaced (acRateOne is all of them): see observe.
	stale uint32
	// lookups estimates the share of this handle's Searches, Updates and Deletes whose first
	// look was the lookup (no usable entry, or a stale one), acRateOne being all: see early.
	lookups uint32
}

// lookedUp adds one operation to the handle's lookup share: whether its first look was the
// lookup rather than an answer through its key's entry.
func (c *addrCache) lookedUp(yes bool) {
	if yes {
		c.lookups += (acRateOne - c.lookups) >> acRateShift
	} else {
		c.lookups -= c.lookups >> acRateShift
	}
}

// early reports whether an operation should ask for its key's buckets before it consults its
// entry, rather than once the entry has failed it: while more than a quarter of the handle's
// recent operations needed the lookup. Consulting the entry reads a line of the handle's table
// (2 MiB by default), usually from the last-level cache, and the buckets cannot be asked for
// until the key's entry is known to be of no use, so an operation the entry fails pays both
// latencies one after the other; asked for first, the buckets' lines come while the entry is
// read, and an operation its entry answers wasted the hint (some tens of instructions and two
// to four lines). With a hint wasted costing a quarter of what an overlap saves, the hint
// first wins below a hit share of about four fifths; a quarter of lookups keeps a cache that
// answers nearly every operation (a key set that fits it) on the path it had.
func (c *addrCache) early() bool { return c.sets != nil && c.lookups > acRateOne/4 }

// acRateOne is an addrCache.stale of 1; acRateShift sets the weight of one observation
// (1/64), so the estimate follows a change of workload within about a hundred looks.
const (
	acRateShift = 6
	acRateOne   = 1 << 16
)

// observe adds one observation to the handle's stale rate: whether a look through an entry of
// the cache, or a lookup of a key the cache held an entry for, found (or would have found) the
// entry's block replaced.
//
// Why a rate per handle, besides each entry's miss count: under a steady workload every key's
// entry goes stale with about the same probability, whatever the key's popularity. A session
// looks a key up about once every 1/q of its operations (q the key's share of all
// operations), and in that time the other n-1 clients, as busy, update it (n-1)·w·q/q =
// (n-1)·w times on average (w their share of updates): the entry is stale with probability
// 1-e^(-(n-1)w), 78% with 4 clients on YCSB A, 14% on B, 96% on B with 64 clients, 0 on C.
// A look through a stale entry costs a round trip (and a block read) more than the lookup, a
// fresh one a round trip less, so above one half the cache costs more than it saves; a key's
// own miss count would learn that only after two misses per key, which a workload over many
// keys never pays back. The rate learns it from all keys at once; the miss counts still tell
// the keys that are updated much more, or less, than the rest.
func (c *addrCache) observe(stale bool) {
	if stale {
		c.stale += (acRateOne - c.stale) >> acRateShift
	} else {
		c.stale -= c.stale >> acRateShift
	}
}

// useful reports whether the handle's looks through its entries find their blocks unchanged
// more often than not (the stale rate is below one half): otherwise every entry is left
// unused, as a volatile one is, while the lookups that replace their uses keep observing.
func (c *addrCache) useful() bool { return c.stale < acRateOne/2 }

// acTag is op's key's tag in an entry: the high half of its first hash (sets are chosen by the
// second's).
func acTag(op *opState) uint32 { return uint32(op.k.h1 >> 32) }

// set returns op's key's set (two entries), nil if the cache holds nothing yet.
func (c *addrCache) set(op *opState) *acSet {
	if c.sets == nil {
		return nil
	}
	return &c.sets[(op.k.h2>>32)&uint64(len(c.sets)-1)]
}

// find returns op's key's entry in use (its word may be 0: history alone), nil if none.
func (c *addrCache) find(op *opState) *acEntry {
	set := c.set(op)
	if set == nil {
		return nil
	}
	tag := acTag(op)
	for i := range set {
		if set[i].state&acLive != 0 && set[i].tag == tag {
			return &set[i]
		}
	}
	return nil
}

// holds reports whether e (nil: false), an entry find returned for op earlier in the same
// operation, still is op's key's entry: between the two only a clear (a node adoption, which
// empties every entry) or keep may have changed the cache, and neither moves a key's live entry
// to another way of its set, so e, still live with op's tag, is the entry find would return.
// An operation that consults the cache several times (take, miss, keepAt) so searches the set
// once; when it does not hold, find searches again.
func (e *acEntry) holds(op *opState) bool {
	return e != nil && e.state&acLive != 0 && e.tag == acTag(op)
}

// at returns op's key's entry, nil if the cache names no block for the key.
func (c *addrCache) at(op *opState) *acEntry {
	if e := c.find(op); e != nil && e.word != 0 {
		return e
	}
	return nil
}

// keep records that the block of w (a blockKey) with stamp was op's key's committed value, in
// slot idx of subtable st (none if st is 0): in the key's entry if it has one, else in the
// set's first way, the entry there (if it names a block) moving to the second (whose entry is
// dropped). So an Update, which takes its key's entry when it begins and keeps the new one
// when it commits, leaves the set's other key in place. The key's miss count carries over: if
// the entry named a block, a lookup found the key (its use was skipped, or there was none to
// use), and the block is the same (w and stamp), one miss is taken back; another block counts
// one more (the entry would have been stale). History alone (word 0) was counted already.
func (c *addrCache) keep(op *opState, w Slot, st farmem.Addr, idx uint64, stamp uint32) {
	c.keepAt(op, nil, w, st, idx, stamp)
}

// keepAt is keep for an operation that found its key's entry e earlier (see holds; nil if none).
func (c *addrCache) keepAt(op *opState, e *acEntry, w Slot, st farmem.Addr, idx uint64, stamp uint32) {
	if c.size == 0 || st == 0 {
		return
	}
	if c.sets == nil {
		c.sets = make([]acSet, c.size/2)
	}
	ne := acEntry{word: w, st: st, idx: uint32(idx), tag: acTag(op), stamp: stamp, state: acLive}
	if !e.holds(op) {
		e = c.find(op)
	}
	if e != nil {
		ne.state = e.state
		switch {
		case e.word == 0:
		case e.word == w && e.stamp == stamp:
			ne.count(-1)
			c.observe(false)
		default:
			ne.count(+1)
			c.observe(true)
		}
		*e = ne
		return
	}
	set := c.set(op)
	if set[0].word != 0 {
		// The first way's entry moves to the second, over whatever is there; a first way
		// that names no block (empty, or a key's history alone) takes the new entry alone.
		set[1] = set[0]
	}
	set[0] = ne
}

// take returns op's key's entry (a zero entry if the cache names no block for it) and forgets
// its block, keeping its history (miss count): an Update or Delete by this handle takes it
// when it begins (changeCached may use it, unless volatile; a committed Update keeps its new
// block's entry when it ends), and counts what its first look found (miss).
//
// It also returns op's key's entry in use as find found it (nil if none), for the
// operation's later miss and keepAt (see holds).
func (c *addrCache) take(op *opState) (acEntry, *acEntry) {
	e := c.find(op)
	if e == nil || e.word == 0 {
		return acEntry{}, e
	}
	r := *e
	e.word = 0
	return r, e
}

// miss counts, in op's key's history (the entry take left), what the first look of an Update
// or Delete found against the block of the entry it took: d +1 for another block (the entry
// was stale), -1 for the same one. e is the entry take returned with it (see holds).
func (c *addrCache) miss(op *opState, e *acEntry, d int) {
	c.observe(d > 0)
	if !e.holds(op) {
		e = c.find(op)
	}
	if e != nil {
		e.count(d)
	}
}

// drop forgets op's key's entry, history and all.
func (c *addrCache) drop(op *opState) {
	if e := c.find(op); e != nil {
		*e = acEntry{}
	}
}

// viewSlot returns the subtable and index of the slot of view v's j-th word, for the address
// cache: no subtable (0) for a view of a split's new half reached through its parent (v.from
// set), whose slots may lie in either half.
func (t *Table) viewSlot(v *view, j int) (farmem.Addr, uint64) {
	if v.from != 0 {
		return 0, 0
	}
	return v.st, v.idx[j]
}

// clear forgets every entry (a node adoption: blocks may be gone).
func (c *addrCache) clear() { clear(c.sets) }

// searchCached answers op's Search (op.dst set) from the address cache, reading the slot and
// the block its entry names (readCached, whose case of the slot and the block on one node it
// makes itself): one round trip, no pin, no clock reading. ok is
// false, with nothing appended, when the cache has no entry for the key, the entry is volatile
// or the handle's entries are not useful (addrCache.useful; either counted in CacheSkips: no read; the caller's lookup counts what it finds against the entry,
// as keep says), or the entry is stale (its block is then forgotten and the miss counted, and
// the caller reads the buckets): the read failed, the slot no longer holds the entry's word,
// or the block fails validation, holds another key or another stamp (it was reused), or its
// valid word is set (a writer replaced or is replacing it). A hit takes a miss back. See
// readCached for why a value it returns is linearizable.
func (t *Table) searchCached(ctx context.Context, op *opState) ([]byte, bool) {
	e := t.ac.at(op)
	if e == nil || t.adoptionCount() != t.adoptions {
		return nil, false
	}
	if e.volatile() || !t.ac.useful() {
		// The lookup's keep counts what it finds against the entry.
		t.stats.CacheSkips++
		return nil, false
	}
	w, stamp, slot := e.word, e.stamp, e.slot(&t.geo)
	sc := t.scr
	n := int(w.Size())
	sc.blocks = grow(sc.blocks, n+16)
	words, buf := sc.blocks[:16:16], sc.blocks[16:16+n:16+n]
	var blk Block
	var ok bool
	var err error
	if slot.Node() == w.Addr().Node() {
		// readCached's case of the slot and the block on one node, written out (the common
		// cached Get: no call with its ten arguments): the hints, then one batch of the slot's
		// word and the block, in that order on that node, and readCached's checks.
		pf := t.pf
		if pf != nil {
			pf.Prefetch2(slot, 8, w.Addr(), n)
		}
		b := t.batch()
		b.Read(slot, words[:8])
		b.Read(w.Addr(), buf)
		if pf != nil {
			err = pf.DoHinted(ctx, b)
		} else {
			err = t.m.Do(ctx, b)
		}
		if err != nil {
			t.lost()
		} else if sw := Slot(binary.LittleEndian.Uint64(words)); sw.Committed() && blockKey(sw) == w {
			if decodeBlockInto(w.Addr(), buf, &blk) != nil {
				t.stats.BadBlocks++
			} else {
				ok = blk.Stamp == stamp && bytes.Equal(blk.Key, op.key)
			}
		}
	} else {
		if t.pf != nil {
			t.pf.Prefetch2(slot, 8, w.Addr(), n)
		}
		ok, err = t.readCached(ctx, op.key, w, slot, stamp, words, buf, t.pf != nil, &blk)
	}
	if err != nil || !ok {
		// The block is forgotten, the miss counted (the lookup's keep then counts nothing).
		e.word = 0
		e.count(+1)
		t.ac.observe(true)
		t.stats.CacheStale++
		return nil, false
	}
	e.count(-1)
	t.ac.observe(false)
	t.stats.CacheHits++
	if op.dst == nil {
		return bytes.Clone(blk.Value), true
	}
	return append(op.dst, blk.Value...), true
}

// readCached reads the block of slot word w (a blockKey) through an address-cache entry of
// stamp for key, kept for the slot at slot: in one batch, the slot's word into words[:8], then,
// when the slot and the block are on different memory nodes, the block's valid word into
// words[8:16], then the block into buf (its size). It accepts the block (ok, the block decoded
// into *blk) if the slot still held w (committed), the valid word (if read) was clear, and the
// block validates and holds key and stamp. hinted tells that the block's lines were hinted (Prefetch) already. A failed read
// is its error (the scratch is dropped).
//
// Why such a value was key's committed value at the read's linearization point. On one node
// the batch's reads run in order, so the block is read after the slot showed w: the block w
// named then was committed then; a block is reused only after it was replaced, and a reused
// block is written whole, in ascending order (a farmem write lands in address order, as a
// block read reads), with another stamp (one chance in 2^32 of the same), so a block read that
// validates with the entry's stamp read that block, unchanged since (a read that met the
// reuse's writes fails the checksum or shows the new stamp): it was committed when the slot was
// read. On two nodes nothing orders the slot's read before the block's, and the block could be
// read before its slot was read, replaced, and filled again with the same word; there the
// valid word, read first on the block's node, tells: every writer sets the valid word of the
// block it replaces before its CAS (Options.Invalidate), so a clear valid word read first means
// either that the cached block had not been replaced yet, and the block read after it (same
// node, in order) holds it (its checksum and stamp tell its bytes from a reuse begun since),
// or that a reuse had already written the stamp and valid word, which the block read then
// shows as another stamp; the valid word's read is then the linearization point. The valid
// word is outside the checksum: read within the block read, a reuse that wrote the first three
// words between the reader's second and third would pass the old block's checksum and stamp
// with the new block's clear valid word.
//
// The slot's word is read for what the block cannot tell: that the key's slot is still there.
// A slot on a memory node that lost its memory fails the read (farmem.ErrNodeLost, as the
// lookup would), and a slot that Purge emptied, or a split moved, no longer holds w; the valid
// word of a block whose slot was lost is never set.
func (t *Table) readCached(ctx context.Context, key []byte, w Slot, slot farmem.Addr, stamp uint32, words, buf []byte, hinted bool, blk *Block) (bool, error) {
	b := t.batch()
	b.Read(slot, words[:8])
	apart := slot.Node() != w.Addr().Node()
	if apart {
		b.Read(w.Addr().Add(ValidOffset), words[8:16])
	}
	b.Read(w.Addr(), buf)
	var err error
	if hinted {
		err = t.pf.DoHinted(ctx, b)
	} else {
		err = t.m.Do(ctx, b)
	}
	if err != nil {
		t.lost()
		return false, fmt.Errorf("race: read cached block: %w", err)
	}
	le := binary.LittleEndian
	if sw := Slot(le.Uint64(words)); !sw.Committed() || blockKey(sw) != w || apart && le.Uint64(words[8:]) != 0 {
		return false, nil
	}
	if err := decodeBlockInto(w.Addr(), buf, blk); err != nil {
		t.stats.BadBlocks++
		return false, nil
	}
	if blk.Stamp != stamp || !bytes.Equal(blk.Key, key) {
		return false, nil
	}
	return true, nil
}

// changeCached is the first look of an Update or Delete of a key whose address-cache entry e
// the handle took (addrCache.take), when the entry's slot and block are on one memory node: in
// one batch, nb's block writes (if nb is not nil), then the slot's word, then the head of the
// block e names (headLen), in that order on that node. It sets *v to the view of that one slot
// and reports a hit if the slot still held e's word, committed and not frozen, and the head holds op's key
// with e's stamp; the caller then commits through it as through findOne's answer, one round
// trip sooner, with the block's valid word still clear (Install sets it in the CAS's batch).
// Otherwise (hit false, counted in ChangeStale; nb written all the same) the caller looks the
// key up as usual. A failed batch is its error, as locate's is.
//
// Why the head read tells what the lookup and findOne would: the operation is pinned before
// the batch, and the head is read after the slot on the slot's node, so the block the slot
// named when it was read cannot have been reused by the time its head is read (a block is
// reused only a grace period after the CAS that replaced it, and this pin holds that back),
// and a published block's head never changes. A word still in its slot, not frozen, names
// the key's one committed slot: a split freezes a slot before it moves it (the word read
// would carry the frozen bit), a Delete empties it, and a slot emptied and filled again holds
// another block, or the same block for another key, which the head's key tells apart. The
// lookup's check that the subtable owns the key serves the buckets it reads; the slot here
// is reached through a word that only the key's committed slot holds. Two nodes give no
// order between the two reads (the head could be read before the slot, of a block reused
// since), hence the one-node condition, checked by the caller.
func (t *Table) changeCached(ctx context.Context, op *opState, e *acEntry, nb *newBlock, v *view) (bool, error) {
	slot, w, word, head := t.cachedLook(e, len(op.key))
	sc := t.scr
	b := t.batch()
	if nb != nil {
		addBlockWrites(b, nb)
	}
	b.Read(slot, word)
	b.Read(w.Addr(), head)
	if err := t.doHinted(ctx, b); err != nil {
		t.lost()
		return false, fmt.Errorf("race: read cached slot %v: %w", slot, err)
	}
	sw := Slot(binary.LittleEndian.Uint64(word))
	if !sw.Committed() || sw.Frozen() || blockKey(sw) != w {
		t.stats.ChangeStale++
		return false, nil
	}
	info, ok, err := t.decodeHead(op, w, head)
	if err != nil || !ok || !info.isKey || info.stamp != e.stamp {
		t.stats.ChangeStale++
		return false, nil
	}
	op.learnt(w, info)
	t.stats.ChangeHits++
	// The view of the one slot, in the scratch's cv storage: every field set, as a view{}
	// literal would, without one copied out through the return.
	cv := &sc.cv
	cv.idx, cv.words = append(cv.idx[:0], uint64(e.idx)), append(cv.words[:0], sw)
	v.st, v.hdr, v.move, v.from, v.idx, v.words = e.st, 0, 0, 0, cv.idx, cv.words
	return true, nil
}

// cachedLook prepares the look through a cache entry that changeCached and updateStraight make:
// the entry's slot address and block word, the scratch buffers its slot word and the block's
// head (for a key of keyLen bytes) are read into, and the hints for both.
func (t *Table) cachedLook(e *acEntry, keyLen int) (slot farmem.Addr, w Slot, word, head []byte) {
	slot, w = e.slot(&t.geo), e.word
	n := headLen(w, keyLen)
	sc := t.scr
	sc.blocks = grow(sc.blocks, 8+n)
	word, head = sc.blocks[:8:8], sc.blocks[8:8+n:8+n]
	if t.pf != nil {
		t.pf.Prefetch2(slot, 8, w.Addr(), n)
	}
	return slot, w, word, head
}
