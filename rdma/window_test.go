package rdma

import (
	"context"
	"encoding/binary"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/farmem/farmem/farmem"
)

// With a window of two outstanding requests, a burst of posts to one node goes partly through
// the connection's backlog: the batches still apply in posting order (the last write wins and
// every FAA lands in order), also when slots free up while frames wait in the backlog, and each
// counts one round trip.
func TestBacklogKeepsPostingOrder(t *testing.T) {
	_, cl := startServers(t, 1, 1<<20)
	f := dialN(t, cl, 1, Options{MaxOutstanding: 2})[0]
	m, err := f.Open(context.Background(), f.Hosted()[0])
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	a := farmem.MakeAddr(1, 4096)
	const n = 200
	before := m.Stats().RoundTrips
	bs := make([]farmem.Batch, n)
	ps := make([]*farmem.Pending, n)
	for i := range bs {
		v := make([]byte, 8)
		binary.LittleEndian.PutUint64(v, uint64(i)+1)
		bs[i].Write(a, v)
		bs[i].FAA(a.Add(8), 1)
		if i%3 == 0 {
			bs[i].Unsignaled(bs[i].FAA(a.Add(16), 1))
		}
		ps[i] = m.Post(ctx, &bs[i])
		if i%20 == 10 {
			// Answers read now free slots while later frames still wait in the backlog: the
			// next posts must queue behind them, not take the slots.
			require.NoError(t, ps[i-10].Wait(ctx, 0))
		}
	}
	for i, p := range ps {
		require.NoError(t, p.Wait(ctx, 0))
		_, err := bs[i].Result(0)
		require.NoError(t, err)
		prev, err := bs[i].Result(1)
		require.NoError(t, err)
		require.Equal(t, uint64(i), prev, "batch %d's FAA ran out of posting order", i)
	}
	got := make([]byte, 24)
	require.NoError(t, m.Read(ctx, a, got))
	require.Equal(t, uint64(n), binary.LittleEndian.Uint64(got), "the last write wins")
	require.Equal(t, uint64(n), binary.LittleEndian.Uint64(got[8:]))
	require.Equal(t, uint64((n+2)/3), binary.LittleEndian.Uint64(got[16:]), "unsignaled FAAs, in order behind the backlog")
	require.Equal(t, uint64(n+1), m.Stats().RoundTrips-before, "one round trip per batch and the read")
}
