package selcc

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/farmem/farmem/alloc/nodearea"
	"github.com/farmem/farmem/farmem"
)

// The group codec's online repair. A group's counter says how many of its members hold the
// line, not which, so a dead member's share cannot be read off the word. Repair makes the
// counter say it: it fences the line on every live member of the dead node's group (a census),
// and each of them, under its frame's latch, gives its own share up and keeps its clients and
// its handler from adding one while the fence stands. Once every live member has answered, the
// group's counter holds only what dead members added; with one member dead it is 0 or 1
// (a node adds at most one share to a line), and Repair removes it with one FAA.
//
// Why it is exact. A live member's count changes only by its own transitions on the line: its
// acquisitions (shared FAA and undo, upgrade CAS), its releases (eviction, lease, yield, case
// 3) and its downgrade for a reader (case 2, which under the group codec adds only its own
// count). The census handler sets the fence first, then try-locks the member's frame for the
// line: every acquisition, release and downgrade of the line runs under that frame's
// exclusive latch, so either one is under way (the member answers "busy" and the repairer asks
// again later) or none is, and none can start on the line while the fence stands (an
// acquisition that meets it before its atomic gives its frame back and waits holding no latch;
// the handler drops invalidations that would downgrade). Hits change no count: if shared
// guards hold the frame, the handler reads the memo under a shared latch, and a share is given
// up by the last of those readers as it leaves (the member answers busy until then). An
// acquisition that had not yet mapped a frame when the fence went up maps it afterwards and
// then meets the fence. So when the last answer is in, no live
// member of the group has a count in the word or can add one until the fence falls, and the
// READ that follows sees the dead members' counts alone. The fence lasts ReplyTimeout from its
// arrival; the repairer trusts its READ only if it completed within ReplyTimeout of sending the
// census (otherwise it asks again), and lifts the fences as soon as it is done. The FAA itself
// may land after the fences fall: the dead node's count does not change, whatever the live
// members do meanwhile.
//
// It never decrements below the real sharers (only the dead node's count is removed, and only
// when the fenced census shows it there), and non-holders never decrement (a live member
// releases only a share its memo records). It cannot deadlock: no one waits on a fence for
// longer than ReplyTimeout, the census handler never waits (it try-locks), and a member that
// does not answer fails the repair of the line with farmem.ErrNodeDown (it may be dead too and
// need its own repair). It does not livelock the cluster: a member only answers busy while one
// of its own transitions of the line is under way, and those complete; the repairer retries
// (with backoff) a bounded number of times and then fails with ErrBusy, leaving the word as it
// was (a superset: at worst extra invalidations to the group until a later repair). The cost is
// paid by the live members: they lose their shared copies of the line and cannot acquire it for
// the length of one census (a few round trips).

// ErrBusy is returned by Repair when the live members of a dead node's group kept a line busy
// (a transition under way) at every census it tried; the line's word is unchanged and Repair
// may be called again.
var ErrBusy = errors.New("selcc: line kept busy")

// Census message kinds (after the invalidations'): they carry no data and need no grant.
const (
	peerCensus  = 3 // fence the line, give the member's share up, answer clear or busy
	peerUnfence = 4 // lift the fence the census put up (no answer)
)

// censusTries bounds the rounds Repair spends on one line whose members keep answering busy.
const censusTries = 64

// census fences g on this node: it keeps this node's clients from adding a count to g until the time given (or until
// lifted) and answers whether the node holds no count of g now (ok) or a local transition of g
// is under way (busy).
func (n *node) census(ctx context.Context, m farmem.Memory, g GCL) (bool, error) {
	until := m.Runtime().Now() + farmem.Time(n.c.opts.ReplyTimeout)
	n.mu.Lock()
	if n.fences == nil {
		n.fences = map[GCL]farmem.Time{}
	}
	if until > n.fences[g] {
		n.fences[g] = until
	}
	n.mu.Unlock()
	f := n.lookup(g)
	if f == nil {
		return true, nil
	}
	l, err := nodearea.NewLatch(m, f.latch)
	if err != nil {
		return false, err
	}
	ok, err := l.TryLock(ctx)
	if err != nil {
		return false, err
	}
	if !ok {
		// Shared guards may hold it: the memo can be read under a shared latch (it is
		// written under the exclusive one). A share must go, but only under the exclusive
		// latch: the last local reader gives it up as it leaves (as for a starving writer).
		ok, err := l.TryRLock(ctx)
		if err != nil || !ok {
			return false, err // an acquisition, release or writer under way
		}
		held := n.mapped(g, f) && f.memo == memoS
		if held {
			f.yieldPrio.CompareAndSwap(0, 1)
		}
		_ = l.RUnlock(detached(ctx))
		return !held, nil
	}
	defer func() { _ = l.Unlock(detached(ctx)) }()
	if !n.mapped(g, f) || f.memo != memoS {
		return true, nil // M adds no count (and cannot downgrade while fenced); I holds none
	}
	if _, err := m.FAA(ctx, g.Latch(), ReleaseSharedDelta(n.c.opts.Codec, n.id)); err != nil {
		return false, err
	}
	f.memo = memoI
	n.unmap(f)
	return true, nil
}

// errFenced ends an acquisition that met a census fence: the caller lets the frame go and
// waits for the fence without holding the frame's latch (the census needs it).
var errFenced = errors.New("selcc: fenced by a repair")

// unfence lifts the fence on g.
func (n *node) unfence(g GCL) {
	n.mu.Lock()
	defer n.mu.Unlock()
	delete(n.fences, g)
}

// fenced returns the time until which g is fenced on this node (0: not fenced).
func (n *node) fenced(g GCL, now farmem.Time) farmem.Time {
	n.mu.Lock()
	defer n.mu.Unlock()
	t, ok := n.fences[g]
	if ok && t <= now {
		delete(n.fences, g)
		return 0
	}
	return t
}

// checkFence fails with errFenced if a repair's census fences g on this node.
func (cl *Client) checkFence(g GCL) error {
	if cl.n.fenced(g, cl.rt.Now()) != 0 {
		return errFenced
	}
	return nil
}

// waitFence waits while a repair's census fences g on this node (holding no latch).
func (cl *Client) waitFence(ctx context.Context, g GCL) error {
	for {
		t := cl.n.fenced(g, cl.rt.Now())
		if t == 0 {
			return nil
		}
		d := min(durationOf(t-cl.rt.Now()), max(cl.o.Backoff, time.Microsecond))
		if err := cl.rt.Sleep(ctx, d); err != nil {
			return err
		}
	}
}

// repairGroup removes dead's share of g under the group codec by a fenced census of dead's
// live group members; it reports whether it removed one.
func (cl *Client) repairGroup(ctx context.Context, dead farmem.ComputeID, g GCL) (bool, error) {
	cd := cl.o.Codec.(Groups)
	gi := int(uint64(dead-1) % groupCount)
	var members []farmem.ComputeID
	self := false
	for id := gi + 1; id <= cd.MaxNodes(); id += groupCount {
		switch c := farmem.ComputeID(id); {
		case c == dead:
		case c == cl.me:
			self = true
		default:
			members = append(members, c)
		}
	}
	defer func() {
		// Lift the fences (best effort: they fall by themselves after ReplyTimeout).
		method := farmem.OwnerSELCC.Method(methodInvalidate)
		for _, t := range members {
			v := invalidation{kind: peerUnfence, from: cl.me, gcl: g}
			_ = cl.m.Send(detached(ctx), t.Node(), method, v.encode())
		}
		if self {
			cl.n.unfence(g)
		}
	}()
	for try := 1; try <= censusTries; try++ {
		start := cl.rt.Now()
		clear, err := cl.censusRound(ctx, g, members)
		if err != nil {
			return false, err
		}
		if self {
			ok, err := cl.n.census(ctx, cl.m, g)
			if err != nil {
				return false, err
			}
			clear = clear && ok
		}
		if clear {
			w, err := cl.word(ctx, g.Latch())
			if err != nil {
				return false, err
			}
			if cl.rt.Now()-start < farmem.Time(cl.o.ReplyTimeout) {
				switch k := cd.Count(w, gi); {
				case k == 0:
					return false, nil
				case k == 1:
					_, err := cl.m.FAA(ctx, g.Latch(), ReleaseSharedDelta(cd, dead))
					return err == nil, err
				default:
					return false, fmt.Errorf("selcc: %v's group holds %d counts of %v with every live member fenced: more than one member is dead (repair them together): %w", dead.Node(), k, g, farmem.ErrInvalid)
				}
			}
		}
		if err := cl.rt.Sleep(ctx, cl.o.Backoff*time.Duration(min(try, 16))); err != nil {
			return false, err
		}
	}
	return false, fmt.Errorf("selcc: repair of %v's share of %v: its group's members kept it busy for %d censuses: %w", dead.Node(), g, censusTries, ErrBusy)
}

// censusRound sends a census of g to each member and waits for every answer; it reports
// whether all answered clear.
func (cl *Client) censusRound(ctx context.Context, g GCL, members []farmem.ComputeID) (bool, error) {
	cl.seq++
	seq := cl.seq
	method := farmem.OwnerSELCC.Method(methodInvalidate)
	for i, t := range members {
		v := invalidation{kind: peerCensus, from: cl.me, gcl: g, flag: cl.flag.Add(8 * uint64(i)), seq: seq}
		if err := cl.m.Send(ctx, t.Node(), method, v.encode()); err != nil {
			if errors.Is(err, farmem.ErrNodeDown) {
				return false, fmt.Errorf("selcc: %v, in the group being repaired, is down too (repair it first): %w", t.Node(), err)
			}
			return false, err
		}
	}
	wctx, cancel := cl.rt.WithTimeout(detached(ctx), cl.o.ReplyTimeout)
	defer cancel()
	clear := true
	for i := range members {
		w, err := cl.m.Wait(wctx, cl.flag.Add(8*uint64(i)), func(w uint64) bool { return w>>8 == seq })
		if err != nil {
			// Late answers may still land in the reply block: never reuse it.
			cl.stale = true
			cl.retireReplies(ctx)
			if errors.Is(err, context.DeadlineExceeded) {
				return false, fmt.Errorf("selcc: %v, in the group being repaired, did not answer its census: %w", members[i].Node(), farmem.ErrNodeDown)
			}
			return false, err
		}
		clear = clear && w&0xff == replyAck
	}
	return clear, nil
}
