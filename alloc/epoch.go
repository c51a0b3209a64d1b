package alloc

import (
	"context"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/farmem/farmem/farmem"
)

// epochState is a client's side of deferred free.
type epochState struct {
	depth      int         // nesting of Pin
	announced  bool        // this client's slot holds ann (as far as it knows)
	lapsed     bool        // a Renew found the announcement gone: the current pin is unsafe
	annE       uint64      // the epoch announced
	annAt      farmem.Time // when it was announced
	deadline   farmem.Time // the lease's end
	word       uint64      // the slot word last written
	cached     uint64      // the global epoch as last read
	retired    []retired   // blocks retired, not yet reusable, in retirement order
	lastScan   farmem.Time
	lastFreed  int         // blocks the last scan made reusable (scanDue)
	keptAtScan int         // retired blocks the last scan kept waiting (scanDue)
	seen       farmem.Time // the latest clock reading of Pin, Unpin, Retire and announce (see PinCoarse)
	// section numbers outermost pinned sections (from 1): a scan may reuse blocks retired
	// outside the current section whatever this client's own announcement (reuseBelow).
	section uint64
}

// retired is a block waiting for every client that could reach it to leave its epoch.
//
// It names its arena by node (or sym) rather than by pointer: the list, appended to by every
// Retire and rewritten by every scan, then holds no pointer, so neither costs a write barrier
// and the garbage collector never scans it.
type retired struct {
	node farmem.NodeID // the arena's node, unless sym
	sym  bool          // a block of the symmetric area
	off  uint64
	size uint64
	// tag is an epoch at least the global epoch when the block was unlinked: the block is
	// reusable once no live announcement is tag or older.
	tag uint64
	// sec is the section it was retired in (0: before any, or adopted).
	sec uint64
}

// unitShift: deadlines in the table are in units of 2^20ns (about 1.05ms).
const unitShift = 20

// maxAnnounce bounds the announce loop; the loop ends in at most three rounds (see announce).
const maxAnnounce = 8

// encodeSlot packs an announcement in one word: the low 32 bits of the epoch, then the lease's
// deadline in units, rounded up, truncated to 32 bits (compared serially, so it wraps safely
// every 52 days; expired slots are cleared long before). The word is never 0 (0 is no
// announcement).
func encodeSlot(e uint64, deadline farmem.Time) uint64 {
	d := uint32((int64(deadline) + (1<<unitShift - 1)) >> unitShift)
	w := uint64(uint32(e))<<32 | uint64(d)
	if w == 0 {
		w = 1 // a deadline one unit later: only more conservative
	}
	return w
}

// decodeEpoch recovers an announced epoch from its low 32 bits and the global epoch g read just
// before: live announcements lie within 2^31 of g (in fact at g-1, g or g+1).
func decodeEpoch(g uint64, e32 uint32) uint64 {
	d := int64(int32(e32 - uint32(g)))
	if d < 0 && uint64(-d) > g {
		return 0
	}
	return uint64(int64(g) + d)
}

// expiredAt reports whether announcement w had expired by now, allowing skew.
func expiredAt(w uint64, now farmem.Time, skew time.Duration) bool {
	nowU := uint32(int64(now) >> unitShift)
	skewU := uint32((int64(skew) + (1<<unitShift - 1)) >> unitShift)
	return int32(nowU-uint32(w)-skewU) > 0
}

// Pin marks the start of a section that may dereference blocks other clients retire: until the
// matching Unpin, no block reachable when Pin returned is reused. Pins nest.
//
// Cost: none while the client's announcement is younger than Refresh; otherwise one round
// trip to the home node (an atomic swap of the client's slot and a Read of the global epoch, in
// one batch), rarely a second if the global epoch moved meanwhile.
func (a *Allocator) Pin(ctx context.Context) error {
	if outer, err := a.nestPin(); !outer {
		return err
	}
	return a.pinAt(ctx, a.rt.Now())
}

// nestPin is the start of every Pin: it fails on a closed allocator and, inside a section,
// counts one more nesting level; it reports whether the caller is the outermost Pin, which
// goes on to announce. It stands in for the usable check the Pins made first, so a pin still
// makes one call before its own work.
func (a *Allocator) nestPin() (outer bool, err error) {
	if a.closed {
		return false, a.usable()
	}
	if a.ep.depth == 0 {
		return true, nil
	}
	a.ep.depth++
	return false, nil
}

// pinAt is the outermost Pin at time now.
func (a *Allocator) pinAt(ctx context.Context, now farmem.Time) error {
	ep := &a.ep
	ep.seen = max(ep.seen, now)
	if !ep.announced || now.Sub(ep.annAt) >= a.opts.Refresh {
		if err := a.announce(ctx, now); err != nil {
			return err
		}
	}
	ep.depth = 1
	ep.section++
	ep.lapsed = false
	return nil
}

// announce writes this client's announcement: the last global epoch it read, and a lease. It
// repeats until the global epoch, read right after the announcement landed (same batch, same
// node, so in order), equals the epoch announced. From then on the global epoch cannot pass
// annE+1 while the announcement stands, since an advance from g needs every live announcement
// to be at least g. The loop ends: after the first round the announced epoch is at most one
// behind, and it is not passed again.
func (a *Allocator) announce(ctx context.Context, now farmem.Time) error {
	if a.rep != nil {
		return a.announceRep(ctx, now)
	}
	ep := &a.ep
	// The buffer and batch are kept from announcement to announcement, as scan's are (a
	// failed batch drops them: a transport may still complete it into them later).
	if a.annBatch == nil {
		a.annBuf, a.annBatch = make([]byte, 8), &farmem.Batch{}
	}
	buf, b := a.annBuf, a.annBatch
	for range maxAnnounce {
		e, deadline := ep.cached, now.Add(a.opts.Lease)
		w := encodeSlot(e, deadline)
		b.Reset()
		b.MaskedCAS(a.slotAddr, 0, 0, w, math.MaxUint64)
		b.Read(a.epochAddr, buf)
		if err := a.m.Do(ctx, b); err != nil {
			a.annBuf, a.annBatch = nil, nil
			ep.announced = false
			return fmt.Errorf("alloc: announce epoch %d: %w", e, err)
		}
		a.stats.Refreshes++
		ep.announced, ep.annE, ep.annAt, ep.deadline, ep.word = true, e, now, deadline, w
		ep.seen = max(ep.seen, now)
		g := le64(buf)
		ep.cached = max(ep.cached, g)
		a.stats.Epoch = ep.cached
		if g == e {
			return nil
		}
		now = a.rt.Now()
	}
	ep.announced = false
	return fmt.Errorf("alloc: the global epoch moved through %d announcements: %w", maxAnnounce, farmem.ErrInvalid)
}

// valid reports whether the client's announcement still protects it at now: it was not found
// cleared, and its lease has ClockSkew to run (so no other client can yet take it as expired).
func (a *Allocator) valid(now farmem.Time) bool {
	ep := &a.ep
	return ep.announced && !ep.lapsed && now <= ep.deadline.Add(-a.opts.ClockSkew)
}

// quiet reports whether the announcement is valid at now and younger than Refresh: a pin then
// writes no announcement, and an unpin has nothing to report or withdraw.
func (a *Allocator) quiet(now farmem.Time) bool {
	return a.valid(now) && now.Sub(a.ep.annAt) < a.opts.Refresh
}

// Unpin ends the section Pin started. At the outermost Unpin, if the lease ran out during the
// section, it returns ErrPinExpired: blocks read in the section may have been reused, and the
// operation must be retried. If the announcement is older than Refresh it is withdrawn with one
// unsignaled atomic (no round trip), so an idle client does not hold reuse back; otherwise
// Unpin costs no verb.
func (a *Allocator) Unpin() error {
	if a.closed || a.ep.depth != 1 {
		return a.unpin(false)
	}
	return a.endSection(a.rt.Now())
}

// endSection is the outermost Unpin at now, on an open allocator: unpinAt, but with no call
// when the announcement is valid and younger than Refresh (nothing to report, nothing to
// withdraw), the state of every section between two refreshes.
func (a *Allocator) endSection(now farmem.Time) error {
	ep := &a.ep
	ep.depth = 0
	if a.quiet(now) {
		ep.seen = max(ep.seen, now)
		return nil
	}
	return a.unpinAt(now)
}

// unpin ends a section: at the outermost one, with a fresh clock reading, or (seen) with the
// allocator's last reading (UnpinSeen).
func (a *Allocator) unpin(seen bool) error {
	if err := a.usable(); err != nil {
		return err
	}
	ep := &a.ep
	if ep.depth == 0 {
		return fmt.Errorf("alloc: unpin without pin: %w", farmem.ErrInvalid)
	}
	ep.depth--
	if ep.depth > 0 {
		return nil
	}
	if seen {
		return a.unpinAt(ep.seen)
	}
	return a.unpinAt(a.rt.Now())
}

// unpinAt is the outermost Unpin's work with the clock reading now, taken after the section's
// last access.
func (a *Allocator) unpinAt(now farmem.Time) error {
	ep := &a.ep
	ep.seen = max(ep.seen, now)
	var err error
	if !a.valid(now) {
		err = fmt.Errorf("alloc: client %d: lease ended %v ago: %w", a.id, now.Sub(ep.deadline), ErrPinExpired)
	}
	if ep.announced && now.Sub(ep.annAt) >= a.opts.Refresh {
		b := &farmem.Batch{}
		if a.rep != nil {
			a.withdrawRep(b)
		} else {
			b.Unsignaled(b.MaskedCAS(a.slotAddr, 0, 0, 0, math.MaxUint64))
		}
		a.m.Post(context.Background(), b)
		ep.announced = false
	}
	ep.lapsed = false
	return err
}

// Renew extends the lease of the current pin, for sections that may run longer than Lease: one
// atomic swap on the home node. The announced epoch stays the same. It returns ErrPinExpired if
// the lease already ran out (or a reclaimer cleared it), in which case the section is unsafe.
func (a *Allocator) Renew(ctx context.Context) error {
	if err := a.usable(); err != nil {
		return err
	}
	ep := &a.ep
	if ep.depth == 0 {
		return fmt.Errorf("alloc: renew without pin: %w", farmem.ErrInvalid)
	}
	now := a.rt.Now()
	if !a.valid(now) {
		ep.lapsed = true
		return fmt.Errorf("alloc: client %d: renew after the lease ended: %w", a.id, ErrPinExpired)
	}
	deadline := now.Add(a.opts.Lease)
	w := encodeSlot(ep.annE, deadline)
	var prevs []uint64
	if a.rep != nil {
		var err error
		if prevs, err = a.slotsRep(ctx, w); err != nil {
			return fmt.Errorf("alloc: renew: %w", err)
		}
	} else {
		prev, err := a.m.MaskedCAS(ctx, a.slotAddr, 0, 0, w, math.MaxUint64)
		if err != nil {
			return fmt.Errorf("alloc: renew: %w", err)
		}
		prevs = []uint64{prev}
	}
	// With replicated metadata, a node that shows another word (cleared by a scan, or one
	// that missed an announcement) lapses the pin: conservative, the caller retries.
	if slices.ContainsFunc(prevs, func(p uint64) bool { return p != ep.word }) {
		ep.word = w
		ep.lapsed = true
		return fmt.Errorf("alloc: client %d: announcement was cleared before renewal: %w", a.id, ErrPinExpired)
	}
	ep.word, ep.deadline = w, deadline
	return nil
}

// Quiesce withdraws the client's announcement (one atomic, one round trip), so that it holds
// no reuse back while idle. It may not be called while pinned.
func (a *Allocator) Quiesce(ctx context.Context) error {
	if err := a.usable(); err != nil {
		return err
	}
	if a.ep.depth > 0 {
		return fmt.Errorf("alloc: quiesce while pinned: %w", farmem.ErrInvalid)
	}
	if a.rep != nil {
		if _, err := a.slotsRep(ctx, 0); err != nil {
			return fmt.Errorf("alloc: quiesce: %w", err)
		}
	} else if _, err := a.m.MaskedCAS(ctx, a.slotAddr, 0, 0, 0, math.MaxUint64); err != nil {
		return fmt.Errorf("alloc: quiesce: %w", err)
	}
	a.ep.announced = false
	return nil
}

// Retire hands back a block that other clients may still be reading: call it once the block is
// unreachable (unlinked from every shared structure). The block is reused, by this client, once
// every client that was pinned when it was unlinked has left its epoch (or its lease expired).
// size is the size it was allocated with.
//
// Cost: no verb while the client's announcement is live (pinned, or within Refresh of a pin);
// otherwise one Read of the global epoch.
func (a *Allocator) Retire(ctx context.Context, addr farmem.Addr, size uint64) error {
	if ar := a.arena(addr.Node()); ar != nil && !a.closed && ar.fits(addr.Offset(), size) {
		return a.retire(ctx, ar, addr.Offset(), size)
	}
	if err := a.usable(); err != nil {
		return err
	}
	ar, err := a.arenaOf(addr, size)
	if err != nil {
		return err
	}
	return a.retire(ctx, ar, addr.Offset(), size)
}

// RetireAt is Retire with the clock reading at instead of a fresh one, for a caller that read
// the clock before the unlink and knows its lease held from that reading through the unlink: a
// structure that checks, at that reading, that its pinned section is within a budget well
// inside the lease (ds/race's PinBudget, ptrsync.Result's CheckedAt), and relies on the same
// bound for the unlink's own CAS. The reading also serves UnpinSeen, as Retire's does. A
// reading at which the lease had already ended makes it read the global epoch, as Retire does.
func (a *Allocator) RetireAt(ctx context.Context, addr farmem.Addr, size uint64, at farmem.Time) error {
	// retireAt's common case, with no call (so nothing to keep across one): a valid block of
	// an open allocator, tagged by a live announcement.
	if ar := a.arena(addr.Node()); ar != nil && !a.closed && ar.fits(addr.Offset(), size) && a.valid(at) {
		ep := &a.ep
		ep.seen = max(ep.seen, at)
		ep.retired = append(ep.retired, retired{node: addr.Node(), off: addr.Offset(), size: size, tag: ep.annE + 1, sec: ep.section})
		a.stats.Retires++
		return nil
	}
	return a.retireAtSlow(ctx, addr, size, at)
}

// retireAtSlow is RetireAt but for its common case.
func (a *Allocator) retireAtSlow(ctx context.Context, addr farmem.Addr, size uint64, at farmem.Time) error {
	if err := a.usable(); err != nil {
		return err
	}
	ar, err := a.arenaOf(addr, size)
	if err != nil {
		return err
	}
	return a.retireAt(ctx, ar, addr.Offset(), size, at)
}

// RetireSymmetric is Retire for a symmetric block.
func (a *Allocator) RetireSymmetric(ctx context.Context, o SymOffset, size uint64) error {
	if err := a.usable(); err != nil {
		return err
	}
	if err := a.sym.check(uint64(o), size); err != nil {
		return err
	}
	return a.retire(ctx, a.sym, uint64(o), size)
}

// retire tags a block with an epoch at least the global epoch at its unlinking. With a live
// announcement annE that is annE+1: the global epoch cannot pass annE+1 while it stands, and it
// stood (or was written later than the unlink) throughout. Otherwise the global epoch is read,
// after the unlink.
func (a *Allocator) retire(ctx context.Context, ar *arena, off, size uint64) error {
	return a.retireAt(ctx, ar, off, size, a.rt.Now())
}

// retireAt is retire with the clock reading now (RetireAt's contract when it is not fresh).
func (a *Allocator) retireAt(ctx context.Context, ar *arena, off, size uint64, now farmem.Time) error {
	ep := &a.ep
	ep.seen = max(ep.seen, now)
	tag := ep.annE + 1
	if !a.valid(now) {
		var err error
		if tag, err = a.readEpoch(ctx); err != nil {
			return fmt.Errorf("alloc: retire: read epoch: %w", err)
		}
	}
	ep.retired = append(ep.retired, retired{node: ar.bump.Node(), sym: ar.sym, off: off, size: size, tag: tag, sec: ep.section})
	a.stats.Retires++
	return nil
}

// readEpoch reads the global epoch (with replicated metadata, the largest of a majority's
// copies), for a retire outside a live announcement, and caches it.
func (a *Allocator) readEpoch(ctx context.Context) (uint64, error) {
	var g uint64
	if a.rep != nil {
		var err error
		if g, err = a.readEpochRep(ctx); err != nil {
			return 0, err
		}
	} else {
		buf := make([]byte, 8)
		if err := a.m.Read(ctx, a.epochAddr, buf); err != nil {
			return 0, err
		}
		g = le64(buf)
	}
	a.ep.cached = max(a.ep.cached, g)
	a.stats.Epoch = a.ep.cached
	return g, nil
}

// Reclaim scans the epoch table now and makes reusable every retired block that no live client
// can still reach; it returns how many. Then it rebuilds whole chunks from free blocks (when a
// pass is due) and gives the whole free chunks beyond one per node back to the nodes' pools, for
// every client (see the package doc, "Free chunks"). Allocation scans on its own when it needs
// room (at most every ScanInterval), so calling Reclaim is optional; a client that frees much
// and allocates little calls it to let others use what it freed.
//
// Cost: one round trip (the global epoch and the table, two Reads in one batch, 8 bytes per
// table slot), then unsignaled CASes: one to advance the global epoch if every live client has
// announced it, one per expired announcement to clear it; and two round trips per node it gives
// chunks back to.
func (a *Allocator) Reclaim(ctx context.Context) (int, error) {
	if err := a.usable(); err != nil {
		return 0, err
	}
	n, err := a.scan(ctx)
	if err != nil {
		return n, err
	}
	return n, a.giveBack(ctx, keepSpares, rebuildDue)
}

// scan reads the global epoch g and the table (in that order, in one batch on the home node).
// The horizon H is the oldest live announcement; a block tagged t is reusable when t < H, since
// any client that could reach it announced at most t before reaching it, and still does if it
// can. If every live announcement is at least g, the epoch advances to g+1.
func (a *Allocator) scan(ctx context.Context) (int, error) {
	if a.rep != nil {
		horizon, others, err := a.scanRep(ctx)
		if err != nil {
			return 0, err
		}
		return a.reuseBelow(horizon, others), nil
	}
	ep := &a.ep
	// now is taken before the table is read: a slot is taken as expired only if it had expired
	// before it was read, so an owner cannot have renewed it unseen.
	now := a.rt.Now()
	// The buffer and batch are kept from scan to scan: a writer scans every few hundred
	// allocations (scanDue) and should not allocate for it. A failed read drops them, since a
	// transport may still complete it into them later.
	if len(a.scanBuf) != 8+8*a.slots {
		a.scanBuf, a.scanBatch = make([]byte, 8+8*a.slots), &farmem.Batch{}
	}
	gbuf, tbuf := a.scanBuf[:8:8], a.scanBuf[8:]
	b := a.scanBatch
	b.Reset()
	b.Read(a.epochAddr, gbuf)
	b.Read(a.tableAddr, tbuf)
	if err := a.m.Do(ctx, b); err != nil {
		a.scanBuf, a.scanBatch = nil, nil
		return 0, fmt.Errorf("alloc: scan epoch table: %w", err)
	}
	a.stats.Scans++
	ep.lastScan = now
	g := le64(gbuf)
	f := newSlotFold()
	var post *farmem.Batch // made only when there is something to post
	for lo := 0; lo < a.slots; lo += 8 {
		hi := min(lo+8, a.slots)
		// Most slots are empty (ids not in use, idle clients): eight at a time, one test.
		if hi-lo == 8 {
			q := tbuf[8*lo : 8*lo+64 : 8*lo+64]
			if le64(q)|le64(q[8:])|le64(q[16:])|le64(q[24:])|le64(q[32:])|le64(q[40:])|le64(q[48:])|le64(q[56:]) == 0 {
				continue
			}
		}
		for i := lo; i < hi; i++ {
			w := le64(tbuf[8*i:])
			if w == 0 {
				continue
			}
			if !f.add(a, w, g, i, now) {
				if post == nil {
					post = &farmem.Batch{}
				}
				post.Unsignaled(post.CAS(a.tableAddr.Add(8*uint64(i)), w, 0))
			}
		}
	}
	horizon, others := f.horizon, f.others
	if f.advance {
		if post == nil {
			post = &farmem.Batch{}
		}
		post.Unsignaled(post.CAS(a.epochAddr, g, g+1))
		a.stats.Advances++
	}
	if post != nil {
		a.m.Post(context.Background(), post)
	}
	ep.cached = max(ep.cached, g)
	a.stats.Epoch = ep.cached
	return a.reuseBelow(horizon, others), nil
}

// slotFold folds the words of an epoch table's announced slots into what a scan learns from
// them: the least epoch announced (horizon), the least announced by other clients (others),
// and whether every announcement has reached the global epoch (advance).
type slotFold struct {
	horizon, others uint64
	advance         bool
}

// newSlotFold is the fold of no slot.
func newSlotFold() slotFold {
	return slotFold{horizon: math.MaxUint64, others: math.MaxUint64, advance: true}
}

// add folds the nonzero word w of slot i (client id i+1), read with the global epoch g, and
// reports whether it is live; an expired announcement is left out, for the caller to clear.
func (f *slotFold) add(a *Allocator, w, g uint64, i int, now farmem.Time) bool {
	if expiredAt(w, now, a.opts.ClockSkew) {
		return false
	}
	e := decodeEpoch(g, uint32(w>>32))
	f.horizon = min(f.horizon, e)
	if uint64(i)+1 != uint64(a.id) {
		f.others = min(f.others, e)
	}
	if e < g {
		f.advance = false
	}
	return true
}

// reuseBelow makes the retired blocks tagged below horizon reusable and returns how many; and
// also those tagged below others, the horizon of the other clients' announcements, that this
// client retired outside the section it is in (any, when it is not pinned).
//
// Why the second rule is as safe as the first: a block b is handed back by Retire only once it
// is unlinked, and a scan runs reuseBelow only over blocks retired before it read the table.
// Another client that could still reach b pinned before the unlink, so its live announcement
// is at most the global epoch then, hence at most b's tag: b stays while it stands (others <=
// tag), and an announcement written after the scan's read is followed by reads that start
// from the structure without b. This client's own announcement protects nothing but its own
// current section: a client reaches blocks only inside a pinned section (the contract of Pin),
// and a section that began after b's unlink, or none at all, cannot reach b. So the own
// announcement, which holds b back under the first rule until it is renewed at a later epoch
// (a Refresh period and two advances of the global epoch), need not hold back a block of a
// section that has ended. Blocks another allocator retired (Absorb) keep its announcement in
// others, since it is another client's; blocks adopted from this client id's closed allocator
// were retired in sections that ended with it.
//
// The second rule is what lets a lone writer reuse its blocks after a scan instead of after
// several Refresh periods, so the lines of a new block are still in the CPU's caches when they
// are written again (allocArena scans when a chunk runs out and scanBacklog blocks wait).
func (a *Allocator) reuseBelow(horizon, others uint64) int {
	ep := &a.ep
	freed := 0
	rs := ep.retired
	kept := rs[:0] // written at or behind the entry read: the list is compacted in place
	// Outside a section, every block was retired outside the current one.
	section := ep.section
	if ep.depth == 0 {
		section = 0
	}
	for i := 0; i < len(rs); {
		r := &rs[i]
		if !reusable(r, horizon, others, section) {
			kept = append(kept, *r)
			i++
			continue
		}
		ar := a.sym
		if !r.sym {
			ar = a.arenas[r.node]
		}
		if r.size > ar.maxSmall {
			ar.put(r.off, r.size) // a large block goes to the free runs
			freed++
			i++
			continue
		}
		// A small block goes to its class's magazine (see arena.mag), with the run of
		// reusable blocks of its arena and size that follows it (a writer's retired list is
		// mostly one such run): the slice is held here while the run lasts.
		node, sym, size, c := r.node, r.sym, r.size, classOf(r.size)
		mag := ar.mag[c]
		for ; i < len(rs); i++ {
			r := &rs[i]
			if r.node != node || r.sym != sym || r.size != size || !reusable(r, horizon, others, section) {
				break
			}
			mag = append(mag, r.off)
			freed++
		}
		ar.mag[c] = mag
		ar.magged = true
	}
	ep.retired = kept
	ep.lastFreed, ep.keptAtScan = freed, len(kept)
	a.stats.Reclaimed += uint64(freed)
	return freed
}

// reusable is reuseBelow's rule for one retired block: tagged below horizon, or below others
// and retired outside section (0: outside any).
func reusable(r *retired, horizon, others, section uint64) bool {
	return r.tag < horizon || (r.tag < others && (section == 0 || r.sec != section))
}
