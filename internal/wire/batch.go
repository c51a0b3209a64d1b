package wire

import (
	"errors"
	"fmt"
	"slices"

	"github.com/farmem/farmem/farmem"
	"github.com/farmem/farmem/farmem/transport"
)

// A Batch payload is a u16 op count (1..farmem.MaxBatchOps), an i64 expiry, and the ops. The
// expiry (added in protocol version 3) is a Unix time in nanoseconds on the server's wall clock
// after which the server must not apply the batch: it answers each signaled op with
// StatusExpired and applies nothing. Zero means none. A client sets it to its post time plus its
// down timeout, the time after which it reports the ops failed, so that an op reported failed is
// never applied later than that plus the skew between the two clocks. Each op is
//
//	kind u8 | flags u8 | key u32 | offset u64 | operands
//
// where flags bit 0 marks the op unsignaled, key is the region key the client learned in
// Welcome, and the operands are by kind:
//
//	read   len u32
//	write  len u32, then len bytes of data
//	cas    cmp u64, swap u64
//	faa    delta u64
//	mcas   cmp u64, cmpMask u64, swap u64, swapMask u64
//
// A Result payload is a u16 count, then for each signaled op of the request, in order, a status
// byte and, if the status is OK, the op's result: a read's len bytes of data, an atomic's u64
// previous word, nothing for a write. The count equals the number of signaled ops, or is smaller
// on a Result flagged FlagPartial.

// Op flag bits.
const opUnsignaled = 1 << 0

// opHeaderSize is the size of an op's fixed part.
const opHeaderSize = 14

// Status is an op's outcome on the wire: a transport.Code, or one of the wire's own statuses.
type Status uint8

// StatusOK is success.
const StatusOK Status = Status(transport.CodeOK)

// StatusBadKey: the op named a region key the node does not have (a stale key from an earlier
// incarnation of the node, or a forged one). Nothing was applied.
const StatusBadKey Status = 0x40

// ErrBadKey is the error of an op refused for its region key. It wraps farmem.ErrOutOfRange: like
// RDMA's remote access error, the access is outside every region registered under that key.
var ErrBadKey = fmt.Errorf("wire: wrong region key: %w", farmem.ErrOutOfRange)

// StatusTooLarge: the op's result would have made the batch's Result frame longer than the
// frame limit the node announced in Welcome. Nothing of the batch was applied. A client that
// splits its batches by ResultSize against that limit never sees it.
const StatusTooLarge Status = 0x41

// ErrReplyTooLarge is the error of an op refused with StatusTooLarge. It wraps
// farmem.ErrInvalid: the request could never be served as sent.
var ErrReplyTooLarge = fmt.Errorf("wire: the batch's results exceed the node's frame limit: %w", farmem.ErrInvalid)

// StatusExpired: the batch reached the server after its expiry (a paused or overloaded node,
// a long queue); nothing of it was applied.
const StatusExpired Status = 0x42

// ErrExpired is the error of an op refused with StatusExpired. It wraps farmem.ErrNodeDown:
// the node did not answer in time, but unlike a plain ErrNodeDown, the op is known not to have
// been applied.
var ErrExpired = fmt.Errorf("wire: the request reached the node after its expiry and was not applied: %w", farmem.ErrNodeDown)

// StatusOf returns the status that carries err.
func StatusOf(err error) Status {
	switch {
	case errors.Is(err, ErrExpired):
		return StatusExpired
	case errors.Is(err, ErrBadKey):
		return StatusBadKey
	case errors.Is(err, ErrReplyTooLarge):
		return StatusTooLarge
	}
	return Status(transport.CodeOf(err))
}

// Err returns the error a status stands for: nil for StatusOK, a farmem sentinel, ErrBadKey or
// ErrReplyTooLarge.
func (s Status) Err() error {
	switch s {
	case StatusBadKey:
		return ErrBadKey
	case StatusTooLarge:
		return ErrReplyTooLarge
	case StatusExpired:
		return ErrExpired
	}
	return transport.Code(s).Err()
}

// Valid reports whether s is a status of this version.
func (s Status) Valid() bool {
	return s <= Status(transport.CodeOther) || s == StatusBadKey || s == StatusTooLarge || s == StatusExpired
}

// OpSize returns the size of op's encoding.
func OpSize(op *farmem.Op) int {
	switch op.Kind {
	case farmem.OpRead:
		return opHeaderSize + 4
	case farmem.OpWrite:
		return opHeaderSize + 4 + len(op.Buf)
	case farmem.OpCAS:
		return opHeaderSize + 16
	case farmem.OpFAA:
		return opHeaderSize + 8
	case farmem.OpMaskedCAS:
		return opHeaderSize + 32
	}
	return opHeaderSize
}

// ResultSize returns the size of a successful result of op in a Result payload (0 for an
// unsignaled op, which has none).
func ResultSize(op *farmem.Op) int {
	if op.Unsignaled {
		return 0
	}
	switch op.Kind {
	case farmem.OpRead:
		return 1 + len(op.Buf)
	case farmem.OpWrite:
		return 1
	}
	return 1 + 8
}

// AppendBatchHeader appends a Batch payload's op count and expiry (Unix nanoseconds, 0 for
// none). A count outside 1..farmem.MaxBatchOps is written as one every decoder refuses, never
// wrapped into a valid one.
func AppendBatchHeader(b []byte, n int, expiry int64) []byte {
	return appendU64(appendU16(b, countField(n)), uint64(expiry))
}

// AppendBatchCount appends a Batch payload's op count with no expiry.
func AppendBatchCount(b []byte, n int) []byte { return AppendBatchHeader(b, n, 0) }

// BatchHeaderSize is the size of a Batch payload before its ops.
const BatchHeaderSize = 2 + 8

// countField is an op or result count as its u16 field: n itself when it is a valid count, else
// 0xFFFF, which exceeds farmem.MaxBatchOps and so never decodes.
func countField(n int) uint16 {
	if n < 0 || n > farmem.MaxBatchOps {
		return 0xFFFF
	}
	return uint16(n)
}

// lenField is an op's byte length as its u32 field: n itself when it fits, else the largest
// u32, which exceeds farmem.MaxOpBytes and so never decodes.
func lenField(n int) uint32 {
	if n < 0 || uint64(n) > farmem.MaxOpBytes {
		return 0xFFFFFFFF
	}
	return uint32(n)
}

// AppendOp appends op's encoding, naming region key, to b. The op must have a valid kind and,
// for reads and writes, at most farmem.MaxOpBytes of buffer (transport.CheckOp).
func AppendOp(b []byte, op *farmem.Op, key uint32) []byte {
	var flags byte
	if op.Unsignaled {
		flags |= opUnsignaled
	}
	b = append(b, byte(op.Kind), flags)
	b = appendU32(b, key)
	b = appendU64(b, op.Addr.Offset())
	switch op.Kind {
	case farmem.OpRead:
		b = appendU32(b, lenField(len(op.Buf)))
	case farmem.OpWrite:
		b = appendU32(b, lenField(len(op.Buf)))
		b = append(b, op.Buf...)
	case farmem.OpCAS:
		b = appendU64(b, op.Cmp)
		b = appendU64(b, op.Swap)
	case farmem.OpFAA:
		b = appendU64(b, op.Swap)
	case farmem.OpMaskedCAS:
		b = appendU64(b, op.Cmp)
		b = appendU64(b, op.CmpMask)
		b = appendU64(b, op.Swap)
		b = appendU64(b, op.SwapMask)
	}
	return b
}

// Op is a decoded op of a Batch. Data aliases the payload it was decoded from.
type Op struct {
	Kind       farmem.OpKind
	Unsignaled bool
	Key        uint32
	Off        uint64
	// Len is the number of bytes a read or write touches (8 for atomics).
	Len  uint32
	Data []byte
	// Cmp, Swap, CmpMask and SwapMask are the atomics' operands as in farmem.Op.
	Cmp, Swap, CmpMask, SwapMask uint64
}

// Atomic returns the op as a farmem.Op for transport.Apply and wordmem (atomics only).
func (o *Op) Atomic() farmem.Op {
	return farmem.Op{Kind: o.Kind, Cmp: o.Cmp, Swap: o.Swap, CmpMask: o.CmpMask, SwapMask: o.SwapMask}
}

// Check validates a decoded op against a region of size bytes with region key: the key, the
// alignment of atomics, and the bounds. It returns the error the op fails with, or nil.
func (o *Op) Check(size uint64, key uint32) error {
	if o.Key != key {
		return ErrBadKey
	}
	if transport.IsAtomic(o.Kind) && o.Off&7 != 0 {
		return farmem.ErrMisaligned
	}
	if n := uint64(o.Len); o.Off >= size || n > size-o.Off {
		return farmem.ErrOutOfRange
	}
	return nil
}

// DecodeBatch decodes a Batch payload into ops (reusing its storage) and returns them. Ops are
// decoded, not checked against any region: see Op.Check.
func DecodeBatch(payload []byte, ops []Op) ([]Op, error) {
	ops, _, err := DecodeBatchExpiry(payload, ops)
	return ops, err
}

// DecodeBatchExpiry is DecodeBatch that also returns the batch's expiry (0 for none).
func DecodeBatchExpiry(payload []byte, ops []Op) ([]Op, int64, error) {
	r := reader{b: payload}
	n := int(r.u16("op count"))
	expiry := int64(r.u64("expiry"))
	if r.err != nil {
		return ops[:0], 0, r.err
	}
	ops, err := decodeOps(&r, n, ops)
	return ops, expiry, err
}

func decodeOps(r *reader, n int, ops []Op) ([]Op, error) {
	if n == 0 || n > farmem.MaxBatchOps {
		return ops[:0], malformed("batch of %d ops", n)
	}
	ops = slices.Grow(ops[:0], n)[:n]
	for i := range ops {
		o := &ops[i]
		kind := farmem.OpKind(r.u8("op kind"))
		flags := r.u8("op flags")
		*o = Op{Kind: kind, Unsignaled: flags&opUnsignaled != 0, Key: r.u32("key"), Off: r.u64("offset"), Len: 8}
		if r.err != nil {
			return ops[:0], r.err
		}
		if flags&^opUnsignaled != 0 {
			return ops[:0], malformed("op %d: flags %#x", i, flags)
		}
		if o.Off > farmem.MaxOffset {
			return ops[:0], malformed("op %d: offset %#x exceeds 48 bits", i, o.Off)
		}
		switch kind {
		case farmem.OpRead, farmem.OpWrite:
			o.Len = r.u32("length")
			if o.Len > farmem.MaxOpBytes {
				return ops[:0], malformed("op %d: %v of %d bytes", i, kind, o.Len)
			}
			if kind == farmem.OpWrite {
				o.Data = r.take(int(o.Len), "write data")
			}
		case farmem.OpCAS:
			o.Cmp, o.Swap = r.u64("cmp"), r.u64("swap")
		case farmem.OpFAA:
			o.Swap = r.u64("delta")
		case farmem.OpMaskedCAS:
			o.Cmp, o.CmpMask, o.Swap, o.SwapMask = r.u64("cmp"), r.u64("cmp mask"), r.u64("swap"), r.u64("swap mask")
		default:
			return ops[:0], malformed("op %d: unknown kind %d", i, kind)
		}
	}
	if err := r.end("batch"); err != nil {
		return ops[:0], err
	}
	return ops, nil
}

// AppendResultCount appends a Result payload's count (an invalid count is written as one every
// decoder refuses, as AppendBatchCount does).
func AppendResultCount(b []byte, n int) []byte { return appendU16(b, countField(n)) }

// ResultsSize returns the size of the Result payload that answers ops when every op succeeds:
// the count and each signaled op's status and data. It is what a server checks against its
// frame limit before building the reply; it cannot overflow (at most farmem.MaxBatchOps ops of
// at most farmem.MaxOpBytes each).
func ResultsSize(ops []Op) uint64 {
	n := uint64(2)
	for i := range ops {
		o := &ops[i]
		if o.Unsignaled {
			continue
		}
		switch o.Kind {
		case farmem.OpRead:
			n += 1 + uint64(o.Len)
		case farmem.OpWrite:
			n++
		default:
			n += 1 + 8
		}
	}
	return n
}

// AppendStatus appends a failed op's status to a Result payload.
func AppendStatus(b []byte, s Status) []byte { return append(b, byte(s)) }

// AppendWord appends a successful atomic's result (its previous word).
func AppendWord(b []byte, prev uint64) []byte { return appendU64(append(b, byte(StatusOK)), prev) }

// AppendWriteOK appends a successful write's result.
func AppendWriteOK(b []byte) []byte { return append(b, byte(StatusOK)) }

// AppendRead appends a successful read's result with room for n bytes of data, and returns the
// buffer and the n-byte slice of it the caller fills with the data.
func AppendRead(b []byte, n int) ([]byte, []byte) {
	b = append(b, byte(StatusOK))
	start := len(b)
	b = slices.Grow(b, n)[:start+n]
	return b, b[start:]
}

// Results walks a Result payload. The caller knows the request, so it says what each result
// should be; Next returns it.
type Results struct {
	r reader
	n int
}

// Reset starts reading a Result payload and returns the number of results it holds.
func (rs *Results) Reset(payload []byte) (int, error) {
	*rs = Results{r: reader{b: payload}}
	rs.n = int(rs.r.u16("result count"))
	if rs.r.err != nil {
		return 0, rs.r.err
	}
	if rs.n > farmem.MaxBatchOps {
		return 0, malformed("%d results", rs.n)
	}
	return rs.n, nil
}

// Next reads the next result, of an op of the given kind that reads or writes n bytes. It
// returns the op's status, an atomic's previous word, and a read's data (aliasing the payload).
func (rs *Results) Next(kind farmem.OpKind, n int) (Status, uint64, []byte, error) {
	if rs.n == 0 {
		return 0, 0, nil, malformed("more results wanted than the frame holds")
	}
	rs.n--
	s := Status(rs.r.u8("status"))
	if rs.r.err != nil {
		return 0, 0, nil, rs.r.err
	}
	if !s.Valid() {
		return 0, 0, nil, malformed("status %#x", uint8(s))
	}
	if s != StatusOK {
		return s, 0, nil, nil
	}
	switch kind {
	case farmem.OpRead:
		data := rs.r.take(n, "read data")
		return s, 0, data, rs.r.err
	case farmem.OpWrite:
		return s, 0, nil, nil
	case farmem.OpCAS, farmem.OpFAA, farmem.OpMaskedCAS:
		v := rs.r.u64("previous word")
		return s, v, nil, rs.r.err
	}
	return 0, 0, nil, malformed("result for unknown op kind %d", kind)
}

// End checks that every result was read and nothing follows.
func (rs *Results) End() error {
	if rs.n != 0 {
		return malformed("%d results left unread", rs.n)
	}
	return rs.r.end("result")
}
