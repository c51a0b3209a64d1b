package alloc

import (
	"encoding/binary"
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/farmem/farmem/farmem"
)

func validHeader(t testing.TB) Header {
	t.Helper()
	h, err := layoutOf(2, 16<<20, 64<<10, 128, 2<<20, 1, 1)
	require.NoError(t, err)
	h.Bump, h.SymBump, h.Epoch = h.HeapBase+3*h.ChunkSize, h.SymBase, 7
	return h
}

func TestHeaderRoundTrip(t *testing.T) {
	h := validHeader(t)
	require.Equal(t, uint64(64<<10), h.SymBase, "table of 129 slots rounds up to one chunk")
	require.Equal(t, h.SymBase+h.SymSize, h.HeapBase)
	require.Equal(t, uint64(16<<20), h.HeapLimit)
	got, err := DecodeHeader(h.Encode())
	require.NoError(t, err)
	require.Equal(t, h, got)
}

// setConst overwrites constant i of an encoded header and, if reclaim, recomputes the claim so
// that only the field's own check can catch it.
func setConst(b []byte, i int, v uint64, reclaim bool) []byte {
	b = append([]byte(nil), b...)
	binary.LittleEndian.PutUint64(b[offConst+8*i:], v)
	if reclaim {
		binary.LittleEndian.PutUint64(b[offClaim:], claimOf(b[offConst:offConst+8*nConst]))
	}
	return b
}

func TestDecodeHeaderErrors(t *testing.T) {
	good := validHeader(t).Encode()
	claimOnly := make([]byte, HeaderLen)
	binary.LittleEndian.PutUint64(claimOnly[offClaim:], 0x1234567)
	noMagicData := make([]byte, HeaderLen)
	noMagicData[100] = 1
	badMagic := append([]byte(nil), good...)
	binary.LittleEndian.PutUint64(badMagic[offMagic:], 0xdeadbeef)
	for _, tc := range []struct {
		name string
		b    []byte
		want error
	}{
		{"short", good[:HeaderLen-1], ErrBadHeader},
		{"zero", make([]byte, HeaderLen), ErrNotFormatted},
		{"claimed, no magic", claimOnly, ErrHalfFormatted},
		{"data, no magic", noMagicData, ErrBadHeader},
		{"wrong magic", badMagic, ErrBadHeader},
		{"version 3", setConst(good, 0, Version+1, true), ErrVersion},
		{"corrupt size, stale checksum", setConst(good, 2, 32<<20, false), ErrBadHeader},
		{"size inconsistent with heap limit", setConst(good, 2, 32<<20, true), ErrBadHeader},
		{"chunk not a power of two", setConst(good, 3, 65<<10, true), ErrBadHeader},
		{"no clients", setConst(good, 4, 0, true), ErrBadHeader},
		{"table moved", setConst(good, 5, 8192, true), ErrBadHeader},
		{"heap overlaps symmetric area", setConst(good, 8, 64<<10, true), ErrBadHeader},
		{"compute node as home", setConst(good, 10, uint64(farmem.ComputeID(1).Node()), true), ErrBadHeader},
		{"node id too wide", setConst(good, 1, 1<<20, true), ErrBadHeader},
		{"reserved byte set", func() []byte { b := append([]byte(nil), good...); b[HeaderLen-1] = 1; return b }(), ErrBadHeader},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := DecodeHeader(tc.b)
			require.ErrorIs(t, err, tc.want)
			require.ErrorIs(t, err, farmem.ErrInvalid)
			for _, other := range []error{ErrNotFormatted, ErrHalfFormatted, ErrBadHeader, ErrVersion} {
				if other != tc.want {
					require.False(t, errors.Is(err, other), "%v also matches %v", err, other)
				}
			}
		})
	}
}

func FuzzHeader(f *testing.F) {
	good := validHeader(f).Encode()
	f.Add(good)
	f.Add(make([]byte, HeaderLen))
	f.Add(setConst(good, 0, Version+1, true))
	f.Add(setConst(good, 7, 0, true))
	f.Add(good[:100])
	f.Fuzz(func(t *testing.T, b []byte) {
		h, err := DecodeHeader(b)
		if err != nil {
			require.ErrorIs(t, err, farmem.ErrInvalid)
			return
		}
		// Whatever decodes is a consistent layout...
		require.NoError(t, h.check())
		require.LessOrEqual(t, h.SymBase+h.SymSize, h.HeapBase)
		require.LessOrEqual(t, h.HeapBase, h.HeapLimit)
		require.LessOrEqual(t, h.HeapLimit, h.Size)
		require.GreaterOrEqual(t, h.SymBase, h.TableOff+8*uint64(h.MaxClients+1))
		// ...and encodes back to the bytes it came from.
		enc := h.Encode()
		require.Equal(t, b[:HeaderLen], enc)
		again, err := DecodeHeader(enc)
		require.NoError(t, err)
		require.Equal(t, h, again)
	})
}
