package far

import (
	"encoding/binary"
	"fmt"
	"math"
	"reflect"
	"sync"
	"unsafe"
)

// Codec encodes values of T in exactly Size bytes of far memory. Encode writes v into
// dst[:Size()]; Decode reads a value from src[:Size()] and never fails: every bit pattern of
// Size bytes decodes to some T (a codec for a type with invalid patterns maps them to a valid
// value, as Binary maps any nonzero byte to true). Both take and return values, not pointers,
// so that calling them through the interface moves nothing to the heap. A Codec is safe for
// concurrent use.
//
// Binary returns the codec every constructor uses by default. A program with a hot type can
// write its own (a few binary.LittleEndian calls) and pass it in the options: a typed load
// then costs the verb and exactly that decode.
type Codec[T any] interface {
	Size() int
	Encode(dst []byte, v T)
	Decode(src []byte) T
}

// DecoderInto is an optional method of a Codec: DecodeInto sets *dst from src[:Size()], as
// *dst = Decode(src) does, but writes the fields in place instead of returning the value
// through the stack, which for a value of a few words spares two copies per load (Go moves a
// large call result through a temporary, and an assignment copies it again). Ptr's loads use
// it when the codec has it, and every codec of Binary has it.
//
// DecodeInto must not keep dst, or anything derived from it, past its return, nor hand it to
// another goroutine: a typed load passes the caller's own variable, which may live on the
// caller's stack, without making the compiler move it to the heap (so that a load allocates
// nothing). It may read and write *dst freely during the call.
type DecoderInto[T any] interface {
	DecodeInto(src []byte, dst *T)
}

// Decoder decodes values of T in place with a Codec, for structures built on far that decode
// into their caller's variables (as far/farcoll's Array does): DecodeInto uses the codec's
// DecodeInto when it has one (DecoderInto) and assigns what Decode returns otherwise, and in
// either case the compiler does not move the caller's variable to the heap. The zero Decoder
// is not usable; a Decoder is a small value, safe for concurrent use as its codec is.
type Decoder[T any] struct{ c intoCodec[T] }

// NewDecoder returns the Decoder of codec (which must not be nil).
func NewDecoder[T any](codec Codec[T]) Decoder[T] { return Decoder[T]{withInto(codec)} }

// DecodeInto sets *dst from src[:Size()]. dst does not escape.
func (d Decoder[T]) DecodeInto(src []byte, dst *T) { d.c.DecodeInto(src, noescape(dst)) }

// intoCodec is a Codec with DecodeInto: what a Ptr holds. A codec without the method is
// wrapped in byValue.
type intoCodec[T any] interface {
	Codec[T]
	DecoderInto[T]
}

// byValue gives a Codec without DecodeInto the method, by assignment.
type byValue[T any] struct{ Codec[T] }

func (b byValue[T]) DecodeInto(src []byte, dst *T) { *dst = b.Decode(src) }

// withInto returns codec as an intoCodec (wrapping it if it has no DecodeInto).
func withInto[T any](codec Codec[T]) intoCodec[T] {
	if ic, ok := codec.(intoCodec[T]); ok {
		return ic
	}
	return byValue[T]{codec}
}

// unwrapInto returns the codec a program gave, from what withInto made of it.
func unwrapInto[T any](ic intoCodec[T]) Codec[T] {
	if b, ok := ic.(byValue[T]); ok {
		return b.Codec
	}
	return ic
}

// noescape returns p, hidden from the compiler's escape analysis, for a pointer handed to a
// DecoderInto through the interface: the compiler cannot see the callee, so it would assume
// that the pointer is kept and move the caller's variable to the heap (an allocation per
// load). The contract of DecoderInto (dst is not kept past the call) is what makes this safe;
// the pointer travels as an integer only inside this function, with no call and so no stack
// move in between, and stays a real pointer in the caller and the callee.
func noescape[T any](p *T) *T {
	u := uintptr(unsafe.Pointer(p))
	return *(**T)(unsafe.Pointer(&u))
}

// CheckType reports whether T can live in far memory: a fixed-size type that holds no Go
// pointers. Allowed are bool, the sized integers (int8 … uint64), float32, float64, complex64,
// complex128, and arrays and structs of them. Refused, with an error wrapping ErrType and the
// path of the offending field: pointers, unsafe.Pointer, uintptr (it may hold one), slices,
// strings, maps, channels, functions and interfaces (they hold pointers), int and uint (their
// size depends on the platform), and types of size 0. It returns the encoded size (the sum of
// the fields' sizes: no padding, as encoding/binary lays data out). It uses reflect and is
// meant for construction time; every constructor of this package calls it.
func CheckType[T any]() (int, error) {
	t := reflect.TypeFor[T]()
	n, err := checkType(t, t.String())
	if err != nil {
		return 0, err
	}
	if n == 0 {
		return 0, fmt.Errorf("far: %v has size 0: %w", t, ErrType)
	}
	return n, nil
}

func checkType(t reflect.Type, path string) (int, error) {
	switch t.Kind() {
	case reflect.Bool, reflect.Int8, reflect.Uint8:
		return 1, nil
	case reflect.Int16, reflect.Uint16:
		return 2, nil
	case reflect.Int32, reflect.Uint32, reflect.Float32:
		return 4, nil
	case reflect.Int64, reflect.Uint64, reflect.Float64, reflect.Complex64:
		return 8, nil
	case reflect.Complex128:
		return 16, nil
	case reflect.Array:
		n, err := checkType(t.Elem(), path+"[]")
		if err != nil {
			return 0, err
		}
		return n * t.Len(), nil
	case reflect.Struct:
		sum := 0
		for i := range t.NumField() {
			f := t.Field(i)
			n, err := checkType(f.Type, path+"."+f.Name)
			if err != nil {
				return 0, err
			}
			sum += n
		}
		return sum, nil
	case reflect.Int, reflect.Uint:
		return 0, fmt.Errorf("far: %s is %v, whose size depends on the platform (use int64 or uint64): %w", path, t, ErrType)
	default:
		return 0, fmt.Errorf("far: %s is %v, which holds or may hold a Go pointer: %w", path, t, ErrType)
	}
}

// Binary returns the default codec of T, after CheckType: little-endian and packed, the layout
// encoding/binary gives T (fields in order, no padding; a bool is one byte, 1 for true, and
// decodes any nonzero byte as true). It uses no unsafe code: the sized integers, floats and
// bool are encoded directly, other types through reflect, decoding into a pooled scratch
// value so that nothing is allocated per call once warm. Struct fields must be exported
// (reflect cannot set the others); a blank field (_) is encoded as zeros and skipped on
// decode. Reflection costs a few nanoseconds per field: for a hot struct, a hand-written
// Codec is faster.
func Binary[T any]() (Codec[T], error) {
	size, err := CheckType[T]()
	if err != nil {
		return nil, err
	}
	var zero T
	switch any(zero).(type) {
	case uint64:
		return any(u64Codec{}).(Codec[T]), nil
	case int64:
		return any(i64Codec{}).(Codec[T]), nil
	case uint32:
		return any(u32Codec{}).(Codec[T]), nil
	case int32:
		return any(i32Codec{}).(Codec[T]), nil
	case float64:
		return any(f64Codec{}).(Codec[T]), nil
	case bool:
		return any(boolCodec{}).(Codec[T]), nil
	}
	t := reflect.TypeFor[T]()
	if err := checkSettable(t, t.String()); err != nil {
		return nil, err
	}
	return &reflectCodec[T]{size: size, plan: compile(t), pool: sync.Pool{New: func() any { return new(T) }}}, nil
}

// MustBinary is Binary for types known to be valid (package-level variables, examples): it
// panics if T is refused.
func MustBinary[T any]() Codec[T] {
	c, err := Binary[T]()
	if err != nil {
		panic(err)
	}
	return c
}

func checkSettable(t reflect.Type, path string) error {
	switch t.Kind() {
	case reflect.Array:
		return checkSettable(t.Elem(), path+"[]")
	case reflect.Struct:
		for i := range t.NumField() {
			f := t.Field(i)
			if !f.IsExported() && f.Name != "_" {
				return fmt.Errorf("far: %s.%s is unexported, which the Binary codec cannot set (write a Codec): %w", path, f.Name, ErrType)
			}
			if err := checkSettable(f.Type, path+"."+f.Name); err != nil {
				return err
			}
		}
	}
	return nil
}

type u64Codec struct{}

func (u64Codec) Size() int                          { return 8 }
func (u64Codec) Encode(dst []byte, v uint64)        { binary.LittleEndian.PutUint64(dst, v) }
func (u64Codec) Decode(src []byte) uint64           { return binary.LittleEndian.Uint64(src) }
func (u64Codec) DecodeInto(src []byte, dst *uint64) { *dst = binary.LittleEndian.Uint64(src) }

type i64Codec struct{}

func (i64Codec) Size() int                         { return 8 }
func (i64Codec) Encode(dst []byte, v int64)        { binary.LittleEndian.PutUint64(dst, uint64(v)) }
func (i64Codec) Decode(src []byte) int64           { return int64(binary.LittleEndian.Uint64(src)) }
func (i64Codec) DecodeInto(src []byte, dst *int64) { *dst = int64(binary.LittleEndian.Uint64(src)) }

type u32Codec struct{}

func (u32Codec) Size() int                          { return 4 }
func (u32Codec) Encode(dst []byte, v uint32)        { binary.LittleEndian.PutUint32(dst, v) }
func (u32Codec) Decode(src []byte) uint32           { return binary.LittleEndian.Uint32(src) }
func (u32Codec) DecodeInto(src []byte, dst *uint32) { *dst = binary.LittleEndian.Uint32(src) }

type i32Codec struct{}

func (i32Codec) Size() int                         { return 4 }
func (i32Codec) Encode(dst []byte, v int32)        { binary.LittleEndian.PutUint32(dst, uint32(v)) }
func (i32Codec) Decode(src []byte) int32           { return int32(binary.LittleEndian.Uint32(src)) }
func (i32Codec) DecodeInto(src []byte, dst *int32) { *dst = int32(binary.LittleEndian.Uint32(src)) }

type f64Codec struct{}

func (f64Codec) Size() int { return 8 }
func (f64Codec) Encode(dst []byte, v float64) {
	binary.LittleEndian.PutUint64(dst, math.Float64bits(v))
}
func (f64Codec) Decode(src []byte) float64 {
	return math.Float64frombits(binary.LittleEndian.Uint64(src))
}
func (f64Codec) DecodeInto(src []byte, dst *float64) {
	*dst = math.Float64frombits(binary.LittleEndian.Uint64(src))
}

type boolCodec struct{}

func (boolCodec) Size() int { return 1 }
func (boolCodec) Encode(dst []byte, v bool) {
	dst[0] = 0
	if v {
		dst[0] = 1
	}
}
func (boolCodec) Decode(src []byte) bool           { return src[0] != 0 }
func (boolCodec) DecodeInto(src []byte, dst *bool) { *dst = src[0] != 0 }

// reflectCodec is Binary's codec for composite types: a plan compiled once from T's type, run
// over a pooled scratch value so that nothing is allocated per call.
type reflectCodec[T any] struct {
	size int
	plan *node
	pool sync.Pool // of *T, scratch for reflect
}

// node is one step of a compiled plan: a leaf of some kind, an array of elem, or a struct
// whose fields are the children (nil for a blank field, whose bytes are skipped).
type node struct {
	kind   reflect.Kind
	size   int
	len    int     // arrays
	elem   *node   // arrays
	fields []*node // structs; nil entries are blank fields of size skip[i]
	skip   []int
}

func compile(t reflect.Type) *node {
	n := &node{kind: t.Kind()}
	n.size, _ = checkType(t, "")
	switch t.Kind() {
	case reflect.Array:
		n.len, n.elem = t.Len(), compile(t.Elem())
	case reflect.Struct:
		for i := range t.NumField() {
			f := t.Field(i)
			if f.Name == "_" {
				n.fields = append(n.fields, nil)
				k, _ := checkType(f.Type, "")
				n.skip = append(n.skip, k)
				continue
			}
			n.fields = append(n.fields, compile(f.Type))
			n.skip = append(n.skip, 0)
		}
	}
	return n
}

func (c *reflectCodec[T]) Size() int { return c.size }

func (c *reflectCodec[T]) Encode(dst []byte, v T) {
	p := c.pool.Get().(*T)
	*p = v
	c.plan.encode(dst[:c.size], reflect.ValueOf(p).Elem())
	c.pool.Put(p)
}

func (c *reflectCodec[T]) Decode(src []byte) T {
	p := c.pool.Get().(*T)
	c.plan.decode(src[:c.size], reflect.ValueOf(p).Elem())
	v := *p
	c.pool.Put(p)
	return v
}

// DecodeInto decodes into *dst through reflect, with no scratch value and no copy. dst is not
// kept: reflect.ValueOf(dst) lives only for the call.
func (c *reflectCodec[T]) DecodeInto(src []byte, dst *T) {
	c.plan.decode(src[:c.size], reflect.ValueOf(dst).Elem())
}

// encode writes v at the start of b (n.size bytes).
func (n *node) encode(b []byte, v reflect.Value) {
	le := binary.LittleEndian
	switch n.kind {
	case reflect.Bool:
		b[0] = 0
		if v.Bool() {
			b[0] = 1
		}
	case reflect.Int8:
		b[0] = byte(v.Int())
	case reflect.Uint8:
		b[0] = byte(v.Uint())
	case reflect.Int16:
		le.PutUint16(b, uint16(v.Int()))
	case reflect.Uint16:
		le.PutUint16(b, uint16(v.Uint()))
	case reflect.Int32:
		le.PutUint32(b, uint32(v.Int()))
	case reflect.Uint32:
		le.PutUint32(b, uint32(v.Uint()))
	case reflect.Float32:
		le.PutUint32(b, math.Float32bits(float32(v.Float())))
	case reflect.Int64:
		le.PutUint64(b, uint64(v.Int()))
	case reflect.Uint64:
		le.PutUint64(b, v.Uint())
	case reflect.Float64:
		le.PutUint64(b, math.Float64bits(v.Float()))
	case reflect.Complex64:
		x := v.Complex()
		le.PutUint32(b, math.Float32bits(float32(real(x))))
		le.PutUint32(b[4:], math.Float32bits(float32(imag(x))))
	case reflect.Complex128:
		x := v.Complex()
		le.PutUint64(b, math.Float64bits(real(x)))
		le.PutUint64(b[8:], math.Float64bits(imag(x)))
	case reflect.Array:
		if n.elem.kind == reflect.Uint8 {
			reflect.Copy(reflect.ValueOf(b[:n.len]), v)
			return
		}
		for i := range n.len {
			n.elem.encode(b[i*n.elem.size:], v.Index(i))
		}
	case reflect.Struct:
		off := 0
		for i, f := range n.fields {
			if f == nil {
				clear(b[off : off+n.skip[i]])
				off += n.skip[i]
				continue
			}
			f.encode(b[off:], v.Field(i))
			off += f.size
		}
	}
}

// decode sets v from the start of b (n.size bytes).
func (n *node) decode(b []byte, v reflect.Value) {
	le := binary.LittleEndian
	switch n.kind {
	case reflect.Bool:
		v.SetBool(b[0] != 0)
	case reflect.Int8:
		v.SetInt(int64(int8(b[0])))
	case reflect.Uint8:
		v.SetUint(uint64(b[0]))
	case reflect.Int16:
		v.SetInt(int64(int16(le.Uint16(b))))
	case reflect.Uint16:
		v.SetUint(uint64(le.Uint16(b)))
	case reflect.Int32:
		v.SetInt(int64(int32(le.Uint32(b))))
	case reflect.Uint32:
		v.SetUint(uint64(le.Uint32(b)))
	case reflect.Float32:
		v.SetFloat(float64(math.Float32frombits(le.Uint32(b))))
	case reflect.Int64:
		v.SetInt(int64(le.Uint64(b)))
	case reflect.Uint64:
		v.SetUint(le.Uint64(b))
	case reflect.Float64:
		v.SetFloat(math.Float64frombits(le.Uint64(b)))
	case reflect.Complex64:
		v.SetComplex(complex(float64(math.Float32frombits(le.Uint32(b))), float64(math.Float32frombits(le.Uint32(b[4:])))))
	case reflect.Complex128:
		v.SetComplex(complex(math.Float64frombits(le.Uint64(b)), math.Float64frombits(le.Uint64(b[8:]))))
	case reflect.Array:
		if n.elem.kind == reflect.Uint8 {
			reflect.Copy(v, reflect.ValueOf(b[:n.len]))
			return
		}
		for i := range n.len {
			n.elem.decode(b[i*n.elem.size:], v.Index(i))
		}
	case reflect.Struct:
		off := 0
		for i, f := range n.fields {
			if f == nil {
				off += n.skip[i]
				continue
			}
			f.decode(b[off:], v.Field(i))
			off += f.size
		}
	}
}
