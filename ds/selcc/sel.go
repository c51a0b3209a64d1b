package selcc

import (
	"context"

	"github.com/farmem/farmem/alloc/nodearea"
	"github.com/farmem/farmem/farmem"
)

// stripe returns the SEL-mode local latch that serializes this node's clients on g: the node
// has one shared bit (or count) per line, so two of its clients must not both add it.
func (cl *Client) stripe(g GCL) (nodearea.Latch, error) {
	h := uint64(g) * 0x9e3779b97f4a7c15
	i := (h >> 32) % uint64(cl.o.Stripes)
	return nodearea.NewLatch(cl.m, cl.n.stripes.Add(8*i))
}

// selAcquire is SEL's acquisition: the latch atomic and the body's read in one batch (one
// round trip), retried with backoff while a conflicting holder is in; no message is sent.
//
// The stripe latch is what keeps a node's shared acquisitions to one share per line, so a
// shared acquisition always takes it. An exclusive one needs it only as a local queue (the
// CAS from 0 admits one holder whoever else of the node tries): a client that already holds a
// guard (a B-link split holds its node while it writes the fresh right half) only tries it and
// goes on without it if it is busy, since two clients each holding one stripe and waiting for
// the other's would deadlock, as would one client whose two lines hash to one stripe.
func (cl *Client) selAcquire(ctx context.Context, g GCL, excl bool) (*Guard, error) {
	cd, me := cl.o.Codec, cl.me
	l, err := cl.stripe(g)
	if err != nil {
		return nil, err
	}
	if excl && cl.selOpen > 0 {
		ok, err := l.TryLock(ctx)
		if err != nil {
			return nil, err
		}
		if !ok {
			l = nodearea.Latch{}
		}
	} else if err := l.Lock(ctx); err != nil {
		return nil, err
	}
	buf := make([]byte, cl.o.LineSize)
	for try := 1; ; try++ {
		var b farmem.Batch
		var i int
		if excl {
			i = b.CAS(g.Latch(), 0, cd.Exclusive(me))
		} else {
			i = b.FAA(g.Latch(), cd.Shared(me))
		}
		b.Read(g.Body(), buf)
		err := doAll(ctx, cl.m, &b)
		if err == nil {
			prev, _ := b.Result(i)
			if excl && prev == 0 || !excl && cd.Holder(prev) == 0 {
				cl.selOpen++
				return &Guard{cl: cl, g: g, excl: excl, l: l, buf: buf}, nil
			}
			if !excl {
				_, err = cl.m.FAA(ctx, g.Latch(), ReleaseSharedDelta(cd, me))
			}
		}
		if err == nil {
			err = cl.backoff(ctx, 1)
		}
		if err != nil {
			if l != (nodearea.Latch{}) {
				cl.unlatch(ctx, l, true)
			}
			return nil, err
		}
	}
}

// selRelease writes the dirty range back and releases the latch, in one batch.
func (cl *Client) selRelease(ctx context.Context, gd *Guard) error {
	cd := cl.o.Codec
	var b farmem.Batch
	if gd.excl {
		if gd.hi > gd.lo {
			b.Write(gd.g.Body().Add(uint64(gd.lo)), gd.buf[gd.lo:gd.hi])
		}
		b.FAA(gd.g.Latch(), ReleaseExclusiveDelta(cd, cl.me))
	} else {
		b.FAA(gd.g.Latch(), ReleaseSharedDelta(cd, cl.me))
	}
	err := doAll(ctx, cl.m, &b)
	cl.selOpen--
	if gd.l == (nodearea.Latch{}) {
		return err
	}
	if e := gd.l.Unlock(detached(ctx)); err == nil {
		err = e
	}
	return err
}
