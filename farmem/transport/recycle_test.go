package transport_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/farmem/farmem/farmem"
	"github.com/farmem/farmem/farmem/transport"
)

// recState is a transport's post state: a Pending allocated with the parker it parks on.
type recState struct {
	pend farmem.Pending
	ch   chan struct{}
}

func (s *recState) Park(ctx context.Context) error {
	select {
	case <-s.ch:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (s *recState) Unpark() {
	select {
	case s.ch <- struct{}{}:
	default:
	}
}

// start is a transport's Post: the state of b's last post set up again if it may be, else new.
func start(b *farmem.Batch) (*recState, transport.Completer) {
	s, _ := transport.Recycled(b).(*recState)
	if s == nil {
		s = &recState{ch: make(chan struct{}, 1)}
	}
	comp := transport.InitPendingOn(&s.pend, b, s, nil)
	transport.KeepPending(b, &s.pend)
	return s, comp
}

// TestRecycledPending: a batch's Pending is handed out again only once every signaled op of its
// post is done, never while one is outstanding, never to a copy of the batch, never once a
// completion hook was registered on it; set up again it counts its new post from zero, with
// fresh results, and the old results do not leak into it.
func TestRecycledPending(t *testing.T) {
	ctx := context.Background()
	var b farmem.Batch
	b.Read(farmem.MakeAddr(1, 0), make([]byte, 8))
	b.FAA(farmem.MakeAddr(1, 8), 1)
	b.Unsignaled(b.FAA(farmem.MakeAddr(1, 16), 1))
	require.Nil(t, transport.Recycled(&b), "a batch never posted")

	s1, comp := start(&b)
	p1 := comp.Pending()
	require.Nil(t, transport.Recycled(&b), "no op done")
	comp.Complete(0, 0, nil)
	require.Nil(t, transport.Recycled(&b), "one of two signaled ops done")
	comp.Complete(1, 5, farmem.ErrNodeDown)
	require.NoError(t, p1.Wait(ctx, 0))
	require.ErrorIs(t, transport.Err(p1), farmem.ErrNodeDown)
	require.Same(t, s1, transport.Recycled(&b), "every signaled op done (the unsignaled one never completes)")

	// A copy of the batch (its own ops) gets its own Pending, and leaves the original's alone.
	c := farmem.Batch{Ops: append([]farmem.Op(nil), b.Ops...)}
	c.Ops = c.Ops[:1]
	require.Nil(t, transport.Recycled(&c), "a copy shares nothing")
	s2, comp2 := start(&c)
	require.NotSame(t, s1, s2)
	comp2.Complete(0, 0, nil)
	require.NoError(t, comp2.Pending().Wait(ctx, 0))

	// The second post of b reuses the Pending and starts from zero.
	s3, comp3 := start(&b)
	require.Same(t, s1, s3)
	require.Same(t, p1, comp3.Pending())
	require.Zero(t, transport.Done(p1))
	require.False(t, p1.OpDone(0))
	require.False(t, p1.OpDone(1))
	require.NoError(t, transport.Err(p1), "the last post's error is gone")
	comp3.Complete(1, 9, nil)
	require.Equal(t, 1, transport.Done(p1))
	require.Nil(t, transport.Recycled(&b))
	comp3.Complete(0, 0, nil)
	require.NoError(t, transport.Finish(ctx, p1))
	v, err := b.Result(1)
	require.NoError(t, err)
	require.Equal(t, uint64(9), v)

	// A batch of another shape reuses it too.
	b.Reset()
	b.Read(farmem.MakeAddr(1, 0), make([]byte, 8))
	s4, comp4 := start(&b)
	require.Same(t, s1, s4)
	require.Equal(t, 1, transport.Signaled(p1))
	comp4.Complete(0, 3, nil)
	require.NoError(t, transport.Finish(ctx, p1))

	// A Pending with a completion hook is never reused: the hook holds it.
	s5, comp5 := start(&b)
	require.Same(t, s1, s5)
	ran := make(chan *farmem.Pending, 1)
	require.NoError(t, p1.Then(func(p *farmem.Pending) { ran <- p }))
	comp5.Complete(0, 0, nil)
	require.Same(t, p1, <-ran)
	require.Nil(t, transport.Recycled(&b), "a hook was registered")
	s6, _ := start(&b)
	require.NotSame(t, s1, s6)

	// A refused batch's Pending is not recorded on it.
	var r farmem.Batch
	r.Read(farmem.MakeAddr(1, 0), make([]byte, 8))
	rej := transport.Rejected(&r, farmem.ErrClosed, nil)
	require.ErrorIs(t, transport.Finish(ctx, rej), farmem.ErrClosed)
	require.Nil(t, transport.Recycled(&r))
}

// TestCompleteOwned: ops completed without the first-wins claim read as any others: done,
// results and first error, node quorums, for a batch of one signaled op (whose being done is
// the count alone) and for a larger one, fresh and set up again.
func TestCompleteOwned(t *testing.T) {
	ctx := context.Background()
	var one farmem.Batch
	one.CAS(farmem.MakeAddr(1, 8), 1, 2)
	for range 2 { // fresh, then reused
		s, comp := start(&one)
		p := comp.Pending()
		require.False(t, p.OpDone(0))
		require.False(t, p.NodeDone(1))
		comp.CompleteOwned(0, 7, nil)
		require.True(t, p.OpDone(0))
		require.True(t, p.NodeDone(1))
		require.NoError(t, p.WaitNodes(ctx, 1))
		require.NoError(t, transport.Finish(ctx, p))
		v, err := one.Result(0)
		require.NoError(t, err)
		require.Equal(t, uint64(7), v)
		require.Same(t, s, transport.Recycled(&one))
	}

	var two farmem.Batch
	two.Read(farmem.MakeAddr(1, 0), make([]byte, 8))
	two.Unsignaled(two.FAA(farmem.MakeAddr(2, 8), 1))
	two.FAA(farmem.MakeAddr(2, 16), 1)
	_, comp := start(&two)
	p := comp.Pending()
	comp.CompleteOwned(2, 0, farmem.ErrNodeDown)
	require.True(t, p.OpDone(2))
	require.False(t, p.OpDone(0))
	require.Equal(t, 1, transport.Done(p))
	require.False(t, p.NodeDone(2), "its op failed")
	comp.CompleteOwned(0, 0, nil)
	require.True(t, p.NodeDone(1))
	require.NoError(t, p.WaitNodes(ctx, 1))
	require.ErrorIs(t, transport.Finish(ctx, p), farmem.ErrNodeDown)
	require.NotNil(t, transport.Recycled(&two), "done: the unsignaled op is no one's to complete")
}

// TestRecycledPendingAllocatesNothing: setting a batch's Pending up again for its next post,
// completing it and waiting on it allocate nothing.
func TestRecycledPendingAllocatesNothing(t *testing.T) {
	ctx := context.Background()
	var b farmem.Batch
	b.Read(farmem.MakeAddr(1, 0), make([]byte, 8))
	_, comp := start(&b)
	comp.CompleteOwned(0, 0, nil)
	require.NoError(t, comp.Pending().Wait(ctx, 0))
	allocs := testing.AllocsPerRun(500, func() {
		_, comp := start(&b)
		comp.CompleteOwned(0, 1, nil)
		if err := transport.Finish(ctx, comp.Pending()); err != nil {
			t.Fatal(err)
		}
	})
	require.Zero(t, allocs, "allocations per reused post")
}
