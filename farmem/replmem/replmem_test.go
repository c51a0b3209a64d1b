package replmem_test

import (
	"context"
	"encoding/binary"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/farmem/farmem/alloc"
	"github.com/farmem/farmem/farmem"
	"github.com/farmem/farmem/farmem/replmem"
	"github.com/farmem/farmem/sim"
)

// TestOptions: replica sets that are not 3, 5 or 7 distinct memory nodes, and a virtual node
// that exists, are refused.
func TestOptions(t *testing.T) {
	model := sim.ConnectX6()
	model.MemoryNodes, model.ComputeNodes = 4, 1
	s, err := sim.New(model, 1)
	require.NoError(t, err)
	defer s.Close()
	s.Run(func() {
		m, err := s.Open(context.Background(), s.Topology().ComputeNodes()[0])
		require.NoError(t, err)
		mem := s.Topology().MemoryNodes()
		for _, o := range []replmem.Options{
			{Nodes: mem[:2], Virtual: 0xF3},
			{Nodes: []farmem.NodeID{mem[0], mem[0], mem[1]}, Virtual: 0xF3},
			{Nodes: mem[:3], Virtual: mem[3]},
			{Nodes: mem[:3], Virtual: 0xF3, Lease: time.Millisecond, ClockSkew: time.Millisecond},
		} {
			_, err := replmem.New(m, o)
			require.ErrorIs(t, err, farmem.ErrInvalid, "%+v", o)
		}
		_, err = replmem.New(m, replmem.Options{Nodes: mem[1:], Virtual: 0xF3})
		require.NoError(t, err)
	})
}

// TestCounterSim: clients add to one replicated word with FAA and CAS while the first replica
// crashes: every FAA returns a distinct previous value, every successful CAS one no FAA or
// other CAS returned, and the final value counts every addition. Then a second replica
// crashes and the next operation fails with ErrNoQuorum, wrapping farmem.ErrNodeDown.
func TestCounterSim(t *testing.T) {
	model := sim.ConnectX6()
	model.MemoryNodes, model.ComputeNodes, model.MemorySize = 3, 2, 16<<20
	model.Tearing, model.Jitter = true, 300*time.Nanosecond
	s, err := sim.New(model, 7)
	require.NoError(t, err)
	defer s.Close()
	const clients, adds = 5, 60
	s.Run(func() {
		ctx := context.Background()
		comp := s.Topology().ComputeNodes()
		mem := s.Topology().MemoryNodes()
		m0, err := s.Open(ctx, comp[0])
		require.NoError(t, err)
		require.NoError(t, alloc.FormatAll(ctx, m0, alloc.FormatOptions{}))
		a0, err := alloc.New(ctx, m0, alloc.Options{})
		require.NoError(t, err)
		o, err := a0.AllocSymmetric(ctx, replmem.Stride*64, 64)
		require.NoError(t, err)
		opts := replmem.Options{Nodes: mem, Virtual: 0xF3}
		word := farmem.MakeAddr(0xF3, uint64(o)/replmem.Stride)
		r0, err := replmem.New(m0, opts)
		require.NoError(t, err)
		require.NoError(t, r0.Write(ctx, word, make([]byte, 64)))
		seen := make([][]uint64, clients)
		s.At(s.Now().Add(50*time.Microsecond), func() { require.NoError(t, s.Crash(mem[0])) })
		require.NoError(t, s.Parallel(clients, func(i int) {
			m, err := s.Open(ctx, comp[i%len(comp)])
			require.NoError(t, err)
			r, err := replmem.New(m, opts)
			require.NoError(t, err)
			for k := range adds {
				if k%2 == 0 {
					prev, err := r.FAA(ctx, word, 1)
					require.NoError(t, err)
					seen[i] = append(seen[i], prev)
					continue
				}
				for {
					var b [8]byte
					require.NoError(t, r.Read(ctx, word, b[:]))
					v := binary.LittleEndian.Uint64(b[:])
					prev, err := r.CAS(ctx, word, v, v+1)
					require.NoError(t, err)
					if prev == v {
						seen[i] = append(seen[i], prev)
						break
					}
				}
			}
			require.NotZero(t, r.ProtocolStats().Suspected)
		}))
		all := slices.Concat(seen...)
		slices.Sort(all)
		for k, v := range all {
			require.Equal(t, uint64(k), v, "the additions' previous values are not 0..n-1")
		}
		var b [8]byte
		require.NoError(t, r0.Read(ctx, word, b[:]))
		require.Equal(t, uint64(clients*adds), binary.LittleEndian.Uint64(b[:]))
		// Post runs the batch before it returns: its Pending is done, with the results.
		var pb farmem.Batch
		pb.FAA(word, 0)
		p := r0.Post(ctx, &pb)
		require.NoError(t, p.Wait(ctx, 0))
		got, err := pb.Result(0)
		require.NoError(t, err)
		require.Equal(t, uint64(clients*adds), got)
		require.NoError(t, s.Crash(mem[1]))
		_, err = r0.FAA(ctx, word, 1)
		require.ErrorIs(t, err, replmem.ErrNoQuorum)
		require.ErrorIs(t, err, farmem.ErrNodeDown)
	})
}
