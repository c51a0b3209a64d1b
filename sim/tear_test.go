package sim_test

import (
	"bytes"
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/farmem/farmem/farmem"
	"github.com/farmem/farmem/sim"
)

// TestTornUnalignedWrite: a torn WRITE or READ that starts off a word boundary moves every
// byte, its first ones included (its first piece once began at the next word boundary, so an
// unaligned write lost its leading bytes and an unaligned read left them unread).
func TestTornUnalignedWrite(t *testing.T) {
	m := sim.ConnectX6()
	m.MemoryNodes, m.ComputeNodes, m.Tearing = 1, 1, true
	s, err := sim.New(m, 7)
	require.NoError(t, err)
	defer s.Close()
	s.Run(func() {
		ctx := context.Background()
		c, err := s.Open(ctx, s.Topology().ComputeNodes()[0])
		require.NoError(t, err)
		base := farmem.MakeAddr(s.Topology().MemoryNodes()[0], 4096)
		for off := uint64(0); off < 8; off++ {
			for _, n := range []int{9, 15, 34, 100} {
				want := bytes.Repeat([]byte{byte(off*16) + byte(n)}, n)
				require.NoError(t, c.Write(ctx, base, make([]byte, 128)))
				require.NoError(t, c.Write(ctx, base.Add(off), want))
				got := make([]byte, n)
				require.NoError(t, c.Read(ctx, base.Add(off), got))
				require.Equal(t, want, got, "offset %d, %d bytes", off, n)
			}
		}
	})
}
