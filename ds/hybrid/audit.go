package hybrid

import (
	"context"
	"fmt"
	"slices"
)

// Census is what Audit found in a quiescent tree.
type Census struct {
	// Nodes counts ART nodes by type (4, 16, 48, 256); Special counts special nodes among them.
	Nodes   [numTypes]int
	Special int
	// SpecialTypes counts special nodes by type.
	SpecialTypes [numTypes]int
	// Leaves lists the reachable leaves in key order.
	Leaves []LeafInfo
	// Keys, Tombstones and Tentative count key words of reachable leaves.
	Keys, Tombstones, Tentative int
	// Held counts reachable leaves whose Spear word is not zero (an IDU or SMO in flight, or
	// a count lost by a failed client).
	Held int
}

// LeafInfo describes one leaf.
type LeafInfo struct {
	Min, Max uint64
	Keys     []uint64 // committed keys, ascending
	Values   []uint64 // their values
	Slots    int      // slots in use (keys, tombstones, tentative)
}

// Audit walks the whole tree with fresh reads (one round trip per node and leaf) and checks
// its invariants: every node's depth and full prefix agree with its path, partial bytes are
// unique in a node, special nodes sit at depth 7 and their leaves partition their 256 keys,
// no reachable leaf is dead, every committed key is inside its leaf's range and appears once.
// It is for tests and tools, on a quiescent tree; errors wrap ErrCorrupt.
func (t *Tree) Audit(ctx context.Context) (Census, error) {
	var c Census
	n, err := t.readNode(ctx, t.node0, 0, 0, 0)
	if err != nil {
		return c, err
	}
	if err := t.auditNode(ctx, n, 0, 0, &c); err != nil {
		return c, err
	}
	seen := map[uint64]bool{}
	for i, l := range c.Leaves {
		if i > 0 && c.Leaves[i-1].Max > l.Min {
			return c, fmt.Errorf("%w: leaves overlap: [%#x, %#x) and [%#x, %#x)", ErrCorrupt, c.Leaves[i-1].Min, c.Leaves[i-1].Max, l.Min, l.Max)
		}
		for _, k := range l.Keys {
			if seen[k] {
				return c, fmt.Errorf("%w: key %#x twice", ErrCorrupt, k)
			}
			seen[k] = true
		}
	}
	return c, nil
}

// auditNode audits n, reached by a path that fixes the key's first known bytes to want's.
func (t *Tree) auditNode(ctx context.Context, n *node, want uint64, known int, c *Census) error {
	if n.depth < known || n.prefix&prefixMask(known) != want {
		return fmt.Errorf("%w: node %v prefix %#x off its path %#x", ErrCorrupt, n.addr, n.prefix, want)
	}
	c.Nodes[n.typ]++
	if n.special {
		c.Special++
		c.SpecialTypes[n.typ]++
	}
	parts := map[byte]bool{}
	type child struct {
		p byte
		w uint64
	}
	var kids []child
	for _, w := range n.slots {
		if entKind(w) == kindEmpty {
			continue
		}
		p := entPartial(w)
		if parts[p] {
			return fmt.Errorf("%w: node %v has partial %#x twice", ErrCorrupt, n.addr, p)
		}
		parts[p] = true
		kids = append(kids, child{p, w})
	}
	slices.SortFunc(kids, func(a, b child) int { return int(a.p) - int(b.p) })
	for j, kd := range kids {
		path := n.prefix | uint64(kd.p)<<(56-8*n.depth)
		if entIsLeaf(kd.w) {
			info, err := t.auditLeaf(ctx, kd.w, c)
			if err != nil {
				return err
			}
			if n.special {
				if keyByte(info.Min, 7) != kd.p || info.Min&prefixMask(7) != n.prefix {
					return fmt.Errorf("%w: leaf [%#x, %#x) under partial %#x of special %v", ErrCorrupt, info.Min, info.Max, kd.p, n.addr)
				}
				end := n.prefix + 256
				if j+1 < len(kids) {
					end = n.prefix | uint64(kids[j+1].p)
				}
				if info.Max != end || (j == 0 && info.Min != n.prefix) {
					return fmt.Errorf("%w: leaf [%#x, %#x) does not tile special %v", ErrCorrupt, info.Min, info.Max, n.addr)
				}
			} else if info.Min&prefixMask(n.depth+1) != path || info.Max != info.Min+256 || info.Min&0xff != 0 {
				return fmt.Errorf("%w: leaf [%#x, %#x) under node %v byte %#x", ErrCorrupt, info.Min, info.Max, n.addr, kd.p)
			}
			continue
		}
		cn, err := t.readNode(ctx, entAddr(kd.w), entType(kd.w), 0, 0)
		if err != nil {
			return err
		}
		if cn.depth <= n.depth || n.special {
			return fmt.Errorf("%w: node %v depth %d under %v depth %d", ErrCorrupt, cn.addr, cn.depth, n.addr, n.depth)
		}
		if err := t.auditNode(ctx, cn, path, n.depth+1, c); err != nil {
			return err
		}
	}
	return nil
}

func (t *Tree) auditLeaf(ctx context.Context, w uint64, c *Census) (LeafInfo, error) {
	la := entAddr(w)
	buf := make([]byte, leafSize(t.s))
	if err := t.m.Read(ctx, la, buf); err != nil {
		return LeafInfo{}, err
	}
	var lf leaf
	decodeLeafHead(buf, t.s, &lf)
	decodeLeafTail(buf[leafValsOff(t.s):], t.s, &lf)
	if spearIsDead(lf.spear) {
		return LeafInfo{}, fmt.Errorf("%w: dead leaf %v reachable", ErrCorrupt, la)
	}
	if lf.spear != 0 {
		c.Held++
	}
	if lf.front != lf.rear || lf.min >= lf.max {
		return LeafInfo{}, fmt.Errorf("%w: leaf %v versions %d/%d range [%#x, %#x)", ErrCorrupt, la, lf.front, lf.rear, lf.min, lf.max)
	}
	info := LeafInfo{Min: lf.min, Max: lf.max}
	type kv struct{ k, v uint64 }
	var pairs []kv
	for i, k := range lf.keys {
		switch {
		case k == 0:
			continue
		case k == tombstone:
			c.Tombstones++
		case k&tentativeBit != 0:
			c.Tentative++
		default:
			if !lf.inRange(k) {
				return info, fmt.Errorf("%w: key %#x outside leaf %v [%#x, %#x)", ErrCorrupt, k, la, lf.min, lf.max)
			}
			pairs = append(pairs, kv{k, lf.vals[i]})
			c.Keys++
		}
		info.Slots++
	}
	slices.SortFunc(pairs, func(a, b kv) int {
		if a.k < b.k {
			return -1
		}
		return 1
	})
	for _, p := range pairs {
		info.Keys = append(info.Keys, p.k)
		info.Values = append(info.Values, p.v)
	}
	c.Leaves = append(c.Leaves, info)
	return info, nil
}
