package kvstore

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/farmem/farmem/farmem"
)

func TestRootWord(t *testing.T) {
	t.Parallel()
	require.Equal(t, RootEmpty, RootWord(0).State())
	now := farmem.Time(1_750_000_000_123_456_789) // a wall-clock time in 2025
	w := claimWord(65535, now)
	require.Equal(t, RootClaimed, w.State())
	require.Equal(t, farmem.ClientID(65535), w.Claimant())
	require.GreaterOrEqual(t, w.Deadline(), now, "rounded up, never down")
	require.Less(t, w.Deadline().Sub(now), farmem.Time(1<<claimUnit).Sub(0))

	for _, a := range []farmem.Addr{farmem.MakeAddr(1, 64), farmem.MakeAddr(farmem.MaxMemoryNode, 1<<48-64)} {
		r, err := readyWord(a)
		require.NoError(t, err)
		require.Equal(t, RootReady, r.State(), "%v", a)
		require.Equal(t, a, r.Descriptor())
		require.Contains(t, r.String(), a.String())
	}
	for _, a := range []farmem.Addr{0, farmem.MakeAddr(1, 65), farmem.MakeAddr(farmem.ComputeID(1).Node(), 64)} {
		_, err := readyWord(a)
		require.ErrorIs(t, err, farmem.ErrInvalid, "%v", a)
	}
	require.Equal(t, RootInvalid, RootWord(3<<62).State())
	require.Equal(t, RootInvalid, RootWord(2<<62).State(), "ready with node 0")
	require.Equal(t, RootInvalid, RootWord(2<<62|1<<60|1<<42).State(), "ready with reserved bits")
}

func TestDescriptorRoundTrip(t *testing.T) {
	t.Parallel()
	at := farmem.MakeAddr(2, 0x10040)
	d := Descriptor{Version: Version, Index: "race", Replication: "none", Sync: "cider", Roots: []farmem.Addr{farmem.MakeAddr(1, 0x20000)},
		Created: 12345, Creator: 7}
	b, err := d.Encode(at)
	require.NoError(t, err)
	got, err := DecodeDescriptor(at, b)
	require.NoError(t, err)
	require.Equal(t, d, got)
	_, err = DecodeDescriptor(at.Add(64), b)
	require.ErrorIs(t, err, ErrBadRoot, "the checksum covers the address")
	for i := range b {
		c := append([]byte(nil), b...)
		c[i] ^= 0x10
		_, err := DecodeDescriptor(at, c)
		require.ErrorIs(t, err, ErrBadRoot, "byte %d flipped", i)
	}
	for _, bad := range []Descriptor{
		{Index: "", Replication: "none", Sync: "x", Roots: d.Roots},
		{Index: "an-index-name-too-long", Replication: "none", Sync: "x", Roots: d.Roots},
		{Index: "race", Replication: "none", Roots: d.Roots},
		{Index: "race", Replication: "none", Sync: "x"},
		{Index: "race", Replication: "none", Sync: "x", Roots: make([]farmem.Addr, MaxReplicas+1)},
		{Index: "race", Replication: "none", Sync: "x", Roots: []farmem.Addr{0}},
	} {
		_, err := bad.Encode(at)
		require.ErrorIs(t, err, farmem.ErrInvalid)
	}
}

// FuzzDescriptor: decoding never panics, and whatever decodes re-encodes to the same bytes.
func FuzzDescriptor(f *testing.F) {
	at := farmem.MakeAddr(1, 0x4000)
	d := Descriptor{Version: Version, Index: "race", Replication: "mirror", Sync: "optimistic",
		Roots: []farmem.Addr{farmem.MakeAddr(1, 0x20000), farmem.MakeAddr(2, 0x40)}, Created: 99, Creator: 3}
	b, _ := d.Encode(at)
	f.Add(uint64(at), b)
	f.Add(uint64(0), make([]byte, DescriptorSize))
	f.Add(uint64(at), b[:100])
	f.Fuzz(func(t *testing.T, a uint64, b []byte) {
		d, err := DecodeDescriptor(farmem.Addr(a), b)
		if err != nil {
			require.ErrorIs(t, err, ErrBadRoot)
			return
		}
		again, err := d.Encode(farmem.Addr(a))
		require.NoError(t, err)
		require.Equal(t, b[:DescriptorSize], again)
		_ = RootWord(a).State()
		_ = RootWord(a).String()
	})
}
