package replmem_test

import (
	"context"
	"encoding/binary"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/farmem/farmem/alloc"
	"github.com/farmem/farmem/farmem"
	"github.com/farmem/farmem/farmem/farmemtest"
	"github.com/farmem/farmem/farmem/replmem"
	"github.com/farmem/farmem/sim"
)

// An atomic whose client stalls past its lease between its lock round and its write round
// (here the fabric clock moves on by twice the lease once the lock round has answered) writes
// nothing under those locks: it gives them back, counts the lapse in Stats.Expired and starts
// over, which costs a release and a lock round more, and its result is the one an atomic with
// no stall would return.
func TestAtomicPastItsLeaseStartsOver(t *testing.T) {
	onReplicaSim(t, 3, 10*time.Millisecond, 0, func(s *sim.Sim, m farmem.Memory, a *alloc.Allocator) {
		ctx := context.Background()
		mem := s.Topology().MemoryNodes()
		base := replBlock(t, a, 64)
		ip := &farmemtest.Interposer{Memory: m}
		const lease = 5 * time.Millisecond
		r, err := replmem.New(ip, replmem.Options{Nodes: mem, Virtual: 0xF3, Lease: lease, ClockSkew: time.Millisecond})
		require.NoError(t, err)
		word := make([]byte, 8)
		binary.LittleEndian.PutUint64(word, 5)
		require.NoError(t, r.Write(ctx, base, word))

		// The uncontended cost, with no stall: a lock round (which reads the replicas' words)
		// and a write round (which releases).
		v, err := r.FAA(ctx, base, 1)
		require.NoError(t, err)
		require.Equal(t, uint64(5), v)
		before := ip.Stats()
		v, err = r.FAA(ctx, base, 1)
		require.NoError(t, err)
		require.Equal(t, uint64(6), v)
		plain := ip.Stats().Sub(before).RoundTrips
		require.Equal(t, uint64(2), plain)
		require.Zero(t, r.ProtocolStats().Expired)

		stalled := false
		ip.After = func(ctx context.Context, v farmemtest.Verb, _ uint64, _ error) {
			if stalled || v.Batch == nil {
				return
			}
			for _, op := range v.Batch.Ops {
				if op.Kind == farmem.OpCAS {
					stalled = true
					require.NoError(t, m.Runtime().Sleep(ctx, 2*lease))
					return
				}
			}
		}
		before = ip.Stats()
		v, err = r.FAA(ctx, base, 1)
		require.True(t, stalled, "the lock round went out")
		require.NoError(t, err)
		require.Equal(t, uint64(7), v)
		require.Equal(t, uint64(1), r.ProtocolStats().Expired, "one lapse")
		require.Equal(t, plain+2, ip.Stats().Sub(before).RoundTrips, "a release and a lock round more")

		require.NoError(t, r.Read(ctx, base, word))
		require.Equal(t, uint64(8), binary.LittleEndian.Uint64(word))
	})
}
