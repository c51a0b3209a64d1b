package selcc

import (
	"context"
	"errors"
	"fmt"

	"github.com/farmem/farmem/farmem"
)

// HolderDownError is the error of an acquisition that found, in the line's word, a compute
// node the fabric already reports down (its invalidation could not be sent: Memory.Send failed
// at once with farmem.ErrNodeDown). It wraps that error, hence farmem.ErrNodeDown. A holder
// that merely did not answer within ReplyTimeout is not reported this way (it may be slow, not
// gone).
type HolderDownError struct {
	Node farmem.ComputeID // the holder reported down
	Line GCL              // the line it holds
	Err  error            // the Send's error
}

// Error names the holder and the line.
func (e *HolderDownError) Error() string {
	return fmt.Sprintf("selcc: %v holds %v and is down (RepairLine clears its holds): %v", e.Node.Node(), e.Line, e.Err)
}

// Unwrap returns the Send's error.
func (e *HolderDownError) Unwrap() error { return e.Err }

// RepairLine removes dead's holds from g's word while the cluster runs: its exclusive hold if
// the holder field names it, and its shared bit if set, with one CAS from the word read (one
// READ and one CAS, more if live nodes change the word meanwhile). It returns the number of
// holds removed (0 if the word holds none of dead's).
//
// Unlike Repair it needs no coordination: a CAS removes a hold only while the word still shows
// it, so survivors that repair the same line at once remove each hold once, and the live
// nodes' transitions (FAAs and CASes of their own parts) only make it retry. It is exact under
// the bitmap codec alone (a group's counter does not say whose share it is: Repair's census is
// for that), and it refuses, with farmem.ErrInvalid, a cluster with EagerForward or the group
// codec. As for Repair, dead must really be gone (the caller's judgement: kvstore's blink kind
// acts on the fabric's report that the node is down, see package ds/blink), and every verb it
// posted must have landed or never will (the fabric's down timeout after it was seen down):
// otherwise a late release of dead's would remove a hold twice.
func (cl *Client) RepairLine(ctx context.Context, dead farmem.ComputeID, g GCL) (int, error) {
	cd := cl.o.Codec
	if cl.o.EagerForward || !exactSharers(cd) {
		return 0, fmt.Errorf("selcc: online repair of %v needs the bitmap codec and no EagerForward: %w", g, farmem.ErrInvalid)
	}
	w, err := cl.word(ctx, g.Latch())
	for err == nil {
		next, removed := w, 0
		if cd.Holder(next) == dead {
			next += ReleaseExclusiveDelta(cd, dead)
			removed++
		}
		if next&cd.Shared(dead) != 0 {
			next += ReleaseSharedDelta(cd, dead)
			removed++
		}
		if removed == 0 {
			return 0, nil
		}
		var prev uint64
		if prev, err = cl.m.CAS(ctx, g.Latch(), w, next); err == nil && prev == w {
			return removed, nil
		}
		w = prev
	}
	return 0, err
}

// Memory returns the client's farmem.Memory (its clock, topology and verbs).
func (cl *Client) Memory() farmem.Memory { return cl.m }

// awaitReply waits (within ctx, ReplyTimeout) for the answer of sequence seq in flag from t,
// which was asked about g. A peer answers within microseconds; after each of the fabric's down
// timeouts without an answer, the client checks whether the fabric now reports t down
// (holderGone) and if so stops waiting with a HolderDownError: t crashed after it took the
// message, and its answer will never come. Costs: nothing while peers answer; one message per
// down timeout of waiting.
func (cl *Client) awaitReply(ctx context.Context, flag farmem.Addr, seq uint64, g GCL, t farmem.ComputeID) (uint64, error) {
	until := func(w uint64) bool { return w>>8 == seq }
	slice := cl.m.Topology().DownTimeout
	if slice <= 0 {
		return cl.m.Wait(ctx, flag, until)
	}
	for {
		sctx, cancel := cl.rt.WithTimeout(ctx, slice)
		w, err := cl.m.Wait(sctx, flag, until)
		cancel()
		if err == nil || ctx.Err() != nil || !errors.Is(err, context.DeadlineExceeded) {
			return w, err
		}
		if herr := cl.holderGone(ctx, t, g, nil); herr != nil {
			return 0, herr
		}
	}
}

// holderGone returns a HolderDownError if the fabric reports t down (a one-way message of no
// effect, a peerUnfence of no line, that Send fails at once for a node known to be down),
// otherwise err. Cost: one message.
func (cl *Client) holderGone(ctx context.Context, t farmem.ComputeID, g GCL, err error) error {
	probe := invalidation{kind: peerUnfence, from: cl.me}.encode()
	if serr := cl.m.Send(ctx, t.Node(), farmem.OwnerSELCC.Method(methodInvalidate), probe); errors.Is(serr, farmem.ErrNodeDown) {
		return &HolderDownError{Node: t, Line: g, Err: serr}
	}
	return err
}
