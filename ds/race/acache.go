package race

import (
	"bytes"
	"context"
)

// MaxAddressCache is the largest Options.AddressCache: 2^24 entries, 256 MiB per handle.
const MaxAddressCache = 1 << 24

// acEntry is one entry of a handle's address cache (Options.AddressCache): the committed slot
// word a Search found for a key (a blockKey: the block's address and size; 0 for none), the
// block's stamp, and a tag of the key's hash that spares most reads of another key's block.
// 16 bytes.
type acEntry struct {
	word  Slot
	tag   uint32
	stamp uint32
}

// addrCache is a handle's address cache: sets of two entries (32 bytes, half a cache line)
// chosen by the key's second hash, allocated at the first entry it keeps (a handle that never
// searches pays nothing). Two ways rather than one keep the keys that share a set: with n keys
// and 2^16 entries, a direct-mapped cache misses about 1-(65536/n)(1-e^(-n/65536)) of a uniform
// workload's Gets for conflicts alone (7% at n = 10^4), two ways about 1% there.
type addrCache struct {
	entries []acEntry
	size    int // entries to allocate, a power of 2 of at least 2; 0: no cache
}

// acTag is op's key's tag in an entry: the high half of its first hash (sets are chosen by the
// second's).
func acTag(op *opState) uint32 { return uint32(op.k.h1 >> 32) }

// set returns op's key's set (two entries), nil if the cache holds nothing yet.
func (c *addrCache) set(op *opState) *[2]acEntry {
	if c.entries == nil {
		return nil
	}
	i := (op.k.h2 >> 32) & uint64(len(c.entries)/2-1)
	return (*[2]acEntry)(c.entries[2*i : 2*i+2])
}

// at returns op's key's entry, nil if the cache has none.
func (c *addrCache) at(op *opState) *acEntry {
	set := c.set(op)
	if set == nil {
		return nil
	}
	tag := acTag(op)
	for i := range set {
		if set[i].word != 0 && set[i].tag == tag {
			return &set[i]
		}
	}
	return nil
}

// keep records that the block of w (a blockKey) with stamp was op's key's committed value when
// it was read through its slot: in the key's entry if it has one, else in the set's first way,
// the entry there moving to the second (whose entry is dropped).
func (c *addrCache) keep(op *opState, w Slot, stamp uint32) {
	if c.size == 0 {
		return
	}
	if c.entries == nil {
		c.entries = make([]acEntry, c.size)
	}
	ne := acEntry{word: w, tag: acTag(op), stamp: stamp}
	if e := c.at(op); e != nil {
		*e = ne
		return
	}
	set := c.set(op)
	set[1], set[0] = set[0], ne
}

// drop forgets op's key's entry (a write of the key by this handle: its next Search reads
// the slot).
func (c *addrCache) drop(op *opState) {
	if e := c.at(op); e != nil {
		*e = acEntry{}
	}
}

// clear forgets every entry (a node adoption: blocks may be gone).
func (c *addrCache) clear() { clear(c.entries) }

// searchCached answers op's Search (op.dst set) from the address cache, reading the block its
// entry names alone: one round trip, no pin, no clock reading. ok is false, with nothing
// appended, when the cache has no entry for the key or the entry is stale (the entry is then
// dropped, and the caller reads the slot): the read failed, or the block fails validation,
// holds another key or another stamp (it was reused), or its valid word is set (a writer
// replaced or is replacing it). A value it returns was the key's committed value while its
// valid word was read: the block was committed when its entry was kept (read through its slot),
// every writer sets the valid word of the block it replaces before its CAS (Options.Invalidate,
// which Open requires of a handle with a cache, and which every client of the table must set),
// and a block is reused only after it was replaced, when it is rewritten whole with another
// stamp and its valid word clear (a reused block of the same key with the same stamp, one
// chance in 2^32 per reuse, is the one case this cannot tell). Reading without a pin, the read
// may meet a block being reused: its checksum then fails.
func (t *Table) searchCached(ctx context.Context, op *opState) ([]byte, bool) {
	e := t.ac.at(op)
	if e == nil || adoptionsOf(t.m) != t.adoptions {
		return nil, false
	}
	w, stamp := e.word, e.stamp
	if t.pf != nil {
		t.pf.Prefetch(w.Addr(), int(w.Size()))
	}
	blk, err := t.readOne(ctx, w)
	if err != nil || blk.Invalid || blk.Stamp != stamp || !bytes.Equal(blk.Key, op.key) {
		*e = acEntry{}
		t.stats.CacheStale++
		return nil, false
	}
	t.stats.CacheHits++
	if op.dst == nil {
		return bytes.Clone(blk.Value), true
	}
	return append(op.dst, blk.Value...), true
}
