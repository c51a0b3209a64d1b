package rdma

import (
	"context"
	"sync/atomic"

	"github.com/farmem/farmem/farmem"
	"github.com/farmem/farmem/farmem/transport"
)

// postState is what a batch posted over the tcp provider needs besides the batch: its Pending,
// the sink its queue pairs report to, and the parker its waiter parks on, in one allocation.
// The batch keeps it (transport.KeepPending), and its next post sets the same state up again
// once the previous post is over (transport.Recycled: every signaled op done, no hook), so a
// batch posted over and over allocates at its first post only. That takes what the tcp queue
// pairs guarantee: each op is completed once (its request's slot is released once, under the
// queue pair's lock), and nothing of the batch, its sink or its Pending is read after its last
// completion but the parker's own atomic state.
//
// The parker is a binary semaphore (set) whose channel is made only if the waiter has to block
// without reading. In reading mode (q not nil: the connection had no reader when the batch was
// posted), parking reads the connection's answers when the reader role is free, as a lone verb
// does; otherwise (a batch to several nodes, or one posted while someone read its connection)
// the waiter writes the lazy frames its client left before it blocks, and a reader delivers.
type postState struct {
	pend farmem.Pending
	sink batchSink
	c    *client
	q    *tcpQP // reading mode: the connection the waiter reads; nil: client mode
	set  atomic.Bool
	ch   atomic.Pointer[chan struct{}]
	// groups splits a batch to several nodes by node (group); their index slices, which the
	// queue pairs hold until the ops are done, are reused by the next post.
	groups []transport.Group
}

// group splits b by target node, as transport.GroupByNode does, into s.groups, reusing the
// index slices of the last post's groups.
func (s *postState) group(b *farmem.Batch) []transport.Group {
	gs := s.groups[:0]
	for i := range b.Ops {
		n := b.Ops[i].Addr.Node()
		g := -1
		for j := range gs {
			if gs[j].Node == n {
				g = j
				break
			}
		}
		if g < 0 {
			if len(gs) < cap(gs) {
				gs = gs[:len(gs)+1]
				gs[len(gs)-1].Node, gs[len(gs)-1].Idx = n, gs[len(gs)-1].Idx[:0]
			} else {
				gs = append(gs, transport.Group{Node: n})
			}
			g = len(gs) - 1
		}
		gs[g].Idx = append(gs[g].Idx, i)
	}
	s.groups = gs
	return gs
}

// startPost returns the Pending and sink of a post of b by client c, in reading mode on q if q
// is not nil: the state of b's last post set up again when it may be, else a new one.
func (c *client) startPost(b *farmem.Batch, q *tcpQP) *postState {
	st, _ := transport.Recycled(b).(*postState)
	if st == nil {
		st = new(postState)
	}
	st.c, st.q = c, q
	comp := transport.InitPendingOn(&st.pend, b, st, c.Runtime())
	st.sink.c, st.sink.comp = c, comp
	transport.KeepPending(b, &st.pend)
	return st
}

// Park implements transport.Parker.
func (s *postState) Park(ctx context.Context) error {
	if s.q != nil {
		return s.q.await(ctx, s)
	}
	s.c.flushLazy(nil)
	return block(ctx, s)
}

// Unpark implements transport.Parker. A signal already set is left as it is (no atomic write):
// whoever consumes it rechecks what it waits for.
func (s *postState) Unpark() {
	if !s.set.Load() {
		s.set.Store(true)
	}
	if c := s.ch.Load(); c != nil {
		select {
		case *c <- struct{}{}:
		default:
		}
	}
}

func (s *postState) fired() bool { return s.set.Load() && s.set.Swap(false) }

func (s *postState) ready() <-chan struct{} {
	if c := s.ch.Load(); c != nil {
		return *c
	}
	c := make(chan struct{}, 1)
	if !s.ch.CompareAndSwap(nil, &c) {
		return *s.ch.Load()
	}
	return c
}
