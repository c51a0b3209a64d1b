package race

import (
	"context"
	"encoding/binary"

	"github.com/farmem/farmem/alloc"
	"github.com/farmem/farmem/farmem"
	"github.com/farmem/farmem/farmem/farmemtest"
)

// Place returns where tab puts key: its two candidate main buckets (0..2*Groups-1, in hash
// order) and its fingerprint. Tests search for keys by it (the hash is deterministic).
func Place(tab *Table, key []byte) (b1, b2 uint64, fp uint8) {
	var op opState
	tab.initOp(&op, key)
	twoG := 2 * tab.geo.groups
	return reduce(uint32(op.k.h1>>32), twoG), reduce(uint32(op.k.h2), twoG), op.fp
}

// LookupHeaderLen is the bytes of a subtable's header area a lookup reads after its slots.
const LookupHeaderLen = lookupHeaderLen

// SplitSteps recognises, in the verbs one client issues (seen through a farmemtest.Interposer),
// the end of each step of its splits, from the layout alone: 1 the freeze, 2 the new half
// written, 3 the child word set, 4 the directory published (the directory lock released),
// 5 the header moved (the split counted), 6 the old half released, 7 the new half released.
type SplitSteps struct {
	root farmem.Addr
	half uint64 // packed address of the last new half this client wrote
}

// NewSplitSteps returns a recogniser for the table at root.
func NewSplitSteps(root farmem.Addr) *SplitSteps { return &SplitSteps{root: root} }

// Step returns the step that v, just completed without error, ends, or 0.
func (s *SplitSteps) Step(v farmemtest.Verb) int {
	ops, ok := doneOps(v)
	if !ok {
		return 0
	}
	all := func(f func(op farmem.Op) bool) bool { return allOps(ops, f) }
	if !v.Single {
		switch {
		case all(func(op farmem.Op) bool {
			return op.Kind == farmem.OpMaskedCAS && op.Swap == uint64(SlotFrozen) && op.SwapMask == uint64(SlotFrozen)
		}):
			return 1
		case !all(func(op farmem.Op) bool { return op.Kind != farmem.OpCAS || op.Cmp != lockParent || op.Swap != 0 }):
			return 7
		case all(func(op farmem.Op) bool { return op.Kind == farmem.OpCAS && Slot(op.Cmp).Frozen() }):
			return 6
		}
		return 0
	}
	op := ops[0]
	le := binary.LittleEndian
	switch {
	case op.Kind == farmem.OpWrite && len(op.Buf) >= stSlotsOff &&
		le.Uint64(op.Buf[stLockOff:]) == lockParent && le.Uint64(op.Buf[stParentOff:]) != 0:
		s.half, _ = packAddr(op.Addr)
		return 2
	case op.Kind == farmem.OpCAS && s.half != 0 && op.Swap == s.half:
		return 3
	case op.Kind == farmem.OpCAS && s.half != 0 && op.Addr == s.root.Add(rootDirLockOff) && op.Swap == 0:
		return 4
	case op.Kind == farmem.OpFAA && op.Addr == s.root.Add(rootSplitsOff):
		return 5
	}
	return 0
}

// RegionSteps recognises, in the verbs one client issues, the end of each step of its splits
// of a layout version 4 table (split region by region), from the layout alone: 1 the new
// half's image written, 2 the child word and move word set, 3 a region frozen, 4 its copies
// made, 5 its bit set, 6 it released, 7 the directory published (the directory lock
// released), 8 the header moved (the split counted), 9 the new half's parent lock cleared.
type RegionSteps struct {
	root farmem.Addr
	half uint64 // packed address of the last new half this client wrote
}

// NewRegionSteps returns a recogniser for the table at root.
func NewRegionSteps(root farmem.Addr) *RegionSteps { return &RegionSteps{root: root} }

// RegionStepCount is the number of steps RegionSteps tells apart.
const RegionStepCount = 9

// Step returns the step that v, just completed without error, ends, or 0.
func (s *RegionSteps) Step(v farmemtest.Verb) int {
	ops, ok := doneOps(v)
	if !ok {
		return 0
	}
	all := func(f func(op farmem.Op) bool) bool { return allOps(ops, f) }
	le := binary.LittleEndian
	op := ops[0]
	switch {
	case v.Single && op.Kind == farmem.OpWrite && len(op.Buf) >= stSlotsOff+8 &&
		le.Uint64(op.Buf[stLockOff:]) == lockParent && Slot(le.Uint64(op.Buf[stSlotsOff:])) == unbornSlot:
		s.half, _ = packAddr(op.Addr)
		return 1
	case s.half != 0 && len(ops) == 2 && op.Kind == farmem.OpCAS && op.Swap == s.half:
		return 2
	case !v.Single && all(func(op farmem.Op) bool {
		return op.Kind == farmem.OpMaskedCAS && op.Swap == uint64(SlotFrozen) && op.SwapMask == uint64(SlotFrozen)
	}):
		return 3
	case all(isCopy):
		return 4
	case isBit(ops[len(ops)-1]) && allOf(ops[:len(ops)-1], isCopy):
		return 5 // the bit alone, or riding the copies' batch (both halves on one node)
	case allOf(ops[:len(ops)-1], isRelease) && (isRelease(ops[len(ops)-1]) || len(ops) > 1 && isUnlock(ops[len(ops)-1])):
		return 6 // the releases, and the unlock riding them
	case v.Single && op.Kind == farmem.OpCAS && s.half != 0 && op.Addr == s.root.Add(rootDirLockOff) && op.Swap == 0:
		return 7
	case v.Single && op.Kind == farmem.OpFAA && op.Addr == s.root.Add(rootSplitsOff):
		return 8
	case v.Single && op.Kind == farmem.OpCAS && op.Cmp == lockParent && op.Swap == 0:
		return 9
	}
	return 0
}

// isCopy reports whether op is a region split's copy into a new half (from unborn).
func isCopy(op farmem.Op) bool {
	return op.Kind == farmem.OpCAS && Slot(op.Cmp) == unbornSlot && Slot(op.Swap).Frozen() && Slot(op.Swap).Committed()
}

// isBit reports whether op sets one region's bit in a move word.
func isBit(op farmem.Op) bool {
	x := op.Swap ^ op.Cmp
	return op.Kind == farmem.OpCAS && x != 0 && x&(x-1) == 0 && x&^moveBitsMask == 0 && op.Swap&x != 0
}

// isRelease reports whether op releases a frozen slot.
func isRelease(op farmem.Op) bool { return op.Kind == farmem.OpCAS && Slot(op.Cmp).Frozen() }

// isUnlock reports whether op may release a lock held by a client (CAS to 0 from a word that
// is no frozen slot).
func isUnlock(op farmem.Op) bool {
	return op.Kind == farmem.OpCAS && op.Swap == 0 && op.Cmp > lockParent && !Slot(op.Cmp).Frozen()
}

// allOf reports whether f holds for every op of ops.
func allOf(ops []farmem.Op, f func(farmem.Op) bool) bool {
	for _, op := range ops {
		if !f(op) {
			return false
		}
	}
	return true
}

// CreateVersion is Create for a table of layout version v (2 to LayoutVersion): version 4 is
// the default, version 3 Params.WholeSplit, and version 2's root is written again with 2,
// as an older binary would have written it. Tables of versions 2 and 3 split whole (the split
// the SplitSteps recogniser follows).
func CreateVersion(ctx context.Context, m farmem.Memory, a *alloc.Allocator, p Params, v int) (farmem.Addr, error) {
	p.WholeSplit = v < LayoutVersion
	root, err := Create(ctx, m, a, p)
	if err != nil || v >= wholeSplitVersion {
		return root, err
	}
	b := make([]byte, RootSize)
	if err := m.Read(ctx, root, b); err != nil {
		return 0, err
	}
	return root, m.Write(ctx, root, withVersion(b, v)[:rootDirOff])
}

// doneOps returns the ops of v if it is a batch that completed in the caller (not a post or a
// wait), with ok false otherwise.
func doneOps(v farmemtest.Verb) ([]farmem.Op, bool) {
	if v.Posted || v.Waited || len(v.Batch.Ops) == 0 {
		return nil, false
	}
	return v.Batch.Ops, true
}

// allOps reports whether f holds for every op of ops.
func allOps(ops []farmem.Op, f func(op farmem.Op) bool) bool {
	for _, op := range ops {
		if !f(op) {
			return false
		}
	}
	return true
}

// BlockImage returns the bytes of a block of the current layout at addr holding key and val
// with stamp, as a writer would write it there (tests replay such a write word by word).
func BlockImage(addr farmem.Addr, key, val []byte, stamp uint32) []byte {
	return encodeBlock(addr, key, val, 0, stamp)
}
