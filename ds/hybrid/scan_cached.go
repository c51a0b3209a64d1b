package hybrid

import (
	"context"
	"fmt"
	"slices"

	"github.com/farmem/farmem/farmem"
)

// scanCached is a scan's one-round-trip path (the paper's): when the cache names a leaf for
// every part of [from, to) (the special nodes' leaves in range, or a leaf hanging from a
// cached ordinary node), every such leaf is read in one batch (head and keys, then values, as
// a Get) and the pairs reported, provided every leaf read is live and their [min, max) ranges
// tile the range with no gap. A live leaf is the home of its whole range at the instant it is
// read (a leaf never changes range; an SMO marks it dead before it publishes its replacement),
// so each key's report is what a Get at that instant returns. ok is false, with nothing
// reported, when the cache does not cover the range or a leaf shows a change since the copies
// were made (dead, or a gap): the caller then walks the tree.
func (t *Tree) scanCached(ctx context.Context, s *scanner) (ok bool, err error) {
	var ws []uint64
	// With a limit, enough leaves for it at a quarter's occupancy; the rest of the range is
	// then left (end) unless the limit is met.
	most := farmem.MaxBatchOps / 2
	if s.limit > 0 {
		most = min(most, s.limit/max(t.s/4, 1)+2)
	}
	end := s.from
	for cur := s.from; cur < s.to && len(ws) < most; {
		c := t.cacheLookup(cur)
		if c == nil {
			return false, nil
		}
		var hi uint64
		if c.special {
			hi = c.prefix + 256
			var kids []uint64
			for _, w := range c.slots {
				if entKind(w) != kindEmpty {
					kids = append(kids, w)
				}
			}
			slices.SortFunc(kids, func(a, b uint64) int { return int(entPartial(a)) - int(entPartial(b)) })
			for i, w := range kids {
				lo, khi := c.prefix|uint64(entPartial(w)), hi
				if i+1 < len(kids) {
					khi = c.prefix | uint64(entPartial(kids[i+1]))
				}
				if khi > cur && lo < s.to && entIsLeaf(w) {
					ws = append(ws, w)
				} else if khi > cur && lo < s.to {
					return false, nil
				}
			}
		} else {
			i := c.route(cur)
			if i < 0 || !entIsLeaf(c.slots[i]) {
				return false, nil
			}
			w := c.slots[i]
			shift := 56 - 8*c.depth
			hi = (c.prefix | uint64(keyByte(cur, c.depth))<<shift) + 1<<shift
			ws = append(ws, w)
		}
		cur = hi
		end = min(hi, s.to)
	}
	if len(ws) > most {
		return false, nil
	}
	var b farmem.Batch
	heads, tails := make([][]byte, len(ws)), make([][]byte, len(ws))
	for i, w := range ws {
		la := entAddr(w)
		heads[i] = make([]byte, leafValsOff(t.s))
		tails[i] = make([]byte, leafSize(t.s)-leafValsOff(t.s))
		b.Read(la, heads[i])
		b.Read(la.Add(uint64(leafValsOff(t.s))), tails[i])
	}
	if err := t.m.Do(ctx, &b); err != nil {
		return false, fmt.Errorf("hybrid: scan: %w", err)
	}
	lfs := make([]leaf, len(ws))
	cursor := s.from
	for i := range ws {
		lf := &lfs[i]
		decodeLeafHead(heads[i], t.s, lf)
		decodeLeafTail(tails[i], t.s, lf)
		if spearIsDead(lf.spear) || lf.min > cursor || lf.max <= cursor {
			t.st.ScanFallbacks++
			return false, nil
		}
		cursor = lf.max
	}
	if cursor < end {
		t.st.ScanFallbacks++
		return false, nil
	}
	mark := len(s.out)
	cursor = s.from
	for i := range lfs {
		s.report(&lfs[i], cursor, min(lfs[i].max, s.to))
		cursor = lfs[i].max
		if s.full() {
			t.st.CachedScans++
			return true, nil
		}
	}
	if end < s.to { // the limit was not met within the leaves read
		s.out = s.out[:mark]
		return false, nil
	}
	t.st.CachedScans++
	return true, nil
}
