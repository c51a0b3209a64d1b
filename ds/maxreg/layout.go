package maxreg

import (
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"github.com/zeebo/xxh3"

	"github.com/farmem/farmem/farmem"
)

// Errors. Each wraps a farmem sentinel, so errors.Is works with either.
var (
	// ErrNotFormatted: the address holds no register (bad magic, layout version or
	// parameters).
	ErrNotFormatted = fmt.Errorf("maxreg: not a register: %w", farmem.ErrInvalid)
	// ErrBadParams: Params out of range.
	ErrBadParams = fmt.Errorf("maxreg: bad parameters: %w", farmem.ErrInvalid)
	// ErrValueSize: a value longer than the register's Params.ValueSize.
	ErrValueSize = fmt.Errorf("maxreg: value too long: %w", farmem.ErrInvalid)
	// ErrNotWriter: the client's id has no writer lane (ids 1..Params.Writers may write).
	ErrNotWriter = fmt.Errorf("maxreg: client has no writer lane: %w", farmem.ErrInvalid)
	// ErrExhausted: the client's next timestamp would not fit the 47-bit field (see Tag).
	ErrExhausted = fmt.Errorf("maxreg: timestamp space exhausted: %w", farmem.ErrNoSpace)
	// ErrReused: Verify of a tag whose out-of-place buffer the writer has reused since (or
	// never wrote).
	ErrReused = fmt.Errorf("maxreg: tag's buffer reused: %w", farmem.ErrInvalid)
	// ErrClosed: the handle was closed.
	ErrClosed = fmt.Errorf("maxreg: handle closed: %w", farmem.ErrClosed)
)

// Tag is a metadata word: what the register orders values by, compared as an unsigned
// 64-bit integer. Its layout, most significant bit first:
//
//	bits 63..17  timestamp (47 bits), in ticks of Params.Tick since the register's creation
//	bits 16..1   client id (16 bits) of the writer
//	bit  0       VERIFIED (1) or GUESSED (0)
//
// The out-of-place buffer is located by the tag alone, with no bits of its own: it is slot
// timestamp mod Params.Slots of the writer's lane (lane client id - 1), because each writer
// picks its timestamps so that consecutive writes rotate through its slots (see Register.Write).
// The zero Tag is the empty register (no client has id 0). The timestamp field holds 2^47
// ticks: 4.46 years at the default tick of 1µs, counted from the register's creation, not from
// any calendar epoch; a write that would need more fails with ErrExhausted and never wraps.
type Tag uint64

// Layout of a Tag.
const (
	// VerifiedBit is the VERIFIED flag, the least significant bit, so that (ts, client,
	// VERIFIED) orders above (ts, client, GUESSED).
	VerifiedBit Tag = 1
	clientShift     = 1
	tsShift         = 17
	// TSBits is the width of the timestamp field.
	TSBits = 47
	// MaxTS is the largest timestamp.
	MaxTS = 1<<TSBits - 1
)

// MakeTag returns the tag of (ts, client, verified). ts must be at most MaxTS.
func MakeTag(ts uint64, c farmem.ClientID, verified bool) Tag {
	t := Tag(ts&MaxTS)<<tsShift | Tag(c)<<clientShift
	if verified {
		t |= VerifiedBit
	}
	return t
}

// TS returns the tag's timestamp.
func (t Tag) TS() uint64 { return uint64(t) >> tsShift }

// Client returns the writer's client id.
func (t Tag) Client() farmem.ClientID { return farmem.ClientID(t >> clientShift) }

// Verified reports the VERIFIED bit.
func (t Tag) Verified() bool { return t&VerifiedBit != 0 }

// IsZero reports the empty register's tag.
func (t Tag) IsZero() bool { return t == 0 }

// identity is the tag without its VERIFIED bit: what names one write (one writer's timestamp)
// and its out-of-place buffer, and what a record's hash binds.
func (t Tag) identity() uint64 { return uint64(t &^ VerifiedBit) }

func (t Tag) String() string {
	if t == 0 {
		return "empty"
	}
	f := "guessed"
	if t.Verified() {
		f = "verified"
	}
	return fmt.Sprintf("ts=%d client=%d %s", t.TS(), t.Client(), f)
}

// Params fix a register's layout at creation. Zero fields take the defaults.
type Params struct {
	// Words is k, the number of 8-byte metadata words; the writer with client id c updates word
	// c mod k, and a reader takes the maximum of all k. Default DefaultWords.
	Words int
	// Slots is the number of out-of-place buffers per writer, at least 2, at most MaxSlots.
	// Default DefaultSlots.
	Slots int
	// ValueSize is the largest value in bytes, at most MaxValueSize. Default DefaultValueSize.
	ValueSize int
	// Writers is the number of writer lanes: clients with ids 1..Writers may write (any client
	// may read). Default DefaultWriters, which covers two compute nodes of the default 64
	// client slots.
	Writers int
	// Tick is the timestamp unit, at least 1ns. Default DefaultTick.
	Tick time.Duration
	// PerNode makes the writers compute nodes rather than clients (see "Per-node lanes" in the
	// package doc): a tag's 16-bit writer field holds the compute id of its writer's node,
	// Writers counts compute ids (those of 1..Writers write), and each lane is shared by the
	// clients of one node, who take turns with a latch word in their node's region around
	// every write and write-back (ReplicatedOptions.Lanes). Only a replicated register
	// (Replicated) takes it.
	PerNode bool
	// Lease and Skew are the synchrony assumption of a replicated register's buffer
	// recycling (see Replicated): a client posts no verb that depends on a tag later than
	// Lease after it began the read that returned the tag (else it reads again), and Skew
	// bounds how much two clients' clocks can disagree about an elapsed time plus how late a
	// memory node may apply a failed request beyond the down timeout (the rdma transport's
	// expiry skew). Defaults DefaultLease and DefaultSkew. The single-node Register ignores
	// both.
	Lease, Skew time.Duration
}

// Defaults and limits of Params.
const (
	// DefaultWords is k when Params.Words is 0: one word per writer for up to 64 writers (see
	// the package doc, "Choosing k", for the measurement behind it).
	DefaultWords     = 64
	DefaultSlots     = 4
	DefaultValueSize = 64
	DefaultWriters   = 128
	DefaultTick      = time.Microsecond
	DefaultLease     = time.Millisecond
	DefaultSkew      = time.Millisecond
	MaxWords         = 4096
	MaxSlots         = 256
	MaxValueSize     = 1 << 20
	MaxWriters       = 1<<16 - 1
)

func (p Params) withDefaults() (Params, error) {
	if p.Words == 0 {
		p.Words = DefaultWords
	}
	if p.Slots == 0 {
		p.Slots = DefaultSlots
	}
	if p.ValueSize == 0 {
		p.ValueSize = DefaultValueSize
	}
	if p.Writers == 0 {
		p.Writers = DefaultWriters
	}
	if p.Tick == 0 {
		p.Tick = DefaultTick
	}
	if p.Lease == 0 {
		p.Lease = DefaultLease
	}
	if p.Skew == 0 {
		p.Skew = DefaultSkew
	}
	switch {
	case p.Words < 1 || p.Words > MaxWords:
		return p, fmt.Errorf("%w: Words %d not in [1, %d]", ErrBadParams, p.Words, MaxWords)
	case p.Slots < 2 || p.Slots > MaxSlots:
		return p, fmt.Errorf("%w: Slots %d not in [2, %d]", ErrBadParams, p.Slots, MaxSlots)
	case p.ValueSize < 1 || p.ValueSize > MaxValueSize:
		return p, fmt.Errorf("%w: ValueSize %d not in [1, %d]", ErrBadParams, p.ValueSize, MaxValueSize)
	case p.Writers < 1 || p.Writers > MaxWriters:
		return p, fmt.Errorf("%w: Writers %d not in [1, %d]", ErrBadParams, p.Writers, MaxWriters)
	case p.Tick < 1:
		return p, fmt.Errorf("%w: Tick %v", ErrBadParams, p.Tick)
	case p.Lease < 0 || p.Skew < 0:
		return p, fmt.Errorf("%w: Lease %v, Skew %v", ErrBadParams, p.Lease, p.Skew)
	}
	return p, nil
}

// Size returns the bytes a register with p occupies (p's zero fields taken as defaults), or 0
// if p is out of range.
func Size(p Params) uint64 {
	p, err := p.withDefaults()
	if err != nil {
		return 0
	}
	return layoutOf(p).size
}

// Record layout, shared by the in-place copy and the out-of-place buffers:
//
//	[0, 16)   XXH3-128 of bytes [16, 32+len), seeded with the register's seed
//	[16, 24)  identity: the write's tag without its VERIFIED bit
//	[24, 32)  len: the value's length
//	[32, 32+len) the value
const (
	recHeader = 32
	hdrSize   = 128 // the header's room (see header for its words)
	hdrUsed   = 88
	metaOff   = hdrSize
	magic     = 0x31_6765_7278_616d // "maxreg1" little-endian
	version   = 2
	// versionPerNode is version's layout with Params.PerNode: the same bytes, its lanes
	// indexed by compute id.
	versionPerNode = 3
	// hashSeed is the constant every process seeds the records' hash with (xor the register's
	// nonce), so that a record written by one process validates in every other.
	hashSeed = 0x5ee0_d15c_a11a_b1e5
)

// layout is where everything of a register lies, relative to its address.
type layout struct {
	p       Params
	inOff   uint64 // the in-place record
	recSize uint64 // bytes of one record, 8-aligned
	laneOff uint64 // the first writer lane, 64-aligned
	size    uint64
}

func layoutOf(p Params) layout {
	l := layout{p: p}
	l.inOff = metaOff + 8*uint64(p.Words)
	l.recSize = (recHeader + uint64(p.ValueSize) + 7) &^ 7
	l.laneOff = (l.inOff + l.recSize + 63) &^ 63
	l.size = l.laneOff + uint64(p.Writers)*uint64(p.Slots)*l.recSize
	return l
}

// slotOff returns the offset of the out-of-place buffer of the write named by t.
func (l layout) slotOff(t Tag) uint64 {
	lane := uint64(t.Client()) - 1
	return l.laneOff + (lane*uint64(l.p.Slots)+t.TS()%uint64(l.p.Slots))*l.recSize
}

// header is the register's first hdrUsed bytes, written once at creation. Its words: magic,
// version (versionPerNode for Params.PerNode), Words, Slots, ValueSize, Writers, Tick, nonce, base, Lease, Skew.
type header struct {
	p     Params
	base  farmem.Time // fabric time of timestamp 0
	nonce uint64      // random, per register: part of the hash seed
}

func (h header) encode(b []byte, withMagic bool) {
	le := binary.LittleEndian
	if withMagic {
		le.PutUint64(b[0:], magic)
	} else {
		le.PutUint64(b[0:], 0)
	}
	if h.p.PerNode {
		le.PutUint64(b[8:], versionPerNode)
	} else {
		le.PutUint64(b[8:], version)
	}
	le.PutUint64(b[16:], uint64(h.p.Words))
	le.PutUint64(b[24:], uint64(h.p.Slots))
	le.PutUint64(b[32:], uint64(h.p.ValueSize))
	le.PutUint64(b[40:], uint64(h.p.Writers))
	le.PutUint64(b[48:], uint64(h.p.Tick))
	le.PutUint64(b[56:], h.nonce)
	le.PutUint64(b[64:], uint64(h.base))
	le.PutUint64(b[72:], uint64(h.p.Lease))
	le.PutUint64(b[80:], uint64(h.p.Skew))
}

// decodeHeader parses a register's header (hdrUsed bytes).
func decodeHeader(b []byte) (header, error) {
	le := binary.LittleEndian
	if len(b) < hdrUsed || le.Uint64(b[0:]) != magic || (le.Uint64(b[8:]) != version && le.Uint64(b[8:]) != versionPerNode) {
		return header{}, ErrNotFormatted
	}
	var h header
	h.p = Params{
		Words:     int(le.Uint64(b[16:])),
		Slots:     int(le.Uint64(b[24:])),
		ValueSize: int(le.Uint64(b[32:])),
		Writers:   int(le.Uint64(b[40:])),
		Tick:      time.Duration(le.Uint64(b[48:])),
		Lease:     time.Duration(le.Uint64(b[72:])),
		Skew:      time.Duration(le.Uint64(b[80:])),
		PerNode:   le.Uint64(b[8:]) == versionPerNode,
	}
	h.nonce = le.Uint64(b[56:])
	h.base = farmem.Time(le.Uint64(b[64:]))
	p, err := h.p.withDefaults()
	if err != nil || p != h.p {
		return header{}, fmt.Errorf("%w: parameters %+v", ErrNotFormatted, h.p)
	}
	return h, nil
}

var errRecord = errors.New("maxreg: record invalid")

// sealRecord fills rec (at least recHeader+len(value) bytes) with the record of the write
// named by t holding value, and returns the record's used prefix.
func sealRecord(rec []byte, seed uint64, t Tag, value []byte) []byte {
	le := binary.LittleEndian
	n := recHeader + len(value)
	rec = rec[:n]
	le.PutUint64(rec[16:], t.identity())
	le.PutUint64(rec[24:], uint64(len(value)))
	copy(rec[recHeader:], value)
	h := xxh3.Hash128Seed(rec[16:n], seed)
	le.PutUint64(rec[0:], h.Lo)
	le.PutUint64(rec[8:], h.Hi)
	return rec
}

// openRecord validates rec (a record read whole, recSize bytes, maybe torn) and returns the
// identity it names and its value (aliasing rec). maxLen bounds the length field.
func openRecord(rec []byte, seed uint64, maxLen int) (uint64, []byte, error) {
	le := binary.LittleEndian
	if len(rec) < recHeader {
		return 0, nil, errRecord
	}
	n := le.Uint64(rec[24:])
	if n > uint64(maxLen) || recHeader+n > uint64(len(rec)) {
		return 0, nil, errRecord
	}
	end := recHeader + int(n)
	h := xxh3.Hash128Seed(rec[16:end], seed)
	if h.Lo != le.Uint64(rec[0:]) || h.Hi != le.Uint64(rec[8:]) {
		return 0, nil, errRecord
	}
	return le.Uint64(rec[16:]), rec[recHeader:end], nil
}

// nextStamp returns a writer's next timestamp: the smallest ts >= max(last+1, now) with
// ts mod slots == (last+1) mod slots, so that each write takes the slot after the previous
// write's, and a slot is reused only by the slots-th write after the one that last used it.
// It is strictly greater than last whatever now is, so a clock that steps back never repeats
// or reorders a writer's timestamps (it only stops them from following the clock until the
// clock catches up).
func nextStamp(last, now, slots uint64) uint64 {
	ts := max(last+1, now)
	want := (last + 1) % slots
	return ts + (want+slots-ts%slots)%slots
}
