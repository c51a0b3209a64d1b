package replmem_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/farmem/farmem/alloc"
	"github.com/farmem/farmem/farmem"
	"github.com/farmem/farmem/farmem/replmem"
	"github.com/farmem/farmem/sim"
)

// onReplicaSim runs body in a simulator (ConnectX-6 model, the given down timeout and jitter)
// of 3 memory nodes, formatted, and one compute node, with body's m a client of it and a an
// allocator on m.
func onReplicaSim(t *testing.T, seed uint64, down, jitter time.Duration, body func(s *sim.Sim, m farmem.Memory, a *alloc.Allocator)) {
	model := sim.ConnectX6()
	model.MemoryNodes, model.ComputeNodes, model.MemorySize = 3, 1, 16<<20
	model.DownTimeout, model.Jitter = down, jitter
	s, err := sim.New(model, seed)
	require.NoError(t, err)
	defer s.Close()
	s.Run(func() {
		ctx := context.Background()
		m, err := s.Open(ctx, s.Topology().ComputeNodes()[0])
		require.NoError(t, err)
		require.NoError(t, alloc.FormatAll(ctx, m, alloc.FormatOptions{}))
		a, err := alloc.New(ctx, m, alloc.Options{})
		require.NoError(t, err)
		body(s, m, a)
	})
}

// replBlock allocates a replicated block of size bytes on virtual node 0xF3 (the symmetric
// area, Stride times as much on each replica) and returns its logical address.
func replBlock(t *testing.T, a *alloc.Allocator, size uint64) farmem.Addr {
	o, err := a.AllocSymmetric(context.Background(), replmem.Stride*size, 64)
	require.NoError(t, err)
	return farmem.MakeAddr(0xF3, uint64(o)/replmem.Stride)
}

// A replica suspected after a hang is back (resumed) but still left out when another replica
// crashes: a plain read then asks the one left out too, instead of failing with ErrNoQuorum
// for want of the crashed replica's answer.
func TestReadAsksSuspectedReplicaWhenAnotherCrashes(t *testing.T) {
	onReplicaSim(t, 5, 10*time.Millisecond, 0, func(s *sim.Sim, m farmem.Memory, a *alloc.Allocator) {
		ctx := context.Background()
		mem := s.Topology().MemoryNodes()
		base := replBlock(t, a, 64)
		// A long suspicion, so that the resumed replica is still left out at the crash.
		r, err := replmem.New(m, replmem.Options{Nodes: mem, Virtual: 0xF3, Health: new(replmem.Health),
			Suspect: time.Second, SuspectMax: time.Second})
		require.NoError(t, err)
		want := []byte("8 bytes!")
		require.NoError(t, r.Write(ctx, base, want))

		require.NoError(t, s.Hang(mem[1]))
		got := make([]byte, 8)
		require.NoError(t, r.Read(ctx, base, got), "two of three answer")
		require.Equal(t, want, got)
		require.NoError(t, s.Resume(mem[1]))
		require.NoError(t, s.Crash(mem[2]))

		got = make([]byte, 8)
		require.NoError(t, r.Read(ctx, base, got), "the suspected replica answers with the first")
		require.Equal(t, want, got)
	})
}
