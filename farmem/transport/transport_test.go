package transport_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/farmem/farmem/farmem"
	"github.com/farmem/farmem/farmem/transport"
)

func TestTopologyClientMapping(t *testing.T) {
	tp := &farmem.Topology{ClientsPerNode: 16, SliceSize: 1024}
	seen := map[farmem.ClientID]bool{}
	for c := farmem.ComputeID(1); c <= 4; c++ {
		for slot := range 16 {
			id, err := transport.ClientIDOf(tp, c, slot)
			require.NoError(t, err)
			require.False(t, seen[id])
			seen[id] = true
			gc, gs, err := transport.ClientSlot(tp, id)
			require.NoError(t, err)
			require.Equal(t, c, gc)
			require.Equal(t, slot, gs)
			a, err := tp.ClientSlice(id)
			require.NoError(t, err)
			require.Equal(t, c.Node(), a.Node())
			require.Equal(t, uint64(farmem.ComputeHeaderSize+slot*1024), a.Offset())
		}
	}
	require.Len(t, seen, 64)
	require.Contains(t, seen, farmem.ClientID(1), "ids are dense from 1")
	require.Contains(t, seen, farmem.ClientID(64))
	_, err := transport.ClientIDOf(tp, 0, 0)
	require.ErrorIs(t, err, farmem.ErrInvalid)
	_, err = transport.ClientIDOf(tp, 1, 16)
	require.ErrorIs(t, err, farmem.ErrInvalid)
	_, err = tp.ClientSlice(0)
	require.ErrorIs(t, err, farmem.ErrInvalid)
	_, err = (&farmem.Topology{}).ClientSlice(5)
	require.ErrorIs(t, err, farmem.ErrInvalid, "no panic on a zero topology")
	require.Equal(t, uint64(farmem.ComputeHeaderSize+16*1024), tp.SharedBase())
}

func TestOpApply(t *testing.T) {
	cas := farmem.Op{Kind: farmem.OpCAS, Cmp: 1, Swap: 2}
	next, ok := transport.Apply(&cas, 1)
	require.True(t, ok)
	require.Equal(t, uint64(2), next)
	next, ok = transport.Apply(&cas, 3)
	require.False(t, ok)
	require.Equal(t, uint64(3), next)
	faa := farmem.Op{Kind: farmem.OpFAA, Swap: ^uint64(0)}
	next, _ = transport.Apply(&faa, 0)
	require.Equal(t, ^uint64(0), next)
	m := farmem.Op{Kind: farmem.OpMaskedCAS, Cmp: 0x10, CmpMask: 0xf0, Swap: 0x0a, SwapMask: 0x0f}
	next, ok = transport.Apply(&m, 0x13)
	require.True(t, ok)
	require.Equal(t, uint64(0x1a), next)
}

func TestOpCheck(t *testing.T) {
	for _, tc := range []struct {
		op   farmem.Op
		want error
	}{
		{farmem.Op{Kind: farmem.OpRead, Addr: farmem.MakeAddr(1, 0), Buf: make([]byte, 64)}, nil},
		{farmem.Op{Kind: farmem.OpRead, Addr: farmem.MakeAddr(1, 65), Buf: make([]byte, 64)}, farmem.ErrOutOfRange},
		{farmem.Op{Kind: farmem.OpWrite, Addr: farmem.MakeAddr(1, 128), Buf: nil}, farmem.ErrOutOfRange},
		{farmem.Op{Kind: farmem.OpCAS, Addr: farmem.MakeAddr(1, 120)}, nil},
		{farmem.Op{Kind: farmem.OpCAS, Addr: farmem.MakeAddr(1, 124)}, farmem.ErrMisaligned},
		{farmem.Op{Kind: farmem.OpFAA, Addr: farmem.MakeAddr(1, 128)}, farmem.ErrOutOfRange},
		{farmem.Op{Kind: 99}, farmem.ErrInvalid},
	} {
		err := transport.CheckOp(&tc.op, 128)
		if tc.want == nil {
			require.NoError(t, err)
		} else {
			require.ErrorIs(t, err, tc.want)
		}
	}
}

func TestStatsArithmetic(t *testing.T) {
	var c transport.Counters
	var b farmem.Batch
	self := farmem.ComputeID(1).Node()
	b.Write(farmem.MakeAddr(1, 0), make([]byte, 10))
	b.CAS(farmem.MakeAddr(2, 0), 0, 1)
	b.Unsignaled(b.FAA(farmem.MakeAddr(farmem.ComputeID(2).Node(), 0), 1))
	b.Read(farmem.MakeAddr(self, 0), make([]byte, 4))
	c.CountBatch(&b, self)
	c.CountResult(&b.Ops[1], 7, nil) // failed CAS
	c.CountResult(&b.Ops[3], 0, nil)
	c.CountResult(&b.Ops[0], 0, errors.New("x"))
	s := c.Snapshot()
	require.Equal(t, uint64(1), s.RoundTrips)
	require.Equal(t, uint64(1), s.Verbs[farmem.TargetMemory][farmem.OpWrite])
	require.Equal(t, uint64(1), s.Verbs[farmem.TargetCompute][farmem.OpFAA])
	require.Equal(t, uint64(1), s.Verbs[farmem.TargetLocal][farmem.OpRead])
	require.Equal(t, uint64(4), s.TotalVerbs())
	require.Equal(t, uint64(2), s.VerbsTo(farmem.TargetMemory))
	require.Equal(t, uint64(1), s.VerbsOf(farmem.OpCAS))
	require.Equal(t, uint64(1), s.FailedCAS)
	require.Equal(t, uint64(10+16+8), s.BytesOut)
	require.Equal(t, uint64(8+4), s.BytesIn)
	require.Equal(t, s, s.Add(s).Sub(s))
	require.Equal(t, farmem.Stats{}, s.Sub(s))
	require.Contains(t, s.String(), "memory.write=1")

	// A batch to the caller's own node only is no round trip.
	var local farmem.Batch
	local.Read(farmem.MakeAddr(self, 0), make([]byte, 8))
	var c2 transport.Counters
	c2.CountBatch(&local, self)
	require.Zero(t, c2.Snapshot().RoundTrips)
}

func TestCodes(t *testing.T) {
	for c := transport.CodeOutOfRange; c < transport.CodeOther; c++ {
		err := fmt.Errorf("wrapped: %w", c.Err())
		require.Equal(t, c, transport.CodeOf(err), "code %d", c)
	}
	require.Equal(t, transport.CodeOK, transport.CodeOf(nil))
	require.Equal(t, transport.CodeOther, transport.CodeOf(errors.New("plain")))
	require.Equal(t, transport.CodeDeadline, transport.CodeOf(context.DeadlineExceeded))
	require.NoError(t, transport.CodeOK.Err())
	require.Error(t, transport.Code(200).Err(), "an unknown code is still an error")
	err := transport.RemoteError(transport.CodeNoSpace, "full")
	require.ErrorIs(t, err, farmem.ErrRemote)
	require.ErrorIs(t, err, farmem.ErrNoSpace)
	require.NotErrorIs(t, transport.RemoteError(transport.CodeOther, "x"), farmem.ErrNoSpace)
}

func TestPending(t *testing.T) {
	var b farmem.Batch
	b.Read(1, nil)
	b.Unsignaled(b.Write(2, nil))
	b.FAA(3, 1)
	p, comp := transport.NewPending(&b, transport.NewChanParker())
	require.Equal(t, 2, transport.Signaled(p))
	go func() {
		time.Sleep(5 * time.Millisecond)
		comp.Complete(0, 0, nil)
		comp.Complete(1, 0, nil)
		time.Sleep(5 * time.Millisecond)
		comp.Complete(2, 41, nil)
		comp.Complete(2, 99, errors.New("late duplicate")) // ignored
	}()
	require.NoError(t, p.Wait(context.Background(), 1))
	require.True(t, p.OpDone(0))
	require.NoError(t, p.Wait(context.Background(), 0))
	v, err := b.Result(2)
	require.NoError(t, err)
	require.Equal(t, uint64(41), v)
	require.NoError(t, transport.Err(p))

	// A context that ends first.
	var b2 farmem.Batch
	b2.Read(1, nil)
	p2, _ := transport.NewPending(&b2, transport.NewChanParker())
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Millisecond)
	defer cancel()
	require.ErrorIs(t, p2.Wait(ctx, 0), context.DeadlineExceeded)

	// Reject reports even an empty batch's error.
	p3, c3 := transport.NewPending(&farmem.Batch{}, nil)
	c3.Reject(farmem.ErrInvalid)
	require.ErrorIs(t, transport.Err(p3), farmem.ErrInvalid)
	require.NoError(t, p3.Wait(context.Background(), 0))

	// An unfinished Pending without a parker is a transport bug, reported, not a hang.
	p4, _ := transport.NewPending(&b2, nil)
	require.ErrorIs(t, p4.Wait(context.Background(), 0), farmem.ErrInvalid)
}

func TestWallRuntime(t *testing.T) {
	rt := transport.NewWallRuntime(7)
	a, b := rt.Fork(), rt.Fork()
	require.NotEqual(t, a.Rand().Uint64(), b.Rand().Uint64(), "forks draw from distinct streams")
	same1, same2 := transport.NewWallRuntime(7).NewRand(), transport.NewWallRuntime(7).NewRand()
	require.Equal(t, same1.Uint64(), same2.Uint64(), "same seed, same stream")
	start := rt.Now()
	require.NoError(t, rt.Sleep(context.Background(), 2*time.Millisecond))
	require.GreaterOrEqual(t, rt.Now().Sub(start), 2*time.Millisecond)
	done := make(chan struct{})
	rt.AfterFunc(time.Millisecond, func() { close(done) })
	<-done
	tm := rt.AfterFunc(time.Hour, func() {})
	require.True(t, tm.Stop())
	ctx, cancel := rt.WithTimeout(context.Background(), time.Millisecond)
	defer cancel()
	<-ctx.Done()
	rt.Compute(time.Second)
	a.Compute(time.Second)
	require.Equal(t, 2*time.Second, rt.ComputeTime())
	ctx2, cancel2 := context.WithCancel(context.Background())
	cancel2()
	require.ErrorIs(t, rt.Sleep(ctx2, time.Hour), context.Canceled)
}
