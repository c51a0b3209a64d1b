package race

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/farmem/farmem/alloc"
	"github.com/farmem/farmem/farmem"
)

// blockFormat reads the KV block of key and returns its layout version by its format bit.
func blockFormat(t *testing.T, ctx context.Context, tab *Table, m farmem.Memory, key string) int {
	loc, err := tab.Locate(ctx, []byte(key))
	require.NoError(t, err)
	var hdr [8]byte
	require.NoError(t, m.Read(ctx, loc.Block, hdr[:]))
	if binary.LittleEndian.Uint16(hdr[2:])&sum3Flag != 0 {
		return 3
	}
	return 2
}

// TestLayoutVersions: a new table is at LayoutVersion (4; version 3 with Params.WholeSplit)
// and writes version 3 blocks; a version 2
// table (a root as an older binary writes it) opens, keeps writing version 2 blocks, and reads
// blocks of both formats.
func TestLayoutVersions(t *testing.T) {
	ctx := context.Background()
	tab, m := localTable(t, Params{Groups: 8, WholeSplit: true})
	require.Equal(t, wholeSplitVersion, tab.version)
	split, _ := localTable(t, Params{Groups: 8})
	require.Equal(t, LayoutVersion, split.version)
	for i := range 20 {
		require.NoError(t, tab.Insert(ctx, fmt.Appendf(nil, "new%d", i), fmt.Appendf(nil, "v3-%d", i)))
	}
	require.Equal(t, 3, blockFormat(t, ctx, tab, m, "new0"))

	// Make the root a version 2 root: the params word's low byte, and the root checksum.
	rb := make([]byte, RootSize)
	require.NoError(t, m.Read(ctx, tab.root, rb))
	rb[rootParamsOff] = 2
	binary.LittleEndian.PutUint64(rb[rootSumOff:], hash64(Magic, rb[:rootSumOff]))
	require.NoError(t, m.Write(ctx, tab.root, rb[:rootDirOff]))
	a, err := alloc.New(ctx, m, alloc.Options{})
	require.NoError(t, err)
	old, err := Open(ctx, m, a, tab.root, Options{})
	require.NoError(t, err)
	info, err := old.Info(ctx)
	require.NoError(t, err)
	require.Equal(t, 2, info.Version)

	for i := range 20 {
		require.NoError(t, old.Insert(ctx, fmt.Appendf(nil, "old%d", i), fmt.Appendf(nil, "v2-%d", i)))
	}
	require.NoError(t, old.Update(ctx, []byte("new1"), []byte("v2-update")))
	require.Equal(t, 2, blockFormat(t, ctx, old, m, "old0"))
	require.Equal(t, 2, blockFormat(t, ctx, old, m, "new1"))
	require.Equal(t, 3, blockFormat(t, ctx, old, m, "new2"))
	for _, h := range []*Table{tab, old} {
		for i := range 20 {
			v, err := h.Search(ctx, fmt.Appendf(nil, "old%d", i))
			require.NoError(t, err)
			require.Equal(t, fmt.Sprintf("v2-%d", i), string(v))
			want := fmt.Sprintf("v3-%d", i)
			if i == 1 {
				want = "v2-update"
			}
			v, err = h.Search(ctx, fmt.Appendf(nil, "new%d", i))
			require.NoError(t, err)
			require.Equal(t, want, string(v))
		}
	}
	require.NoError(t, old.Delete(ctx, []byte("new2")))
	_, err = tab.Search(ctx, []byte("new2"))
	require.ErrorIs(t, err, ErrNotFound)
	require.NoError(t, old.Close())
}

// TestDecodeBlockPadding: for every key and value length up to 24 bytes, a block encoded into
// a buffer full of garbage decodes (the padding and the word before the checksum are zeroed,
// whatever the buffer held), and setting any padding byte, checksum recomputed, is refused as
// corrupt, while the bytes of the key and value in the same word are not taken for padding.
func TestDecodeBlockPadding(t *testing.T) {
	addr := farmem.MakeAddr(1, 4096)
	for kl := 0; kl <= 24; kl++ {
		for vl := 0; vl <= 24-kl; vl++ {
			key, val := bytes.Repeat([]byte{0xab}, kl), bytes.Repeat([]byte{0xcd}, vl)
			buf := bytes.Repeat([]byte{0xff}, 128)
			b := encodeBlockInto(buf, addr, key, val, 5, 9)
			blk, err := DecodeBlock(addr, b)
			require.NoError(t, err, "kl %d vl %d", kl, vl)
			require.Equal(t, key, blk.Key)
			require.Equal(t, val, blk.Value)
			n := len(b)
			for i := blockHeader + kl + vl; i < n-8; i++ {
				c := bytes.Clone(b)
				c[i] = 1
				binary.LittleEndian.PutUint64(c[n-8:], sum3(addr, c[:n-8]))
				_, err := DecodeBlock(addr, c)
				require.ErrorIs(t, err, ErrCorrupt, "padding byte %d of kl %d vl %d", i, kl, vl)
				require.ErrorContains(t, err, "padding")
			}
		}
	}
}
