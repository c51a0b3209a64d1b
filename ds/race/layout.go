package race

import (
	"encoding/binary"
	"fmt"
	"time"

	"github.com/farmem/farmem/farmem"
)

// Unit is the granularity of far pointers packed into words and of KV block lengths: every
// block, subtable and directory the table allocates is Unit-aligned.
const Unit = 64

// Packed far pointers (46 bits): an 8-bit memory node id above a 38-bit offset in Units.
const (
	ptrUnitBits = 38
	ptrNodeBits = 8
	ptrBits     = ptrUnitBits + ptrNodeBits
	ptrMask     = 1<<ptrBits - 1
	// MaxPointerNode is the largest memory node id a packed pointer can name.
	MaxPointerNode = 1<<ptrNodeBits - 1
	// MaxPointerOffset is the largest offset (exclusive) a packed pointer can reach: 16 TiB.
	MaxPointerOffset = Unit << ptrUnitBits
)

// packAddr packs a Unit-aligned address on a memory node into 46 bits, or reports why it cannot.
func packAddr(a farmem.Addr) (uint64, error) {
	n, off := a.Node(), a.Offset()
	switch {
	case a == 0:
		return 0, fmt.Errorf("race: nil address: %w", ErrPointerRange)
	case n.IsCompute() || n > MaxPointerNode:
		return 0, fmt.Errorf("race: address %v: node id above %d: %w", a, MaxPointerNode, ErrPointerRange)
	case off%Unit != 0:
		return 0, fmt.Errorf("race: address %v not %d-byte aligned: %w", a, Unit, ErrPointerRange)
	case off >= MaxPointerOffset:
		return 0, fmt.Errorf("race: address %v: offset beyond %d TiB: %w", a, MaxPointerOffset>>40, ErrPointerRange)
	}
	return uint64(n)<<ptrUnitBits | off/Unit, nil
}

// unpackAddr is the inverse of packAddr (0 unpacks to nil).
func unpackAddr(p uint64) farmem.Addr {
	p &= ptrMask
	if p == 0 {
		return 0
	}
	return farmem.MakeAddr(farmem.NodeID(p>>ptrUnitBits), (p&(1<<ptrUnitBits-1))*Unit)
}

// Slot is a slot word of a bucket, 8 bytes, changed only by CAS (or MaskedCAS, by splits):
//
//	bits 63..56  fingerprint (the top FingerprintBits bits of the key's second hash)
//	bits 55..48  length of the KV block in Units (1..255); 0 in an empty slot
//	bit  47      frozen: a split owns the slot; writers wait, readers may still use it
//	bit  46      tentative: an insert not yet committed; readers ignore it
//	bits 45..0   the KV block's packed address (node id 8 bits, offset/64 38 bits)
//
// The word 0 is an empty slot; the frozen bit alone is an empty slot frozen by a split. A word
// of length 0 with nonzero address bits is a tombstone (MakeTombstone): a deleted key's slot
// under the delete lease, whose address bits hold the time (in 2^16 ns) from which an insert
// may reuse it. The frozen and tentative bits alone (length 0) are the unborn word of a split's
// new half (move.go): a slot not yet moved into it.
type Slot uint64

// Slot bits.
const (
	slotFPShift  = 56
	slotLenShift = 48
	// SlotFrozen is the frozen bit of a slot word.
	SlotFrozen Slot = 1 << 47
	// SlotTentative is the tentative bit of a slot word.
	SlotTentative Slot = 1 << 46
	// MaxBlockSize is the largest KV block a slot can describe (255 Units).
	MaxBlockSize = 255 * Unit
)

// MakeSlot packs a committed slot word for a KV block of size bytes at a.
func MakeSlot(fp uint8, size uint64, a farmem.Addr) (Slot, error) {
	if size == 0 || size > MaxBlockSize {
		return 0, fmt.Errorf("race: block of %d bytes: %w", size, ErrTooLarge)
	}
	p, err := packAddr(a)
	if err != nil {
		return 0, err
	}
	units := (size + Unit - 1) / Unit
	return Slot(uint64(fp)<<slotFPShift | units<<slotLenShift | p), nil
}

// Fingerprint returns the slot's fingerprint.
func (s Slot) Fingerprint() uint8 { return uint8(s >> slotFPShift) }

// Units returns the KV block's length in Units.
func (s Slot) Units() uint64 { return uint64(s>>slotLenShift) & 0xff }

// Size returns the KV block's length in bytes (a multiple of Unit).
func (s Slot) Size() uint64 { return s.Units() * Unit }

// Addr returns the KV block's address (nil for an empty slot).
func (s Slot) Addr() farmem.Addr { return unpackAddr(uint64(s)) }

// Frozen reports whether a split has frozen the slot.
func (s Slot) Frozen() bool { return s&SlotFrozen != 0 }

// Tentative reports whether the slot holds an insert not yet committed.
func (s Slot) Tentative() bool { return s&SlotTentative != 0 }

// Plain returns the word without its frozen bit: what the slot holds for readers.
func (s Slot) Plain() Slot { return s &^ SlotFrozen }

// Empty reports whether the slot holds no block (frozen or not): the word 0 or a tombstone.
func (s Slot) Empty() bool { return s.Units() == 0 }

// Tombstone reports whether the slot holds a delete's tombstone (frozen or not): no block, and
// the fabric time from which an Insert may reuse the slot (ReusableAt). The unborn word of a
// split's new half (length 0, frozen and tentative) is not one.
func (s Slot) Tombstone() bool { return s.Units() == 0 && s&^SlotFrozen != 0 && !s.Tentative() }

// ReusableAt returns a tombstone's reuse time (0 for other words).
func (s Slot) ReusableAt() farmem.Time {
	if !s.Tombstone() {
		return 0
	}
	return farmem.Time((uint64(s) & ptrMask) << lockUnitShift)
}

// MakeTombstone returns the tombstone a delete leaves in a slot when the table keeps a delete
// lease: no block, and the slot reusable by an Insert from reuseAt on (rounded up to 2^16 ns).
func MakeTombstone(reuseAt farmem.Time) Slot {
	u := (uint64(reuseAt) + 1<<lockUnitShift - 1) >> lockUnitShift
	return Slot(max(u&ptrMask, 1))
}

// Committed reports whether the slot holds a committed KV block (frozen or not): what Search sees.
func (s Slot) Committed() bool { return !s.Empty() && !s.Tentative() && s.Units() != 0 }

// String formats the slot for dumps.
func (s Slot) String() string {
	if s == unbornSlot {
		return "unborn"
	}
	if s.Tombstone() {
		return fmt.Sprintf("tombstone(until %d)", s.ReusableAt())
	}
	if s.Plain() == 0 {
		if s.Frozen() {
			return "empty(frozen)"
		}
		return "empty"
	}
	f := ""
	if s.Frozen() {
		f += ",frozen"
	}
	if s.Tentative() {
		f += ",tentative"
	}
	return fmt.Sprintf("{fp=%#02x len=%d at=%v%s}", s.Fingerprint(), s.Size(), s.Addr(), f)
}

// Root layout: the address Create returns. Constants are written once, before the root is
// published; the words from rootDirOff on are atomic.
const (
	rootMagicOff     = 0
	rootParamsOff    = 8
	rootGroupsOff    = 16 // Groups, and IndexReplicas from bit rootIndexReplicasShift
	rootSeedOff      = 24
	rootSumOff       = 32
	rootDirOff       = 40 // atomic: packed directory address | global depth << 56
	rootDirLockOff   = 48 // atomic: the directory lock (a lock word)
	rootSplitsOff    = 56 // atomic: splits completed (FAA)
	rootDoublingsOff = 64 // atomic: directory doublings (FAA)
	// RootSize is the size of the root block.
	RootSize = 128

	// Magic is the first word of a table root: the bytes "farmRACE" as a little-endian word.
	Magic uint64 = 0x454341526d726166
	// LayoutVersion is the newest layout version this package writes (Create's default;
	// version 3 with Params.WholeSplit). Version 2 added the stamp and
	// the valid word to KV blocks; version 3 changed only their checksum (to one built on
	// XXH3-64, about three times faster; see DecodeBlock's layout); version 4 splits subtables
	// region by region, recording the split in progress in each subtable's move word (see the
	// package doc's "Resizing"; its blocks are version 3's), so that older binaries, which
	// split whole and ignore the move word, refuse it. A version 2 or 3 table is read and
	// written as before, its blocks in their format (Root.Version says which) and its
	// subtables split whole, so binaries of those versions can share it; a version 1 table is
	// refused (ErrBadRoot), since its blocks cannot be read with this layout: recreate it.
	LayoutVersion = 4
	// wholeSplitVersion is the layout version of a table created with Params.WholeSplit.
	wholeSplitVersion = 3
	// oldestLayoutVersion is the oldest layout version this package reads.
	oldestLayoutVersion = 2
)

// Subtable layout. The header area is 5 Units: the header, lock and parent words, then one
// child word per depth; the slots follow, then the per-slot metadata.
const (
	stHeaderOff = 0  // atomic: depth << 56 | suffix
	stLockOff   = 8  // atomic: the split lock (a lock word)
	stParentOff = 16 // plain: packed parent address (0 for the initial subtables)
	stChildOff  = 32 // atomic, one per depth l: packed address of the half split off at depth l | done << 63
	stSlotsOff  = 5 * Unit
	// childDone marks a child word whose split has finished.
	childDone = 1 << 63
)

// childOff returns the offset of the child word for a split at depth l.
func childOff(l uint) uint64 { return stChildOff + 8*uint64(l) }

// depthShift places a depth in the top byte of directory entries, header words, child words and
// the root's directory word.
const depthShift = 56

// Depth limits. The directory suffix uses the low MaxDepthLimit bits of the first hash, whose
// high 32 bits choose a bucket.
const (
	// MaxDepthLimit is the largest global depth a table may be created with.
	MaxDepthLimit = 30
)

func headerWord(depth uint, suffix uint64) uint64 { return uint64(depth)<<depthShift | suffix }
func headerDepth(w uint64) uint                   { return uint(w >> depthShift) }
func headerSuffix(w uint64) uint64                { return w & (1<<depthShift - 1) }

// covers reports whether a subtable with header word w holds the keys whose first hash is h1.
func covers(w uint64, h1 uint64) bool {
	d := headerDepth(w)
	return d <= MaxDepthLimit && h1&(1<<d-1) == headerSuffix(w)
}

// entryWord builds a directory entry (and the root's directory word, and a child word with
// depth+1): a packed address and a depth.
func entryWord(packed uint64, depth uint) uint64 { return packed | uint64(depth)<<depthShift }
func entryDepth(w uint64) uint                   { return uint(w >> depthShift) }

// Lock words (the split lock of a subtable, the directory lock of the root): 0 is free;
// lockParent marks a subtable created by a split that is not finished (its parent's lock covers
// it); otherwise the owner's client id << 48 | the lease's deadline in units of 2^16 ns.
const (
	lockParent    = 1
	lockUnitShift = 16
	lockTimeMask  = 1<<48 - 1
)

func lockWord(owner farmem.ClientID, deadline farmem.Time) uint64 {
	u := (uint64(deadline) + 1<<lockUnitShift - 1) >> lockUnitShift
	return uint64(owner)<<48 | u&lockTimeMask
}

func lockOwner(w uint64) farmem.ClientID { return farmem.ClientID(w >> 48) }

func lockDeadline(w uint64) farmem.Time { return farmem.Time((w & lockTimeMask) << lockUnitShift) }

// lockExpired reports whether a lock word held by a client had expired at now, with skew.
func lockExpired(w uint64, now farmem.Time, skew time.Duration) bool {
	return w > lockParent && lockDeadline(w).Add(skew) < now
}

// geometry is the shape of every subtable of a table.
type geometry struct {
	groups   uint64 // bucket groups per subtable
	perB     uint64 // slots per bucket
	nslots   uint64 // slots per subtable: groups * 3 * perB
	metaSize uint64 // bytes of synchronizer metadata per slot
	metaOff  uint64 // offset of the metadata array in a subtable
	size     uint64 // bytes of a subtable (a multiple of Unit)
}

func newGeometry(groups, perB, metaSize uint64) geometry {
	g := geometry{groups: groups, perB: perB, nslots: groups * 3 * perB, metaSize: metaSize}
	g.metaOff = stSlotsOff + g.nslots*8
	g.metaOff = (g.metaOff + 15) &^ 15
	g.size = g.metaOff + g.nslots*metaSize
	g.size = (g.size + Unit - 1) &^ (Unit - 1)
	return g
}

// slotAddr returns the address of slot i of subtable st.
func (g *geometry) slotAddr(st farmem.Addr, i uint64) farmem.Addr { return st.Add(stSlotsOff + 8*i) }

// metaAddr returns the address of slot i's metadata entry (nil when the table keeps none).
func (g *geometry) metaAddr(st farmem.Addr, i uint64) farmem.Addr {
	if g.metaSize == 0 {
		return 0
	}
	return st.Add(g.metaOff + g.metaSize*i)
}

// Params are the layout of a table, fixed when it is created and recorded in its root.
type Params struct {
	// Groups is the number of bucket groups per subtable (default 64). A group is three buckets:
	// two main buckets around one overflow bucket they share.
	Groups int
	// SlotsPerBucket is the number of 8-byte slots per bucket (default 8: a 64-byte bucket).
	SlotsPerBucket int
	// InitialDepth is the global depth at creation: 2^InitialDepth subtables (default 0).
	InitialDepth int
	// MaxDepth bounds the global depth (default 20, at most MaxDepthLimit). A subtable at this
	// depth that fills up makes Insert fail with ErrFull.
	MaxDepth int
	// FingerprintBits is the width of fingerprints, 1..8 (default 8). Fewer bits mean more slots
	// whose KV block must be read to tell keys apart; tests use it to force collisions.
	FingerprintBits int
	// MetaSize is the bytes of synchronizer metadata kept per slot (a lock entry; 0, or a
	// multiple of 8 up to 64). A synchronizer asking for more cannot open the table.
	MetaSize int
	// Seed seeds the key hash.
	Seed uint64
	// Replicas is how many copies of every KV block are written (0 or 1: one; at most
	// MaxReplicas): at one offset of the allocator's symmetric area on the block's primary
	// memory node (chosen by the key's hash) and the next ones in id order, in the round trip
	// that writes the block, before any slot names it. Readers read the primary only (see the
	// package doc, "Replication"). With fewer memory nodes than Replicas, one copy per node.
	Replicas int
	// IndexReplicas, 3, 5 or 7 (0 or 1: not replicated), replicates the whole table on
	// IndexReplicas memory nodes, so that it survives any (IndexReplicas-1)/2 of them
	// crashed (IndexReplicaNodes: the allocator's metadata nodes if there are as many, else
	// the highest IndexReplicas memory nodes): every word and block of it, root, directory,
	// subtables and KV blocks, is a
	// replicated word of package farmem/replmem (see the package doc, "Replicated index").
	// It excludes Replicas.
	IndexReplicas int
	// WholeSplit makes Create write a table of layout version 3, whose subtables split whole
	// (one insert freezes, copies and releases every slot of a subtable: a growing table's
	// p999 insert is a split), which binaries older than version 4 can share. Without it a
	// table is of layout version 4 and splits its subtables region by region over many
	// inserts (see the package doc's "Resizing"); older binaries refuse it. DecodeRoot sets it
	// for tables of versions 2 and 3.
	WholeSplit bool
}

// MaxReplicas is the most copies of a KV block a table keeps.
const MaxReplicas = 8

func (p *Params) setDefaults() error {
	if p.Groups == 0 {
		p.Groups = 64
	}
	if p.SlotsPerBucket == 0 {
		p.SlotsPerBucket = 8
	}
	if p.MaxDepth == 0 {
		p.MaxDepth = 20
	}
	if p.FingerprintBits == 0 {
		p.FingerprintBits = 8
	}
	switch {
	case p.Groups < 1 || p.Groups > 1<<20:
		return fmt.Errorf("race: %d bucket groups (want 1..%d): %w", p.Groups, 1<<20, farmem.ErrInvalid)
	case p.SlotsPerBucket < 1 || p.SlotsPerBucket > 64:
		return fmt.Errorf("race: %d slots per bucket (want 1..64): %w", p.SlotsPerBucket, farmem.ErrInvalid)
	case p.MaxDepth < 1 || p.MaxDepth > MaxDepthLimit:
		return fmt.Errorf("race: max depth %d (want 1..%d): %w", p.MaxDepth, MaxDepthLimit, farmem.ErrInvalid)
	case p.InitialDepth < 0 || p.InitialDepth > p.MaxDepth || p.InitialDepth > 16:
		return fmt.Errorf("race: initial depth %d (want 0..min(16, MaxDepth)): %w", p.InitialDepth, farmem.ErrInvalid)
	case p.FingerprintBits < 1 || p.FingerprintBits > 8:
		return fmt.Errorf("race: %d fingerprint bits (want 1..8): %w", p.FingerprintBits, farmem.ErrInvalid)
	case p.Replicas < 0 || p.Replicas > MaxReplicas:
		return fmt.Errorf("race: %d replicas (want 0..%d): %w", p.Replicas, MaxReplicas, farmem.ErrInvalid)
	case p.IndexReplicas < 0 || p.IndexReplicas > 7 || p.IndexReplicas > 1 && p.IndexReplicas%2 == 0:
		return fmt.Errorf("race: %d index replicas (want 0, 1, 3, 5 or 7): %w", p.IndexReplicas, farmem.ErrInvalid)
	case p.IndexReplicas > 1 && p.Replicas > 1:
		return fmt.Errorf("race: a replicated index (%d) keeps its blocks on every replica; Replicas (%d) must be 0: %w", p.IndexReplicas, p.Replicas, farmem.ErrInvalid)
	case p.MetaSize < 0 || p.MetaSize > 64 || p.MetaSize%8 != 0:
		return fmt.Errorf("race: metadata of %d bytes per slot (want a multiple of 8 up to 64): %w", p.MetaSize, farmem.ErrInvalid)
	}
	return nil
}

// encodeRootConst encodes the constant part of a root (words 0..4).
func encodeRootConst(p Params) []byte {
	b := make([]byte, RootSize)
	binary.LittleEndian.PutUint64(b[rootMagicOff:], Magic)
	version := uint64(LayoutVersion)
	if p.WholeSplit {
		version = wholeSplitVersion
	}
	params := version | uint64(p.SlotsPerBucket)<<8 | uint64(p.FingerprintBits)<<16 |
		uint64(p.MetaSize)<<24 | uint64(p.MaxDepth)<<40 | uint64(p.InitialDepth)<<48 | uint64(p.Replicas)<<56
	binary.LittleEndian.PutUint64(b[rootParamsOff:], params)
	binary.LittleEndian.PutUint64(b[rootGroupsOff:], uint64(p.Groups)|uint64(p.IndexReplicas)<<rootIndexReplicasShift)
	binary.LittleEndian.PutUint64(b[rootSeedOff:], p.Seed)
	binary.LittleEndian.PutUint64(b[rootSumOff:], hash64(Magic, b[:rootSumOff]))
	return b
}

// Root is a decoded table root.
type Root struct {
	Params Params
	// Version is the table's layout version (2 to 4): the format of the KV blocks its clients
	// write (version 2's, or version 3's from 3 on), and how its subtables split (region by
	// region from 4 on).
	Version int
	// Dir is the current directory and GlobalDepth its depth (2^GlobalDepth entries).
	Dir         farmem.Addr
	GlobalDepth int
	// DirLock is the directory lock word.
	DirLock uint64
	// Splits and Doublings count completed subtable splits and directory doublings.
	Splits, Doublings uint64
}

// DecodeRoot decodes and validates the RootSize bytes of a table root. It never panics; bytes
// that are not a root this package wrote give an error wrapping ErrBadRoot.
func DecodeRoot(b []byte) (Root, error) {
	var r Root
	if len(b) < RootSize {
		return r, fmt.Errorf("race: root of %d bytes: %w", len(b), ErrBadRoot)
	}
	le := binary.LittleEndian
	if le.Uint64(b[rootMagicOff:]) != Magic {
		return r, fmt.Errorf("race: bad magic %#x: %w", le.Uint64(b[rootMagicOff:]), ErrBadRoot)
	}
	if le.Uint64(b[rootSumOff:]) != hash64(Magic, b[:rootSumOff]) {
		return r, fmt.Errorf("race: root checksum mismatch: %w", ErrBadRoot)
	}
	params := le.Uint64(b[rootParamsOff:])
	if v := params & 0xff; v < oldestLayoutVersion || v > LayoutVersion {
		if v == 1 {
			return r, fmt.Errorf("race: layout version 1 (KV blocks without a stamp and valid word, written before version 2): this package reads only versions %d to %d; recreate the table: %w", oldestLayoutVersion, LayoutVersion, ErrBadRoot)
		}
		return r, fmt.Errorf("race: layout version %d (want %d to %d): %w", v, oldestLayoutVersion, LayoutVersion, ErrBadRoot)
	}
	r.Version = int(params & 0xff)
	groups := le.Uint64(b[rootGroupsOff:])
	if params>>56 > MaxReplicas || groups&(1<<rootIndexReplicasShift-1) > 1<<20 || groups>>rootIndexReplicasShift > 7 {
		return r, fmt.Errorf("race: reserved bits set in root parameters: %w", ErrBadRoot)
	}
	r.Params = Params{
		Groups:          int(groups & (1<<rootIndexReplicasShift - 1)),
		IndexReplicas:   int(groups >> rootIndexReplicasShift),
		SlotsPerBucket:  int(params >> 8 & 0xff),
		FingerprintBits: int(params >> 16 & 0xff),
		MetaSize:        int(params >> 24 & 0xffff),
		MaxDepth:        int(params >> 40 & 0xff),
		InitialDepth:    int(params >> 48 & 0xff),
		Replicas:        int(params >> 56),
		Seed:            le.Uint64(b[rootSeedOff:]),
		WholeSplit:      r.Version < LayoutVersion,
	}
	p := r.Params
	if p.Groups == 0 || p.SlotsPerBucket == 0 || p.MaxDepth == 0 || p.FingerprintBits == 0 {
		return r, fmt.Errorf("race: zero parameter in root: %w", ErrBadRoot)
	}
	if err := p.setDefaults(); err != nil {
		return r, fmt.Errorf("race: root parameters: %v: %w", err, ErrBadRoot)
	}
	dw := le.Uint64(b[rootDirOff:])
	r.Dir, r.GlobalDepth = unpackAddr(dw), int(entryDepth(dw))
	if r.Dir == 0 || r.GlobalDepth > p.MaxDepth || dw&^(ptrMask|0xff<<depthShift) != 0 {
		return r, fmt.Errorf("race: bad directory word %#x: %w", dw, ErrBadRoot)
	}
	r.DirLock = le.Uint64(b[rootDirLockOff:])
	r.Splits = le.Uint64(b[rootSplitsOff:])
	r.Doublings = le.Uint64(b[rootDoublingsOff:])
	return r, nil
}
