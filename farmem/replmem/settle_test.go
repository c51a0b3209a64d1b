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

// An atomic whose lock round locked exactly f+1 replicas (the third is suspected, left out)
// loses one of them in its write round (it crashes before applying it): its new version is
// released on one replica only, with one replica down of three. The atomic settles it (a
// round over the replicas that answer, the suspected one included since fewer than f+1 others
// are left, finds its version the latest and writes it back) and succeeds with the value it
// found, instead of failing with ErrNoQuorum ("outcome unknown"). The sum reads back from the
// two replicas left, and the next FAA continues from it.
func TestAtomicSettlesWriteWhenLockedReplicaCrashes(t *testing.T) {
	onReplicaSim(t, 7, 10*time.Millisecond, 0, func(s *sim.Sim, m farmem.Memory, a *alloc.Allocator) {
		ctx := context.Background()
		mem := s.Topology().MemoryNodes()
		base := replBlock(t, a, 64)
		ip := &farmemtest.Interposer{Memory: m}
		// A long suspicion, so that the resumed replica is still left out at the crash.
		r, err := replmem.New(ip, replmem.Options{Nodes: mem, Virtual: 0xF3, Health: new(replmem.Health),
			Suspect: time.Second, SuspectMax: time.Second})
		require.NoError(t, err)
		word := make([]byte, 8)
		binary.LittleEndian.PutUint64(word, 5)
		require.NoError(t, r.Write(ctx, base, word))

		require.NoError(t, s.Hang(mem[2]))
		v, err := r.FAA(ctx, base, 1)
		require.NoError(t, err, "two of three answer")
		require.Equal(t, uint64(5), v)
		require.NoError(t, s.Resume(mem[2]))

		// The next FAA locks mem[0] and mem[1]; mem[0] crashes as its write round goes out.
		crashed := false
		ip.Before = func(_ context.Context, v farmemtest.Verb) {
			if crashed {
				return
			}
			for _, op := range v.Batch.Ops {
				if op.Kind == farmem.OpWrite && op.Addr.Node() == mem[0] {
					crashed = true
					require.NoError(t, s.Crash(mem[0]))
					return
				}
			}
		}
		v, err = r.FAA(ctx, base, 1)
		require.True(t, crashed, "the FAA's write round went out")
		require.NoError(t, err, "one replica of three is down")
		require.Equal(t, uint64(6), v)
		require.Equal(t, uint64(1), r.ProtocolStats().Settled, "settled by an identity round")

		require.NoError(t, r.Read(ctx, base, word))
		require.Equal(t, uint64(7), binary.LittleEndian.Uint64(word))
		v, err = r.FAA(ctx, base, 1)
		require.NoError(t, err)
		require.Equal(t, uint64(7), v)
	})
}
