package transport_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/farmem/farmem/farmem"
	"github.com/farmem/farmem/farmem/transport"
)

// TestCountersLoneOps: one-op batches, counted with one addition for the verb and the round
// trip together, snapshot as the same verbs, round trips and bytes as the same ops counted one
// by one in a larger batch; to the client's own node or unsignaled they cost no round trip.
func TestCountersLoneOps(t *testing.T) {
	self := farmem.ComputeID(1).Node()
	mem, peer := farmem.NodeID(1), farmem.ComputeID(2).Node()
	ops := func(b *farmem.Batch, n farmem.NodeID) {
		b.Read(farmem.MakeAddr(n, 0), make([]byte, 24))
		b.Write(farmem.MakeAddr(n, 64), make([]byte, 40))
		b.CAS(farmem.MakeAddr(n, 8), 1, 2)
		b.FAA(farmem.MakeAddr(n, 16), 1)
		b.MaskedCAS(farmem.MakeAddr(n, 24), 1, 1, 2, 2)
	}
	var lone transport.Counters
	var all farmem.Batch
	rts := uint64(0)
	for _, n := range []farmem.NodeID{mem, peer, self} {
		var b farmem.Batch
		ops(&b, n)
		for i := range b.Ops {
			one := farmem.Batch{Ops: b.Ops[i : i+1]}
			lone.CountBatch(&one, self)
			if n != self {
				rts++
			}
		}
		ops(&all, n)
	}
	var un farmem.Batch
	un.Unsignaled(un.Write(farmem.MakeAddr(mem, 0), make([]byte, 8)))
	lone.CountOp(&un.Ops[0], self)
	s := lone.Snapshot()
	require.Equal(t, rts, s.RoundTrips, "a round trip per one-op batch leaving the node")
	require.Equal(t, uint64(1), s.Unsignaled)
	var ref transport.Counters
	ref.CountBatch(&all, self)
	r := ref.Snapshot()
	for tg := range farmem.NumTargets {
		for k := range farmem.NumOpKinds {
			want := r.Verbs[tg][k]
			if tg == farmem.TargetMemory && k == farmem.OpWrite {
				want++ // the unsignaled write
			}
			require.Equal(t, want, s.Verbs[tg][k], "verbs of kind %v to %v", k, tg)
		}
	}
	require.Equal(t, r.BytesOut+8, s.BytesOut)
	require.Zero(t, s.BytesIn, "outcomes are counted apart")
}

// TestCountersReceiveAhead: bytes counted ahead of a run of outcomes, then each outcome counted
// against them, come to what CountResult of each outcome counts.
func TestCountersReceiveAhead(t *testing.T) {
	var b farmem.Batch
	b.Read(farmem.MakeAddr(1, 0), make([]byte, 24))
	b.Read(farmem.MakeAddr(1, 64), make([]byte, 16)) // fails
	b.CAS(farmem.MakeAddr(1, 8), 1, 2)               // finds 1: succeeds
	b.CAS(farmem.MakeAddr(1, 8), 1, 2)               // finds 3: fails its comparison
	b.FAA(farmem.MakeAddr(1, 16), 1)                 // fails
	b.Write(farmem.MakeAddr(1, 32), make([]byte, 8))
	b.Unsignaled(b.Read(farmem.MakeAddr(1, 40), make([]byte, 8)))
	vals := []uint64{0, 0, 1, 3, 0, 0, 0}
	errs := []error{nil, farmem.ErrNodeDown, nil, nil, farmem.ErrNodeDown, nil, nil}
	var ahead, each transport.Counters
	var n uint64
	for i := range b.Ops {
		n += transport.ResultBytes(&b.Ops[i])
	}
	require.Equal(t, uint64(24+16+8+8+8), n)
	ahead.ReceiveAhead(n)
	for i := range b.Ops {
		ahead.CountResultAhead(&b.Ops[i], vals[i], errs[i])
		each.CountResult(&b.Ops[i], vals[i], errs[i])
	}
	require.Equal(t, each.Snapshot(), ahead.Snapshot())
	require.Equal(t, uint64(24+8+8), ahead.Snapshot().BytesIn)
	require.Equal(t, uint64(1), ahead.Snapshot().FailedCAS)
}
