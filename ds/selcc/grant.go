package selcc

import (
	"context"
	"errors"
	"fmt"

	"github.com/farmem/farmem/farmem"
)

// Grant word states (low byte). The next byte names the holder that claimed the word (0
// until one did), and the bits above hold the low 48 bits of the first sequence number of the
// acquisition the word is open for.
const (
	grantClosed    = 0
	grantOpen      = 1 // a writer is acquiring and takes a hand-over from a lease
	grantClaimed   = 2 // a holder claimed it and is handing the line over
	grantData      = 3 // the line is in the requester's frame, clean
	grantDataDirty = 4 // the same, newer than far memory
)

// A writer's grant word (after its reply flags in its slice) lets a holder whose γ budget ran
// out hand the line to the highest-priority writer whose invalidation it dropped, although that
// writer already had its answer (dropped) and went on retrying. The word is open only while the
// writer's acquisition runs, so a late hand-over can never reach a writer that stopped waiting:
// the holder claims the word with a CAS (failing if the writer closed it) that writes its own
// id into it (so a writer that stops waiting knows whom to ask whether it is down), hands the
// line over with one FAA and forwards it with the word's final state in one batch; the writer
// closes the word with a CAS when its acquisition ends, and one that finds it claimed waits
// for the line.

// grantSeqMask keeps the part of a sequence number a grant word holds. A client's numbers
// start below 2^40 and grow by one per message, so they never reach it in practice; masked
// comparisons keep the words right if one did.
const grantSeqMask = 1<<48 - 1

// grantWord packs a grant word for the acquisition whose first sequence number is first.
func grantWord(first uint64, claimer farmem.ComputeID, state uint64) uint64 {
	return (first&grantSeqMask)<<16 | uint64(claimer&0xff)<<8 | state
}

// grantFor reports whether grant word w belongs to the acquisition first.
func grantFor(w, first uint64) bool { return w>>16 == first&grantSeqMask }

// grantStateOf is w's state (grantClosed, ...).
func grantStateOf(w uint64) uint64 { return w & 0xff }

// grantClaimer is the holder that claimed grant word w (0: none, or a codec past 255 nodes,
// which the word cannot name: the group codec stops at GroupMaxNodes = 255).
func grantClaimer(w uint64) farmem.ComputeID { return farmem.ComputeID(w >> 8 & 0xff) }

func (cl *Client) readWord(ctx context.Context, a farmem.Addr) (uint64, error) {
	return cl.word(ctx, a)
}

// setGrant moves the grant word from whatever it holds to v with local CASes.
func (cl *Client) setGrant(ctx context.Context, v uint64) error {
	cur, err := cl.readWord(ctx, cl.grant)
	for err == nil && cur != v {
		var prev uint64
		if prev, err = cl.m.CAS(ctx, cl.grant, cur, v); err == nil && prev == cur {
			return nil
		}
		cur = prev
	}
	return err
}

// awaitGrant waits (bounded by ReplyTimeout) for a claimed grant word of the acquisition first
// to carry the line, and returns its final state.
func (cl *Client) awaitGrant(ctx context.Context, g GCL, f *frame, first uint64) (uint64, error) {
	wctx, cancel := cl.rt.WithTimeout(detached(ctx), cl.o.ReplyTimeout)
	defer cancel()
	w, err := cl.m.Wait(wctx, cl.grant, func(w uint64) bool {
		return !grantFor(w, first) || grantStateOf(w) == grantData || grantStateOf(w) == grantDataDirty
	})
	if err != nil {
		// The claimer's hand-over FAA may still land (or has): an orphan until settled; and
		// its forward may still land in f: never reuse it, nor this grant word (the line's
		// status lands in it). The word names the claimer, so settling can ask whether it is
		// down (a local READ; if even that fails, the claimer stays unknown).
		var from farmem.ComputeID
		if gw, rerr := cl.readWord(ctx, cl.grant); rerr == nil && grantFor(gw, first) {
			from = grantClaimer(gw)
		}
		cl.n.addOrphan(g, orphan{from: from, excl: true, at: cl.grant, seq: first, grant: true, body: f.body})
		cl.stale = true
		cl.n.quarantine(f, []orphan{{at: cl.grant, seq: first, grant: true}})
		if errors.Is(err, context.DeadlineExceeded) {
			return 0, fmt.Errorf("selcc: a hand-over claimed for this client never came: %w", farmem.ErrNodeDown)
		}
		return 0, err
	}
	if !grantFor(w, first) {
		return 0, nil
	}
	return grantStateOf(w), nil
}

// pollGrant reports a hand-over to the acquisition first: grantData or grantDataDirty once the
// line is in the frame (waiting if a holder has claimed the word), 0 otherwise.
func (cl *Client) pollGrant(ctx context.Context, g GCL, f *frame, first uint64) (uint64, error) {
	w, err := cl.readWord(ctx, cl.grant)
	if err != nil || !grantFor(w, first) {
		return 0, err
	}
	switch st := grantStateOf(w); st {
	case grantClaimed:
		return cl.awaitGrant(ctx, g, f, first)
	case grantData, grantDataDirty:
		return st, nil
	}
	return 0, nil
}

// closeGrant ends the acquisition first's grant: it returns the hand-over's final state if one
// was claimed or done before the close, 0 otherwise; the word is closed either way.
func (cl *Client) closeGrant(ctx context.Context, g GCL, f *frame, first uint64) (uint64, error) {
	ctx = detached(ctx)
	open := grantWord(first, 0, grantOpen)
	prev, err := cl.m.CAS(ctx, cl.grant, open, grantClosed)
	if err != nil || prev == open {
		return 0, err
	}
	st := uint64(0)
	if grantFor(prev, first) {
		switch grantStateOf(prev) {
		case grantClaimed:
			if st, err = cl.awaitGrant(ctx, g, f, first); err != nil {
				return 0, err
			}
		case grantData, grantDataDirty:
			st = grantStateOf(prev)
		}
	}
	return st, cl.setGrant(ctx, grantClosed)
}

// handOver gives f's line (held M, latched X by this client) to p's writer if that writer's
// acquisition is still the one that sent p: it claims the writer's grant word, hands the
// ownership over with one FAA and forwards the line with the word's final state. It reports
// whether it did; on false nothing changed.
func (cl *Client) handOver(ctx context.Context, f *frame, p invalidation) (bool, error) {
	w, err := cl.readWord(ctx, p.grant)
	if err != nil || grantStateOf(w) != grantOpen || w>>16 > p.seq&grantSeqMask {
		return false, nil // not acquiring any more, or another acquisition: release plainly
	}
	prev, err := cl.m.CAS(ctx, p.grant, w, grantWord(w>>16, cl.me, grantClaimed))
	if err != nil || prev != w {
		return false, nil
	}
	if _, err := cl.m.FAA(ctx, f.key.Latch(), HandoverDelta(cl.o.Codec, cl.me, p.from)); err != nil {
		return false, err
	}
	st := uint64(grantData)
	if f.hi > f.lo {
		st = grantDataDirty
	}
	buf := make([]byte, cl.o.LineSize)
	if err := cl.m.Read(ctx, f.body, buf); err != nil {
		return true, err
	}
	var b farmem.Batch
	b.Write(p.data, buf)
	b.MaskedCAS(p.grant, grantClaimed, 0xff, st, 0xff)
	return true, doAll(ctx, cl.m, &b)
}
