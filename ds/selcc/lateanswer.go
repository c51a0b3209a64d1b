package selcc

import (
	"cmp"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"

	"github.com/farmem/farmem/alloc/nodearea"
	"github.com/farmem/farmem/farmem"
)

// Late answers. A requester that stops waiting for a peer's answer (ReplyTimeout, or the peer
// reported down) leaves its frame quarantined and the hold the answer may bring recorded as an
// orphan (see orphan). A peer that was only late still answers: an exclusive holder hands the
// line over with its FAA and then forwards it, dirty under WriteBack, into the quarantined
// frame, with its status in the requester's reply word (or grant word). That line can hold
// acknowledged writes far memory never saw, so settling the orphan must write it back, and to
// know whether it came the node must read the answer where it lands. A client's reply flags and
// grant word are reused by its next messages, so a client that stopped waiting on them retires
// them: at the end of that acquisition (or census) it takes a fresh block of flags and grant
// word from its node's shared area (alloc/nodearea), and the old block is written only by the
// late answers the orphans record. The slice's own block, once retired, is never handed to a
// later client of the slice. Costs: nothing on any path that got its answers; on a failed
// wait, one allocation in the node's shared area (local verbs), 8 bytes per compute node the
// codec encodes plus 8, never freed (as the quarantined frame is not). If the area has no room,
// the client keeps its block and the orphans it recorded forget where their answers land: they
// are then settled as before this mechanism (a late forward's line dropped).

// answer is what an orphan's answer word says.
type answer struct {
	known     bool // the orphan knows where its answer lands
	answered  bool // the peer answered (a late answer has come)
	forwarded bool // ... with the line, forwarded into the orphan's frame
	dirty     bool // ... newer than far memory
}

// answered reports whether w, read from o's answer word, is an answer (for Memory.Wait).
func (o orphan) answered(w uint64) bool {
	if o.grant {
		return !grantFor(w, o.seq) || grantStateOf(w) != grantClaimed
	}
	return w>>8 == o.seq
}

// decode reads o's answer from w.
func (o orphan) decode(w uint64) answer {
	if o.at == 0 {
		return answer{}
	}
	if o.grant {
		if !grantFor(w, o.seq) {
			return answer{} // not this acquisition's grant: the word says nothing of it
		}
		switch grantStateOf(w) {
		case grantClaimed:
			return answer{known: true}
		case grantData:
			return answer{known: true, answered: true, forwarded: true}
		case grantDataDirty:
			return answer{known: true, answered: true, forwarded: true, dirty: true}
		}
		return answer{known: true, answered: true}
	}
	if w>>8 != o.seq {
		return answer{known: true}
	}
	switch w & 0xff {
	case replyData:
		return answer{known: true, answered: true, forwarded: true}
	case replyDataDirty:
		return answer{known: true, answered: true, forwarded: true, dirty: true}
	}
	return answer{known: true, answered: true}
}

// answerOf reads o's answer word (a local READ; none if o does not know it).
func (cl *Client) answerOf(ctx context.Context, o orphan) (answer, error) {
	if o.at == 0 {
		return answer{}, nil
	}
	w, err := cl.word(ctx, o.at)
	if err != nil {
		return answer{}, err
	}
	return o.decode(w), nil
}

// Outcomes of settleLanded.
const (
	landedNone     = iota // no exclusive orphan: the hold is not an orphan's
	landedReleased        // released (written back first if its line came dirty)
	landedKept            // its line has not come: every orphan kept
)

// settleLanded settles this node's exclusive hold of g that an orphan of os landed (the word
// names this node, its frame has memo I): with the line written back if an orphan's answer
// carries it dirty, in one ordered batch with the release FAA. It returns the index of the
// orphan released (-1 if none can be named). If no answer carries the line yet, the forward
// is still on its way (the holder forwards after its FAA): with wait it waits for the answers
// (ReplyTimeout at most), releasing without the line only if every peer it waits for is
// reported down (a claimer it could not read: after lostForward ReplyTimeouts); otherwise it
// keeps every orphan (landedKept), with an error wrapping farmem.ErrNodeDown if it waited.
func (cl *Client) settleLanded(ctx context.Context, g GCL, os []orphan, ans []answer, wait bool) (int, int, error) {
	var wctx context.Context
	for {
		var pending []int
		excl, unknown := false, -1
		for i, o := range os {
			if !o.excl {
				continue
			}
			excl = true
			switch a := ans[i]; {
			case a.forwarded:
				return i, landedReleased, cl.releaseLanded(ctx, g, o, a)
			case !a.known:
				unknown = i
			case !a.answered:
				pending = append(pending, i)
			}
		}
		if unknown >= 0 {
			// No answer carries the line, and one orphan does not know where its answer
			// lands: release, dropping what may come there.
			return unknown, landedReleased, cl.releaseLanded(ctx, g, os[unknown], ans[unknown])
		}
		if !excl {
			return -1, landedNone, nil
		}
		if len(pending) == 0 {
			// Every exclusive orphan answered without the line: the hold is none of theirs
			// (nothing else gives this node a hold it has no frame for); release it.
			return -1, landedReleased, cl.releaseLanded(ctx, g, orphan{}, answer{})
		}
		if !wait {
			return -1, landedKept, nil
		}
		if wctx == nil {
			var cancel context.CancelFunc
			wctx, cancel = cl.rt.WithTimeout(ctx, cl.o.ReplyTimeout)
			defer cancel()
		}
		o := os[pending[0]]
		w, err := cl.m.Wait(wctx, o.at, o.answered)
		if err == nil {
			ans[pending[0]] = o.decode(w)
			continue
		}
		if !errors.Is(err, context.DeadlineExceeded) {
			return -1, landedKept, err
		}
		// The line did not come within ReplyTimeout. A peer that handed the line over sends
		// it right after its FAA, over a connection that delivers or reports the peer down
		// (a cut link included), so the line comes however slow the peer is, unless the peer
		// is down: then it never will, and a crash loses what only the dead node had. So the
		// hold is released without the line only once every peer that may still send it is
		// reported down. A grant's claimer that could not be read (from 0) cannot be asked:
		// it is deemed down lostForward ReplyTimeouts after the hold was found landed.
		since := cl.n.landedSince(g, cl.rt.Now())
		for _, i := range pending {
			o := os[i]
			if o.from == 0 && cl.rt.Now()-since < farmem.Time(lostForward*cl.o.ReplyTimeout) ||
				o.from != 0 && cl.holderGone(ctx, o.from, g, nil) == nil {
				return -1, landedKept, fmt.Errorf("selcc: %v was handed over to %v, and the line has not come within ReplyTimeout: %w", g, cl.me.Node(), farmem.ErrNodeDown)
			}
		}
		return -1, landedReleased, cl.releaseLanded(ctx, g, orphan{}, answer{})
	}
}

// lostForward is how many ReplyTimeouts a node waits, in failed acquisitions, for the line of
// a grant hand-over that landed from a claimer it could not read before it deems the claimer
// down and releases the hold without the line.
const lostForward = 8

// landedSince returns when this node first found a landed hold of g whose line had not come
// (now, recorded, if it had not).
func (n *node) landedSince(g GCL, now farmem.Time) farmem.Time {
	n.mu.Lock()
	defer n.mu.Unlock()
	if t, ok := n.landed[g]; ok {
		return t
	}
	if n.landed == nil {
		n.landed = map[GCL]farmem.Time{}
	}
	n.landed[g] = now
	return now
}

// releaseLanded releases this node's exclusive hold of g (landed from o, memo I): one FAA, in
// one ordered batch after the write-back of the line o's answer forwarded dirty.
func (cl *Client) releaseLanded(ctx context.Context, g GCL, o orphan, a answer) error {
	cl.n.mu.Lock()
	delete(cl.n.landed, g)
	cl.n.mu.Unlock()
	delta := ReleaseExclusiveDelta(cl.o.Codec, cl.me)
	if !a.forwarded || !a.dirty {
		_, err := cl.m.FAA(ctx, g.Latch(), delta)
		return err
	}
	buf := make([]byte, cl.o.LineSize)
	if err := cl.m.Read(ctx, o.body, buf); err != nil {
		return err
	}
	var b farmem.Batch
	b.Write(g.Body(), buf)
	b.FAA(g.Latch(), delta)
	return doAll(ctx, cl.m, &b)
}

// mayAnswer reports whether o's source may still answer it: o knows where its answer lands,
// no answer has come, and its source (a grant's claimer, named in the grant word) is known and
// not reported down (one message to ask, see holderGone). A grant orphan whose claimer could
// not be read is kept only while some node holds the line (the caller's rule): the claimer
// hands over right after its claim, while it holds the line.
func (cl *Client) mayAnswer(ctx context.Context, g GCL, o orphan, a answer) bool {
	if !a.known || a.answered || o.from == 0 {
		return false
	}
	return cl.holderGone(ctx, o.from, g, nil) == nil
}

// replyBlock is the size of a client's reply block: a flag per compute node the codec
// encodes, then the grant word.
func (cl *Client) replyBlock() uint64 { return 8 * uint64(cl.o.Codec.MaxNodes()+1) }

// retireReplies gives the client a fresh reply block if a wait of it failed (see Late
// answers); the caller's grant word is closed (no acquisition runs).
func (cl *Client) retireReplies(ctx context.Context) {
	if !cl.stale {
		return
	}
	cl.stale = false
	ctx = detached(ctx)
	b, err := cl.n.replyBlock(ctx, cl.m, cl.replyBlock())
	if err != nil {
		// No room: keep the block; what the orphans recorded in it cannot be told from the
		// answers to come.
		cl.n.forgetAnswers(cl.flag, cl.replyBlock())
		return
	}
	cl.n.retire(cl.flag)
	cl.flag, cl.grant = b, b.Add(8*uint64(cl.o.Codec.MaxNodes()))
}

// replyBlock allocates a zeroed reply block of size bytes in the node's shared area through m
// (a zero grant word is closed, a zero flag matches no sequence a client uses).
func (n *node) replyBlock(ctx context.Context, m farmem.Memory, size uint64) (farmem.Addr, error) {
	a, err := nodearea.Open(ctx, m)
	if err != nil {
		return 0, err
	}
	return a.AllocZeroed(ctx, size)
}

// retire records that the reply block at a belongs to late answers from now on.
func (n *node) retire(a farmem.Addr) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.retired == nil {
		n.retired = map[farmem.Addr]bool{}
	}
	n.retired[a] = true
}

// retiredBlock reports whether the reply block at a was retired.
func (n *node) retiredBlock(a farmem.Addr) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.retired[a]
}

// forgetAnswers makes the orphans whose answer word lies in [a, a+size) forget it.
func (n *node) forgetAnswers(a farmem.Addr, size uint64) {
	n.mu.Lock()
	defer n.mu.Unlock()
	for g, os := range n.orphans {
		for i, o := range os {
			if o.at >= a && o.at < a.Add(size) {
				os[i].at = 0
			}
		}
		n.orphans[g] = os
	}
}

// quarantine marks f dead (late answers to the messages whose answer words are in at may
// still forward a line into it) and records those words, so the frame can be reclaimed once
// they all answered and their lines were settled (reclaim).
func (n *node) quarantine(f *frame, at []orphan) {
	n.mu.Lock()
	defer n.mu.Unlock()
	f.dead = true
	if n.quarantined == nil {
		n.quarantined = map[*frame][]orphan{}
	}
	n.quarantined[f] = append(n.quarantined[f], at...)
}

// reclaim returns a quarantined frame that nothing can write any more to use (taken off the
// free list's way, as takeFree would), or nil: every message that could forward into it has
// answered (its answer word says so; a forward lands before its answer, in one ordered batch)
// and no orphan still waits to write back a line forwarded into it. Called only when no frame
// is free; costs a local READ per answer word of the quarantined frames it looks at.
func (n *node) reclaim(ctx context.Context, m farmem.Memory) *frame {
	n.mu.Lock()
	if len(n.quarantined) == 0 {
		n.mu.Unlock()
		return nil
	}
	type cand struct {
		f  *frame
		at []orphan
	}
	var cs []cand
	for f, at := range n.quarantined {
		cs = append(cs, cand{f, at})
	}
	n.mu.Unlock()
	// in frame order, so the verbs' order does not depend on the map's (sim runs are
	// deterministic)
	slices.SortFunc(cs, func(a, b cand) int { return cmp.Compare(a.f.body, b.f.body) })
	for _, c := range cs {
		done := true
		for _, o := range c.at {
			w, err := readWord(ctx, m, o.at)
			if err != nil || !o.answered(w) || o.decode(w).forwarded && n.pendingForward(c.f, o) {
				done = false
				break
			}
		}
		if !done {
			continue
		}
		n.mu.Lock()
		if _, ok := n.quarantined[c.f]; ok && c.f.key == 0 {
			delete(n.quarantined, c.f)
			c.f.dead = false
			n.mu.Unlock()
			return c.f
		}
		n.mu.Unlock()
	}
	return nil
}

// pendingForward reports whether an orphan still has to settle the line the answer at o
// forwarded into f.
func (n *node) pendingForward(f *frame, o orphan) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, os := range n.orphans {
		for _, x := range os {
			if x.body == f.body && x.at == o.at && x.seq == o.seq {
				return true
			}
		}
	}
	return false
}

func readWord(ctx context.Context, m farmem.Memory, a farmem.Addr) (uint64, error) {
	var b [8]byte
	if err := m.Read(ctx, a, b[:]); err != nil {
		return 0, err
	}
	return binary.LittleEndian.Uint64(b[:]), nil
}
