package farmem_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/farmem/farmem/farmem"
	"github.com/farmem/farmem/farmem/transport"
)

// quorumBatch is two signaled ops to each of nodes 1, 2 and 3 and an unsignaled op to node 4.
func quorumBatch() *farmem.Batch {
	var b farmem.Batch
	for n := farmem.NodeID(1); n <= 3; n++ {
		b.Write(farmem.MakeAddr(n, 64), make([]byte, 8))
		b.FAA(farmem.MakeAddr(n, 128), 1)
	}
	b.Unsignaled(b.Write(farmem.MakeAddr(4, 64), make([]byte, 8)))
	return &b
}

func waitNodesAsync(p *farmem.Pending, k int) chan error {
	ch := make(chan error, 1)
	go func() { ch <- p.WaitNodes(context.Background(), k) }()
	return ch
}

func TestWaitNodesCountsNodesNotOps(t *testing.T) {
	b := quorumBatch()
	p, comp := transport.NewPendingOn(b, transport.NewChanParker(), transport.NewWallRuntime(1))
	require.ErrorIs(t, p.WaitNodes(context.Background(), 4), farmem.ErrInvalid, "node 4 has only an unsignaled op")
	require.ErrorIs(t, p.WaitNodes(context.Background(), 0), farmem.ErrInvalid)
	ch := waitNodesAsync(p, 2)
	// Four ops done, but only node 1 complete: no quorum of 2 yet.
	comp.Complete(0, 0, nil)
	comp.Complete(1, 7, nil)
	comp.Complete(2, 0, nil)
	comp.Complete(4, 0, nil)
	select {
	case err := <-ch:
		t.Fatalf("WaitNodes(2) returned %v with one node complete", err)
	case <-time.After(20 * time.Millisecond):
	}
	require.Equal(t, []farmem.NodeID{1}, p.NodesDone(nil))
	comp.Complete(3, 0, nil) // node 2's second op
	require.NoError(t, <-ch)
	require.Equal(t, []farmem.NodeID{1, 2}, p.NodesDone(nil))
	require.True(t, p.NodeDone(2))
	require.False(t, p.NodeDone(3))
	require.False(t, p.NodeDone(4), "a node with no signaled op is never done")
	require.NoError(t, p.WaitNodes(context.Background(), 1), "a reached quorum returns at once")
}

func TestWaitNodesFailsAsSoonAsQuorumIsImpossible(t *testing.T) {
	b := quorumBatch()
	p, comp := transport.NewPendingOn(b, transport.NewChanParker(), transport.NewWallRuntime(1))
	ch := waitNodesAsync(p, 2)
	comp.Complete(0, 0, nil)
	comp.Complete(1, 0, nil) // node 1 complete
	down := errors.New("boom")
	comp.Complete(2, 0, down) // node 2 failed: 2 of 3 can still complete
	select {
	case err := <-ch:
		t.Fatalf("WaitNodes(2) returned %v while a quorum could still form", err)
	case <-time.After(20 * time.Millisecond):
	}
	comp.Complete(5, 0, farmem.ErrNodeDown) // node 3 failed, its op 4 still outstanding
	err := <-ch
	require.ErrorIs(t, err, farmem.ErrNodeDown)
	require.ErrorIs(t, err, down)
	require.Equal(t, []farmem.NodeID{1}, p.NodesDone(nil))
	comp.Complete(3, 0, nil)
	require.False(t, p.NodeDone(2), "a node with a failed op stays failed")
}

func TestThenRunsOnceWhenAllDone(t *testing.T) {
	b := quorumBatch()
	p, comp := transport.NewPendingOn(b, transport.NewChanParker(), transport.NewWallRuntime(1))
	var runs atomic.Int32
	ran := make(chan struct{}, 2)
	require.NoError(t, p.Then(func(q *farmem.Pending) {
		require.Same(t, p, q)
		for i := range 6 {
			require.True(t, q.OpDone(i))
		}
		runs.Add(1)
		ran <- struct{}{}
	}))
	require.ErrorIs(t, p.Then(func(*farmem.Pending) {}), farmem.ErrInvalid, "one hook per batch")
	require.ErrorIs(t, p.Then(nil), farmem.ErrInvalid)
	for i := range 5 {
		comp.Complete(i, 0, nil)
	}
	select {
	case <-ran:
		t.Fatal("the hook ran with an op outstanding")
	case <-time.After(20 * time.Millisecond):
	}
	comp.Complete(5, 0, farmem.ErrNodeDown) // failed ops count as finished
	<-ran
	comp.Complete(5, 0, nil) // a late duplicate changes nothing
	time.Sleep(10 * time.Millisecond)
	require.Equal(t, int32(1), runs.Load())
}

func TestThenAfterDoneStillRuns(t *testing.T) {
	b := quorumBatch()
	p, comp := transport.NewPendingOn(b, transport.NewChanParker(), transport.NewWallRuntime(1))
	comp.Fail(farmem.ErrNodeDown)
	ran := make(chan struct{})
	require.NoError(t, p.Then(func(*farmem.Pending) { close(ran) }))
	<-ran
	// A refused batch, with no runtime, runs the hook in the caller.
	rej := transport.Rejected(&farmem.Batch{}, farmem.ErrClosed, nil)
	called := false
	require.NoError(t, rej.Then(func(*farmem.Pending) { called = true }))
	require.True(t, called)
}

// TestThenRaceWithCompletion registers the hook while the last op completes, many times: the
// hook runs exactly once each time.
func TestThenRaceWithCompletion(t *testing.T) {
	rt := transport.NewWallRuntime(1)
	for range 200 {
		var b farmem.Batch
		b.FAA(farmem.MakeAddr(1, 8), 1)
		p, comp := transport.NewPendingOn(&b, transport.NewChanParker(), rt)
		var runs atomic.Int32
		done := make(chan struct{}, 2)
		go comp.Complete(0, 0, nil)
		require.NoError(t, p.Then(func(*farmem.Pending) { runs.Add(1); done <- struct{}{} }))
		<-done
		require.NoError(t, p.Wait(context.Background(), 0))
		require.Equal(t, int32(1), runs.Load())
	}
}
