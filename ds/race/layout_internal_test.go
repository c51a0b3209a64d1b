package race

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/farmem/farmem/farmem"
)

func TestPackAddr(t *testing.T) {
	for _, a := range []farmem.Addr{
		farmem.MakeAddr(1, Unit), farmem.MakeAddr(MaxPointerNode, MaxPointerOffset-Unit), farmem.MakeAddr(7, 1<<40),
	} {
		p, err := packAddr(a)
		require.NoError(t, err)
		require.Zero(t, p&^ptrMask)
		require.Equal(t, a, unpackAddr(p))
	}
	for _, a := range []farmem.Addr{
		0, farmem.MakeAddr(MaxPointerNode+1, Unit), farmem.MakeAddr(1, MaxPointerOffset), farmem.MakeAddr(1, 8),
		farmem.MakeAddr(farmem.ComputeID(1).Node(), Unit),
	} {
		_, err := packAddr(a)
		require.ErrorIs(t, err, ErrPointerRange, "%v", a)
		require.ErrorIs(t, err, farmem.ErrInvalid)
	}
}

func TestSlot(t *testing.T) {
	a := farmem.MakeAddr(3, 5*Unit)
	s, err := MakeSlot(0xa5, 100, a)
	require.NoError(t, err)
	require.Equal(t, uint8(0xa5), s.Fingerprint())
	require.Equal(t, uint64(2), s.Units())
	require.Equal(t, uint64(128), s.Size())
	require.Equal(t, a, s.Addr())
	require.True(t, s.Committed())
	require.False(t, s.Frozen() || s.Tentative() || s.Empty())
	f := s | SlotFrozen
	require.True(t, f.Frozen() && f.Committed())
	require.Equal(t, s, f.Plain())
	tw := s | SlotTentative
	require.False(t, tw.Committed())
	require.True(t, tw.Tentative())
	require.Equal(t, a, tw.Addr())
	require.True(t, SlotFrozen.Empty())
	require.False(t, SlotFrozen.Committed())
	_, err = MakeSlot(1, MaxBlockSize+1, a)
	require.ErrorIs(t, err, ErrTooLarge)
	_, err = MakeSlot(1, MaxBlockSize, a)
	require.NoError(t, err)
	require.Contains(t, f.String(), "frozen")
}

func TestHeaderWords(t *testing.T) {
	w := headerWord(3, 0b101)
	require.True(t, covers(w, 0b1101))
	require.False(t, covers(w, 0b1001))
	require.True(t, covers(headerWord(0, 0), 12345))
	lw := lockWord(7, farmem.Time(1_700_000_000_000_000_000))
	require.Equal(t, farmem.ClientID(7), lockOwner(lw))
	require.False(t, lockExpired(lw, farmem.Time(1_700_000_000_000_000_000), 0))
	require.True(t, lockExpired(lw, farmem.Time(1_700_000_000_000_000_000+1_000_000), 0))
	require.False(t, lockExpired(lockParent, 1<<62, 0))
	require.Less(t, uint64(childOff(MaxDepthLimit-1)+8), uint64(stSlotsOff))
}

func TestBlock(t *testing.T) {
	for _, version := range []int{2, 3} {
		t.Run(fmt.Sprintf("v%d", version), func(t *testing.T) { testBlock(t, version) })
	}
}

// testBlock checks a block of one layout version: it decodes, and any change to it but its
// valid word, its address included, is rejected.
func testBlock(t *testing.T, version int) {
	a := farmem.MakeAddr(2, 64*Unit)
	enc := func(key, val string) []byte {
		n := blockSize(len(key), len(val))
		return encodeBlockVersion(make([]byte, n), a, []byte(key), []byte(val), 12345, 77, version)
	}
	b := enc("key", "value")
	require.Equal(t, blockSize(3, 5), uint64(len(b)))
	require.Equal(t, version == 3, b[3]&0x80 != 0, "format bit")
	blk, err := DecodeBlock(a, b)
	require.NoError(t, err)
	require.Equal(t, "key", string(blk.Key))
	require.Equal(t, "value", string(blk.Value))
	require.Equal(t, farmem.Time(12345), blk.Deadline)
	// Another address, any flipped bit, a short buffer: rejected.
	_, err = DecodeBlock(a.Add(Unit), b)
	require.ErrorIs(t, err, ErrCorrupt)
	require.Equal(t, uint32(77), blk.Stamp)
	require.False(t, blk.Invalid)
	for i := range len(b) * 8 {
		c := bytes.Clone(b)
		c[i/8] ^= 1 << (i % 8)
		blk, err := DecodeBlock(a, c)
		if i/8 >= ValidOffset && i/8 < ValidOffset+8 {
			// The valid word is outside the checksum: any nonzero value marks the block invalid.
			require.NoError(t, err, "bit %d", i)
			require.True(t, blk.Invalid, "bit %d", i)
			require.Equal(t, "value", string(blk.Value))
			continue
		}
		require.ErrorIs(t, err, ErrCorrupt, "bit %d", i)
	}
	_, err = DecodeBlock(a, b[:len(b)-1])
	require.ErrorIs(t, err, ErrCorrupt)
	// A torn block: the first half of one write, the second of another.
	o := enc("key", "VALUE")
	torn := append(bytes.Clone(b[:28]), o[28:]...) // "key"+"v" then "ALUE" and o's checksum
	_, err = DecodeBlock(a, torn)
	require.ErrorIs(t, err, ErrCorrupt)
	// A large block (XXH3's long-input path), torn at every 64-byte boundary: rejected.
	long := strings.Repeat("0123456789abcdef", 120)
	l1, l2 := enc("key", long), enc("key", strings.ToUpper(long))
	_, err = DecodeBlock(a, l1)
	require.NoError(t, err)
	for cut := 64; cut < len(l1)-8; cut += 64 {
		_, err := DecodeBlock(a, append(bytes.Clone(l1[:cut]), l2[cut:]...))
		require.ErrorIs(t, err, ErrCorrupt, "torn at %d", cut)
	}
}

func TestRoot(t *testing.T) {
	p := Params{Groups: 4, SlotsPerBucket: 3, InitialDepth: 2, MaxDepth: 9, FingerprintBits: 5, MetaSize: 16, Seed: 99}
	require.NoError(t, p.setDefaults())
	b := encodeRootConst(p)
	_, err := DecodeRoot(b)
	require.ErrorIs(t, err, ErrBadRoot, "no directory yet")
	dir, _ := packAddr(farmem.MakeAddr(1, 1<<20))
	le := func(off int, v uint64) {
		for i := range 8 {
			b[off+i] = byte(v >> (8 * i))
		}
	}
	le(rootDirOff, entryWord(dir, 2))
	le(rootSplitsOff, 5)
	r, err := DecodeRoot(b)
	require.NoError(t, err)
	require.Equal(t, p, r.Params)
	require.Equal(t, 2, r.GlobalDepth)
	require.Equal(t, uint64(5), r.Splits)
	// A version 1 root (blocks without a stamp and valid word) is refused, saying so.
	v1 := bytes.Clone(b)
	v1[rootParamsOff] = 1
	binary.LittleEndian.PutUint64(v1[rootSumOff:], hash64(Magic, v1[:rootSumOff]))
	_, err = DecodeRoot(v1)
	require.ErrorIs(t, err, ErrBadRoot)
	require.ErrorContains(t, err, "layout version 1")
	require.Equal(t, LayoutVersion, r.Version, "the default")
	// With WholeSplit the root is of version 3, and decodes with it.
	p3 := p
	p3.WholeSplit = true
	require.Equal(t, byte(wholeSplitVersion), encodeRootConst(p3)[rootParamsOff])
	r3, err := DecodeRoot(withVersion(b, wholeSplitVersion))
	require.NoError(t, err)
	require.Equal(t, wholeSplitVersion, r3.Version)
	require.Equal(t, p3, r3.Params)
	// A version 2 root is read, saying so, and splits whole; a version from the future is
	// refused.
	r2, err := DecodeRoot(withVersion(b, 2))
	require.NoError(t, err)
	require.Equal(t, 2, r2.Version)
	require.Equal(t, p3, r2.Params)
	_, err = DecodeRoot(withVersion(b, LayoutVersion+1))
	require.ErrorIs(t, err, ErrBadRoot)
	b[rootSeedOff] ^= 1
	_, err = DecodeRoot(b)
	require.ErrorIs(t, err, ErrBadRoot)
	require.ErrorIs(t, err, farmem.ErrInvalid)
}

func FuzzDecodeBlock(f *testing.F) {
	a := farmem.MakeAddr(1, Unit)
	f.Add(uint64(a), encodeBlock(a, []byte("k"), []byte("v"), 1, 5))
	f.Add(uint64(a), encodeBlockVersion(make([]byte, Unit), a, []byte("k"), []byte("v"), 1, 5, 2))
	f.Add(uint64(a), []byte{})
	f.Add(uint64(0), make([]byte, 64))
	f.Fuzz(func(t *testing.T, addr uint64, b []byte) {
		blk, err := DecodeBlock(farmem.Addr(addr), b)
		if err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("error %v does not wrap ErrCorrupt", err)
			}
			return
		}
		version := 2
		if b[3]&0x80 != 0 {
			version = 3
		}
		buf := make([]byte, blockSize(len(blk.Key), len(blk.Value)))
		again := encodeBlockVersion(buf, farmem.Addr(addr), blk.Key, blk.Value, blk.Deadline, blk.Stamp, version)
		want := bytes.Clone(b[:len(again)])
		clear(want[ValidOffset : ValidOffset+8]) // outside the checksum; encoded as 0
		if !bytes.Equal(again, want) {
			t.Fatalf("a valid block does not re-encode to itself")
		}
	})
}

func FuzzDecodeRoot(f *testing.F) {
	p := Params{}
	_ = p.setDefaults()
	b := encodeRootConst(p)
	dir, _ := packAddr(farmem.MakeAddr(1, 1<<20))
	for i := range 8 {
		b[rootDirOff+i] = byte(dir >> (8 * i))
	}
	f.Add(b)
	f.Add(make([]byte, RootSize))
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := DecodeRoot(b)
		if err != nil {
			if !errors.Is(err, ErrBadRoot) {
				t.Fatalf("error %v does not wrap ErrBadRoot", err)
			}
			return
		}
		if err := r.Params.setDefaults(); err != nil {
			t.Fatalf("decoded invalid params %+v: %v", r.Params, err)
		}
		if !bytes.Equal(withVersion(encodeRootConst(r.Params), r.Version)[:rootDirOff], b[:rootDirOff]) {
			t.Fatalf("decoded root does not re-encode to itself")
		}
	})
}

// withVersion returns a copy of the root bytes b with layout version v, its checksum updated.
func withVersion(b []byte, v int) []byte {
	c := bytes.Clone(b)
	c[rootParamsOff] = byte(v)
	binary.LittleEndian.PutUint64(c[rootSumOff:], hash64(Magic, c[:rootSumOff]))
	return c
}
