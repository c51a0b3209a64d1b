package hybrid

import (
	"context"
	"errors"
	"fmt"

	"github.com/farmem/farmem/farmem"
)

// Insert stores k with value v if k is absent. Warm cache, room in the leaf: 3 round trips
// (the Spear FAA with the head and keys; the CAS of an empty key word to k with the tentative
// bit, with a re-read of the keys; the value's WRITE and the CAS clearing the tentative bit,
// the release FAA unsignaled behind them). Readers ignore a tentative key, so k never shows
// before its value. A full leaf is split (or compacted) first; a new 7-byte prefix gets a new
// leaf (2 round trips after the descent), a diverging prefix a new internal node.
func (t *Tree) Insert(ctx context.Context, key []byte, v uint64) error {
	k, err := decodeKey(key)
	if err != nil {
		return err
	}
	if t.blocks {
		return errBlockMode("Insert")
	}
	t.st.Inserts++
	return t.insert(ctx, k, v, nil)
}

// insert inserts k with value word v; x, if set, holds v's block, written with the first
// round trip (or alone before a new leaf or node names it).
func (t *Tree) insert(ctx context.Context, k, v uint64, x *extra) error {
	var w walk
	head := make([]byte, leafValsOff(t.s))
	keysBuf := make([]byte, 8*t.s)
	var lf leaf
	for {
		l, ok, err := t.idu(ctx, k, &w, head, &lf, x)
		if err != nil {
			return fmt.Errorf("hybrid: insert: %w", err)
		}
		if !ok && x != nil && !x.written {
			// A new leaf or node will name the block, maybe on another memory node: write it
			// first (one more round trip).
			if err := t.m.Write(ctx, x.block, x.img); err != nil {
				if l.idx >= 0 && l.child == nil {
					t.release(ctx, entAddr(l.entry))
				}
				return fmt.Errorf("hybrid: insert: %w", err)
			}
			x.written = true
		}
		if !ok {
			switch {
			case l.idx < 0:
				err = t.newLeaf(ctx, k, v, l)
			case l.child != nil:
				err = t.prefixSplit(ctx, k, v, l, l.child.prefix, l.child.depth)
			default: // a leaf of another prefix, whose Spear count we hold
				err = t.prefixSplit(ctx, k, v, l, lf.min, 7)
				t.release(ctx, entAddr(l.entry))
			}
			if errors.Is(err, errRetry) {
				w.backtrack(l.parent)
				continue
			}
			if err != nil {
				return fmt.Errorf("hybrid: insert: %w", err)
			}
			return nil
		}
		done, err := t.insertInLeaf(ctx, k, v, l, &lf, keysBuf, &w)
		if errors.Is(err, errRetry) {
			w.backtrack(l.parent)
			continue
		}
		if err != nil {
			return fmt.Errorf("hybrid: insert: %w", err)
		}
		if done {
			return nil
		}
		return ErrExists
	}
}

// insertInLeaf inserts k in the leaf l names, holding one Spear count on it (given back on
// every path). It returns done, or false for an existing key, or errRetry.
func (t *Tree) insertInLeaf(ctx context.Context, k, v uint64, l loc, lf *leaf, keysBuf []byte, w *walk) (bool, error) {
	la := entAddr(l.entry)
	if lf.find(k) >= 0 {
		t.release(ctx, la)
		return false, nil
	}
	if j := tentativeOf(lf.keys, k, -1); j >= 0 {
		// Another insert of k is undecided: wait for it outside the leaf's Spear.
		t.release(ctx, la)
		if err := t.awaitTentative(ctx, la, j, k); err != nil {
			return false, err
		}
		return false, errRetry
	}
	e := emptyOf(lf.keys, 0)
	for {
		if e < 0 {
			// Full: split or compact the leaf (which takes over our count), then retry.
			if err := t.smo(ctx, l, lf, w); err != nil && !errors.Is(err, errRetry) {
				return false, err
			}
			return false, errRetry
		}
		var b farmem.Batch
		b.CAS(leafKeyAddr(la, e), 0, k|tentativeBit)
		b.Read(la.Add(lKeysOff), keysBuf)
		if err := t.m.Do(ctx, &b); err != nil {
			if prev, cerr := b.Result(0); cerr == nil && prev == 0 {
				t.abandon(ctx, la, e, k)
			}
			t.release(ctx, la)
			return false, err
		}
		for i := range lf.keys {
			lf.keys[i] = le.Uint64(keysBuf[8*i:])
		}
		if prev, _ := b.Result(0); prev != 0 {
			if lf.find(k) >= 0 {
				t.release(ctx, la)
				return false, nil
			}
			e = emptyOf(lf.keys, e+1)
			continue
		}
		break
	}
	// We hold slot e tentative. Resolve competing inserts of k in this leaf: of two, the one
	// that re-read later saw the other; a lower slot found tentative wins, a higher one is
	// waited for (it either saw us and gives up, or did not and commits).
	if lf.find(k) >= 0 {
		t.abandon(ctx, la, e, k)
		t.release(ctx, la)
		return false, nil
	}
	for j := tentativeOf(lf.keys, k, e); j >= 0; j = tentativeOf(lf.keys, k, e) {
		if j < e {
			t.abandon(ctx, la, e, k)
			t.release(ctx, la)
			if err := t.awaitTentative(ctx, la, j, k); err != nil {
				return false, err
			}
			return false, errRetry
		}
		if err := t.awaitTentative(ctx, la, j, k); err != nil {
			t.abandon(ctx, la, e, k)
			t.release(ctx, la)
			return false, err
		}
		word, err := t.readWord(ctx, leafKeyAddr(la, j))
		if err != nil {
			t.abandon(ctx, la, e, k)
			t.release(ctx, la)
			return false, err
		}
		lf.keys[j] = word
		if word == k {
			t.abandon(ctx, la, e, k)
			t.release(ctx, la)
			return false, nil
		}
	}
	var b farmem.Batch
	if t.blocks { // the value word is a CAS target: set it by CAS too
		b.CAS(leafValAddr(la, t.s, e), 0, v)
	} else {
		b.Write(leafValAddr(la, t.s, e), le.AppendUint64(nil, v))
	}
	b.CAS(leafKeyAddr(la, e), k|tentativeBit, k)
	b.Unsignaled(b.FAA(la.Add(lSpearOff), ^uint64(0)))
	if err := t.m.Do(ctx, &b); err != nil {
		return false, err
	}
	if prev, _ := b.Result(1); prev != k|tentativeBit {
		// A waiter removed our slot after its lease: start again.
		return false, errRetry
	}
	return true, nil
}

// abandon turns our tentative slot e into a tombstone (unsignaled: a slot left tentative is
// removed by the next inserter of the key after its lease, and dropped by the next SMO).
func (t *Tree) abandon(ctx context.Context, la farmem.Addr, e int, k uint64) {
	var b farmem.Batch
	b.Unsignaled(b.CAS(leafKeyAddr(la, e), k|tentativeBit, tombstone))
	t.m.Post(ctx, &b)
}

func (t *Tree) readWord(ctx context.Context, a farmem.Addr) (uint64, error) {
	var w [8]byte
	if err := t.m.Read(ctx, a, w[:]); err != nil {
		return 0, err
	}
	return le.Uint64(w[:]), nil
}

// awaitTentative re-reads key word j until it is no longer k's tentative word; past the lease
// it replaces it with a tombstone (its inserter's commit CAS then fails and it retries).
func (t *Tree) awaitTentative(ctx context.Context, la farmem.Addr, j int, k uint64) error {
	deadline := t.rt.Now().Add(t.lease)
	for n := 0; ; n++ {
		t.st.TentativeWaits++
		word, err := t.readWord(ctx, leafKeyAddr(la, j))
		if err != nil {
			return err
		}
		if word != k|tentativeBit {
			return nil
		}
		if t.rt.Now() > deadline {
			_, err := t.m.CAS(ctx, leafKeyAddr(la, j), k|tentativeBit, tombstone)
			return err
		}
		if err := t.backoff(ctx, n); err != nil {
			return err
		}
	}
}

// tentativeOf returns a slot other than skip holding k's tentative word, or -1.
func tentativeOf(keys []uint64, k uint64, skip int) int {
	for i, w := range keys {
		if i != skip && w == k|tentativeBit {
			return i
		}
	}
	return -1
}

// emptyOf returns the first empty slot at or after from, or -1.
func emptyOf(keys []uint64, from int) int {
	for i := from; i < len(keys); i++ {
		if keys[i] == 0 {
			return i
		}
	}
	return -1
}

// newLeaf hangs a new leaf for k's 7-byte prefix on l.parent, a fresh ordinary node with no
// child for k's byte: the leaf's WRITE and the slot's CAS in one ordered batch (both on the
// parent's memory node), with a MaskedCAS of the node's type when the slot is beyond its
// capacity (growth in place: the node has room for 256). 1 round trip.
func (t *Tree) newLeaf(ctx context.Context, k, v uint64, l loc) error {
	n := l.parent
	e := n.firstEmpty(0)
	if e >= 256 {
		return fmt.Errorf("%w: node %v full with no child for %#x", ErrCorrupt, n.addr, keyByte(k, n.depth))
	}
	la, err := t.a.AllocOn(ctx, n.addr.Node(), uint64(leafSize(t.s)), 64)
	if err != nil {
		return err
	}
	ent, err := packEntry(keyByte(k, n.depth), kindLeaf, la)
	if err != nil {
		return err
	}
	lo := k &^ 0xff
	var b farmem.Batch
	b.Write(la, encodeLeaf(t.s, uint64(n.slotAddr(e)), lo, lo+256, 1, []uint64{k}, []uint64{v}))
	b.CAS(n.slotAddr(e), 0, ent)
	grow := e >= len(n.slots)
	if grow {
		b.MaskedCAS(n.addr.Add(nMetaOff), uint64(n.typ), metaTypeMask, uint64(n.typ+1), metaTypeMask)
	}
	if err := t.m.Do(ctx, &b); err != nil {
		return err
	}
	if prev, _ := b.Result(1); prev != 0 {
		_ = t.a.Free(la, uint64(leafSize(t.s))) // never published
		return errRetry
	}
	t.st.NewLeaves++
	if grow {
		if prev, _ := b.Result(2); prev&metaTypeMask == uint64(n.typ) {
			t.st.Growths++
		}
	}
	return nil
}

// prefixSplit puts a new internal node above the child in l.parent's slot l.idx, at the first
// byte where k and the child's key bytes (other, valid below limit) differ, with the child and
// a new leaf for k as its two children: the new node and leaf written and the parent's slot
// CASed in one ordered batch (1 round trip). The child is not changed (its header holds its
// full prefix), except its reverse pointer, a hint fixed with an unsignaled CAS.
func (t *Tree) prefixSplit(ctx context.Context, k, v uint64, l loc, other uint64, limit int) error {
	n := l.parent
	q := -1
	for i := n.depth + 1; i < limit; i++ {
		if keyByte(k, i) != keyByte(other, i) {
			q = i
			break
		}
	}
	if q < 0 {
		return fmt.Errorf("%w: no diverging byte between %#x and %#x below %d", ErrCorrupt, k, other, limit)
	}
	ma, err := t.a.AllocOn(ctx, n.addr.Node(), nodeSize, 64)
	if err != nil {
		return err
	}
	la, err := t.a.AllocOn(ctx, n.addr.Node(), uint64(leafSize(t.s)), 64)
	if err != nil {
		_ = t.a.Free(ma, nodeSize)
		return err
	}
	ment, err := packEntry(keyByte(k, n.depth), kindNode, ma)
	if err != nil {
		return err
	}
	lent, err := packEntry(keyByte(k, q), kindLeaf, la)
	if err != nil {
		return err
	}
	childEnt := l.entry&^(0xff<<entPartSh) | uint64(keyByte(other, q))<<entPartSh
	m := &node{addr: ma}
	lo := k &^ 0xff
	var b farmem.Batch
	b.Write(la, encodeLeaf(t.s, uint64(m.slotAddr(1)), lo, lo+256, 1, []uint64{k}, []uint64{v}))
	b.Write(ma, encodeNode(uint64(l.slot()), 0, q, false, k&prefixMask(q), []uint64{childEnt, lent}))
	b.CAS(l.slot(), l.entry, ment)
	if err := t.m.Do(ctx, &b); err != nil {
		return err
	}
	if prev, _ := b.Result(2); prev != l.entry {
		_ = t.a.Free(la, uint64(leafSize(t.s)))
		_ = t.a.Free(ma, nodeSize)
		return errRetry
	}
	t.st.PrefixSplits++
	var rb farmem.Batch
	rb.Unsignaled(rb.CAS(entAddr(l.entry).Add(lRevOff), uint64(l.slot()), uint64(m.slotAddr(0))))
	t.m.Post(ctx, &rb)
	return nil
}
