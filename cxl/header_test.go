package cxl

import (
	"bytes"
	"encoding/binary"
	"errors"
	"github.com/farmem/farmem/farmem/transport"
	"hash/crc32"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func validHeader(t testing.TB) (*header, []byte) {
	o := Options{Shape: transport.Shape{MemoryNodes: 3, MemorySize: 1 << 20, ComputeNodes: 4}}
	o.defaults()
	h, err := o.header(BackingMemfd, 4096)
	require.NoError(t, err)
	h.Requested, h.Node, h.Profile = 1, 0, "cxl-direct"
	h.Emulated = true
	b := make([]byte, headerPage)
	h.encode(b)
	return h, b
}

func TestHeaderRoundTrip(t *testing.T) {
	h, b := validHeader(t)
	got, err := decodeHeader(b)
	require.NoError(t, err)
	require.Equal(t, h, got)
	require.Equal(t, uint64(tableOff+4*entrySize), uint64(tableOff)+uint64(h.MaxCompute)*entrySize)
	// The layout keeps every piece apart: header and table, then each compute node's region
	// and control block, then the memory nodes.
	require.GreaterOrEqual(t, h.ComputeBase, uint64(tableOff)+uint64(h.MaxCompute)*entrySize)
	require.GreaterOrEqual(t, h.CtlOff, h.ComputeSize())
	require.GreaterOrEqual(t, h.ComputeStride, h.CtlOff+h.ctlSize())
	require.Equal(t, h.ComputeBase+uint64(h.MaxCompute)*h.ComputeStride, h.MemBase)
	require.GreaterOrEqual(t, h.MemStride, h.MemorySize)
	require.Equal(t, h.MemBase+uint64(h.MemoryNodes)*h.MemStride, h.TotalSize)
}

// Every single-byte change to a valid header is rejected: the checksum covers every field, and
// a change to the checksum itself no longer matches. This is the decoder's own broken-variant
// check: a decoder that skipped a field would let some of these through.
func TestHeaderRejectsEveryByteFlip(t *testing.T) {
	_, b := validHeader(t)
	for i := range headerLen {
		c := bytes.Clone(b)
		c[i] ^= 0x40
		_, err := decodeHeader(c)
		require.ErrorIs(t, err, ErrBadRegion, "byte %d flipped", i)
	}
}

// A header with a consistent checksum but a layout that its parameters do not give, or
// parameters out of range, is rejected too (a tool could have written it, or a newer layout).
func TestHeaderRejectsInconsistentFields(t *testing.T) {
	h, _ := validHeader(t)
	cases := map[string]func(h *header){
		"total size":      func(h *header) { h.TotalSize += 4096 },
		"memory base":     func(h *header) { h.MemBase += 8 },
		"compute stride":  func(h *header) { h.ComputeStride -= 4096 },
		"zero nodes":      func(h *header) { h.MemoryNodes = 0 },
		"page size":       func(h *header) { h.PageSize = 3000 },
		"handlers":        func(h *header) { h.MaxHandlers = h.ClientsPerNode },
		"client ids":      func(h *header) { h.MaxCompute, h.ClientsPerNode = 2000, 64 },
		"mailbox size":    func(h *header) { h.MailboxSize = 100 },
		"down timeout":    func(h *header) { h.DownTimeout = 0 },
		"profile":         func(h *header) { h.Profile = "warp-drive" },
		"backing":         func(h *header) { h.Backing = numBackings },
		"huge memory":     func(h *header) { h.MemorySize = 1 << 50 },
		"slice alignment": func(h *header) { h.SliceSize = 100 },
	}
	for name, mutate := range cases {
		c := *h
		mutate(&c)
		b := make([]byte, headerPage)
		c.encode(b)
		_, err := decodeHeader(b)
		require.ErrorIs(t, err, ErrBadRegion, name)
	}
}

func TestHeaderTooShort(t *testing.T) {
	_, b := validHeader(t)
	for _, n := range []int{0, 7, 100, headerLen - 1} {
		_, err := decodeHeader(b[:n])
		require.ErrorIs(t, err, ErrBadRegion, "%d bytes", n)
	}
	got, err := decodeHeader(b[:headerLen])
	require.NoError(t, err, "the header is self-contained in its first %d bytes", headerLen)
	require.NotNil(t, got)
}

func TestOptionsRejected(t *testing.T) {
	for name, o := range map[string]Options{
		"negative nodes":   {Shape: transport.Shape{MemoryNodes: -1}},
		"too many handles": {Shape: transport.Shape{MaxHandlers: 64, ClientsPerNode: 64}},
		"client ids":       {Shape: transport.Shape{ComputeNodes: 2000}},
		"too big":          {Shape: transport.Shape{MemoryNodes: 100, MemorySize: 1 << 47}},
	} {
		o.defaults()
		_, err := o.header(BackingMemfd, 4096)
		require.Error(t, err, name)
		require.False(t, errors.Is(err, ErrBadRegion), "%s: options are not a bad region file: %v", name, err)
	}
}

// FuzzDecodeHeader: any bytes give a header or an error, never a panic; a header that decodes
// re-encodes to the same bytes, and its layout fits together.
func FuzzDecodeHeader(f *testing.F) {
	_, b := validHeader(f)
	f.Add(b[:headerLen])
	f.Add([]byte(magic))
	f.Add(make([]byte, headerLen))
	o := Options{Shape: transport.Shape{ComputeNodes: 1, ClientsPerNode: 2, MaxHandlers: 1}, DownTimeout: time.Hour}
	o.defaults()
	if h, err := o.header(BackingDevDAX, 1<<21); err == nil {
		hb := make([]byte, headerLen)
		h.encode(hb)
		f.Add(hb)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		h, err := decodeHeader(data)
		if err != nil {
			require.ErrorIs(t, err, ErrBadRegion)
			return
		}
		re := make([]byte, headerLen)
		h.encode(re)
		require.Equal(t, data[:headerLen], re)
		require.LessOrEqual(t, h.TotalSize, uint64(maxRegionSize))
		require.LessOrEqual(t, h.ComputeBase, h.MemBase)
		require.Equal(t, h.MemBase+uint64(h.MemoryNodes)*h.MemStride, h.TotalSize)
		require.GreaterOrEqual(t, h.ComputeStride, h.CtlOff+h.ctlSize())
	})
}

// FuzzHeaderFields fuzzes the header's fields behind a valid magic, version and checksum, which
// random bytes almost never get past: the field checks and the layout arithmetic must reject
// what does not fit, without panicking or overflowing.
func FuzzHeaderFields(f *testing.F) {
	_, b := validHeader(f)
	f.Add(b[16:headerFields])
	f.Add(make([]byte, headerFields-16))
	f.Fuzz(func(t *testing.T, fields []byte) {
		data := make([]byte, headerLen)
		copy(data, magic)
		binary.LittleEndian.PutUint32(data[8:], version)
		binary.LittleEndian.PutUint32(data[12:], headerFields)
		copy(data[16:headerFields], fields)
		binary.LittleEndian.PutUint32(data[headerFields:], crc32.ChecksumIEEE(data[:headerFields]))
		h, err := decodeHeader(data)
		if err != nil {
			require.ErrorIs(t, err, ErrBadRegion)
			return
		}
		re := make([]byte, headerLen)
		h.encode(re)
		require.Equal(t, data, re)
		require.LessOrEqual(t, h.TotalSize, uint64(maxRegionSize))
		require.Equal(t, h.MemBase+uint64(h.MemoryNodes)*h.MemStride, h.TotalSize)
		require.GreaterOrEqual(t, h.ComputeStride, h.CtlOff+h.ctlSize())
		require.LessOrEqual(t, uint64(h.MaxCompute)*uint64(h.ClientsPerNode), uint64(0xffff))
	})
}
