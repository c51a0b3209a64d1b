package transport_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/farmem/farmem/farmem"
	"github.com/farmem/farmem/farmem/transport"
)

type fakeClient struct {
	transport.ClientState
}

func (c *fakeClient) Post(ctx context.Context, b *farmem.Batch) *farmem.Pending {
	p, comp := transport.NewPending(b, nil)
	for i := range b.Ops {
		comp.Complete(i, uint64(i)+40, nil)
	}
	return p
}
func (c *fakeClient) Wait(context.Context, farmem.Addr, func(uint64) bool) (uint64, error) {
	return 0, farmem.ErrNotSupported
}
func (c *fakeClient) Call(context.Context, farmem.NodeID, uint16, []byte) ([]byte, error) {
	return nil, farmem.ErrNotSupported
}
func (c *fakeClient) Send(context.Context, farmem.NodeID, uint16, []byte) error {
	return farmem.ErrNotSupported
}
func (c *fakeClient) Topology() *farmem.Topology { return nil }
func (c *fakeClient) Close() error               { c.SetClosed(); return nil }

func newFake(info farmem.ClientInfo) *fakeClient {
	c := &fakeClient{}
	c.Init(info, transport.NewWallRuntime(1), func(ctx context.Context, op farmem.Op) (uint64, error) {
		return c.PostOne(ctx, op)
	}, c.Post)
	return c
}

func TestRegistry(t *testing.T) {
	r := transport.NewRegistry[*fakeClient](4, 1024, 1)
	node := farmem.ComputeID(2).Node()
	open := func(slot int) (*fakeClient, error) {
		return r.Open(node, slot, func(info farmem.ClientInfo) (*fakeClient, *transport.Counters) {
			c := newFake(info)
			return c, &c.Counters
		})
	}
	h, err := open(3)
	require.NoError(t, err, "the handler slot")
	var cs []*fakeClient
	for range 3 {
		c, err := open(-1)
		require.NoError(t, err)
		cs = append(cs, c)
	}
	require.Equal(t, []int{0, 1, 2}, []int{cs[0].ClientInfo.Slot, cs[1].ClientInfo.Slot, cs[2].ClientInfo.Slot})
	require.Equal(t, farmem.ClientID(5), cs[0].ClientInfo.ID, "(2-1)*4 + 0 + 1")
	require.Equal(t, farmem.MakeAddr(node, farmem.ComputeHeaderSize+1024), cs[1].ClientInfo.Slice)
	_, err = open(-1)
	require.ErrorIs(t, err, farmem.ErrNoSpace, "the handler slot is not an application slot")
	_, err = open(3)
	require.ErrorIs(t, err, farmem.ErrNoSpace, "a taken slot")

	cs[1].Counters.CountCall(10, 20)
	require.Equal(t, uint64(1), r.Stats().Calls)
	r.Release(cs[1].ClientInfo.ID, cs[1])
	r.Release(cs[1].ClientInfo.ID, cs[1])
	require.Equal(t, uint64(1), r.Stats().Calls, "a released client's counts stay, once")
	require.Equal(t, uint64(1), r.Released().Calls)
	_, ok := r.Get(cs[1].ClientInfo.ID)
	require.False(t, ok)
	again, err := open(-1)
	require.NoError(t, err)
	require.Equal(t, cs[1].ClientInfo.ID, again.ClientInfo.ID, "a released slot is reused")
	r.Release(cs[1].ClientInfo.ID, cs[1])
	got, ok := r.Get(again.ClientInfo.ID)
	require.True(t, ok, "a stale release does not free the new holder's slot")
	require.Same(t, again, got)

	all := r.Clients()
	require.Equal(t, []*fakeClient{cs[0], again, cs[2], h}, all, "by ascending id")
	closed, first := r.Close()
	require.True(t, first)
	require.Equal(t, all, closed)
	_, first = r.Close()
	require.False(t, first)
	require.True(t, r.Closed())
	_, err = open(-1)
	require.ErrorIs(t, err, farmem.ErrClosed)
}

func TestClientStateAndVerbs(t *testing.T) {
	c := newFake(farmem.ClientInfo{ID: 7})
	ctx := context.Background()
	v, err := c.FAA(ctx, farmem.MakeAddr(1, 8), 1)
	require.NoError(t, err)
	require.Equal(t, uint64(40), v, "the one-op batch's result")
	var b farmem.Batch
	b.Read(farmem.MakeAddr(1, 0), nil)
	b.CAS(farmem.MakeAddr(1, 8), 0, 1)
	require.NoError(t, c.Do(ctx, &b))
	v, _ = b.Result(1)
	require.Equal(t, uint64(41), v)
	require.NoError(t, c.Usable())
	select {
	case <-c.Done():
		t.Fatal("done before close")
	default:
	}
	require.True(t, c.SetClosed())
	require.False(t, c.SetClosed(), "only the first close")
	<-c.Done()
	require.ErrorIs(t, c.Usable(), farmem.ErrClosed)
	d := newFake(farmem.ClientInfo{ID: 8})
	d.SetCrashed()
	require.True(t, d.Crashed())
	require.ErrorIs(t, d.Usable(), farmem.ErrNodeDown)
}

func TestGroupByNode(t *testing.T) {
	var b farmem.Batch
	b.Read(farmem.MakeAddr(2, 0), nil)
	b.Read(farmem.MakeAddr(1, 0), nil)
	b.Read(farmem.MakeAddr(2, 8), nil)
	gs := transport.GroupByNode(&b, nil)
	require.Equal(t, []transport.Group{{Node: 2, Idx: []int{0, 2}}, {Node: 1, Idx: []int{1}}}, gs)
}

func TestQueuesKeepOrder(t *testing.T) {
	var q transport.Queues
	require.True(t, q.Idle(1))
	require.False(t, q.Busy())
	var mu sync.Mutex
	var got []int
	release := make(chan struct{})
	done := make(chan struct{})
	q.Push(1, func() { <-release })
	require.False(t, q.Idle(1), "a job is running")
	require.True(t, q.Idle(2))
	require.True(t, q.Busy())
	for i := range 50 {
		q.Push(1, func() {
			mu.Lock()
			got = append(got, i)
			mu.Unlock()
			if i == 49 {
				close(done)
			}
		})
	}
	close(release)
	<-done
	require.Eventually(t, func() bool { return q.Idle(1) && !q.Busy() }, 10*time.Second, time.Millisecond)
	for i := range got {
		require.Equal(t, i, got[i], "posting order")
	}
}

func TestAwaitReach(t *testing.T) {
	var ch transport.Changes
	var mu sync.Mutex
	state := transport.Silent
	reach := func() (transport.Reach, <-chan struct{}) {
		c := ch.Chan()
		mu.Lock()
		defer mu.Unlock()
		return state, c
	}
	ctx := context.Background()
	// Silent past the deadline: down.
	err := transport.AwaitReach(ctx, 3, time.Now().Add(5*time.Millisecond), reach)
	require.ErrorIs(t, err, farmem.ErrNodeDown)
	// Resumed before the deadline: a change wakes the waiter.
	res := make(chan error, 1)
	go func() { res <- transport.AwaitReach(ctx, 3, time.Now().Add(time.Hour), reach) }()
	time.Sleep(5 * time.Millisecond)
	mu.Lock()
	state = transport.Reachable
	mu.Unlock()
	ch.Notify()
	require.NoError(t, <-res)
	// Crashed: down at once.
	mu.Lock()
	state = transport.Down
	mu.Unlock()
	require.ErrorIs(t, transport.AwaitReach(ctx, 3, time.Now().Add(time.Hour), reach), farmem.ErrNodeDown)
	// The context ends first.
	mu.Lock()
	state = transport.Silent
	mu.Unlock()
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	require.ErrorIs(t, transport.AwaitReach(cctx, 3, time.Now().Add(time.Hour), reach), context.Canceled)
}

func TestHandlers(t *testing.T) {
	h := transport.NewHandlers[*fakeClient](1)
	require.ErrorIs(t, h.Set(1, nil), farmem.ErrInvalid)
	hc := newFake(farmem.ClientInfo{ID: 9})
	h.AddClient(hc)
	require.NoError(t, h.Set(1, func(_ context.Context, m farmem.Memory, from farmem.ClientID, req []byte) ([]byte, error) {
		require.Same(t, hc, m, "runs on the pool's client")
		return append(req, byte(from)), nil
	}))
	require.NoError(t, h.Set(2, func(context.Context, farmem.Memory, farmem.ClientID, []byte) ([]byte, error) {
		return nil, farmem.ErrNoSpace
	}))
	require.NoError(t, h.Set(3, func(context.Context, farmem.Memory, farmem.ClientID, []byte) ([]byte, error) {
		panic("boom")
	}))
	ctx := context.Background()
	node := farmem.ComputeID(1).Node()
	reply, err := h.Serve(ctx, ctx, node, 1, 5, []byte("x"))
	require.NoError(t, err)
	require.Equal(t, []byte("x\x05"), reply)
	_, err = h.Serve(ctx, ctx, node, 2, 5, nil)
	var he *transport.HandlerError
	require.True(t, errors.As(err, &he), "a handler's own error")
	err = transport.CallerError(err)
	require.ErrorIs(t, err, farmem.ErrRemote)
	require.ErrorIs(t, err, farmem.ErrNoSpace, "its sentinel travels")
	_, err = h.Serve(ctx, ctx, node, 3, 5, nil)
	require.ErrorContains(t, err, "panicked")
	_, err = h.Serve(ctx, ctx, node, 4, 5, nil)
	require.ErrorIs(t, err, farmem.ErrNoHandler)
	// The pool's one client is taken: a Serve waits, and a node that goes down ends it.
	got, ok := h.Take(nil)
	require.True(t, ok)
	nodeCtx, down := context.WithCancel(ctx)
	down()
	_, err = h.Serve(ctx, nodeCtx, node, 1, 5, nil)
	require.ErrorIs(t, err, farmem.ErrNodeDown)
	stop := make(chan struct{})
	close(stop)
	_, ok = h.Take(stop)
	require.False(t, ok)
	h.AddClient(got)
}

func TestShape(t *testing.T) {
	var s transport.Shape
	s.EnsureDefaults()
	require.Equal(t, transport.Shape{MemoryNodes: 1, MemorySize: 16 << 20, ComputeNodes: 1, ClientsPerNode: 64,
		MaxHandlers: 8, SliceSize: 16 << 10, SharedSize: 1 << 20}, s)
	require.Equal(t, s, *s.EnsureDefaults(), "idempotent")
	require.NoError(t, s.Check())
	r := transport.Shape{SliceSize: 100, SharedSize: 5}
	r.EnsureDefaults()
	require.Equal(t, uint64(128), r.SliceSize)
	require.Equal(t, uint64(8), r.SharedSize)
	tp := s.Topology(time.Second)
	require.Len(t, tp.MemoryNodes(), 1)
	require.Len(t, tp.ComputeNodes(), 1)
	n, ok := tp.Node(farmem.ComputeID(1).Node())
	require.True(t, ok)
	require.Equal(t, s.ComputeSize(), n.Size)
	require.Equal(t, tp.SharedBase()+s.SharedSize, s.ComputeSize())
	for name, bad := range map[string]transport.Shape{
		"too many handlers": {ClientsPerNode: 4, MaxHandlers: 4},
		"ids overflow":      {ComputeNodes: 2000, ClientsPerNode: 64},
		"tiny node":         {MemorySize: 8},
		"huge compute":      {SliceSize: 1 << 46},
		"negative":          {MemoryNodes: -1},
	} {
		bad.EnsureDefaults()
		require.ErrorIs(t, bad.Check(), farmem.ErrInvalid, name)
	}
}
