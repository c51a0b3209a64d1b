package farcoll

import (
	"context"
	"encoding"
	"fmt"

	"github.com/farmem/farmem/far"
	"github.com/farmem/farmem/farmem"
	"github.com/farmem/farmem/kvstore"
)

// Encoding turns values of T into bytes of any length and back, for Map's keys and values.
// Append appends v's encoding to dst; Parse decodes a whole encoding and reports malformed
// input as an error (it must not panic). An Encoding is safe for concurrent use.
type Encoding[T any] interface {
	Append(dst []byte, v T) ([]byte, error)
	Parse(b []byte) (T, error)
}

// Fixed is the Encoding of a fixed-size far.Codec: exactly Size bytes (Parse refuses any other
// length).
func Fixed[T any](c far.Codec[T]) Encoding[T] { return fixedEnc[T]{c} }

type fixedEnc[T any] struct{ c far.Codec[T] }

func (f fixedEnc[T]) Append(dst []byte, v T) ([]byte, error) {
	n := len(dst)
	dst = append(dst, make([]byte, f.c.Size())...)
	f.c.Encode(dst[n:], v)
	return dst, nil
}

func (f fixedEnc[T]) Parse(b []byte) (T, error) {
	if len(b) != f.c.Size() {
		var zero T
		return zero, fmt.Errorf("farcoll: %d bytes for a %d-byte value: %w", len(b), f.c.Size(), farmem.ErrInvalid)
	}
	return f.c.Decode(b), nil
}

// Marshaler is the Encoding of a type that implements encoding.BinaryMarshaler, and whose
// pointer implements encoding.BinaryUnmarshaler.
func Marshaler[T any, PT interface {
	*T
	encoding.BinaryUnmarshaler
}]() Encoding[T] {
	return marshalEnc[T, PT]{}
}

type marshalEnc[T any, PT interface {
	*T
	encoding.BinaryUnmarshaler
}] struct{}

func (marshalEnc[T, PT]) Append(dst []byte, v T) ([]byte, error) {
	m, ok := any(v).(encoding.BinaryMarshaler)
	if !ok {
		m, ok = any(&v).(encoding.BinaryMarshaler)
	}
	if !ok {
		return dst, fmt.Errorf("farcoll: %T is not an encoding.BinaryMarshaler: %w", v, far.ErrType)
	}
	b, err := m.MarshalBinary()
	return append(dst, b...), err
}

func (marshalEnc[T, PT]) Parse(b []byte) (T, error) {
	var v T
	err := PT(&v).UnmarshalBinary(b)
	return v, err
}

// String is the Encoding of strings: their bytes.
func String() Encoding[string] { return stringEnc{} }

type stringEnc struct{}

func (stringEnc) Append(dst []byte, v string) ([]byte, error) { return append(dst, v...), nil }
func (stringEnc) Parse(b []byte) (string, error)              { return string(b), nil }

// encodingOf returns enc, or by default String for strings, Marshaler for types implementing
// both binary interfaces, and Fixed(far.Binary) for fixed-size types.
func encodingOf[T any](enc Encoding[T]) (Encoding[T], error) {
	if enc != nil {
		return enc, nil
	}
	var zero T
	if _, ok := any(zero).(string); ok {
		return any(stringEnc{}).(Encoding[T]), nil
	}
	c, err := far.Binary[T]()
	if err != nil {
		return nil, fmt.Errorf("farcoll: no default encoding (pass one): %w", err)
	}
	return Fixed(c), nil
}

// Map is a typed map over a kvstore.Store: keys and values are encoded with their Encodings
// (Fixed, Marshaler, String, or the program's own), so Get(ctx, k) returns a V with no hand
// encoding. Each operation is the store's, with its semantics (linearizable) and costs
// (kvstore.GetRoundTrips, kvstore.InsertRoundTrips and the others); encoding adds no verb. A
// Map is safe for concurrent use, as the store is. Absent and present keys are reported with
// kvstore.ErrNotFound and kvstore.ErrExists (errors.Is). Encoded keys are 1 to the store's
// Limits().MaxKey bytes.
type Map[K, V any] struct {
	s  *kvstore.Store
	kc Encoding[K]
	vc Encoding[V]
}

// NewMap returns a map over s with the given encodings (nil: String for strings, else
// Fixed(far.Binary) for fixed-size types; a type implementing encoding.BinaryMarshaler needs
// Marshaler passed explicitly). Several maps may share a store only if their keys cannot
// collide (a prefix in the key encoding, say): the store has one key space.
func NewMap[K, V any](s *kvstore.Store, kc Encoding[K], vc Encoding[V]) (*Map[K, V], error) {
	kc, err := encodingOf(kc)
	if err != nil {
		return nil, err
	}
	vc, err = encodingOf(vc)
	if err != nil {
		return nil, err
	}
	return &Map[K, V]{s: s, kc: kc, vc: vc}, nil
}

// Store returns the underlying store.
func (m *Map[K, V]) Store() *kvstore.Store { return m.s }

func (m *Map[K, V]) key(k K) ([]byte, error) {
	b, err := m.kc.Append(nil, k)
	if err != nil {
		return nil, fmt.Errorf("farcoll: key: %w", err)
	}
	return b, nil
}

// Get returns k's value, or an error wrapping kvstore.ErrNotFound.
func (m *Map[K, V]) Get(ctx context.Context, k K) (V, error) {
	var zero V
	kb, err := m.key(k)
	if err != nil {
		return zero, err
	}
	vb, err := m.s.Get(ctx, kb)
	if err != nil {
		return zero, err
	}
	v, err := m.vc.Parse(vb)
	if err != nil {
		return zero, fmt.Errorf("farcoll: value of %x: %w", kb, err)
	}
	return v, nil
}

func (m *Map[K, V]) kv(k K, v V) ([]byte, []byte, error) {
	kb, err := m.key(k)
	if err != nil {
		return nil, nil, err
	}
	vb, err := m.vc.Append(nil, v)
	if err != nil {
		return nil, nil, fmt.Errorf("farcoll: value: %w", err)
	}
	return kb, vb, nil
}

// Put stores v at k, present or not.
func (m *Map[K, V]) Put(ctx context.Context, k K, v V) error {
	kb, vb, err := m.kv(k, v)
	if err != nil {
		return err
	}
	return m.s.Put(ctx, kb, vb)
}

// Insert stores v at k if k is absent, else fails with kvstore.ErrExists.
func (m *Map[K, V]) Insert(ctx context.Context, k K, v V) error {
	kb, vb, err := m.kv(k, v)
	if err != nil {
		return err
	}
	return m.s.Insert(ctx, kb, vb)
}

// Update stores v at k if k is present, else fails with kvstore.ErrNotFound.
func (m *Map[K, V]) Update(ctx context.Context, k K, v V) error {
	kb, vb, err := m.kv(k, v)
	if err != nil {
		return err
	}
	return m.s.Update(ctx, kb, vb)
}

// Delete removes k, or fails with kvstore.ErrNotFound.
func (m *Map[K, V]) Delete(ctx context.Context, k K) error {
	kb, err := m.key(k)
	if err != nil {
		return err
	}
	return m.s.Delete(ctx, kb)
}
