package abd

import (
	"context"
	"encoding/binary"
	"fmt"

	"github.com/zeebo/xxh3"

	"github.com/farmem/farmem/alloc"
	"github.com/farmem/farmem/farmem"
)

// Object is a replicated (or not) register as a key-value store's value: the interface RAW,
// DM-ABD and SWARM's register share in the harness.
type Object interface {
	// Get returns the object's value (nil if never written).
	Get(ctx context.Context) ([]byte, error)
	// Update sets the object's value (at most the object's value size).
	Update(ctx context.Context, value []byte) error
	// Close releases the handle (no verb). Idempotent.
	Close() error
}

// Round trips of the common case (no contention, no failure).
const (
	RawGetRoundTrips    = 1
	RawUpdateRoundTrips = 1
	GetRoundTrips       = 2
	UpdateRoundTrips    = 2
)

// Errors.
var (
	// ErrBadParams: replicas or parameters out of range.
	ErrBadParams = fmt.Errorf("abd: bad parameters: %w", farmem.ErrInvalid)
	// ErrTooLarge: a value longer than the object's value size.
	ErrTooLarge = fmt.Errorf("abd: value too large: %w", farmem.ErrInvalid)
	// ErrNotWriter: the client's id has no writer lane.
	ErrNotWriter = fmt.Errorf("abd: client cannot write: %w", farmem.ErrInvalid)
	// ErrExhausted: the object's 32-bit timestamp is used up.
	ErrExhausted = fmt.Errorf("abd: timestamps exhausted: %w", farmem.ErrInvalid)
	// ErrClosed: the handle was closed.
	ErrClosed = fmt.Errorf("abd: handle closed: %w", farmem.ErrClosed)
)

// Params fix an object's layout. Zero fields take the defaults.
type Params struct {
	// ValueSize is the largest value in bytes (default 64).
	ValueSize int
	// Writers is the number of writer lanes of a DM-ABD object (default 16): the clients
	// whose rank, compute nodes interleaved, is below it may update (the first
	// Writers/ComputeNodes client slots of every compute node). RAW has no lanes.
	Writers int
	// Slots is the number of out-of-place records per writer lane, 2 to 4096 (default 8).
	Slots int
}

func (p Params) withDefaults() (Params, error) {
	if p.ValueSize == 0 {
		p.ValueSize = 64
	}
	if p.Writers == 0 {
		p.Writers = 16
	}
	if p.Slots == 0 {
		p.Slots = 8
	}
	if p.ValueSize < 0 || p.ValueSize > 1<<20 || p.Writers < 1 || p.Writers > 1<<16-1 || p.Slots < 2 || p.Slots > 4096 {
		return p, fmt.Errorf("%w: %+v", ErrBadParams, p)
	}
	return p, nil
}

// recSize is the bytes of one DM-ABD record: hash, identity, length, value, rounded to 8.
func (p Params) recSize() uint64 { return (24 + uint64(p.ValueSize) + 7) &^ 7 }

// Size returns the bytes a DM-ABD object with p takes on each replica (0 if p is out of range).
func Size(p Params) uint64 {
	p, err := p.withDefaults()
	if err != nil {
		return 0
	}
	return 64 + uint64(p.Writers)*uint64(p.Slots)*p.recSize()
}

// RawSize returns the bytes a RAW object with p takes (0 if p is out of range): the value,
// rounded up to 8 bytes.
func RawSize(p Params) uint64 {
	p, err := p.withDefaults()
	if err != nil {
		return 0
	}
	return max(8, (uint64(p.ValueSize)+7)&^7)
}

// Stamp is DM-ABD's max word: ts (32 bits) | writer (16: its lane plus one) | seq (16),
// ordered as a word; zero is the empty object.
type Stamp uint64

// MakeStamp returns the stamp (ts, writer, seq).
func MakeStamp(ts uint64, w farmem.ClientID, seq uint16) Stamp {
	return Stamp(ts<<32 | uint64(w)<<16 | uint64(seq))
}

// TS is the stamp's timestamp.
func (s Stamp) TS() uint64 { return uint64(s) >> 32 }

// Writer is the stamp's writer.
func (s Stamp) Writer() farmem.ClientID { return farmem.ClientID(uint64(s) >> 16 & 0xffff) }

// Seq is the writer's sequence number of the stamp's update.
func (s Stamp) Seq() uint16 { return uint16(s) }

// identity is what a record carries of its stamp: writer and seq.
func (s Stamp) identity() uint64 { return uint64(s) & 0xffffffff }

// seal fills rec (recSize bytes) with the record of identity id and value.
func seal(rec []byte, id uint64, value []byte) {
	binary.LittleEndian.PutUint64(rec[8:], id)
	binary.LittleEndian.PutUint64(rec[16:], uint64(len(value)))
	copy(rec[24:], value)
	clear(rec[24+len(value):])
	binary.LittleEndian.PutUint64(rec[0:], xxh3.Hash(rec[8:]))
}

// open returns the value of rec if it is a whole record of identity id.
func open(rec []byte, id uint64) ([]byte, bool) {
	if len(rec) < 24 || binary.LittleEndian.Uint64(rec[0:]) != xxh3.Hash(rec[8:]) ||
		binary.LittleEndian.Uint64(rec[8:]) != id {
		return nil, false
	}
	n := binary.LittleEndian.Uint64(rec[16:])
	if n > uint64(len(rec)-24) {
		return nil, false
	}
	return rec[24 : 24+n], true
}

// Raw is a RAW object: one block on one memory node, read and written whole, with no
// validation (see the package doc).
type Raw struct {
	m      farmem.Memory
	addr   farmem.Addr
	size   int
	closed bool
}

// CreateRaw allocates a RAW object with p on node with a and zeroes it.
func CreateRaw(ctx context.Context, m farmem.Memory, a *alloc.Allocator, node farmem.NodeID, p Params) (farmem.Addr, error) {
	size := RawSize(p)
	if size == 0 {
		return 0, fmt.Errorf("%w: %+v", ErrBadParams, p)
	}
	addr, err := a.AllocOn(ctx, node, size, 64)
	if err != nil {
		return 0, fmt.Errorf("abd: allocating %d bytes on %v: %w", size, node, err)
	}
	if err := m.Write(ctx, addr, make([]byte, size)); err != nil {
		return 0, fmt.Errorf("abd: format: %w", err)
	}
	return addr, nil
}

// OpenRaw returns m's handle on the RAW object with p at addr (no verb).
func OpenRaw(m farmem.Memory, addr farmem.Addr, p Params) (*Raw, error) {
	p, err := p.withDefaults()
	if err != nil {
		return nil, err
	}
	return &Raw{m: m, addr: addr, size: p.ValueSize}, nil
}

// Get reads the value: one READ (ValueSize bytes; an all-zero value reads as nil, the empty
// object). A read concurrent with an update of a value longer than 8 bytes may be torn.
func (r *Raw) Get(ctx context.Context) ([]byte, error) {
	if r.closed {
		return nil, ErrClosed
	}
	buf := make([]byte, r.size)
	if err := r.m.Read(ctx, r.addr, buf); err != nil {
		return nil, fmt.Errorf("abd: raw get: %w", err)
	}
	for _, c := range buf {
		if c != 0 {
			return buf, nil
		}
	}
	return nil, nil
}

// Update writes value, zero-padded to ValueSize: one WRITE.
func (r *Raw) Update(ctx context.Context, value []byte) error {
	if r.closed {
		return ErrClosed
	}
	if len(value) > r.size {
		return fmt.Errorf("%w: %d bytes, at most %d", ErrTooLarge, len(value), r.size)
	}
	buf := make([]byte, r.size)
	copy(buf, value)
	if err := r.m.Write(ctx, r.addr, buf); err != nil {
		return fmt.Errorf("abd: raw update: %w", err)
	}
	return nil
}

// Close releases the handle. Idempotent.
func (r *Raw) Close() error { r.closed = true; return nil }
