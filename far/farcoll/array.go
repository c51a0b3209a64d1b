package farcoll

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/farmem/farmem/far"
	"github.com/farmem/farmem/farmem"
)

// arrayMagic starts an array's descriptor ("farArr01", little-endian).
const arrayMagic uint64 = 0x3130727241726166

// maxSegments bounds the nodes an array spreads over (and what ArrayAt accepts).
const maxSegments = 1024

// arrayHead is the descriptor's fixed part: magic, length, stride, element size, elements per
// segment, segment count; the segments' addresses follow.
const arrayHead = 6 * 8

// ArrayOptions configure NewArray.
type ArrayOptions[T any] struct {
	// Nodes are the memory nodes the elements are spread over, in equal contiguous segments in
	// this order (default: the client allocator's preferred node only).
	Nodes []farmem.NodeID
	// Codec encodes T (default far.Binary[T]()).
	Codec far.Codec[T]
}

// Array is a fixed-length far array of T: contiguous segments of elements, one per node, each
// element in a slot of Stride bytes (8 for a T that encodes in at most 8 bytes, else its size
// rounded up to 8), found from a descriptor in far memory so that other processes open it by
// address (ArrayAt). An *Array is immutable once built and safe for concurrent use by many
// goroutines; each passes its own far.Client.
//
// Costs: Get and Set 1 round trip; ReadRange and WriteRange 1 round trip however many
// elements and nodes they touch (one Read or Write per segment, in one batch: nodes are
// reached in parallel), as long as they fit in farmem.MaxBatchOps ops of farmem.MaxOpBytes.
//
// Atomicity is per element, and only for elements of at most 8 bytes: their slot is one
// aligned word, which never tears, so each Get, Set and each element of a range is
// linearizable. A larger element can tear under a concurrent Set of the same element (the
// contract's words tear independently); guard such elements with the program's own
// synchronisation, or keep far.Ptr values instead. A range is not a snapshot: each element
// is read (or written) at its own instant.
type Array[T any] struct {
	desc   farmem.Addr
	n      int
	stride int
	size   int
	per    int
	segs   []farmem.Addr
	codec  far.Codec[T]
	dec    far.Decoder[T] // codec's, decoding in place
}

// NewArray allocates an array of n elements, each set to T's zero value: one round trip for
// the elements and descriptor (one Write per segment, in one batch), plus the allocator's
// chunk claims (arrays larger than half a chunk per node take runs of whole chunks).
func NewArray[T any](ctx context.Context, c *far.Client, n int, opts ArrayOptions[T]) (*Array[T], error) {
	codec, err := codecOf(opts.Codec)
	if err != nil {
		return nil, err
	}
	nodes := opts.Nodes
	if n <= 0 {
		return nil, fmt.Errorf("farcoll: array of %d elements: %w", n, farmem.ErrInvalid)
	}
	if len(nodes) > maxSegments {
		return nil, fmt.Errorf("farcoll: array over %d nodes (at most %d): %w", len(nodes), maxSegments, farmem.ErrInvalid)
	}
	a := &Array[T]{n: n, size: codec.Size(), codec: codec, dec: far.NewDecoder(codec)}
	a.stride = (a.size + 7) &^ 7
	if len(nodes) == 0 {
		nodes = []farmem.NodeID{0}
	}
	a.per = (n + len(nodes) - 1) / len(nodes)
	al := c.Allocator()
	free := func() {
		for i, s := range a.segs {
			_ = al.Free(s, uint64(a.segLen(i)*a.stride))
		}
		if a.desc != 0 {
			_ = al.Free(a.desc, uint64(arrayHead+8*len(a.segs)))
		}
	}
	for i, node := range nodes {
		if i*a.per >= n {
			break
		}
		size := uint64(min(a.per, n-i*a.per) * a.stride)
		var s farmem.Addr
		if node == 0 {
			s, err = al.Alloc(ctx, size, 8)
		} else {
			s, err = al.AllocOn(ctx, node, size, 8)
		}
		if err != nil {
			free()
			return nil, err
		}
		a.segs = append(a.segs, s)
	}
	dsize := uint64(arrayHead + 8*len(a.segs))
	if a.desc, err = al.AllocOn(ctx, a.segs[0].Node(), dsize, 8); err != nil {
		free()
		return nil, err
	}
	// The zero value, encoded once per slot.
	buf := c.Scratch(int(dsize) + a.per*a.stride)
	d, z := buf[:dsize], buf[dsize:]
	clear(z[:a.stride])
	var zero T
	codec.Encode(z[:a.size], zero)
	for i := 1; i < a.per; i++ {
		copy(z[i*a.stride:(i+1)*a.stride], z[:a.stride])
	}
	le := binary.LittleEndian
	for i, v := range []uint64{arrayMagic, uint64(n), uint64(a.stride), uint64(a.size), uint64(a.per), uint64(len(a.segs))} {
		le.PutUint64(d[8*i:], v)
	}
	for i, s := range a.segs {
		le.PutUint64(d[arrayHead+8*i:], uint64(s))
	}
	b := c.Batch()
	for i, s := range a.segs {
		addOps(b, farmem.OpWrite, s, z[:a.segLen(i)*a.stride])
	}
	b.Write(a.desc, d)
	if len(b.Ops) > farmem.MaxBatchOps {
		free()
		return nil, fmt.Errorf("farcoll: array of %d bytes per node needs more than one batch: %w", a.per*a.stride, farmem.ErrInvalid)
	}
	if err := c.Memory().Do(ctx, b); err != nil {
		free()
		return nil, err
	}
	return a, nil
}

// ArrayAt opens the array whose descriptor is at desc (Array.Addr of its creator): one round
// trip (the descriptor's Read; a second for arrays over more than 58 nodes, or a descriptor
// within 512 bytes of its node's end). codec nil means
// far.Binary[T](); its size must be the one the array was made with. A descriptor that fails
// validation is an error wrapping farmem.ErrInvalid.
func ArrayAt[T any](ctx context.Context, c *far.Client, desc farmem.Addr, codec far.Codec[T]) (*Array[T], error) {
	codec, err := codecOf(codec)
	if err != nil {
		return nil, err
	}
	buf := c.Scratch(512)
	err = c.Memory().Read(ctx, desc, buf)
	if errors.Is(err, farmem.ErrOutOfRange) {
		buf = buf[:arrayHead] // a descriptor near the end of its node
		err = c.Memory().Read(ctx, desc, buf)
	}
	if err != nil {
		return nil, err
	}
	le := binary.LittleEndian
	h := make([]uint64, 6)
	for i := range h {
		h[i] = le.Uint64(buf[8*i:])
	}
	head, err := decodeArrayHead(h, codec.Size())
	if err != nil {
		return nil, fmt.Errorf("farcoll: array at %v: %w", desc, err)
	}
	a := arrayFrom[T](head)
	nsegs := int(h[5])
	if need := arrayHead + 8*nsegs; need > len(buf) {
		buf = c.Scratch(need)
		if err := c.Memory().Read(ctx, desc, buf); err != nil {
			return nil, err
		}
	}
	a.desc, a.codec, a.dec = desc, codec, far.NewDecoder(codec)
	for i := range nsegs {
		s := farmem.Addr(le.Uint64(buf[arrayHead+8*i:]))
		if s == 0 || s.Offset()%8 != 0 {
			return nil, fmt.Errorf("farcoll: array at %v: segment %d at %v: %w", desc, i, s, farmem.ErrInvalid)
		}
		a.segs = append(a.segs, s)
	}
	return a, nil
}

// decodeArrayHead validates an array descriptor's fixed words for an element of size bytes.
func decodeArrayHead(h []uint64, size int) (*Array[struct{}], error) {
	bad := func(what string) error { return fmt.Errorf("bad descriptor (%s): %w", what, farmem.ErrInvalid) }
	switch {
	case h[0] != arrayMagic:
		return nil, bad("magic")
	case h[3] != uint64(size):
		return nil, bad(fmt.Sprintf("element size %d, codec's %d", h[3], size))
	case h[2] != uint64((size+7)&^7):
		return nil, bad("stride")
	case h[1] == 0 || h[1] > farmem.MaxOffset/h[2]:
		return nil, bad("length")
	case h[5] == 0 || h[5] > maxSegments:
		return nil, bad("segments")
	case h[4] == 0 || h[4] > h[1] || h[4]*h[5] < h[1] || h[4]*(h[5]-1) >= h[1]:
		return nil, bad("segment length")
	}
	return &Array[struct{}]{n: int(h[1]), stride: int(h[2]), size: size, per: int(h[4])}, nil
}

// arrayFrom converts a validated head to an Array of T.
func arrayFrom[T any](h *Array[struct{}]) *Array[T] {
	return &Array[T]{n: h.n, stride: h.stride, size: h.size, per: h.per}
}

// Addr returns the address of the array's descriptor, for ArrayAt.
func (a *Array[T]) Addr() farmem.Addr { return a.desc }

// Len returns the number of elements.
func (a *Array[T]) Len() int { return a.n }

// Stride returns the bytes each element's slot takes.
func (a *Array[T]) Stride() int { return a.stride }

func (a *Array[T]) segLen(i int) int { return min(a.per, a.n-i*a.per) }

func (a *Array[T]) at(i int) farmem.Addr {
	if len(a.segs) == 1 {
		return a.segs[0].Add(uint64(i * a.stride))
	}
	return a.segs[i/a.per].Add(uint64((i % a.per) * a.stride))
}

func (a *Array[T]) check(from, n int) error {
	if from < 0 || n < 0 || from+n > a.n {
		return fmt.Errorf("farcoll: elements [%d, %d) of an array of %d: %w", from, from+n, a.n, farmem.ErrOutOfRange)
	}
	return nil
}

// Get returns element i: one Read of its slot, one round trip.
func (a *Array[T]) Get(ctx context.Context, c *far.Client, i int) (v T, err error) {
	err = a.GetInto(ctx, c, i, &v)
	return v, err
}

// GetInto is Get that sets *dst (left as it was on error), decoding in place with the
// codec's DecodeInto when it has one (far.DecoderInto): for a large T it spares the copies of
// returning the value. dst does not escape.
func (a *Array[T]) GetInto(ctx context.Context, c *far.Client, i int, dst *T) error {
	if err := a.check(i, 1); err != nil {
		return err
	}
	buf := c.Scratch(a.stride)
	if err := c.Memory().Read(ctx, a.at(i), buf); err != nil {
		return err
	}
	a.dec.DecodeInto(buf, dst)
	return nil
}

// Set stores v in element i: one Write of its slot, one round trip.
func (a *Array[T]) Set(ctx context.Context, c *far.Client, i int, v T) error {
	if err := a.check(i, 1); err != nil {
		return err
	}
	buf := c.Scratch(a.stride)
	clear(buf[a.size:])
	a.codec.Encode(buf, v)
	return c.Memory().Write(ctx, a.at(i), buf)
}

// ReadRange reads elements [from, from+len(out)) into out: one Read per segment the range
// touches, all in one batch (one round trip).
func (a *Array[T]) ReadRange(ctx context.Context, c *far.Client, from int, out []T) error {
	if err := a.check(from, len(out)); err != nil {
		return err
	}
	if len(out) == 0 {
		return nil
	}
	buf := c.Scratch(len(out) * a.stride)
	b := c.Batch()
	a.ranges(from, len(out), func(at farmem.Addr, lo, hi int) {
		addOps(b, farmem.OpRead, at, buf[lo*a.stride:hi*a.stride])
	})
	if err := c.Memory().Do(ctx, b); err != nil {
		return err
	}
	for i := range out {
		a.dec.DecodeInto(buf[i*a.stride:], &out[i])
	}
	return nil
}

// WriteRange stores vs in elements [from, from+len(vs)): one Write per segment the range
// touches, all in one batch (one round trip).
func (a *Array[T]) WriteRange(ctx context.Context, c *far.Client, from int, vs []T) error {
	if err := a.check(from, len(vs)); err != nil {
		return err
	}
	if len(vs) == 0 {
		return nil
	}
	buf := c.Scratch(len(vs) * a.stride)
	for i, v := range vs {
		s := buf[i*a.stride : (i+1)*a.stride]
		clear(s[a.size:])
		a.codec.Encode(s, v)
	}
	b := c.Batch()
	a.ranges(from, len(vs), func(at farmem.Addr, lo, hi int) {
		addOps(b, farmem.OpWrite, at, buf[lo*a.stride:hi*a.stride])
	})
	return c.Memory().Do(ctx, b)
}

// ranges calls fn for each segment piece of [from, from+n): its address and the indexes, from
// 0, of the range's elements it holds.
func (a *Array[T]) ranges(from, n int, fn func(at farmem.Addr, lo, hi int)) {
	for i := from; i < from+n; {
		end := min(from+n, (i/a.per+1)*a.per)
		fn(a.at(i), i-from, end-from)
		i = end
	}
}

// addOps appends reads or writes of buf at at, split into ops of at most farmem.MaxOpBytes.
func addOps(b *farmem.Batch, kind farmem.OpKind, at farmem.Addr, buf []byte) {
	for len(buf) > 0 {
		k := min(len(buf), farmem.MaxOpBytes)
		if kind == farmem.OpRead {
			b.Read(at, buf[:k])
		} else {
			b.Write(at, buf[:k])
		}
		at, buf = at.Add(uint64(k)), buf[k:]
	}
}

// Free retires the array's segments and descriptor through the allocator's deferred free. The
// caller must make sure no client uses the array afterwards.
func (a *Array[T]) Free(ctx context.Context, c *far.Client) error {
	al := c.Allocator()
	for i, s := range a.segs {
		if err := al.Retire(ctx, s, uint64(a.segLen(i)*a.stride)); err != nil {
			return err
		}
	}
	return al.Retire(ctx, a.desc, uint64(arrayHead+8*len(a.segs)))
}

func codecOf[T any](codec far.Codec[T]) (far.Codec[T], error) {
	if _, err := far.CheckType[T](); err != nil {
		return nil, err
	}
	if codec == nil {
		return far.Binary[T]()
	}
	if codec.Size() <= 0 || codec.Size() > farmem.MaxOpBytes {
		return nil, fmt.Errorf("farcoll: codec size %d: %w", codec.Size(), far.ErrType)
	}
	return codec, nil
}
