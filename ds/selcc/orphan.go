package selcc

import (
	"context"
	"fmt"

	"github.com/farmem/farmem/farmem"
)

// An orphan is a hold that may have been given to this node by a peer whose answer never came:
// an exclusive holder that crashed (or stalled past ReplyTimeout) between its hand-over FAA and
// the forward, one that claimed this client's grant word and never forwarded, or (bitmap codec)
// one that downgraded for this node's PeerRd and never forwarded. The word may then name this
// node while no frame of it holds the line; the handler would drop every invalidation for it
// (no frame), and the node's own next acquisition would find itself in the way (a CAS that
// fails on its own hold, or a second share that carries into the next node's bit). So the
// requester records the unanswered message, and the node settles it before its next attempt
// on the line (under the frame's exclusive latch, so no other transition of this node on the
// line runs meanwhile).
//
// Settling is exact because only this node's own acquisitions and its peers' answers to its
// own messages ever put this node's hold into the word, and the holder field is exact:
//
//   - an exclusive orphan landed iff the holder field names this node. A peer that is only
//     late still forwards its line into the quarantined frame, and under WriteBack that line
//     can be the only copy of acknowledged writes; so the orphan keeps where the answer lands
//     (its reply or grant word, which the client never reuses once it stopped waiting: see
//     lateanswer.go) and the frame's body. A landed orphan whose answer carries the line is
//     released in one ordered batch that writes the line back (if it came dirty) before the
//     release FAA; one whose answer has not come yet (the forward follows the hand-over FAA)
//     is waited for, at most ReplyTimeout, and kept if it still has not come (the acquisition
//     fails with farmem.ErrNodeDown, or the handler leaves it for later), unless its source
//     is reported down (a crash loses what only the dead node had, as Durability says): then
//     it is released without the line. However slow a live source is, its line comes (a
//     connection delivers or reports its peer down), so it is waited for; a grant's claimer
//     is named in the grant word for this (one that could not be read is deemed down after
//     8 ReplyTimeouts). An orphan that does not know where its answer lands
//     (a client taken over, or no room for a fresh reply block) is released at once, dropping
//     whatever a late forward brings;
//   - it can still land while the holder field names its source (the source still holds M): it
//     stays recorded; the acquisition goes on (its CAS cannot succeed meanwhile, and a hand-over
//     landing later is settled at the next attempt);
//   - it can still land while its source has not answered and is not reported down, even if
//     the source does not hold the line now: a late message is served whenever it reaches the
//     source's handler, which may be after the source took the line back (kept; the holder
//     cannot hand over while this node holds the line, so a hold that lands later always
//     finds the node without one, and is settled as above);
//   - otherwise it never will (it answered without handing over, or its source is down, or,
//     for an orphan that does not know where its answer lands, its source does not hold the
//     line any more): it is forgotten.
//   - A shared orphan (bitmap only) landed iff this node's bit is set, since a downgrade adds it
//     in the same FAA that takes the holder field off its source (and writes the line back
//     before, so nothing is lost with the forward); while the source still holds M and has not
//     answered it could land at any moment, and a shared attempt then would add the node's bit
//     twice (a carry), so a shared acquisition of the line waits for the answer (ReplyTimeout
//     at most, if the orphan knows where it lands) and otherwise fails with
//     farmem.ErrNodeDown until it settles (the source answers late, or is repaired).
//
// The group codec never makes shared orphans: its holders downgrade only themselves on a PeerRd
// (the reader adds its own count with its next attempt), since a group count cannot tell whether
// a given member's count landed.
type orphan struct {
	from farmem.ComputeID // the peer that may hand over (a grant's claimer); 0: not known, any holder
	excl bool
	// Where the late answer lands, if known (at 0: not known): the reply word of the message
	// (seq its sequence number) or, grant set, the client's grant word (seq the acquisition's
	// first sequence number), and body, the quarantined frame's body the line is forwarded to.
	at    farmem.Addr
	seq   uint64
	grant bool
	body  farmem.Addr
}

// addOrphan records an unanswered message of this node about g.
func (n *node) addOrphan(g GCL, o orphan) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.orphans == nil {
		n.orphans = map[GCL][]orphan{}
	}
	for _, x := range n.orphans[g] {
		if x == o {
			return
		}
	}
	n.orphans[g] = append(n.orphans[g], o)
}

func (n *node) orphansOf(g GCL) []orphan {
	n.mu.Lock()
	defer n.mu.Unlock()
	return append([]orphan(nil), n.orphans[g]...)
}

func (n *node) setOrphans(g GCL, os []orphan) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if len(os) == 0 {
		delete(n.orphans, g)
		return
	}
	n.orphans[g] = os
}

// settleOrphans settles this node's orphans on g before an attempt (the caller holds the
// frame mapping g latched X, with memo I): a READ of each recorded answer word, then one READ
// of the word, and one FAA per landed hold (with the forwarded line's write-back in its
// batch). With wait, a landed hold whose line has not come yet is waited for (ReplyTimeout at
// most); without (the handler), it is left for later. A shared attempt that must wait for a shared
// orphan (its source holds the line and has not answered) waits for the answer, ReplyTimeout
// at most, if the orphan knows where it lands. It fails with farmem.ErrNodeDown if that answer
// does not come, or if a hand-over landed whose line did not come.
func (cl *Client) settleOrphans(ctx context.Context, g GCL, excl bool, gs *grantState, wait bool) error {
	os := cl.n.orphansOf(g)
	if len(os) == 0 {
		return nil
	}
	cd, me := cl.o.Codec, cl.me
	// The answers are read before the word: a peer changes the word (its hand-over or
	// downgrade FAA) before it answers, so an answer read here has its FAA in the word read
	// after it. Read the other way round, a downgrade landing between the two reads left
	// this node's share in the word with its orphan forgotten as answered: the node's next
	// writer failed its CAS on its own share forever, and its next reader carried into the
	// next node's bit.
	ans := make([]answer, len(os))
	for i, o := range os {
		var err error
		if ans[i], err = cl.answerOf(ctx, o); err != nil {
			return err
		}
	}
	w, err := cl.word(ctx, g.Latch())
	if err != nil {
		return err
	}
	if gs.opened && cd.Holder(w) == me {
		// This acquisition's own grant may be what named this node (a holder claims the word
		// before its hand-over FAA): read after the latch word, a grant still open means the
		// hold came from elsewhere. If claimed, the loop's poll takes the line; settle later.
		gw, err := cl.readWord(ctx, cl.grant)
		if err != nil {
			return err
		}
		if grantFor(gw, gs.first) && grantStateOf(gw) != grantOpen {
			return nil
		}
	}
	released := -1 // the exclusive orphan released as the one that landed
	if cd.Holder(w) == me {
		i, out, err := cl.settleLanded(ctx, g, os, ans, wait)
		if err != nil || out == landedKept {
			return err
		}
		if out == landedReleased {
			w += ReleaseExclusiveDelta(cd, me)
			released = i
		}
	}
	var keep []orphan
	var wait0 farmem.ComputeID
	var waitFor orphan
	for i, o := range os {
		h := cd.Holder(w)
		a := ans[i]
		switch {
		case i == released:
		case o.excl && a.known && a.answered && !a.forwarded:
			// answered without a hand-over: it never will hand over
		case o.excl && (o.from == 0 && h != 0 || o.from != 0 && h == o.from):
			keep = append(keep, o)
		case o.excl && cl.mayAnswer(ctx, g, o, a):
			// Its source does not hold the line now, but has not answered: it may take the
			// line back and hand it over then.
			keep = append(keep, o)
		case o.excl:
		case w&cd.Shared(me) != 0 && exactSharers(cd):
			if _, err := cl.m.FAA(ctx, g.Latch(), ReleaseSharedDelta(cd, me)); err != nil {
				return err
			}
			w += ReleaseSharedDelta(cd, me)
		case a.known && a.answered:
			// answered, and its share (if it gave one) released above: nothing can land
		case h == o.from:
			keep = append(keep, o)
			wait0, waitFor = o.from, o
		case cl.mayAnswer(ctx, g, o, a):
			keep = append(keep, o) // as an exclusive orphan: a downgrade may come later
		}
	}
	cl.n.setOrphans(g, keep)
	if wait0 != 0 && !excl && wait && waitFor.at != 0 {
		// The source holds the line and has the message: wait for its answer (ReplyTimeout at
		// most), then settle again.
		wctx, cancel := cl.rt.WithTimeout(ctx, cl.o.ReplyTimeout)
		_, err := cl.m.Wait(wctx, waitFor.at, waitFor.answered)
		cancel()
		if err == nil {
			return cl.settleOrphans(ctx, g, excl, gs, wait)
		}
	}
	if wait0 != 0 && !excl {
		return cl.holderGone(ctx, wait0, g, fmt.Errorf("selcc: %v has not answered an earlier PeerRd of %v and still holds it (Repair clears its holds): %w", wait0.Node(), g, farmem.ErrNodeDown))
	}
	return nil
}

// exactSharers reports whether cd's Sharers is exact (the bitmap), so a node's share can be
// told apart from its group's.
func exactSharers(cd Codec) bool {
	_, ok := cd.(Bitmap)
	return ok
}
