package selcc

import (
	"context"
	"encoding/binary"
	"fmt"

	"github.com/farmem/farmem/alloc/nodearea"
	"github.com/farmem/farmem/farmem"
)

// Guard is a held SELCC latch on one GCL: read its bytes (either mode), write them (exclusive
// only), then Unlock. In Cached mode a guard holds the frame's local latch (and pins the frame
// against eviction); Unlock releases only that, and the node keeps the global latch until a
// peer asks for the line, the frame is evicted or the γ budget runs out. In SEL mode a guard
// holds the global latch and Unlock releases it.
type Guard struct {
	cl   *Client
	g    GCL
	excl bool
	f    *frame         // Cached
	l    nodearea.Latch // Cached: the frame's latch; SEL: the stripe latch
	buf  []byte         // SEL: the line
	lo   int            // SEL: dirty bounds
	hi   int
	done bool
}

// GCL returns the guarded line.
func (gd *Guard) GCL() GCL { return gd.g }

// Exclusive reports whether the guard may write.
func (gd *Guard) Exclusive() bool { return gd.excl }

func (gd *Guard) check(off, n int) error {
	if gd.done {
		return fmt.Errorf("selcc: guard on %v used after Unlock: %w", gd.g, farmem.ErrClosed)
	}
	if gd.cl.life.down {
		return gd.cl.downErr() // its frame went to the node: never read it again
	}
	if off < 0 || n < 0 || off+n > gd.cl.o.LineSize {
		return fmt.Errorf("selcc: [%d, %d) outside a %d-byte line: %w", off, off+n, gd.cl.o.LineSize, farmem.ErrOutOfRange)
	}
	return nil
}

// Read copies len(dst) bytes of the line from off (a local access in Cached mode: no round
// trip; a copy of the line read at acquisition in SEL mode).
func (gd *Guard) Read(ctx context.Context, off int, dst []byte) error {
	if err := gd.check(off, len(dst)); err != nil {
		return err
	}
	if gd.buf != nil {
		copy(dst, gd.buf[off:])
		return nil
	}
	return gd.cl.m.Read(ctx, gd.f.body.Add(uint64(off)), dst)
}

// Write copies src into the line at off and widens the dirty bounds to cover it (exclusive
// guards only: farmem.ErrInvalid otherwise).
func (gd *Guard) Write(ctx context.Context, off int, src []byte) error {
	if err := gd.check(off, len(src)); err != nil {
		return err
	}
	if !gd.excl {
		return fmt.Errorf("selcc: write under a shared guard on %v: %w", gd.g, farmem.ErrInvalid)
	}
	if len(src) == 0 {
		return nil
	}
	if gd.buf != nil {
		copy(gd.buf[off:], src)
		gd.lo, gd.hi = widen(gd.lo, gd.hi, off, off+len(src))
		return nil
	}
	if err := gd.cl.m.Write(ctx, gd.f.body.Add(uint64(off)), src); err != nil {
		return err
	}
	gd.f.lo, gd.f.hi = widen(gd.f.lo, gd.f.hi, off, off+len(src))
	if gd.cl.o.NoDirtyBounds {
		gd.f.lo, gd.f.hi = 0, gd.cl.o.LineSize
	}
	return nil
}

// ReadUint64 and WriteUint64 are Read and Write of one little-endian word.
func (gd *Guard) ReadUint64(ctx context.Context, off int) (uint64, error) {
	var b [8]byte
	err := gd.Read(ctx, off, b[:])
	return binary.LittleEndian.Uint64(b[:]), err
}

// WriteUint64 writes v little-endian at off.
func (gd *Guard) WriteUint64(ctx context.Context, off int, v uint64) error {
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], v)
	return gd.Write(ctx, off, b[:])
}

func widen(lo, hi, s, e int) (int, int) {
	if hi <= lo {
		return s, e
	}
	return min(lo, s), max(hi, e)
}

// unlock is Unlock's release (see Unlock).
func (gd *Guard) unlock(ctx context.Context) error {
	if gd.done {
		return nil
	}
	gd.done = true
	cl := gd.cl
	if gd.buf != nil {
		return cl.selRelease(ctx, gd)
	}
	f := gd.f
	if !gd.excl {
		if err := gd.cl.runlock(ctx, gd.l); err != nil {
			return err
		}
		if p := f.yieldPrio.Load(); p != 0 && f.yieldPrio.CompareAndSwap(p, 0) {
			return cl.yieldShared(ctx, gd.g, f, p)
		}
		if cl.overBudget(f) {
			return cl.leaseRelease(ctx, gd.g, f)
		}
		return nil
	}
	var err error
	if cl.o.Durability == WriteBackOnRelease && f.hi > f.lo && f.memo == memoM {
		buf := make([]byte, f.hi-f.lo)
		if err = cl.m.Read(ctx, f.body.Add(uint64(f.lo)), buf); err == nil {
			if err = cl.m.Write(ctx, gd.g.Body().Add(uint64(f.lo)), buf); err == nil {
				f.lo, f.hi = 0, 0
			}
		}
	}
	if err == nil && cl.overBudget(f) {
		err = cl.giveUp(ctx, f)
	}
	if e := gd.l.Unlock(ctx); err == nil {
		err = e
	}
	return err
}

// overBudget reports whether f's lease ran out (A = R_c/P + W_c > γ), resetting it if so.
func (cl *Client) overBudget(f *frame) bool {
	if cl.o.Gamma < 0 || !f.contended.Load() {
		return false
	}
	w := f.waits.Load()
	if w <= uint64(cl.o.Gamma*cl.o.Threads) || !f.waits.CompareAndSwap(w, 0) {
		return false // under budget, or another releasing client took it
	}
	f.contended.Store(false)
	return true
}

// leaseRelease gives f's line up after a shared guard's release, if it can take the local
// latch at once (otherwise another local client holds it and will see the budget next time).
func (cl *Client) leaseRelease(ctx context.Context, g GCL, f *frame) error {
	l, err := nodearea.NewLatch(cl.m, f.latch)
	if err != nil {
		return err
	}
	ok, err := l.TryLock(ctx)
	if err != nil || !ok {
		return err
	}
	if cl.n.mapped(g, f) { // not released and reused for another line meanwhile
		err = cl.giveUp(ctx, f)
	}
	if e := l.Unlock(ctx); err == nil {
		err = e
	}
	return err
}

// giveUp releases f's global latch (writing a dirty range back) under its X latch, and frees
// the frame, so a peer waiting for the line gets it at its next retry.
func (cl *Client) giveUp(ctx context.Context, f *frame) error {
	if f.memo == memoI || f.key == 0 {
		return nil
	}
	g := f.key
	cl.n.mu.Lock()
	p, ok := f.pend, f.pendOK
	f.pendOK = false
	cl.n.mu.Unlock()
	handed := false
	if ok && f.memo == memoM && !cl.o.NoForwarding {
		// Priority hand-over: the highest-priority writer kept waiting gets the line.
		var err error
		if handed, err = cl.handOver(ctx, f, p); err != nil {
			return err
		}
		if handed {
			cl.n.stats.granted.Add(1)
		}
	}
	if !handed {
		var b farmem.Batch
		if err := cl.n.releaseOps(ctx, cl.m, &b, f); err != nil {
			return err
		}
		if err := doAll(ctx, cl.m, &b); err != nil {
			return err
		}
	}
	f.memo, f.lo, f.hi = memoI, 0, 0
	cl.n.unmap(f)
	cl.n.stats.leases.Add(1)
	cl.n.holdOff(cl.m, g, 2*cl.o.Backoff)
	return nil
}

// RLock acquires g shared: a hit costs no round trip, a miss one (the shared FAA and the
// body's read in one batch) when no peer holds g exclusively.
func (cl *Client) RLock(ctx context.Context, g GCL) (*Guard, error) {
	if cl.o.Mode == SEL {
		return cl.selAcquire(ctx, g, false)
	}
	return cl.locked(ctx, g, false)
}

// Lock acquires g exclusively: a hit on a line held M costs no round trip, a miss one (the
// CAS and the body's read in one batch) when no peer holds g; an upgrade from S one CAS.
func (cl *Client) Lock(ctx context.Context, g GCL) (*Guard, error) {
	if cl.o.Mode == SEL {
		return cl.selAcquire(ctx, g, true)
	}
	return cl.locked(ctx, g, true)
}

// latch takes f's local latch in the mode asked, counting a wait for the lease if the frame
// is contended.
func (cl *Client) latch(ctx context.Context, f *frame, excl bool) (nodearea.Latch, error) {
	l, err := nodearea.NewLatch(cl.m, f.latch)
	if err != nil {
		return l, err
	}
	var ok bool
	if excl {
		ok, err = l.TryLock(ctx)
	} else {
		ok, err = l.TryRLock(ctx)
	}
	if ok && !excl {
		cl.rlocked(f.latch)
	}
	if err != nil || ok {
		if ok && f.contended.Load() {
			// got it without waiting: the line is not hot here any more
			f.contended.Store(false)
			f.waits.Store(0)
		}
		return l, err
	}
	if f.contended.Load() {
		if excl {
			f.waits.Add(uint64(cl.o.Threads))
		} else {
			f.waits.Add(1)
		}
	}
	behind := f.acquiring.Load()
	start := cl.rt.Now()
	if excl {
		err = l.Lock(ctx)
	} else if err = l.RLock(ctx); err == nil {
		cl.rlocked(f.latch)
	}
	d := uint64(cl.rt.Now().Sub(start))
	cl.n.stats.latchWaits.Add(1)
	cl.n.stats.latchWait.Add(d)
	if behind == acquiringExclusive {
		cl.n.stats.writerWait.Add(d)
	}
	return l, err
}

// yieldShared gives up a shared hold after a shared guard's release because a writer with
// priority p was refused while local readers held the frame (spin waiting, §5.3.2): it releases
// the node's share if it can take the frame's latch at once, and keeps the node's readers off
// the line for p·WriterHoldoff, so the writer finds a window with no share.
func (cl *Client) yieldShared(ctx context.Context, g GCL, f *frame, p uint32) error {
	l, err := nodearea.NewLatch(cl.m, f.latch)
	if err != nil {
		return err
	}
	ok, err := l.TryLock(ctx)
	if err != nil || !ok {
		return err
	}
	if cl.n.mapped(g, f) && f.memo == memoS {
		if _, err = cl.m.FAA(ctx, g.Latch(), ReleaseSharedDelta(cl.o.Codec, cl.me)); err == nil {
			f.memo = memoI
			cl.n.unmap(f)
			cl.n.setHoldoff(cl.m, g, p)
		}
	}
	if e := l.Unlock(ctx); err == nil {
		err = e
	}
	return err
}
