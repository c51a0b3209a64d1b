package selcc

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/farmem/farmem/alloc/nodearea"
	"github.com/farmem/farmem/farmem"
)

// ErrClientDown is what every access of a client that lost its access to the fabric returns
// (wrapped, beside farmem.ErrNodeDown): its holds went to its node, and it serves nothing from
// the node's cache any more.
var ErrClientDown = errors.New("selcc: client lost its access")

// A client that loses its access while its compute node lives (the fabric cuts that client
// alone off: a queue pair in error, the simulator's CrashClient) can no longer release what it
// holds: the local latches of the frames it was using or acquiring (which its node's other
// clients and its node's handler then wait on or drop invalidations for, forever), and the
// global holds an acquisition of it had under way (an atomic whose outcome it never learnt, a
// grant word open). Its goroutine still runs: the access that failed returns to it with
// farmem.ErrNodeDown. The client then tells its own death from a peer's by one local READ of
// its own slice (a verb to its own region fails only if it, or its node, is down), and hands
// what it held to its node (see takeOver) through a client it opens on the node for the
// purpose; from then on every access of it fails with ErrClientDown (it never serves from the
// cache again). A client that is only slow (paused) is never taken over: it holds its latches
// until it runs again, and peers that want its lines back off and retry meanwhile, as for any
// local holder.

// life is what a client holds that its node cannot see: the frames it latched shared (a shared
// latch word counts holders without naming them), and whether it was taken over.
type life struct {
	shared map[farmem.Addr]int // latch word → shared holds this client has on it
	down   bool
}

// rlocked records a shared hold of the latch at a (no verb).
func (cl *Client) rlocked(a farmem.Addr) {
	if cl.life.shared == nil {
		cl.life.shared = make(map[farmem.Addr]int, 4)
	}
	cl.life.shared[a]++
}

// runlock releases a shared hold of l and forgets it.
func (cl *Client) runlock(ctx context.Context, l nodearea.Latch) error {
	if err := l.RUnlock(ctx); err != nil {
		return err
	}
	if k := cl.life.shared[l.Addr()]; k > 1 {
		cl.life.shared[l.Addr()] = k - 1
	} else {
		delete(cl.life.shared, l.Addr())
	}
	return nil
}

// downErr is the error of an access by a client that was taken over.
func (cl *Client) downErr() error {
	return fmt.Errorf("selcc: client %d of %v: %w: %w", cl.m.Info().ID, cl.me.Node(), ErrClientDown, farmem.ErrNodeDown)
}

// locked is Lock and RLock in Cached mode, with the takeover of a client that lost its access.
func (cl *Client) locked(ctx context.Context, g GCL, excl bool) (*Guard, error) {
	if cl.life.down {
		return nil, cl.downErr()
	}
	gd, err := cl.lock(ctx, g, excl)
	if err != nil {
		return nil, cl.checkLost(ctx, g, err)
	}
	return gd, nil
}

// Unlock releases the guard (idempotent). Cached: the local latch only, after writing the
// dirty range back in WriteBackOnRelease mode (one round trip) and after giving the line up if
// its γ budget ran out. SEL: the dirty range's write-back and the release FAA, one round trip.
// A client that lost its access hands the guard's frame to its node instead (see Recovery) and
// returns an error wrapping ErrClientDown.
func (gd *Guard) Unlock(ctx context.Context) error {
	if gd.done {
		return nil
	}
	if gd.cl.life.down {
		gd.done = true
		return gd.cl.downErr()
	}
	err := gd.unlock(ctx)
	if err != nil && gd.buf == nil {
		return gd.cl.checkLost(ctx, gd.g, err)
	}
	return err
}

// checkLost returns err, after handing what the client holds to its node if err says that the
// client itself lost its access (see ErrClientDown); g is the line whose access failed.
func (cl *Client) checkLost(ctx context.Context, g GCL, err error) error {
	if !errors.Is(err, farmem.ErrNodeDown) || cl.o.Mode != Cached {
		return err
	}
	ctx = detached(ctx)
	var b [8]byte
	if rerr := cl.m.Read(ctx, cl.grant, b[:]); !errors.Is(rerr, farmem.ErrNodeDown) {
		return err // a peer is down, not this client
	}
	cl.life.down = true
	if terr := cl.takeOver(ctx, g); terr != nil {
		return fmt.Errorf("selcc: client %d of %v lost its access and its node could not take its holds over (%v): %w: %w",
			cl.m.Info().ID, cl.me.Node(), terr, ErrClientDown, err)
	}
	return fmt.Errorf("selcc: client %d of %v lost its access; its node took its holds over: %w: %w", cl.m.Info().ID, cl.me.Node(), ErrClientDown, err)
}

// takeOver hands what cl (which lost its access) holds to its node, through a client it opens
// on the node: every frame whose latch word names cl as its exclusive holder is settled (the
// frame's dirty range written back, this node's part of the line's word released as the word
// shows it, the frame forgotten, or quarantined if an answer of a peer may still land in it)
// and unlatched; cl's shared holds are released by count; a pending bit left alone on a frame's
// latch is cleared; cl's grant word is closed. Costs: local verbs, plus per settled frame one
// READ of the word and one batch (write-back and release) to its memory node. A frame's word
// may still gain a hold of this node afterwards (a hand-over to cl answered late, or cl's own
// atomic applied late within the fabric's down timeout): each such line is recorded as an
// orphan, which the node's next acquisition of the line settles. Line g, whose access failed,
// is settled at once, as the node's own acquisitions settle orphans (a failed acquisition may
// have left this node's hold in its word with no frame behind it: a shared attempt whose undo
// never went out, a CAS whose outcome the client never learnt), so peers that want it stop
// finding this node in its word.
func (cl *Client) takeOver(ctx context.Context, g GCL) error {
	n := cl.n
	m, err := cl.c.fabric.Open(ctx, cl.me.Node())
	if err != nil {
		return err
	}
	defer m.Close()
	tc, err := cl.c.Client(ctx, m)
	if err != nil {
		return err
	}
	id := cl.m.Info().ID
	var errs []error
	// No frame is added or removed after the node opened: n.frames needs no lock.
	for _, f := range n.frames {
		var b [8]byte
		if err := m.Read(ctx, f.latch, b[:]); err != nil {
			return err
		}
		l, err := nodearea.NewLatch(m, f.latch)
		if err != nil {
			return err
		}
		switch w := binary.LittleEndian.Uint64(b[:]); {
		case nodearea.HeldBy(w, id):
			if err := cl.settleFrame(ctx, m, f); err != nil {
				errs = append(errs, err)
				continue // the frame stays latched: its line's hold is not known released
			}
			if _, err := l.ReleaseFor(ctx, id); err != nil {
				errs = append(errs, err)
			}
		default:
			if _, err := l.ClearStalePending(ctx); err != nil {
				errs = append(errs, err)
			}
		}
	}
	for a, k := range cl.life.shared {
		l, err := nodearea.NewLatch(m, a)
		if err == nil {
			err = l.RReleaseFor(ctx, k)
		}
		if err != nil {
			errs = append(errs, err)
		}
	}
	cl.life.shared = nil
	// Close the grant word, so no holder claims it from now on (one claimed already is a
	// hand-over under way: the frame it lands in is quarantined and its hold an orphan).
	var gw [8]byte
	if err := m.Read(ctx, cl.grant, gw[:]); err == nil {
		if w := binary.LittleEndian.Uint64(gw[:]); grantStateOf(w) == grantOpen {
			_, err = m.CAS(ctx, cl.grant, w, grantClosed)
		}
		if err != nil {
			errs = append(errs, err)
		}
	} else {
		errs = append(errs, err)
	}
	n.addOrphan(g, orphan{from: cl.me, excl: true})
	if exactSharers(cl.o.Codec) {
		n.addOrphan(g, orphan{from: cl.me})
	}
	if err := tc.settleLine(ctx, g); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// settleLine settles this node's orphans on g under the exclusive latch of the frame that maps
// g, mapping a free one for the purpose if none does (and freeing it after): if a client of the
// node holds the line (memo S or M), its hold is real and nothing is settled now.
func (cl *Client) settleLine(ctx context.Context, g GCL) error {
	n := cl.n
	for {
		var l nodearea.Latch
		f := n.lookup(g)
		fresh := f == nil
		if fresh {
			var err error
			if f, l, err = cl.frameFor(ctx, g); err != nil {
				return err
			}
			if f == nil {
				continue // another client mapped g first
			}
		} else {
			var err error
			if l, err = cl.latch(ctx, f, true); err != nil {
				return err
			}
			if !n.mapped(g, f) {
				cl.unlatch(ctx, l, true)
				continue
			}
		}
		var err error
		if f.memo == memoI {
			err = cl.settleOrphans(ctx, g, true, &grantState{}, true)
		}
		if fresh {
			n.unmap(f)
		}
		return errors.Join(err, l.Unlock(ctx))
	}
}

// settleFrame releases, through m, what this node holds of the line frame f (latched
// exclusively by the client taken over) caches, and forgets the frame. A dirty range is written
// back first (its operation never returned, so it may take effect), in the same ordered batch as
// the release. The release is what the word shows: the holder field if it names this node, and
// (bitmap) this node's bit if set; under the group codec the memo's share, since the counter
// does not say whose it is (an atomic of the client applied late then stays in the word until
// a repair's census). A frame whose acquisition was under way is quarantined (a peer's forward
// may still land in it) and its line recorded as an orphan.
func (cl *Client) settleFrame(ctx context.Context, m farmem.Memory, f *frame) error {
	n := cl.n
	n.mu.Lock()
	g := f.key
	live := g != 0 && n.table[g] == f
	n.mu.Unlock()
	if !live {
		return nil
	}
	cd, me := cl.o.Codec, cl.me
	var b farmem.Batch
	if f.memo == memoM && f.hi > f.lo {
		buf := make([]byte, f.hi-f.lo)
		if err := m.Read(ctx, f.body.Add(uint64(f.lo)), buf); err != nil {
			return err
		}
		b.Write(g.Body().Add(uint64(f.lo)), buf)
	}
	var wb [8]byte
	if err := m.Read(ctx, g.Latch(), wb[:]); err != nil {
		return err
	}
	w := binary.LittleEndian.Uint64(wb[:])
	if cd.Holder(w) == me {
		b.FAA(g.Latch(), ReleaseExclusiveDelta(cd, me))
	}
	if exactSharers(cd) && w&cd.Shared(me) != 0 || !exactSharers(cd) && f.memo == memoS {
		b.FAA(g.Latch(), ReleaseSharedDelta(cd, me))
	}
	if len(b.Ops) > 0 {
		if err := doAll(ctx, m, &b); err != nil {
			return err
		}
	}
	if f.memo != memoM {
		n.addOrphan(g, orphan{excl: true})
		n.mu.Lock()
		f.dead = true
		n.mu.Unlock()
	}
	f.memo, f.lo, f.hi = memoI, 0, 0
	n.unmap(f)
	return nil
}
