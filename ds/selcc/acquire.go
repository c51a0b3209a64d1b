package selcc

import (
	"context"
	"errors"
	"fmt"

	"github.com/farmem/farmem/alloc/nodearea"
	"github.com/farmem/farmem/farmem"
)

func (cl *Client) unlatch(ctx context.Context, l nodearea.Latch, excl bool) {
	ctx = detached(ctx)
	if excl {
		_ = l.Unlock(ctx)
	} else {
		_ = cl.runlock(ctx, l)
	}
}

// lock is the Cached access path: look up; take the frame's local latch; check the memo; on a
// mismatch run the global acquisition under the local X latch (never under a shared one: two
// local readers would each add the node's shared delta).
func (cl *Client) lock(ctx context.Context, g GCL, excl bool) (*Guard, error) {
	n := cl.n
	for {
		var l nodearea.Latch
		f := n.lookup(g)
		if f == nil {
			var err error
			if f, l, err = cl.frameFor(ctx, g); err != nil {
				return nil, err
			}
			if f == nil {
				continue // another client mapped g first
			}
		} else {
			var err error
			if l, err = cl.latch(ctx, f, excl); err != nil {
				return nil, err
			}
			if !n.mapped(g, f) {
				cl.unlatch(ctx, l, excl)
				continue
			}
			if excl && f.memo == memoM {
				return &Guard{cl: cl, g: g, excl: true, f: f, l: l}, nil
			}
			if !excl {
				if f.memo != memoI {
					return &Guard{cl: cl, g: g, f: f, l: l}, nil
				}
				// Invalid under a shared latch: retake it exclusively to fetch.
				if err := cl.runlock(ctx, l); err != nil {
					return nil, err
				}
				if l, err = cl.latch(ctx, f, true); err != nil {
					return nil, err
				}
				if !n.mapped(g, f) || f.memo != memoI {
					cl.unlatch(ctx, l, true)
					continue
				}
			}
		}
		// f is latched X and mapped to g; its memo does not allow the access.
		kind := uint32(acquiringShared)
		if excl {
			kind = acquiringExclusive
		}
		f.acquiring.Store(kind)
		err := cl.acquire(ctx, g, f, excl)
		f.acquiring.Store(0)
		if err != nil {
			cl.fail(ctx, f)
			cl.unlatch(ctx, l, true)
			if errors.Is(err, errFenced) {
				if err := cl.waitFence(ctx, g); err != nil {
					return nil, err
				}
				continue
			}
			return nil, err
		}
		if excl {
			return &Guard{cl: cl, g: g, excl: true, f: f, l: l}, nil
		}
		if err := l.Unlock(ctx); err != nil {
			return nil, err
		}
	}
}

// frameFor maps g to a free frame latched X (memo I), evicting a batch of victims if no frame
// is free. It returns a nil frame if another client mapped g meanwhile.
func (cl *Client) frameFor(ctx context.Context, g GCL) (*frame, nodearea.Latch, error) {
	n := cl.n
	for try := 1; ; try++ {
		f := n.takeFree()
		if f == nil {
			f = n.reclaim(ctx, cl.m)
		}
		n.kickEvictor()
		if f == nil {
			vs := n.victims(cl.o.EvictBatch)
			if len(vs) == 0 && n.allDead() {
				return nil, nodearea.Latch{}, fmt.Errorf("selcc: no frame left on %v: %w", cl.me.Node(), farmem.ErrNoSpace)
			}
			// With no victim, every frame is being filled or freed by another client.
			if err := n.evict(ctx, cl.m, vs); err != nil {
				return nil, nodearea.Latch{}, err
			}
			if n.lookup(g) != nil {
				return nil, nodearea.Latch{}, nil
			}
			if try > 1 {
				// every victim was in use: let their holders finish
				if err := cl.backoff(ctx, 1); err != nil {
					return nil, nodearea.Latch{}, err
				}
			}
			continue
		}
		l, err := nodearea.NewLatch(cl.m, f.latch)
		if err == nil {
			err = l.Lock(ctx) // a handler that just freed it may still hold it for a moment
		}
		if err != nil {
			n.putFree(f)
			return nil, l, err
		}
		f.memo, f.lo, f.hi, f.earned = memoI, 0, 0, 0
		if !n.install(g, f) {
			_ = l.Unlock(ctx)
			n.putFree(f)
			return nil, l, nil
		}
		return f, l, nil
	}
}

// fail ends a failed acquisition of f (latched X). A failed acquisition can still leave the
// node holding the line: an upgrade that failed (its peer was down) keeps the share the frame
// had, and a grant or fetch that failed after its atomic landed holds what the memo says. That
// hold is released here (one ordered batch, as an eviction), never just forgotten: a frame
// unmapped with its hold still in the word leaves a share or an exclusive hold no invalidation
// can remove (the node has no frame to serve it with), and every writer of the line then spins.
// If the release itself fails the frame stays mapped with its memo, so the hold stays
// accountable (served by the handler, released by eviction).
func (cl *Client) fail(ctx context.Context, f *frame) {
	if f.memo != memoI {
		var b farmem.Batch
		if err := cl.n.releaseOps(detached(ctx), cl.m, &b, f); err != nil {
			return
		}
		if err := doAll(detached(ctx), cl.m, &b); err != nil {
			return
		}
	}
	f.memo, f.lo, f.hi = memoI, 0, 0
	cl.n.unmap(f)
}

// acquire runs the global part of an acquisition under f's X latch: the transitions of the
// package doc's table, conflict resolution by invalidation messages, backoff with priority
// aging.
func (cl *Client) acquire(octx context.Context, g GCL, f *frame, excl bool) error {
	defer cl.retireReplies(octx)
	gs := grantState{first: cl.seq + 1}
	err := cl.acquireLoop(octx, g, f, excl, &gs)
	if !gs.opened {
		return err
	}
	st, cerr := cl.closeGrant(octx, g, f, gs.first)
	if st != 0 {
		// A holder handed the line over before the close: it is ours, whatever ended the loop.
		cl.granted(f, st)
		return nil
	}
	if err == nil {
		err = cerr
	}
	return err
}

// grantState is an exclusive acquisition's grant word: open once it sent a PeerWr.
type grantState struct {
	first  uint64
	opened bool
}

// granted records a hand-over by grant into f (the line is in its body).
func (cl *Client) granted(f *frame, st uint64) {
	f.memo, f.lo, f.hi, f.earned = memoM, 0, 0, 0
	if st == grantDataDirty {
		f.hi = cl.o.LineSize
	}
}

func (cl *Client) acquireLoop(octx context.Context, g GCL, f *frame, excl bool, gs *grantState) error {
	// The verbs run to completion even if octx ends (each is bounded by the fabric's down
	// timeout): an atomic left with an unknown outcome could leave this node's hold in the
	// word with no frame behind it. octx is checked between attempts.
	ctx := detached(octx)
	cd, me := cl.o.Codec, cl.me
	buf := make([]byte, cl.o.LineSize)
	upFails := 0
	for try := 1; ; try++ {
		if err := octx.Err(); err != nil {
			return err
		}
		if f.memo == memoI {
			if err := cl.settleOrphans(ctx, g, excl, gs, true); err != nil {
				return err
			}
		}
		var prev uint64
		switch {
		case excl && f.memo == memoS:
			p, err := cl.m.CAS(ctx, g.Latch(), cd.Shared(me), cd.Exclusive(me))
			if err != nil {
				return err
			}
			if p == cd.Shared(me) {
				f.memo, f.earned = memoM, cl.earned(try)
				return nil
			}
			if upFails++; upFails >= cl.o.UpgradeTries {
				// Fallback: release S, acquire M from scratch.
				if _, err := cl.m.FAA(ctx, g.Latch(), ReleaseSharedDelta(cd, me)); err != nil {
					return err
				}
				f.memo = memoI
				continue
			}
			prev = p
		case excl:
			if err := cl.waitHoldoff(octx, g); err != nil {
				return err
			}
			if err := cl.checkFence(g); err != nil {
				return err
			}
			var b farmem.Batch
			i := b.CAS(g.Latch(), 0, cd.Exclusive(me))
			b.Read(g.Body(), buf)
			if err := doAll(ctx, cl.m, &b); err != nil {
				return err
			}
			if prev, _ = b.Result(i); prev == 0 {
				f.memo, f.lo, f.hi, f.earned = memoM, 0, 0, cl.earned(try)
				return cl.m.Write(ctx, f.body, buf)
			}
		default:
			if err := cl.waitHoldoff(octx, g); err != nil {
				return err
			}
			if err := cl.checkFence(g); err != nil {
				return err
			}
			var b farmem.Batch
			i := b.FAA(g.Latch(), cd.Shared(me))
			b.Read(g.Body(), buf)
			if err := doAll(ctx, cl.m, &b); err != nil {
				return err
			}
			if prev, _ = b.Result(i); cd.Holder(prev) == 0 {
				f.memo, f.lo, f.hi = memoS, 0, 0
				return cl.m.Write(ctx, f.body, buf)
			}
			// Undo, and only then (the FAA has completed) tell the holder: its downgrade
			// adds our share back, which must not meet ours (a carry).
			if _, err := cl.m.FAA(ctx, g.Latch(), ReleaseSharedDelta(cd, me)); err != nil {
				return err
			}
		}
		targets := cl.targets(prev, excl)
		if len(targets) > 0 {
			kind := uint8(peerRd)
			if excl {
				kind = peerWr
				if !gs.opened {
					if err := cl.setGrant(ctx, grantWord(gs.first, 0, grantOpen)); err != nil {
						return err
					}
					gs.opened = true
				}
			}
			st, err := cl.invalidate(ctx, g, f, kind, targets, try)
			if err != nil {
				return err
			}
			switch st {
			case replyData, replyDataDirty:
				if excl {
					f.memo, f.lo, f.hi, f.earned = memoM, 0, 0, cl.earned(try)
					if st == replyDataDirty {
						f.hi = cl.o.LineSize
					}
				} else {
					f.memo, f.lo, f.hi = memoS, 0, 0
				}
				return nil
			}
			if st == replyAck {
				// Every target gave its hold up (case 3; or, group codec, the holder downgraded
				// itself for a reader): retry at once, as the paper's writer keeps retrying its
				// CAS once the sharers released (§4.4); the resend interval is for invalidations
				// that were dropped.
				continue
			}
		}
		if gs.opened {
			st, err := cl.pollGrant(ctx, g, f, gs.first)
			if err != nil {
				return err
			}
			if st != 0 {
				cl.granted(f, st)
				return nil
			}
		}
		if err := cl.backoff(octx, try); err != nil {
			return err
		}
	}
}

// earned is the priority a writer that got its line at its try-th attempt keeps it with
// against readers (priority matching): its retry count if it starved, else none.
func (cl *Client) earned(try int) uint32 {
	if cl.n.starving(uint32(try)) {
		return uint32(try)
	}
	return 0
}

// targets decodes whom to invalidate from a failed attempt's word: the exclusive holder if
// any, else (for a writer) the sharers; never this node.
func (cl *Client) targets(w uint64, excl bool) []farmem.ComputeID {
	cd := cl.o.Codec
	var ts []farmem.ComputeID
	if h := cd.Holder(w); h != 0 {
		ts = append(ts, h)
	} else if excl {
		ts = cd.Sharers(w, ts)
	}
	out := ts[:0]
	for _, t := range ts {
		if t != cl.me && int(t) <= cd.MaxNodes() {
			out = append(out, t)
		}
	}
	return out
}

// invalidate sends one message to each target and waits for every answer (each target
// answers exactly once, into its own flag word of this client's slice). It returns replyData
// or replyDataDirty if the exclusive holder forwarded the line into f, replyAck if every
// target acknowledged (gave its hold up), replyDrop otherwise.
func (cl *Client) invalidate(ctx context.Context, g GCL, f *frame, kind uint8, targets []farmem.ComputeID, try int) (uint64, error) {
	cl.seq++
	seq := cl.seq
	method := farmem.OwnerSELCC.Method(methodInvalidate)
	sent := make([]bool, len(targets))
	var out []orphan // where the answers to messages that may have been delivered land
	var down error
	for i, t := range targets {
		v := invalidation{kind: kind, prio: uint32(try), from: cl.me, gcl: g,
			flag: cl.flag.Add(8 * uint64(i)), data: f.body, seq: seq}
		if kind == peerWr {
			v.grant = cl.grant
		}
		err := cl.m.Send(ctx, t.Node(), method, v.encode())
		switch {
		case err == nil:
			sent[i] = true
			out = append(out, orphan{at: v.flag, seq: seq})
		case errors.Is(err, farmem.ErrNodeDown):
			out = append(out, orphan{at: v.flag, seq: seq})
			// A holder that is down keeps its hold until Repair removes it. The message may
			// still have been delivered: its answer may hand this node a hold, and land in
			// this reply block after the client stopped waiting.
			cl.orphaned(g, t, kind, v.flag, seq, f)
			down = &HolderDownError{Node: t, Line: g, Err: err}
		case errors.Is(err, farmem.ErrInvalid):
			// a stale or garbage id: nothing to wait for
		default:
			down = err
		}
		if down != nil && !errors.Is(down, farmem.ErrNodeDown) {
			break
		}
	}
	// Wait for every answer even if ctx ends: a holder may be handing the line over to this
	// frame, and leaving before the answer would strand the latch (the word would name this
	// node while no frame holds the line).
	wctx, cancel := cl.rt.WithTimeout(detached(ctx), cl.o.ReplyTimeout)
	defer cancel()
	result := uint64(replyDrop)
	acks := 0
	for i, ok := range sent {
		if !ok {
			continue
		}
		w, err := cl.awaitReply(wctx, cl.flag.Add(8*uint64(i)), seq, g, targets[i])
		if err != nil {
			// A forward may still land in f: never reuse it. The hold it comes with is an
			// orphan until settled; so is any other target's (one answered already may have
			// forwarded the line into f, and one not awaited yet may still do so), each
			// knowing where its answer lands.
			cl.n.quarantine(f, out)
			for j, ok := range sent {
				if ok {
					cl.orphaned(g, targets[j], kind, cl.flag.Add(8*uint64(j)), seq, f)
				}
			}
			if errors.Is(err, context.DeadlineExceeded) && wctx.Err() != nil {
				return 0, fmt.Errorf("selcc: %v did not answer an invalidation of %v: %w", targets[i].Node(), g, farmem.ErrNodeDown)
			}
			return 0, err
		}
		switch st := w & 0xff; st {
		case replyData, replyDataDirty:
			result = st
		case replyAck:
			acks++
		}
	}
	if result == replyDrop && acks == len(targets) {
		result = replyAck // every target released (none dropped, none down)
	}
	if down != nil && result != replyData && result != replyDataDirty {
		return 0, down
	}
	return result, nil
}

// orphaned records that t may answer this client's message of kind about g (sequence seq,
// answered in the reply word at flag, forwarding into f) with a hold after the client stopped
// waiting (see orphan). The client's reply block then belongs to that late answer: it takes a
// fresh one once the acquisition ends.
func (cl *Client) orphaned(g GCL, t farmem.ComputeID, kind uint8, flag farmem.Addr, seq uint64, f *frame) {
	cl.stale = true
	o := orphan{from: t, at: flag, seq: seq, body: f.body}
	switch {
	case kind == peerWr:
		o.excl = true
		cl.n.addOrphan(g, o)
	case exactSharers(cl.o.Codec):
		cl.n.addOrphan(g, o)
	}
}

// waitHoldoff waits while this node keeps its own clients off g: after its shared hold went
// to a starving writer (spin waiting), or after it gave g up because its γ budget ran out (so
// the peers it kept waiting get their turn before its own clients take g back).
func (cl *Client) waitHoldoff(ctx context.Context, g GCL) error {
	t := cl.n.holdoffUntil(g)
	if t == 0 {
		return nil
	}
	if d := t - cl.rt.Now(); d > 0 {
		if err := cl.rt.Sleep(ctx, durationOf(d)); err != nil {
			return err
		}
	}
	cl.n.clearHoldoff(g, t)
	return nil
}
