package hybrid

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/farmem/farmem/farmem"
)

// smo splits or compacts the full leaf l names. The caller holds one Spear count on it, which
// the SMO takes over (or gives back). It returns errRetry when another SMO holds the leaf.
func (t *Tree) smo(ctx context.Context, l loc, lf *leaf, w *walk) error {
	la := entAddr(l.entry)
	now := t.rt.Now()
	if lf.smo != 0 && !smoExpired(lf.smo, now) {
		// Another inserter claimed the leaf and has yet to take it exclusive.
		t.release(ctx, la)
		w.waits++
		if err := t.backoff(ctx, w.waits); err != nil {
			return err
		}
		return errRetry
	}
	// Claim it (or take over a claim whose holder never took the leaf exclusive in its lease).
	claim := smoWord(t.m.Info().ID, now.Add(t.lease))
	prev, err := t.m.CAS(ctx, la.Add(lSMOOff), lf.smo, claim)
	if err != nil || prev != lf.smo {
		t.release(ctx, la)
		if err != nil {
			return err
		}
		return errRetry
	}
	if lf.smo != 0 {
		t.st.Helps++
	}
	// Exclusive: our IDU count becomes the SMO's hold (one FAA, so the count never dips).
	if _, err := t.m.FAA(ctx, la.Add(lSpearOff), spearExcl-spearOne); err != nil {
		return err // the leaf stays held until our lease expires and another finishes or undoes it
	}
	return t.runSMO(ctx, la, claim, l.parent)
}

// runSMO runs the SMO on leaf la whose Spear is held exclusive under claim (ours, or taken
// over from a holder whose lease expired): it drains in-flight IDUs, builds and records the
// plan (or takes the recorded one), marks the leaf dead and publishes. hint, if set, is a node
// that named the leaf.
func (t *Tree) runSMO(ctx context.Context, la farmem.Addr, claim uint64, hint *node) error {
	// Drain: re-read the Spear word until no IDU is in flight, backing off 1µs doubling to 64µs
	// (each read counted in Stats.DrainReads), for at most half the lease.
	deadline := t.rt.Now().Add(t.lease / 2)
	for n := 0; ; n++ {
		t.st.DrainReads++
		w, err := t.readWord(ctx, la.Add(lSpearOff))
		if err != nil {
			return err
		}
		if spearHolders(w) == 0 || spearIsDead(w) {
			break
		}
		if t.rt.Now() > deadline {
			// An IDU holds its count too long (or died holding it): undo, leave the leaf
			// usable; the insert fails rather than wait forever. The claim goes first: if a
			// successor took it over, the hold is now its own.
			prev, err := t.m.CAS(ctx, la.Add(lSMOOff), claim, 0)
			if err != nil {
				return err
			}
			if prev == claim {
				if _, err := t.m.FAA(ctx, la.Add(lSpearOff), ^uint64(spearExcl)+1); err != nil {
					return err
				}
			}
			return fmt.Errorf("%w: %v still has %d IDUs in flight after %v", ErrBusy, la, spearHolders(w), t.lease/2)
		}
		if err := t.backoff(ctx, n); err != nil {
			return err
		}
	}
	// The leaf is frozen: nothing writes it any more.
	buf := make([]byte, leafSize(t.s))
	if err := t.m.Read(ctx, la, buf); err != nil {
		return err
	}
	var lf leaf
	decodeLeafHead(buf, t.s, &lf)
	decodeLeafTail(buf[leafValsOff(t.s):], t.s, &lf)
	plan := lf.plan
	p := hint
	if plan == 0 {
		p, idx, err := t.findLeafSlot(ctx, la, lf.min, 0, hint)
		if errors.Is(err, errUnlinked) {
			// The executor whose claim we took over may have recorded its plan, marked the
			// leaf dead and published since our read (and the replacement been replaced):
			// then the SMO is done; a leaf with no plan off its path is a corrupt tree.
			var w [24]byte // the Spear, SMO and plan words
			if rerr := t.m.Read(ctx, la.Add(lSpearOff), w[:]); rerr != nil {
				return rerr
			}
			if le.Uint64(w[16:]) == 0 || !spearIsDead(le.Uint64(w[:])) {
				return err
			}
			var b farmem.Batch
			b.Unsignaled(b.CAS(la.Add(lSMOOff), claim, smoDone))
			t.m.Post(ctx, &b)
			return nil
		}
		if err != nil {
			return err
		}
		var blk farmem.Addr
		var size uint64
		plan, blk, size, err = t.buildPlan(ctx, la, &lf, p, idx)
		if err != nil {
			return err
		}
		prev, err := t.m.CAS(ctx, la.Add(lPlanOff), 0, plan)
		if err != nil {
			return err
		}
		if prev != 0 { // another executor recorded first: theirs it is
			_ = t.a.Free(blk, size)
			plan = prev
		}
	}
	if !spearIsDead(lf.spear) {
		if _, err := t.m.FAA(ctx, la.Add(lSpearOff), spearDead); err != nil {
			return err
		}
	}
	if err := t.publish(ctx, la, lf.min, plan, p); err != nil {
		return err
	}
	var b farmem.Batch
	b.Unsignaled(b.CAS(la.Add(lSMOOff), claim, smoDone))
	t.m.Post(ctx, &b)
	switch entKind(plan) {
	case planCompact:
		t.st.Compactions++
	default:
		t.st.Splits++
	}
	return nil
}

// buildPlan writes the frozen leaf's replacement: its committed pairs sorted by key (values
// moved with their keys), in one new leaf if they fill at most half of one (a compaction,
// dropping tombstones and abandoned tentative slots), else split at the median, the upper
// half (the larger, for an odd count) in the second leaf; under an ordinary parent, with a
// new special node above both. One block holds them all; it returns the plan word.
func (t *Tree) buildPlan(ctx context.Context, la farmem.Addr, lf *leaf, p *node, idx int) (uint64, farmem.Addr, uint64, error) {
	type kv struct{ k, v uint64 }
	var live []kv
	for i, w := range lf.keys {
		if w != 0 && w&tentativeBit == 0 {
			live = append(live, kv{w, lf.vals[i]})
		}
	}
	slices.SortFunc(live, func(a, b kv) int {
		switch {
		case a.k < b.k:
			return -1
		case a.k > b.k:
			return 1
		}
		return 0
	})
	split := func(from, to int) (ks, vs []uint64) {
		for _, x := range live[from:to] {
			ks, vs = append(ks, x.k), append(vs, x.v)
		}
		return
	}
	ls := uint64(leafSize(t.s))
	gen := lf.front + 1
	kind, size := planCompact, ls
	if len(live) > t.s/2 {
		kind, size = planSplit, 2*ls
		if !p.special {
			kind, size = planNewSpecial, 2*ls+nodeSize
		}
	}
	// On the client's own memory node (the allocator's placement, Nodes[(id-1) % len(Nodes)],
	// asked for explicitly: the allocator would reuse room in the chunks of the new-prefix
	// leaves, all on their parents' node), so leaves spread over the memory nodes; the block is
	// written before the plan records it.
	mns := t.m.Topology().MemoryNodes()
	blk, err := t.a.AllocOn(ctx, mns[(int(t.m.Info().ID)-1)%len(mns)], size, 64)
	if err != nil {
		return 0, 0, 0, err
	}
	var b farmem.Batch
	var partial byte
	if kind == planCompact {
		ks, vs := split(0, len(live))
		b.Write(blk, encodeLeaf(t.s, uint64(p.slotAddr(idx)), lf.min, lf.max, gen, ks, vs))
	} else {
		m := len(live) / 2
		sk := live[m].k
		partial = keyByte(sk, 7)
		l1, l2, sp := blk, blk.Add(ls), blk.Add(2*ls)
		rev1, rev2 := uint64(p.slotAddr(idx)), uint64(0) // the second's is set once it has a slot
		if kind == planNewSpecial {
			s := &node{addr: sp}
			rev1, rev2 = uint64(s.slotAddr(0)), uint64(s.slotAddr(1))
			e1, err := packEntry(keyByte(lf.min, 7), kindLeaf, l1)
			if err != nil {
				return 0, 0, 0, err
			}
			e2, err := packEntry(partial, kindLeaf, l2)
			if err != nil {
				return 0, 0, 0, err
			}
			b.Write(sp, encodeNode(uint64(p.slotAddr(idx)), 0, 7, true, lf.min&prefixMask(7), []uint64{e1, e2}))
		}
		ks, vs := split(0, m)
		b.Write(l1, encodeLeaf(t.s, rev1, lf.min, sk, gen, ks, vs))
		ks, vs = split(m, len(live))
		b.Write(l2, encodeLeaf(t.s, rev2, sk, lf.max, gen, ks, vs))
	}
	if err := t.m.Do(ctx, &b); err != nil {
		return 0, 0, 0, err
	}
	plan, err := packEntry(partial, kind, blk)
	if err != nil {
		return 0, 0, 0, err
	}
	return plan, blk, size, nil
}

// errUnlinked: the path of a leaf's key ends at another leaf, naming neither it nor its plan's
// leaves. Once the leaf is dead with its plan recorded, this means the plan was published and
// its replacement replaced since (a dead leaf leaves its slot only through its plan's swap, and
// no slot names it again): an SMO executor that was paused past its lease, and a helper that
// read the SMO word before that, find the work done. For a live leaf it is a corrupt tree
// (findLeafSlot's error wraps ErrCorrupt too).
var errUnlinked = errors.New("hybrid: leaf off its key's path")

// findLeafSlot returns a fresh copy of the node holding the slot that names leaf la (or the
// plan's replacement, once published) and the slot's index: it reads hint again if given and
// it still has the slot, else descends from the root by key (the leaf's min) with fresh reads.
func (t *Tree) findLeafSlot(ctx context.Context, la farmem.Addr, key uint64, plan uint64, hint *node) (*node, int, error) {
	names := func(w uint64) bool {
		if entKind(w) == kindEmpty {
			return false
		}
		a := entAddr(w)
		if a == la {
			return true
		}
		if plan == 0 {
			return false
		}
		blk := entAddr(plan)
		ls := uint64(leafSize(t.s))
		return a == blk || (entKind(plan) == planNewSpecial && a == blk.Add(2*ls))
	}
	if hint != nil {
		p, err := t.readNode(ctx, hint.addr, hint.typ, 0, 0)
		if err != nil {
			return nil, 0, err
		}
		if i := p.route(key); i >= 0 && names(p.slots[i]) {
			return p, i, nil
		}
	}
	n, err := t.readNode(ctx, t.node0, 0, 0, 0)
	if err != nil {
		return nil, 0, err
	}
	for {
		i := n.route(key)
		if i < 0 {
			return nil, 0, fmt.Errorf("%w: no slot names leaf %v", ErrCorrupt, la)
		}
		w := n.slots[i]
		if names(w) {
			return n, i, nil
		}
		if entIsLeaf(w) {
			return nil, 0, fmt.Errorf("%w: the path to leaf %v (key %#x) ends at %v (node %v depth %d special %v slot %d of %v): %w", errUnlinked, la, key, entAddr(w), n.addr, n.depth, n.special, i, n.slots, ErrCorrupt)
		}
		if n, err = t.readNode(ctx, entAddr(w), entType(w), 0, 0); err != nil {
			return nil, 0, err
		}
	}
}

// publish makes the recorded plan of dead leaf la reachable, idempotently (any number of
// executors may run it): the second leaf of a split into the special parent first (its slot
// CAS from empty, growing the node's type with a MaskedCAS past its capacity), then the swap
// of the old leaf's slot, which readers of the old range wait for.
func (t *Tree) publish(ctx context.Context, la farmem.Addr, min, plan uint64, hint *node) error {
	blk := entAddr(plan)
	ls := uint64(leafSize(t.s))
	for attempt := 0; ; attempt++ {
		p, idx, err := t.findLeafSlot(ctx, la, min, plan, hint)
		if errors.Is(err, errUnlinked) {
			return nil // swapped already, and the replacement replaced since
		}
		if err != nil {
			return err
		}
		hint = p
		cur := p.slots[idx]
		if entAddr(cur) != la {
			return nil // swapped already
		}
		var repl uint64
		switch entKind(plan) {
		case planCompact:
			repl, err = packEntry(entPartial(cur), kindLeaf, blk)
		case planNewSpecial:
			repl, err = packEntry(entPartial(cur), kindNode, blk.Add(2*ls))
		case planSplit:
			if !p.special {
				return fmt.Errorf("%w: split plan of leaf %v under an ordinary node", ErrCorrupt, la)
			}
			l2 := blk.Add(ls)
			if !slices.ContainsFunc(p.slots, func(w uint64) bool { return entKind(w) != kindEmpty && entAddr(w) == l2 }) {
				e := p.firstEmpty(0)
				if e >= 256 {
					return fmt.Errorf("%w: special node %v full", ErrCorrupt, p.addr)
				}
				ent, err := packEntry(entPartial(plan), kindLeaf, l2)
				if err != nil {
					return err
				}
				var b farmem.Batch
				b.CAS(p.slotAddr(e), 0, ent)
				grow := e >= len(p.slots)
				if grow {
					b.MaskedCAS(p.addr.Add(nMetaOff), uint64(p.typ), metaTypeMask, uint64(p.typ+1), metaTypeMask)
				}
				b.Unsignaled(b.CAS(l2.Add(lRevOff), 0, uint64(p.slotAddr(e))))
				if err := t.m.Do(ctx, &b); err != nil {
					return err
				}
				if prev, _ := b.Result(0); prev != 0 {
					if err := t.backoff(ctx, attempt); err != nil {
						return err
					}
					continue // the slot was taken: read the node again
				}
				if grow {
					if prev, _ := b.Result(1); prev&metaTypeMask == uint64(p.typ) {
						t.st.Growths++
					}
				}
			}
			repl, err = packEntry(entPartial(cur), kindLeaf, blk)
		default:
			return fmt.Errorf("%w: leaf %v plan %#x", ErrCorrupt, la, plan)
		}
		if err != nil {
			return err
		}
		prev, err := t.m.CAS(ctx, p.slotAddr(idx), cur, repl)
		if err != nil {
			return err
		}
		if prev == cur || prev == repl {
			t.cachePut(p.with(idx, repl))
			return nil
		}
	}
}

// with returns a copy of n with slot i set to w.
func (n *node) with(i int, w uint64) *node {
	c := *n
	c.slots = slices.Clone(n.slots)
	c.slots[i] = w
	return &c
}

// awaitSMO waits while an SMO holds leaf la (exclusive, or dead and not yet published),
// re-reading its Spear, SMO and plan words with backoff (counted in Stats.SMOWaitReads). Once
// the holder's lease has expired it finishes the SMO itself: publishes a recorded plan, or
// takes the claim over and runs the SMO from its drain.
func (t *Tree) awaitSMO(ctx context.Context, la farmem.Addr, hint *node) error {
	buf := make([]byte, 24)
	start := t.rt.Now()
	for n := 0; ; n++ {
		t.st.SMOWaitReads++
		if err := t.m.Read(ctx, la.Add(lSpearOff), buf); err != nil {
			return err
		}
		spear, smo, plan := le.Uint64(buf), le.Uint64(buf[8:]), le.Uint64(buf[16:])
		if smo == smoDone || (!spearExclusive(spear) && !spearIsDead(spear)) {
			return nil
		}
		// A hold with no claim beside it past a lease: its holder died undoing it.
		orphan := smo == 0 && spearExclusive(spear) && t.rt.Now() > start.Add(t.lease)
		if (smo != 0 && smoExpired(smo, t.rt.Now())) || orphan {
			mine := smoWord(t.m.Info().ID, t.rt.Now().Add(t.lease))
			prev, err := t.m.CAS(ctx, la.Add(lSMOOff), smo, mine)
			if err != nil {
				return err
			}
			if prev == smo {
				t.st.Helps++
				if orphan {
					// The hold may be a live undoer's whose FAA has yet to land (it gave its
					// claim back first): that FAA would make the leaf writable while our SMO
					// copies it. Take an exclusive hold of our own (holds are counted); an
					// orphan's stays behind on the leaf, which our SMO kills.
					if _, err := t.m.FAA(ctx, la.Add(lSpearOff), spearExcl); err != nil {
						return err
					}
				}
				if spearIsDead(spear) && plan != 0 {
					var mn [8]byte
					if err := t.m.Read(ctx, la.Add(lMinOff), mn[:]); err != nil {
						return err
					}
					if err := t.publish(ctx, la, le.Uint64(mn[:]), plan, hint); err != nil {
						return err
					}
					_, err := t.m.CAS(ctx, la.Add(lSMOOff), mine, smoDone)
					return err
				}
				return t.runSMO(ctx, la, mine, hint)
			}
			continue
		}
		if err := t.backoff(ctx, n); err != nil {
			return err
		}
	}
}
