package hybrid

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/farmem/farmem/farmem"
)

// Sentinel errors. Every error the package returns for one of these conditions wraps it.
var (
	// ErrKey: a key that is not exactly KeyLen bytes, is zero, or has its top bit set.
	ErrKey = errors.New("hybrid: invalid key")
	// ErrNotFound: Get, Update or Delete of an absent key.
	ErrNotFound = errors.New("hybrid: key not found")
	// ErrExists: Insert of a present key.
	ErrExists = errors.New("hybrid: key exists")
	// ErrCorrupt: far memory that does not decode as the tree's layout.
	ErrCorrupt = errors.New("hybrid: corrupt tree")
	// ErrPointerRange: an address the child-word packing cannot hold.
	ErrPointerRange = errors.New("hybrid: address out of the packable range")
	// ErrBusy: a structural change could not drain the leaf's in-flight writers within the lease.
	ErrBusy = errors.New("hybrid: leaf busy")
)

// KeyLen is the length of every key: 8 bytes, big-endian, so byte order is numeric order.
const KeyLen = 8

// MaxKey is the largest key (as a big-endian integer): the top bit is the tentative bit of the
// leaf's key words, so keys are 63-bit. The smallest key is 1 (0 marks an empty slot).
const MaxKey = 1<<63 - 1

// Key returns the 8-byte big-endian encoding of k.
func Key(k uint64) []byte { return binary.BigEndian.AppendUint64(nil, k) }

// decodeKey checks and decodes a key.
func decodeKey(key []byte) (uint64, error) {
	if len(key) != KeyLen {
		return 0, fmt.Errorf("%w: %d bytes, want exactly %d (padding would break byte order)", ErrKey, len(key), KeyLen)
	}
	k := binary.BigEndian.Uint64(key)
	if k == 0 || k > MaxKey {
		return 0, fmt.Errorf("%w: %#x is outside [1, 2^63)", ErrKey, k)
	}
	return k, nil
}

// Child words (8 bytes, CAS-only): partial byte, kind, node and offset.
const (
	entOffBits  = 45 // offset >> 3
	entNodeBits = 8
	entKindSh   = entOffBits + entNodeBits // 53
	entPartSh   = 56

	kindEmpty = 0
	kindLeaf  = 1
	kindNode  = 2 // kindNode + node type (0..3)
)

// Node types: the slot capacity of an ART node (its allocation always has room for 256).
var typeCap = [...]int{4, 16, 48, 256}

const numTypes = 4

func packEntry(partial byte, kind int, a farmem.Addr) (uint64, error) {
	off := a.Offset()
	if a.Node() >= 1<<entNodeBits || off&7 != 0 || off>>3 >= 1<<entOffBits {
		return 0, fmt.Errorf("%w: %v", ErrPointerRange, a)
	}
	return uint64(partial)<<entPartSh | uint64(kind)<<entKindSh | uint64(a.Node())<<entOffBits | off>>3, nil
}

func entPartial(w uint64) byte { return byte(w >> entPartSh) }
func entKind(w uint64) int     { return int(w>>entKindSh) & 7 }
func entAddr(w uint64) farmem.Addr {
	return farmem.MakeAddr(farmem.NodeID(w>>entOffBits&(1<<entNodeBits-1)), (w&(1<<entOffBits-1))<<3)
}
func entIsLeaf(w uint64) bool { return entKind(w) == kindLeaf }
func entType(w uint64) int    { return entKind(w) - kindNode }

// withType returns child word w (of a node) naming node type t.
func withType(w uint64, t int) uint64 {
	return w&^(7<<entKindSh) | uint64(kindNode+t)<<entKindSh
}

// ART node layout (see the package doc).
const (
	nRevOff    = 0
	nMetaOff   = 8
	nPrefixOff = 16
	nSlotsOff  = 24
	nodeSize   = nSlotsOff + 8*256 // 2072: room for the largest type, so growth is in place

	metaTypeMask = 0xff
	metaSpecial  = 1 << 8
	metaDepthSh  = 16
)

func nodeBytes(t int) int { return nSlotsOff + 8*typeCap[t] }

func metaWord(t, depth int, special bool) uint64 {
	w := uint64(t) | uint64(depth)<<metaDepthSh
	if special {
		w |= metaSpecial
	}
	return w
}

// prefixMask returns the mask of a key's first d bytes.
func prefixMask(d int) uint64 {
	if d == 0 {
		return 0
	}
	return ^uint64(0) << (64 - 8*d)
}

// keyByte returns byte i (0 = most significant) of k.
func keyByte(k uint64, i int) byte { return byte(k >> (56 - 8*i)) }

// Leaf layout (see the package doc); S is Params.LeafSlots.
const (
	lRevOff   = 0
	lSpearOff = 8
	lSMOOff   = 16 // SMO holder and lease
	lPlanOff  = 24 // the SMO's plan: what it publishes (see planWord)
	lResOff   = 32 // reserved, zero (16 bytes)
	lFrontOff = 48
	lMinOff   = 56
	lMaxOff   = 64
	lKeysOff  = 72
)

func leafSize(s int) int                           { return lKeysOff + 16*s + 8 }
func leafValsOff(s int) int                        { return lKeysOff + 8*s }
func leafRearOff(s int) int                        { return lKeysOff + 16*s }
func leafKeyAddr(l farmem.Addr, i int) farmem.Addr { return l.Add(uint64(lKeysOff + 8*i)) }
func leafValAddr(l farmem.Addr, s, i int) farmem.Addr {
	return l.Add(uint64(leafValsOff(s) + 8*i))
}

// Key words of a leaf slot.
const (
	tentativeBit = 1 << 63
	tombstone    = 1 << 63 // the tentative bit over key 0, which no key is
)

// Spear: one FAA-only word per leaf. Low 32 bits count in-flight IDUs; the exclusive field
// (bits 40..47) is nonzero while an SMO holds the leaf; the dead field (bits 48..55) is
// nonzero once the leaf has been replaced.
const (
	spearOne   = 1
	spearExcl  = 1 << 40
	spearDead  = 1 << 48
	spearCount = 1<<32 - 1
)

func spearExclusive(w uint64) bool { return w>>40&0xff != 0 }
func spearIsDead(w uint64) bool    { return w>>48&0xff != 0 }
func spearHolders(w uint64) uint64 { return w & spearCount }

// SMO word: 0 free; smoDone once the SMO published; else holder client id (16 bits, +1) and
// lease deadline in microseconds of fabric time, modulo 2^48 (compared as a signed
// difference, so it holds for leases under 4 years whatever the clock's epoch).
const smoDone = ^uint64(0)

const smoTimeMask = 1<<48 - 1

func smoWord(id farmem.ClientID, deadline farmem.Time) uint64 {
	return (uint64(id)+1)<<48 | uint64(deadline/1000)&smoTimeMask
}

// smoExpired reports whether SMO word w's lease has expired at now.
func smoExpired(w uint64, now farmem.Time) bool {
	d := (uint64(now/1000) - w) & smoTimeMask
	return d != 0 && d < 1<<47
}

// Plan words: a child word naming the block that holds the SMO's new leaves (and new special
// node), its kind saying which SMO it is and its partial the second leaf's partial byte.
const (
	planCompact    = 1 // one new leaf replacing the old in its slot
	planSplit      = 2 // two new leaves in the special parent: the first in the old slot, the second in an empty one
	planNewSpecial = 3 // two new leaves under a new special node, replacing the old leaf in its ordinary parent
)

// Root block.
const (
	rootMagic     = 0x3142_4449_5248_4c44 // "DLHRIDB1"
	rootMagicOff  = 0
	rootSlotsOff  = 8
	rootNodeOff   = 16 // the root node's address
	rootEntryOff  = 24 // child word naming the root node and its type (a hint)
	rootFlagsOff  = 32 // flagBlocks
	flagBlocks    = 1
	rootBlockSize = 64
)

var le = binary.LittleEndian

// leaf is a decoded leaf image.
type leaf struct {
	rev, spear, smo    uint64
	plan               uint64
	front, rear        uint64
	min, max           uint64
	keys, vals         []uint64
	haveVals, haveRear bool
}

func decodeLeafHead(b []byte, s int, l *leaf) {
	l.rev = le.Uint64(b[lRevOff:])
	l.spear = le.Uint64(b[lSpearOff:])
	l.smo = le.Uint64(b[lSMOOff:])
	l.plan = le.Uint64(b[lPlanOff:])
	l.front = le.Uint64(b[lFrontOff:])
	l.min = le.Uint64(b[lMinOff:])
	l.max = le.Uint64(b[lMaxOff:])
	if cap(l.keys) < s {
		l.keys = make([]uint64, s)
	}
	l.keys = l.keys[:s]
	for i := range s {
		l.keys[i] = le.Uint64(b[lKeysOff+8*i:])
	}
}

func decodeLeafTail(b []byte, s int, l *leaf) {
	if cap(l.vals) < s {
		l.vals = make([]uint64, s)
	}
	l.vals = l.vals[:s]
	for i := range s {
		l.vals[i] = le.Uint64(b[8*i:])
	}
	l.rear = le.Uint64(b[8*s:])
	l.haveVals, l.haveRear = true, true
}

// find returns the slot holding committed key k, or -1.
func (l *leaf) find(k uint64) int {
	for i, w := range l.keys { // every slot: holes (empty, tentative, tombstones) do not end it
		if w == k {
			return i
		}
	}
	return -1
}

// encodeLeaf returns the image of a fresh leaf holding pairs (sorted), with generation gen.
func encodeLeaf(s int, rev, min, max, gen uint64, keys, vals []uint64) []byte {
	b := make([]byte, leafSize(s))
	le.PutUint64(b[lRevOff:], rev)
	le.PutUint64(b[lFrontOff:], gen)
	le.PutUint64(b[lMinOff:], min)
	le.PutUint64(b[lMaxOff:], max)
	for i := range keys {
		le.PutUint64(b[lKeysOff+8*i:], keys[i])
		le.PutUint64(b[leafValsOff(s)+8*i:], vals[i])
	}
	le.PutUint64(b[leafRearOff(s):], gen)
	return b
}

// node is a decoded ART node (remote or cached copy).
type node struct {
	addr    farmem.Addr
	rev     uint64
	typ     int
	special bool
	depth   int
	prefix  uint64
	slots   []uint64
}

func decodeNode(a farmem.Addr, b []byte) (*node, error) {
	if len(b) < nSlotsOff {
		return nil, fmt.Errorf("%w: node %v: %d bytes", ErrCorrupt, a, len(b))
	}
	n := &node{addr: a, rev: le.Uint64(b[nRevOff:]), prefix: le.Uint64(b[nPrefixOff:])}
	meta := le.Uint64(b[nMetaOff:])
	n.typ = int(meta & metaTypeMask)
	n.special = meta&metaSpecial != 0
	n.depth = int(meta >> metaDepthSh & 0xff)
	if n.typ >= numTypes || n.depth > 7 || (n.special && n.depth != 7) || n.prefix&^prefixMask(n.depth) != 0 {
		return nil, fmt.Errorf("%w: node %v meta %#x prefix %#x", ErrCorrupt, a, meta, n.prefix)
	}
	cnt := min(typeCap[n.typ], (len(b)-nSlotsOff)/8)
	n.slots = make([]uint64, cnt)
	for i := range cnt {
		n.slots[i] = le.Uint64(b[nSlotsOff+8*i:])
	}
	return n, nil
}

func encodeNode(rev uint64, t, depth int, special bool, prefix uint64, slots []uint64) []byte {
	b := make([]byte, nodeSize)
	le.PutUint64(b[nRevOff:], rev)
	le.PutUint64(b[nMetaOff:], metaWord(t, depth, special))
	le.PutUint64(b[nPrefixOff:], prefix)
	for i, w := range slots {
		le.PutUint64(b[nSlotsOff+8*i:], w)
	}
	return b
}

func (n *node) slotAddr(i int) farmem.Addr { return n.addr.Add(uint64(nSlotsOff + 8*i)) }

// route returns the index of the child for k, or -1: an exact match of byte depth in an
// ordinary node, the entry with the largest partial at most k's last byte in a special one.
func (n *node) route(k uint64) int {
	b := keyByte(k, n.depth)
	best, bestP := -1, -1
	for i, w := range n.slots {
		if entKind(w) == kindEmpty {
			continue
		}
		p := int(entPartial(w))
		if !n.special {
			if byte(p) == b {
				return i
			}
			continue
		}
		if p <= int(b) && p > bestP {
			best, bestP = i, p
		}
	}
	return best
}

// firstEmpty returns the first empty slot at or after from, or len(slots).
func (n *node) firstEmpty(from int) int {
	for i := from; i < len(n.slots); i++ {
		if n.slots[i] == 0 {
			return i
		}
	}
	return len(n.slots)
}
