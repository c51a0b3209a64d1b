package selcc

import (
	"context"

	"github.com/farmem/farmem/farmem"
)

// selShare is SEL's shared-holder delta: a count of reading clients in the word's low bits (the
// paper's SEL adds 1 per reader: its artifact, github.com/ruihong123/SELCC, storage/rdma.cc
// global_Rlock_and_read_page_without_INVALID), so that clients of one node read a line at
// once with no local latch in front of the global one. A reader checks only the codec's
// exclusive holder field, in the word's top bits, far above any count of clients.
const selShare = 1

// selUnshare is the delta that undoes or releases a selShare (minus one, modulo 2^64).
const selUnshare = ^uint64(selShare - 1)

// selAcquire is SEL's acquisition, as the paper's baseline and its artifact run it: the latch
// atomic and the body's read in one batch (one round trip), and on a conflict (a shared
// attempt undone with one more FAA) the next attempt at once, with no backoff and no message;
// every client takes the global latch itself, with no local latch in front of it.
func (cl *Client) selAcquire(ctx context.Context, g GCL, excl bool) (*Guard, error) {
	cd, me := cl.o.Codec, cl.me
	buf := make([]byte, cl.o.LineSize)
	for {
		var b farmem.Batch
		var i int
		if excl {
			i = b.CAS(g.Latch(), 0, cd.Exclusive(me))
		} else {
			i = b.FAA(g.Latch(), selShare)
		}
		b.Read(g.Body(), buf)
		if err := doAll(ctx, cl.m, &b); err != nil {
			return nil, err
		}
		prev, _ := b.Result(i)
		if excl && prev == 0 || !excl && cd.Holder(prev) == 0 {
			return &Guard{cl: cl, g: g, excl: excl, buf: buf}, nil
		}
		if !excl {
			if _, err := cl.m.FAA(ctx, g.Latch(), selUnshare); err != nil {
				return nil, err
			}
		}
		if err := ctx.Err(); err != nil {
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
		b.FAA(gd.g.Latch(), selUnshare)
	}
	return doAll(ctx, cl.m, &b)
}
