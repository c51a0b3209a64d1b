package far

import (
	"context"
	"encoding/binary"
	"fmt"

	"github.com/farmem/farmem/farmem"
)

// Uint64 is a far atomic word: an aligned 8-byte word in far memory that is written only with
// atomics, as the contract requires of any word atomics touch. Every operation is one verb and
// one round trip, and linearizable (the word never tears). The zero Uint64 is nil.
//
//	Load             1 Read (8 bytes)
//	Store, Swap      1 MaskedCAS (full masks: an unconditional swap)
//	CompareAndSwap   1 CAS
//	Add              1 FAA (wraps modulo 2^64)
//
// A Uint64 is a value (its address): store it, pass it, or rebuild it with Uint64At.
type Uint64 struct{ a farmem.Addr }

// NewUint64 allocates a word on node (0: the client allocator's placement) and sets it to v
// with a plain write, before any atomic touches it: one round trip (plus the allocator's chunk
// claim, amortised).
func NewUint64(ctx context.Context, c *Client, node farmem.NodeID, v uint64) (Uint64, error) {
	a, err := c.alloc(ctx, node, 8)
	if err != nil {
		return Uint64{}, err
	}
	buf := c.scratch(8)
	binary.LittleEndian.PutUint64(buf, v)
	if err := c.m.Write(ctx, a, buf); err != nil {
		_ = c.al.Free(a, 8)
		return Uint64{}, err
	}
	return Uint64{a}, nil
}

// Uint64At returns the word at a, which must be 8-aligned (ErrMisaligned otherwise). It does
// not touch far memory: use it for words placed by hand or addresses read from far memory.
func Uint64At(a farmem.Addr) (Uint64, error) {
	if a == 0 {
		return Uint64{}, ErrNil
	}
	if a.Offset()%8 != 0 {
		return Uint64{}, fmt.Errorf("far: word at %v: %w", a, farmem.ErrMisaligned)
	}
	return Uint64{a}, nil
}

// Addr returns the word's address.
func (u Uint64) Addr() farmem.Addr { return u.a }

// IsNil reports whether u is the zero Uint64.
func (u Uint64) IsNil() bool { return u.a == 0 }

// Load reads the word: one 8-byte Read, one round trip.
func (u Uint64) Load(ctx context.Context, c *Client) (uint64, error) {
	if u.a == 0 {
		return 0, ErrNil
	}
	buf := c.scratch(8)
	if err := c.m.Read(ctx, u.a, buf); err != nil {
		return 0, err
	}
	return binary.LittleEndian.Uint64(buf), nil
}

// Store sets the word to v: one MaskedCAS with empty compare mask and full swap mask (an
// unconditional atomic swap), one round trip.
func (u Uint64) Store(ctx context.Context, c *Client, v uint64) error {
	_, err := u.Swap(ctx, c, v)
	return err
}

// Swap sets the word to v and returns the word it replaced: one MaskedCAS, one round trip.
func (u Uint64) Swap(ctx context.Context, c *Client, v uint64) (uint64, error) {
	if u.a == 0 {
		return 0, ErrNil
	}
	return c.m.MaskedCAS(ctx, u.a, 0, 0, v, ^uint64(0))
}

// CompareAndSwap sets the word to new if it holds old, and reports whether it did: one CAS,
// one round trip.
func (u Uint64) CompareAndSwap(ctx context.Context, c *Client, old, new uint64) (bool, error) {
	if u.a == 0 {
		return false, ErrNil
	}
	prev, err := c.m.CAS(ctx, u.a, old, new)
	return err == nil && prev == old, err
}

// Add adds delta (modulo 2^64) and returns the new value: one FAA, one round trip.
func (u Uint64) Add(ctx context.Context, c *Client, delta uint64) (uint64, error) {
	if u.a == 0 {
		return 0, ErrNil
	}
	prev, err := c.m.FAA(ctx, u.a, delta)
	return prev + delta, err
}

// Free retires the word through the allocator's deferred free: it is reused once no client
// can still be reading it. The caller must make sure no client uses it afterwards.
func (u Uint64) Free(ctx context.Context, c *Client) error {
	if u.a == 0 {
		return ErrNil
	}
	return c.al.Retire(ctx, u.a, 8)
}

// Int64 is a far atomic signed word: Uint64 with two's-complement conversions, the same
// costs and guarantees (Add with a negative delta subtracts; it wraps modulo 2^64).
type Int64 struct{ u Uint64 }

// NewInt64 allocates a word on node (0: the allocator's placement) holding v; one round trip.
func NewInt64(ctx context.Context, c *Client, node farmem.NodeID, v int64) (Int64, error) {
	u, err := NewUint64(ctx, c, node, uint64(v))
	return Int64{u}, err
}

// Int64At returns the signed word at a (see Uint64At).
func Int64At(a farmem.Addr) (Int64, error) {
	u, err := Uint64At(a)
	return Int64{u}, err
}

// Addr returns the word's address.
func (i Int64) Addr() farmem.Addr { return i.u.a }

// IsNil reports whether i is the zero Int64.
func (i Int64) IsNil() bool { return i.u.IsNil() }

// Load reads the word; one round trip.
func (i Int64) Load(ctx context.Context, c *Client) (int64, error) {
	v, err := i.u.Load(ctx, c)
	return int64(v), err
}

// Store sets the word; one round trip.
func (i Int64) Store(ctx context.Context, c *Client, v int64) error {
	return i.u.Store(ctx, c, uint64(v))
}

// Swap sets the word and returns the word it replaced; one round trip.
func (i Int64) Swap(ctx context.Context, c *Client, v int64) (int64, error) {
	p, err := i.u.Swap(ctx, c, uint64(v))
	return int64(p), err
}

// CompareAndSwap sets the word to new if it holds old; one round trip.
func (i Int64) CompareAndSwap(ctx context.Context, c *Client, old, new int64) (bool, error) {
	return i.u.CompareAndSwap(ctx, c, uint64(old), uint64(new))
}

// Add adds delta and returns the new value; one round trip.
func (i Int64) Add(ctx context.Context, c *Client, delta int64) (int64, error) {
	v, err := i.u.Add(ctx, c, uint64(delta))
	return int64(v), err
}

// Free retires the word (see Uint64.Free).
func (i Int64) Free(ctx context.Context, c *Client) error { return i.u.Free(ctx, c) }
