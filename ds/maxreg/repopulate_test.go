package maxreg_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/farmem/farmem/ds/maxreg"
	"github.com/farmem/farmem/farmem"
)

// zeroReplica wipes a register's block at a (size bytes) as a restart would: plain writes
// for the header, the in-place record and the lanes, atomics for the metadata words.
func zeroReplica(t *testing.T, ctx context.Context, m farmem.Memory, a farmem.Addr, p maxreg.Params, size uint64) {
	t.Helper()
	b := new(farmem.Batch)
	b.Write(a, make([]byte, 128))
	for w := range uint64(p.Words) {
		b.MaskedCAS(a+128+farmem.Addr(8*w), 0, 0, 0, ^uint64(0))
	}
	in := uint64(128 + 8*p.Words)
	b.Write(a+farmem.Addr(in), make([]byte, size-in))
	require.NoError(t, m.Do(ctx, b))
}

// TestRepopulateReplica: the last write lands on replicas 0 and 1 only (node 3 hangs past the
// down timeout), replica 0 then loses its memory, and is repopulated from replicas 1 and 2:
// it holds the largest tag again, with the header byte for byte, so a fresh handle reads the
// last write with node 2 (replica 1) crashed. Without the copy, that read returns an older
// write (replica 2 missed the last one).
func TestRepopulateReplica(t *testing.T) {
	t.Parallel()
	s := newSimN(t, 3, 3)
	p := repParams
	p.Words = 4
	addrs := createRep(t, s, p)
	s.Run(func() {
		ctx := context.Background()
		w := openRep(t, s, 0, addrs)
		for i := range 5 {
			_, err := w.r.Write(ctx, []byte{byte(i)})
			require.NoError(t, err)
		}
		require.NoError(t, s.Hang(addrs[2].Node()))
		last, err := w.r.Write(ctx, []byte{9})
		require.NoError(t, err)
		require.NoError(t, s.Runtime().Sleep(ctx, 2*s.Topology().DownTimeout))
		require.NoError(t, s.Resume(addrs[2].Node()))

		size := maxreg.Size(p)
		hdr := make([]byte, 88)
		require.NoError(t, w.m.Read(ctx, addrs[1], hdr))
		zeroReplica(t, ctx, w.m, addrs[0], p, size)
		rep, err := maxreg.RepopulateReplica(ctx, w.m, addrs, 0)
		require.NoError(t, err)
		require.Equal(t, last, rep.Top)
		require.Positive(t, rep.Words)
		got := make([]byte, 88)
		require.NoError(t, w.m.Read(ctx, addrs[0], got))
		require.Equal(t, hdr, got)

		require.NoError(t, s.Crash(addrs[1].Node()))
		r := openRep(t, s, 1, addrs)
		tag, v, err := r.r.Read(ctx)
		require.NoError(t, err)
		require.Equal(t, last, tag)
		require.Equal(t, []byte{9}, v)
	})
}

// TestHealReplica: a replica never formatted (zero) while the register is written is healed
// from the one other replica that answers (node 2 crashed): header and largest tag copied,
// and a write made before stays.
func TestHealReplica(t *testing.T) {
	t.Parallel()
	s := newSimN(t, 4, 3)
	p := repParams
	p.Words = 4
	addrs := createRep(t, s, p)
	s.Run(func() {
		ctx := context.Background()
		w := openRep(t, s, 0, addrs)
		zeroReplica(t, ctx, w.m, addrs[2], p, maxreg.Size(p))
		last, err := w.r.Write(ctx, []byte{7})
		require.NoError(t, err)
		require.NoError(t, s.Crash(addrs[1].Node()))
		_, err = maxreg.RepopulateReplica(ctx, w.m, addrs, 2)
		require.ErrorIs(t, err, maxreg.ErrNoQuorum, "one other replica is no majority of them")
		rep, err := maxreg.HealReplica(ctx, w.m, addrs, 2)
		require.NoError(t, err)
		require.Equal(t, last, rep.Top)
		r := openRep(t, s, 1, addrs)
		tag, v, err := r.r.Read(ctx)
		require.NoError(t, err)
		require.Equal(t, last, tag)
		require.Equal(t, []byte{7}, v)
	})
}
