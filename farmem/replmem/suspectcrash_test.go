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

// A replica suspected after a hang is back (resumed) but still left out when another replica
// crashes: a plain read then asks the one left out too, instead of failing with ErrNoQuorum
// for want of the crashed replica's answer.
func TestReadAsksSuspectedReplicaWhenAnotherCrashes(t *testing.T) {
	model := sim.ConnectX6()
	model.MemoryNodes, model.ComputeNodes, model.MemorySize = 3, 1, 16<<20
	model.DownTimeout = 10 * time.Millisecond
	s, err := sim.New(model, 5)
	require.NoError(t, err)
	defer s.Close()
	s.Run(func() {
		ctx := context.Background()
		comp := s.Topology().ComputeNodes()
		mem := s.Topology().MemoryNodes()
		m, err := s.Open(ctx, comp[0])
		require.NoError(t, err)
		require.NoError(t, alloc.FormatAll(ctx, m, alloc.FormatOptions{}))
		a, err := alloc.New(ctx, m, alloc.Options{})
		require.NoError(t, err)
		o, err := a.AllocSymmetric(ctx, replmem.Stride*64, 64)
		require.NoError(t, err)
		base := farmem.MakeAddr(0xF3, uint64(o)/replmem.Stride)
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
