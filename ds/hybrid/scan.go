package hybrid

import (
	"context"
	"fmt"
	"slices"

	"github.com/farmem/farmem/farmem"
)

// Pair is a key and its 8-byte value.
type Pair struct {
	Key, Value uint64
}

// BytesPair is a key and its value in a tree with Params.BlockValues.
type BytesPair struct {
	Key   uint64
	Value []byte
}

// Scan returns the pairs with from <= key < to, ascending, at most limit of them (limit <= 0:
// no limit); to = MaxKey+1 has no upper bound. A scan is not atomic: each key's report (its
// value, or its absence) is what a Get linearized at some instant within the scan returns. It
// starts at the deepest node on the first key's path that the cache names, read again (a copy
// may miss children; the node's subtree holds every key of its prefix), and walks it in key
// order with fresh reads: one round trip per internal node, and one per run of sibling leaves
// (batched; with a limit, about as many as the keys still wanted fill at half occupancy), then
// goes on past that node's range the same way. A leaf found dead sends it back to the leaf's
// parent, read again, for that leaf's range, and so does the part of a special node's slot
// range that a live leaf does not cover (the node's copy was read across a split). Warm cache, a range inside one special node's
// 256 keys: 2 round trips (3 with ScanBytes).
func (t *Tree) Scan(ctx context.Context, from, to uint64, limit int) ([]Pair, error) {
	if t.blocks {
		return nil, errBlockMode("Scan")
	}
	raw, err := t.scan(ctx, from, to, limit)
	if err != nil {
		return nil, err
	}
	out := make([]Pair, len(raw))
	for i, p := range raw {
		out[i] = Pair(p)
	}
	return out, nil
}

// ScanBytes is Scan for a tree with Params.BlockValues: the blocks of the pairs found are read
// in batches after the walk (one round trip per farmem.MaxBatchOps pairs), the whole scan
// pinned so that no block is reused meanwhile.
func (t *Tree) ScanBytes(ctx context.Context, from, to uint64, limit int) ([]BytesPair, error) {
	if !t.blocks {
		return nil, errWordMode("ScanBytes")
	}
	var out []BytesPair
	err := t.pinned(ctx, func() error {
		raw, err := t.scan(ctx, from, to, limit)
		if err != nil {
			return err
		}
		out = make([]BytesPair, len(raw))
		bufs := make([][]byte, len(raw))
		for i := 0; i < len(raw); i += farmem.MaxBatchOps {
			var b farmem.Batch
			for j := i; j < min(i+farmem.MaxBatchOps, len(raw)); j++ {
				bufs[j] = make([]byte, 8*blockWords(raw[j].Value))
				b.Read(blockAddr(raw[j].Value), bufs[j])
			}
			if err := t.m.Do(ctx, &b); err != nil {
				return fmt.Errorf("hybrid: scan: %w", err)
			}
		}
		for i, p := range raw {
			buf := bufs[i]
			if len(buf) < 8 || le.Uint64(buf) > uint64(len(buf)-8) {
				return fmt.Errorf("%w: block %v of %d words", ErrCorrupt, blockAddr(p.Value), blockWords(p.Value))
			}
			n := le.Uint64(buf)
			if n > uint64(len(buf)-8) {
				return fmt.Errorf("%w: block %v holds %d bytes", ErrCorrupt, blockAddr(p.Value), n)
			}
			out[i] = BytesPair{Key: p.Key, Value: buf[8 : 8+n]}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

type scanner struct {
	t        *Tree
	from, to uint64
	limit    int
	out      []Pair
}

func (s *scanner) full() bool { return s.limit > 0 && len(s.out) >= s.limit }

func (t *Tree) scan(ctx context.Context, from, to uint64, limit int) ([]Pair, error) {
	if to > MaxKey+1 {
		to = MaxKey + 1
	}
	s := &scanner{t: t, from: max(from, 1), to: to, limit: limit}
	if s.from >= s.to {
		return nil, nil
	}
	if ok, err := t.scanCached(ctx, s); ok || err != nil {
		return s.out, err
	}
	// Piece by piece: the deepest node on the path of the next key to report (a cached copy
	// names it; it is read again, since a copy may miss children), whose subtree holds every
	// key of its prefix, then on past its range.
	for cur := s.from; cur < s.to && !s.full(); {
		var n *node
		var err error
		if c := t.cacheLookup(cur); c != nil {
			n, err = t.readNode(ctx, c.addr, c.typ, 0, 0)
		} else {
			n, err = t.readNode(ctx, t.node0, 0, 0, 0)
		}
		if err != nil {
			return nil, fmt.Errorf("hybrid: scan: %w", err)
		}
		t.cachePut(n)
		hi := uint64(MaxKey + 1)
		if n.depth > 0 {
			hi = n.prefix + 1<<(64-8*n.depth)
		}
		if err := s.node(ctx, n, cur, min(hi, s.to)); err != nil {
			return nil, fmt.Errorf("hybrid: scan: %w", err)
		}
		cur = hi
	}
	return s.out, nil
}

// kid is a child in a scan, with the key range it covers.
type kid struct {
	w      uint64
	lo, hi uint64
}

// node scans n's children whose ranges meet [lo, hi) and the scan's range, in key order: runs
// of leaves are read in batches (one round trip each; with a limit, about as many leaves as
// the keys still wanted need at half occupancy), child nodes one by one.
func (s *scanner) node(ctx context.Context, n *node, lo, hi uint64) error {
	var kids []kid
	for _, w := range n.slots {
		if entKind(w) != kindEmpty {
			kids = append(kids, kid{w: w})
		}
	}
	slices.SortFunc(kids, func(a, b kid) int { return int(entPartial(a.w)) - int(entPartial(b.w)) })
	for i := range kids {
		p := uint64(entPartial(kids[i].w))
		if n.special {
			kids[i].lo = n.prefix | p
			kids[i].hi = n.prefix + 256
			if i+1 < len(kids) {
				kids[i].hi = n.prefix | uint64(entPartial(kids[i+1].w))
			}
		} else {
			kids[i].lo = n.prefix | p<<(56-8*n.depth)
			kids[i].hi = kids[i].lo + 1<<(56-8*n.depth)
		}
	}
	var leaves []kid
	for _, k := range kids {
		a, b := max(k.lo, lo, s.from), min(k.hi, hi, s.to)
		if a >= b {
			continue
		}
		if entIsLeaf(k.w) {
			leaves = append(leaves, kid{k.w, a, b})
			continue
		}
		if err := s.leaves(ctx, n, leaves); err != nil || s.full() {
			return err
		}
		leaves = leaves[:0]
		c, err := s.t.readNode(ctx, entAddr(k.w), entType(k.w), 0, 0)
		if err != nil {
			return err
		}
		if err := s.node(ctx, c, a, b); err != nil || s.full() {
			return err
		}
	}
	return s.leaves(ctx, n, leaves)
}

// leaves reads a run of leaves (children of parent, in key order) in batches and reports their
// committed keys in each one's range.
func (s *scanner) leaves(ctx context.Context, parent *node, ks []kid) error {
	t := s.t
	for len(ks) > 0 && !s.full() {
		chunk := len(ks)
		if s.limit > 0 {
			chunk = min(chunk, (s.limit-len(s.out))/max(t.s/2, 1)+1)
		}
		chunk = min(chunk, farmem.MaxBatchOps/2)
		var b farmem.Batch
		heads, tails := make([][]byte, chunk), make([][]byte, chunk)
		for i, k := range ks[:chunk] {
			la := entAddr(k.w)
			heads[i] = make([]byte, leafValsOff(t.s))
			tails[i] = make([]byte, leafSize(t.s)-leafValsOff(t.s))
			b.Read(la, heads[i])
			b.Read(la.Add(uint64(leafValsOff(t.s))), tails[i])
		}
		if err := t.m.Do(ctx, &b); err != nil {
			return err
		}
		for i, k := range ks[:chunk] {
			var lf leaf
			decodeLeafHead(heads[i], t.s, &lf)
			decodeLeafTail(tails[i], t.s, &lf)
			switch {
			case spearIsDead(lf.spear):
				if err := s.replaced(ctx, parent, k); err != nil {
					return err
				}
			case parent.special && (lf.min > k.lo || lf.max < k.hi):
				if err := s.partly(ctx, parent, k, &lf); err != nil {
					return err
				}
			default:
				s.report(&lf, k.lo, k.hi)
			}
			if s.full() {
				return nil
			}
		}
		ks = ks[chunk:]
	}
	return nil
}

// replaced scans the range of a leaf found dead (replaced since parent was read) through
// parent, read again (after the SMO publishes, if parent still names the leaf).
func (s *scanner) replaced(ctx context.Context, parent *node, k kid) error {
	t := s.t
	p, err := t.readNode(ctx, parent.addr, parent.typ, 0, 0)
	if err != nil {
		return err
	}
	if slices.Contains(p.slots, k.w) {
		if err := t.awaitSMO(ctx, entAddr(k.w), p); err != nil {
			return err
		}
		if p, err = t.readNode(ctx, parent.addr, parent.typ, 0, 0); err != nil {
			return err
		}
	}
	return s.node(ctx, p, k.lo, k.hi)
}

// partly reports a live leaf that covers only part of the range its special parent's copy
// gives it, and scans the rest through parent, read again. A node's read is not one snapshot:
// its type word is read before its slots, so a copy whose type word was read before a split
// published the upper leaf in a slot past the type's capacity (growing the type), and whose
// slots were read after the old slot was swapped to the lower leaf, names the lower leaf and
// not the upper one, and its partials give the lower leaf the upper leaf's range too. (Under an
// ordinary node a leaf covers its 7-byte prefix, less than its slot's range by design: keys of
// the slot outside it are absent while the slot names the leaf.)
func (s *scanner) partly(ctx context.Context, parent *node, k kid, lf *leaf) error {
	if lf.min > k.lo {
		if err := s.rescan(ctx, parent, k.lo, min(lf.min, k.hi)); err != nil || s.full() {
			return err
		}
	}
	if a, b := max(k.lo, lf.min), min(k.hi, lf.max); a < b {
		s.report(lf, a, b)
	}
	if lf.max < k.hi && !s.full() {
		return s.rescan(ctx, parent, max(lf.max, k.lo), k.hi)
	}
	return nil
}

// rescan scans [lo, hi) through parent, read again.
func (s *scanner) rescan(ctx context.Context, parent *node, lo, hi uint64) error {
	p, err := s.t.readNode(ctx, parent.addr, parent.typ, 0, 0)
	if err != nil {
		return err
	}
	return s.node(ctx, p, lo, hi)
}

// report appends the leaf's committed keys in [lo, hi), ascending, up to the limit. A key
// committed in two slots (the keys read one word after another, the first slot before a
// delete made it a tombstone and the second after a re-insert claimed it) is reported once,
// from its first slot, as Get reports it.
func (s *scanner) report(lf *leaf, lo, hi uint64) {
	var found []Pair
	for i, k := range lf.keys {
		// (A block value word read as 0 was cleared by a delete after the key was read.)
		if k != 0 && k&tentativeBit == 0 && k >= lo && k < hi && !(s.t.blocks && lf.vals[i] == 0) {
			found = append(found, Pair{k, lf.vals[i]})
		}
	}
	slices.SortStableFunc(found, func(a, b Pair) int {
		switch {
		case a.Key < b.Key:
			return -1
		case a.Key > b.Key:
			return 1
		}
		return 0
	})
	found = slices.CompactFunc(found, func(a, b Pair) bool { return a.Key == b.Key })
	for _, p := range found {
		if s.full() {
			break
		}
		s.out = append(s.out, p)
	}
}
