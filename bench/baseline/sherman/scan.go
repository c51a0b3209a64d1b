package sherman

import (
	"bytes"
	"context"

	"github.com/farmem/farmem/farmem"
)

// Pair is a key and its value.
type Pair struct {
	Key   []byte
	Value uint64
}

// Scan returns up to limit pairs (0: no limit) with from <= key < to (nil to: no upper bound),
// in key order. With the range's leaf parents cached, every leaf they name in the range is
// read in one batch (Sherman's range query: one round trip, ScanRoundTrips); without a bound
// the batch holds enough leaves for limit keys at half-full leaves. A leaf the batch lacks
// (split since the copy) is reached by its left neighbour's sibling pointer, one read each.
// Not atomic: each key's report is what a Get at the instant its leaf was read would return.
func (t *Tree) Scan(ctx context.Context, from, to []byte, limit int) ([]Pair, error) {
	if err := t.l.codec.valid(from); err != nil {
		return nil, err
	}
	t.st.Scans++
	if limit <= 0 {
		limit = int(^uint(0) >> 1)
	}
	// Leaves named by the cached parents, in key order.
	most := 1 << 20
	if to == nil {
		most = 2*limit/max(1, t.l.leafCap) + 2
	}
	var addrs []farmem.Addr
	parents := t.cache.covering(from, to, 64)
	if t.caching() {
		t.chargeCopies(parents)
	}
	for _, p := range parents {
		for i := range p.vals {
			if len(addrs) >= most {
				break
			}
			if i < len(p.keys) && bytes.Compare(p.keys[i], from) <= 0 {
				continue // child i ends at or below from
			}
			if i > 0 && to != nil && bytes.Compare(p.keys[i-1], to) >= 0 {
				break
			}
			addrs = append(addrs, farmem.Addr(p.vals[i]))
		}
	}
	var queue []*node
	if len(addrs) > 0 {
		bufs := make([][]byte, len(addrs))
		var b farmem.Batch
		for i, a := range addrs {
			bufs[i] = make([]byte, t.l.size)
			b.Read(a, bufs[i])
		}
		if err := t.m.Do(ctx, &b); err != nil {
			return nil, err
		}
		for i, a := range addrs {
			n, ok := t.parse(a, bufs[i])
			if !ok {
				if n, err := t.read(ctx, a); err == nil {
					queue = append(queue, n)
					continue
				} else {
					return nil, err
				}
			}
			queue = append(queue, n)
		}
	}
	var out []Pair
	cursor := bytes.Clone(from)
	var last *node
	for len(out) < limit {
		// The leaf covering cursor: the batch's next, else the last leaf's sibling, else a walk.
		var n *node
		for len(queue) > 0 && queue[0].beyond(cursor) {
			queue = queue[1:]
		}
		switch {
		case len(queue) > 0 && queue[0].covers(cursor):
			n, queue = queue[0], queue[1:]
		case last != nil:
			var err error
			if n, err = t.read(ctx, last.sibling); err != nil {
				return nil, err
			}
			t.st.SiblingHops++
		default:
			var err error
			if n, err = t.leafFor(ctx, cursor); err != nil {
				return nil, err
			}
		}
		if n.beyond(cursor) { // a sibling read found it split again: keep going right
			last = n
			continue
		}
		i, _ := n.search(cursor)
		for ; i < len(n.keys) && len(out) < limit; i++ {
			if to != nil && bytes.Compare(n.keys[i], to) >= 0 {
				return out, nil
			}
			out = append(out, Pair{Key: n.keys[i], Value: n.vals[i]})
		}
		if n.high == nil || (to != nil && bytes.Compare(n.high, to) >= 0) {
			return out, nil
		}
		cursor, last = n.high, n
	}
	return out, nil
}
