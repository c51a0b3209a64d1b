package wire

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/farmem/farmem/farmem"
	"github.com/farmem/farmem/farmem/transport"
)

func sampleOps() []farmem.Op {
	a := farmem.MakeAddr(3, 0x10008)
	return []farmem.Op{
		{Kind: farmem.OpRead, Addr: a, Buf: make([]byte, 24)},
		{Kind: farmem.OpWrite, Addr: a.Add(3), Buf: []byte("hello"), Unsignaled: true},
		{Kind: farmem.OpCAS, Addr: a, Cmp: 1, Swap: 2},
		{Kind: farmem.OpFAA, Addr: a.Add(8), Swap: ^uint64(0)},
		{Kind: farmem.OpMaskedCAS, Addr: a.Add(16), Cmp: 3, CmpMask: 0xff, Swap: 4, SwapMask: 0xf0},
	}
}

func encodeBatch(ops []farmem.Op, key uint32) []byte {
	b := AppendBatchCount(nil, len(ops))
	for i := range ops {
		b = AppendOp(b, &ops[i], key)
	}
	return b
}

// A batch's expiry survives the round trip; AppendBatchCount writes none.
func TestBatchExpiry(t *testing.T) {
	ops := sampleOps()
	b := AppendBatchHeader(nil, len(ops), 1_700_000_000_123_456_789)
	for i := range ops {
		b = AppendOp(b, &ops[i], 9)
	}
	got, expiry, err := DecodeBatchExpiry(b, nil)
	require.NoError(t, err)
	require.Len(t, got, len(ops))
	require.Equal(t, int64(1_700_000_000_123_456_789), expiry)
	_, expiry, err = DecodeBatchExpiry(encodeBatch(ops, 9), nil)
	require.NoError(t, err)
	require.Zero(t, expiry)
	_, _, err = DecodeBatchExpiry(b[:5], nil)
	require.ErrorIs(t, err, ErrMalformed, "a payload cut inside the expiry")
	require.ErrorIs(t, StatusExpired.Err(), ErrExpired)
	require.ErrorIs(t, StatusExpired.Err(), farmem.ErrNodeDown)
	require.Equal(t, StatusExpired, StatusOf(fmt.Errorf("x: %w", ErrExpired)))
	require.True(t, StatusExpired.Valid())
}

func TestHeaderRoundTrip(t *testing.T) {
	h := Header{Type: TypeResult, Flags: FlagPartial, Len: 1234, ID: 0xdeadbeef01}
	b := AppendHeader(nil, h)
	require.Len(t, b, HeaderSize)
	got, err := ParseHeader(b, 1<<20)
	require.NoError(t, err)
	require.Equal(t, h, got)

	for name, mut := range map[string]func([]byte){
		"magic":   func(b []byte) { b[0] = 0 },
		"version": func(b []byte) { b[1] = Version + 1 },
		"type":    func(b []byte) { b[2] = 0x7f },
		"flags":   func(b []byte) { b[2] = byte(TypeBatch) },
		"length":  func(b []byte) { b[6] = 0xff },
	} {
		c := bytes.Clone(b)
		mut(c)
		_, err := ParseHeader(c, 1<<20)
		require.ErrorIs(t, err, ErrMalformed, name)
	}
	_, err = ParseHeader(b[:5], 1<<20)
	require.ErrorIs(t, err, ErrMalformed)
}

func TestBatchRoundTrip(t *testing.T) {
	ops := sampleOps()
	p := encodeBatch(ops, 77)
	size := BatchHeaderSize
	for i := range ops {
		size += OpSize(&ops[i])
	}
	require.Len(t, p, size, "OpSize matches the encoding")
	got, err := DecodeBatch(p, nil)
	require.NoError(t, err)
	require.Len(t, got, len(ops))
	for i, o := range got {
		want := &ops[i]
		require.Equal(t, want.Kind, o.Kind)
		require.Equal(t, want.Unsignaled, o.Unsignaled)
		require.Equal(t, uint32(77), o.Key)
		require.Equal(t, want.Addr.Offset(), o.Off)
		require.Equal(t, uint32(transport.OpLen(want)), o.Len)
		if want.Kind == farmem.OpWrite {
			require.Equal(t, want.Buf, o.Data)
		}
		if transport.IsAtomic(want.Kind) {
			require.Equal(t, want.Cmp, o.Cmp)
			require.Equal(t, want.Swap, o.Swap)
			require.Equal(t, want.CmpMask, o.CmpMask)
			require.Equal(t, want.SwapMask, o.SwapMask)
		}
	}
	// Every truncation is malformed, never a panic.
	for n := range p {
		_, err := DecodeBatch(p[:n], got)
		require.ErrorIs(t, err, ErrMalformed, "truncated to %d", n)
	}
	_, err = DecodeBatch(append(bytes.Clone(p), 0), nil)
	require.ErrorIs(t, err, ErrMalformed, "trailing byte")
}

func TestOpCheck(t *testing.T) {
	o := Op{Kind: farmem.OpFAA, Key: 5, Off: 64, Len: 8}
	require.NoError(t, o.Check(128, 5))
	require.ErrorIs(t, o.Check(128, 6), ErrBadKey)
	require.ErrorIs(t, o.Check(128, 6), farmem.ErrOutOfRange, "a bad key is outside every region under that key")
	require.ErrorIs(t, o.Check(64, 5), farmem.ErrOutOfRange)
	o.Off = 68
	require.ErrorIs(t, o.Check(128, 5), farmem.ErrMisaligned)
	o = Op{Kind: farmem.OpRead, Key: 5, Off: 100, Len: 28}
	require.NoError(t, o.Check(128, 5))
	o.Len = 29
	require.ErrorIs(t, o.Check(128, 5), farmem.ErrOutOfRange)
	require.Equal(t, StatusBadKey, StatusOf(ErrBadKey))
	require.Equal(t, Status(transport.CodeMisaligned), StatusOf(farmem.ErrMisaligned))
	require.ErrorIs(t, StatusBadKey.Err(), ErrBadKey)
}

func TestResultsRoundTrip(t *testing.T) {
	b := AppendResultCount(nil, 4)
	b, dst := AppendRead(b, 5)
	copy(dst, "abcde")
	b = AppendWriteOK(b)
	b = AppendWord(b, 42)
	b = AppendStatus(b, StatusBadKey)
	var rs Results
	n, err := rs.Reset(b)
	require.NoError(t, err)
	require.Equal(t, 4, n)
	s, _, data, err := rs.Next(farmem.OpRead, 5)
	require.NoError(t, err)
	require.Equal(t, StatusOK, s)
	require.Equal(t, "abcde", string(data))
	s, _, _, err = rs.Next(farmem.OpWrite, 3)
	require.NoError(t, err)
	require.Equal(t, StatusOK, s)
	s, v, _, err := rs.Next(farmem.OpFAA, 8)
	require.NoError(t, err)
	require.Equal(t, uint64(42), v)
	s, _, _, err = rs.Next(farmem.OpCAS, 8)
	require.NoError(t, err)
	require.Equal(t, StatusBadKey, s)
	require.NoError(t, rs.End())
	_, _, _, err = rs.Next(farmem.OpCAS, 8)
	require.ErrorIs(t, err, ErrMalformed, "more results than the frame holds")

	// Short data for a read is malformed.
	_, err = rs.Reset(b)
	require.NoError(t, err)
	_, _, _, err = rs.Next(farmem.OpRead, 6)
	require.NoError(t, err, "reads 6 of the remaining bytes")
	_, _, _, err = rs.Next(farmem.OpRead, 64)
	require.ErrorIs(t, err, ErrMalformed)
}

func TestHandshakeRoundTrip(t *testing.T) {
	h := Hello{Node: 2, Client: 9, Purpose: PurposeData}
	h.Nonce[0] = 1
	hp := h.Append(nil)
	gh, err := DecodeHello(hp)
	require.NoError(t, err)
	require.Equal(t, h, gh)

	c := Challenge{Node: 2, Role: farmem.RoleMemory}
	c.Nonce[31] = 7
	cp := c.Append(nil)
	gc, err := DecodeChallenge(cp)
	require.NoError(t, err)
	require.Equal(t, c, gc)
	_, err = DecodeChallenge((&Challenge{Node: 2, Role: farmem.RoleCompute}).Append(nil))
	require.ErrorIs(t, err, ErrMalformed, "role must match the id")

	secret := []byte("0123456789abcdef")
	m1 := MAC(secret, "client", hp, cp)
	require.True(t, CheckMAC(m1, MAC(secret, "client", hp, cp)))
	require.False(t, CheckMAC(m1, MAC([]byte("0123456789abcdeF"), "client", hp, cp)), "another secret")
	require.False(t, CheckMAC(m1, MAC(secret, "server", hp, cp)), "the server's MAC differs from the client's")
	hp2 := bytes.Clone(hp)
	hp2[0] ^= 1
	require.False(t, CheckMAC(m1, MAC(secret, "client", hp2, cp)), "another nonce")
	got, err := DecodeAuth(m1[:])
	require.NoError(t, err)
	require.Equal(t, m1, got)

	w := Welcome{MAC: m1, Node: farmem.ComputeID(3).Node(), Role: farmem.RoleCompute, Size: 1 << 20, Key: 99, MaxFrame: 1 << 20, MaxOutstanding: 64, Incarnation: 0x1234}
	gw, err := DecodeWelcome(w.Append(nil))
	require.NoError(t, err)
	require.Equal(t, w, gw)
	w.MaxFrame = 1
	_, err = DecodeWelcome(w.Append(nil))
	require.ErrorIs(t, err, ErrMalformed)
	w.MaxFrame, w.Incarnation = 1<<20, 0
	_, err = DecodeWelcome(w.Append(nil))
	require.ErrorIs(t, err, ErrMalformed, "a node without an incarnation")
	_, err = DecodeWelcome(w.Append(nil)[:len(w.Append(nil))-8])
	require.ErrorIs(t, err, ErrMalformed, "a version-1 welcome, without the incarnation")

	code, msg, err := DecodeMessage(AppendMessage(nil, uint8(ReasonAuth), "no"))
	require.NoError(t, err)
	require.Equal(t, uint8(ReasonAuth), code)
	require.Equal(t, "no", msg)
	long := AppendMessage(nil, 1, string(bytes.Repeat([]byte("é"), MaxMessage)))
	_, msg, err = DecodeMessage(long)
	require.NoError(t, err)
	require.LessOrEqual(t, len(msg), MaxMessage)
}

func TestCallAndCtl(t *testing.T) {
	m, from, req, err := DecodeCall(AppendCall(nil, 7, 12, []byte("req")))
	require.NoError(t, err)
	require.Equal(t, uint16(7), m)
	require.Equal(t, farmem.ClientID(12), from)
	require.Equal(t, "req", string(req))
	s, body, _, err := DecodeReply(AppendReply(nil, StatusOK, []byte("ok")))
	require.NoError(t, err)
	require.Equal(t, StatusOK, s)
	require.Equal(t, "ok", string(body))
	s, _, msg, err := DecodeReply(AppendReply(nil, Status(transport.CodeNoSpace), []byte("full")))
	require.NoError(t, err)
	require.ErrorIs(t, s.Err(), farmem.ErrNoSpace)
	require.Equal(t, "full", msg)

	p, err := AppendCtl(nil, CtlJoin, map[string]int{"compute": 3})
	require.NoError(t, err)
	op, jb, err := DecodeCtl(p)
	require.NoError(t, err)
	require.Equal(t, CtlJoin, op)
	var v struct{ Compute int }
	require.NoError(t, DecodeJSON(jb, &v))
	require.Equal(t, 3, v.Compute)
	require.ErrorIs(t, DecodeJSON([]byte("{"), &v), ErrMalformed)
}

func TestReadFrame(t *testing.T) {
	var stream []byte
	stream, start := BeginFrame(stream, TypeCall, 0, 5)
	stream = EndFrame(AppendCall(stream, 1, 2, []byte("x")), start)
	stream = AppendHeader(stream, Header{Type: TypePing, ID: 6})
	r := bytes.NewReader(stream)
	var hdr [HeaderSize]byte
	buf := make([]byte, 0, 2)
	h, p, err := ReadFrame(r, &hdr, buf, 1<<16)
	require.NoError(t, err)
	require.Equal(t, TypeCall, h.Type)
	require.Equal(t, uint64(5), h.ID)
	require.Len(t, p, 5, "a payload larger than buf gets its own slice")
	h, p, err = ReadFrame(r, &hdr, buf, 1<<16)
	require.NoError(t, err)
	require.Equal(t, TypePing, h.Type)
	require.Empty(t, p)
	_, _, err = ReadFrame(r, &hdr, buf, 1<<16)
	require.ErrorIs(t, err, io.EOF)
	_, _, err = ReadFrame(bytes.NewReader(stream[:HeaderSize+2]), &hdr, buf, 1<<16)
	require.True(t, errors.Is(err, io.ErrUnexpectedEOF))
}

func TestEncodeAllocs(t *testing.T) {
	ops := sampleOps()
	buf := make([]byte, 0, 4096)
	dec := make([]Op, 0, 16)
	var rs Results
	res := AppendWord(AppendResultCount(nil, 1), 5)
	allocs := testing.AllocsPerRun(100, func() {
		b, start := BeginFrame(buf[:0], TypeBatch, 0, 1)
		b = AppendBatchCount(b, len(ops))
		for i := range ops {
			b = AppendOp(b, &ops[i], 1)
		}
		b = EndFrame(b, start)
		if _, err := DecodeBatch(b[HeaderSize:], dec); err != nil {
			panic(err)
		}
		if _, err := rs.Reset(res); err != nil {
			panic(err)
		}
		_, _, _, _ = rs.Next(farmem.OpFAA, 8)
	})
	require.Zero(t, allocs, "encoding and decoding a batch allocates nothing")
}

// A peer of another protocol version is told apart from garbage: the error names both versions.
func TestOtherVersionIsNamed(t *testing.T) {
	b := AppendHeader(nil, Header{Type: TypePing})
	b[1] = Version - 1
	_, err := ParseHeader(b, DefaultMaxFrame)
	require.ErrorIs(t, err, ErrMalformed)
	require.Contains(t, err.Error(), fmt.Sprintf("protocol version %d, this build speaks %d", Version-1, Version))
}
