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
// walks the tree in key order with fresh reads, one round trip per node and per leaf it
// reaches (the cache is not used: a cached copy may miss a child); a leaf found dead sends it
// back to the leaf's parent, read again, for that leaf's range.
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
			n := le.Uint64(buf)
			if n > uint64(len(buf)-8) {
				return fmt.Errorf("%w: block %v holds %d bytes", ErrCorrupt, blockAddr(p.Value), n)
			}
			out[i] = BytesPair{Key: p.Key, Value: buf[8 : 8+n]}
		}
		return nil
	})
	return out, err
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
	n, err := t.readNode(ctx, t.node0, 0, 0, 0)
	if err != nil {
		return nil, fmt.Errorf("hybrid: scan: %w", err)
	}
	if err := s.node(ctx, n, 0, MaxKey+1); err != nil {
		return nil, fmt.Errorf("hybrid: scan: %w", err)
	}
	return s.out, nil
}

// node scans n's children whose ranges meet [lo, hi) and the scan's range, in key order.
func (s *scanner) node(ctx context.Context, n *node, lo, hi uint64) error {
	type kid struct {
		w      uint64
		lo, hi uint64
	}
	var kids []kid
	for _, w := range n.slots {
		if entKind(w) != kindEmpty {
			kids = append(kids, kid{w: w})
		}
	}
	slices.SortFunc(kids, func(a, b kid) int { return int(entPartial(a.w)) - int(entPartial(b.w)) })
	span := uint64(1) << (56 - 8*n.depth)
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
			kids[i].hi = kids[i].lo + span
		}
	}
	for _, k := range kids {
		a, b := max(k.lo, lo, s.from), min(k.hi, hi, s.to)
		if a >= b {
			continue
		}
		if entIsLeaf(k.w) {
			if err := s.leaf(ctx, n, k.w, a, b); err != nil {
				return err
			}
		} else {
			c, err := s.t.readNode(ctx, entAddr(k.w), entType(k.w), 0, 0)
			if err != nil {
				return err
			}
			if err := s.node(ctx, c, a, b); err != nil {
				return err
			}
		}
		if s.full() {
			return nil
		}
	}
	return nil
}

// leaf reports the committed keys in [lo, hi) of the leaf w names (a child of parent).
func (s *scanner) leaf(ctx context.Context, parent *node, w uint64, lo, hi uint64) error {
	t := s.t
	la := entAddr(w)
	head := make([]byte, leafValsOff(t.s))
	tail := make([]byte, leafSize(t.s)-leafValsOff(t.s))
	var b farmem.Batch
	b.Read(la, head)
	b.Read(la.Add(uint64(leafValsOff(t.s))), tail)
	if err := t.m.Do(ctx, &b); err != nil {
		return err
	}
	var lf leaf
	decodeLeafHead(head, t.s, &lf)
	decodeLeafTail(tail, t.s, &lf)
	if spearIsDead(lf.spear) {
		// Replaced since the parent was read: read the parent again for this range.
		p, err := t.readNode(ctx, parent.addr, parent.typ, 0, 0)
		if err != nil {
			return err
		}
		if slices.Contains(p.slots, w) {
			if err := t.awaitSMO(ctx, la, p); err != nil {
				return err
			}
			if p, err = t.readNode(ctx, parent.addr, parent.typ, 0, 0); err != nil {
				return err
			}
		}
		return s.node(ctx, p, lo, hi)
	}
	var found []Pair
	for i, k := range lf.keys {
		if k != 0 && k&tentativeBit == 0 && k >= lo && k < hi {
			found = append(found, Pair{k, lf.vals[i]})
		}
	}
	slices.SortFunc(found, func(a, b Pair) int {
		if a.Key < b.Key {
			return -1
		}
		return 1
	})
	for _, p := range found {
		if s.full() {
			break
		}
		s.out = append(s.out, p)
	}
	return nil
}
