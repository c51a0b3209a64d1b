package race

import (
	"context"
	"encoding/binary"
	"fmt"
	"sync"

	"github.com/farmem/farmem/farmem"
)

// splitMem is the memory of one split (runSplit) beside its batches' (splitBuf): the reads of
// the subtable and of its new half (header area, slot bytes, decoded words), what the split
// learnt of its keys' hashes, the frozen words, and the image of the new half. A split of the
// default geometry would otherwise allocate some 180 KiB of it (24 KiB per read of the
// subtable, three of them, and of the new half; its image, 37 KiB with kvstore's 16-byte lock
// entries; 24 KiB of hashes; the frozen words and their indices), and a split allocating it
// while the collector marks paid for it in GC assists as well as in zeroing: tens of
// microseconds of a split that is itself a load phase's tail. Like splitBuf it is kept in a
// small process-wide stack (splitMems), not per handle, and sized for the geometry of the
// table that takes it.
//
// A buffer that a failed Do or Write handed to the transport may still be written by it:
// the split then marks the splitMem lost and it is not kept.
type splitMem struct {
	hb     [2][]byte // header areas read: [0] the subtable, [1] its new half
	sb     [2][]byte // slot bytes read
	words  [2][]Slot // decoded slot words
	state  [2]subtableState
	hashes slotHashes
	frozen []Slot
	pos    []int
	img    []byte
	lost   bool
	// unlocked: a region split's step released its lock in its last batch (releaseRegion).
	unlocked bool
	// bs are a region split's batches (freeze, copies, release: CASes only, no buffers; and
	// the step's lock, or the begin's record of the child), kept here so that a step builds
	// them on kept ops and allocates none; at are the slots it copies.
	bs [4]farmem.Batch
	at []uint64
}

// maxSplitMems is how many splitMems the process keeps between splits.
const maxSplitMems = 4

var splitMems struct {
	mu   sync.Mutex
	free []*splitMem
}

// takeSplitMem takes a kept splitMem, or a new one, sized for geo, with nothing learnt.
func takeSplitMem(geo *geometry) *splitMem {
	splitMems.mu.Lock()
	var sm *splitMem
	if n := len(splitMems.free); n > 0 {
		sm = splitMems.free[n-1]
		splitMems.free = splitMems.free[:n-1]
	}
	splitMems.mu.Unlock()
	if sm == nil {
		sm = new(splitMem)
	}
	n := int(geo.nslots)
	for i := range sm.words {
		sm.hb[i] = grow(sm.hb[i], headerAreaLen)
		sm.sb[i] = grow(sm.sb[i], n*8)
		sm.words[i] = growSlots(sm.words[i], n)
	}
	sm.hashes.block = growSlots(sm.hashes.block, n)
	if cap(sm.hashes.h1) < n {
		sm.hashes.h1 = make([]uint64, n)
	}
	sm.hashes.h1 = sm.hashes.h1[:n]
	sm.hashes.forget()
	sm.frozen = growSlots(sm.frozen, n)
	sm.unlocked = false
	return sm
}

// giveSplitMem keeps sm for a later split unless the transport may still own its buffers.
func giveSplitMem(sm *splitMem) {
	if sm.lost {
		return
	}
	splitMems.mu.Lock()
	defer splitMems.mu.Unlock()
	if len(splitMems.free) < maxSplitMems {
		splitMems.free = append(splitMems.free, sm)
	}
}

// growSlots returns s resliced to n words, reallocated if its capacity is short.
func growSlots(s []Slot, n int) []Slot {
	if cap(s) < n {
		return make([]Slot, n)
	}
	return s[:n]
}

// readHeld renews st's split lock (*word, held) and reads st whole into sm's buffers of index
// 0 (readSplitSubtable), returning its state and depth: ErrCorrupt for a depth beyond
// MaxDepthLimit. It is how every pass of a split's holder over st begins: 1 round trip, 1 more
// when half the lease has run (renew).
func (t *Table) readHeld(ctx context.Context, st farmem.Addr, word *uint64, sm *splitMem) (*subtableState, uint, error) {
	if err := t.renew(ctx, st.Add(stLockOff), word); err != nil {
		return nil, 0, err
	}
	s, err := t.readSplitSubtable(ctx, st, sm, 0)
	if err != nil {
		return nil, 0, err
	}
	d := headerDepth(s.hdr)
	if d > MaxDepthLimit {
		return nil, 0, fmt.Errorf("race: subtable %v: header %#x: %w", st, s.hdr, ErrCorrupt)
	}
	return s, d, nil
}

// readSplitSubtable is readSubtable (with its slots) into sm's buffers of index which (0 for
// the subtable being split, 1 for its new half); the state returned lives in sm and is
// overwritten by the next read of the same index.
func (t *Table) readSplitSubtable(ctx context.Context, st farmem.Addr, sm *splitMem, which int) (*subtableState, error) {
	hb, sb := sm.hb[which], sm.sb[which]
	var b farmem.Batch
	b.Read(st, hb)
	b.Read(t.geo.slotAddr(st, 0), sb)
	if err := t.m.Do(ctx, &b); err != nil {
		sm.lost = true
		return nil, fmt.Errorf("race: read subtable %v: %w", st, err)
	}
	s := &sm.state[which]
	*s = subtableState{st: st}
	s.decodeHeader(hb)
	s.words = sm.words[which]
	for i := range s.words {
		s.words[i] = Slot(binary.LittleEndian.Uint64(sb[8*i:]))
	}
	return s, nil
}

// splitImage returns the bytes of the new half of a split, as subtableImage does (every slot
// and metadata byte zero), in sm's image buffer.
func splitImage(geo *geometry, sm *splitMem, header, lock, parent uint64) []byte {
	sm.img = grow(sm.img, int(geo.size))
	b := sm.img
	clear(b)
	le := binary.LittleEndian
	le.PutUint64(b[stHeaderOff:], header)
	le.PutUint64(b[stLockOff:], lock)
	le.PutUint64(b[stParentOff:], parent)
	return b
}

// splitSentinels makes sure that every bucket group's overflow bucket in slots (the slot words
// of a split's new half, little-endian, the moved ones frozen and the others 0) holds a frozen
// slot, freezing its first slot when none of the bucket's is.
//
// Every combined bucket is a main bucket and its group's overflow bucket, so every key's view
// of the new half then holds a frozen slot: until the split releases the half, an insert there
// waits for the split, as it would if every empty slot were frozen, and an update or delete
// meets its key's frozen copy. Only the frozen slots need a CAS to release (finishSplit CASes
// the frozen ones), the moved slots and at most one per group, instead of every slot of the
// half: with the default geometry some 600 CASes instead of 1,536.
func (g *geometry) splitSentinels(slots []byte) {
	le := binary.LittleEndian
	for grp := range g.groups {
		first := grp*3*g.perB + g.perB // the group's overflow bucket
		frozen := false
		for i := first; i < first+g.perB && !frozen; i++ {
			frozen = Slot(le.Uint64(slots[8*i:])).Frozen()
		}
		if !frozen {
			le.PutUint64(slots[8*first:], uint64(SlotFrozen))
		}
	}
}

// batch returns the region split's batch i emptied, its ops kept as they are (not cleared, as
// giveSplitBuf explains for a split's buffers: a batch built on them overwrites every op it
// uses whole).
func (sm *splitMem) batch(i int) *farmem.Batch {
	b := &sm.bs[i]
	b.Ops = b.Ops[:0]
	return b
}
