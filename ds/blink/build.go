package blink

import (
	"bytes"
	"context"
	"fmt"

	"github.com/farmem/farmem/ds/selcc"
	"github.com/farmem/farmem/farmem"
)

// Build writes a tree holding pairs (sorted by key, keys distinct and within the line's
// Limits) bottom up and returns its root line: leaves filled to fill of a line (0 < fill <= 1;
// at least one entry each), chained by sibling pointers and high keys, then each internal level
// over the one below, up to a single root. It is a bulk load for a tree nobody else uses
// yet: each node costs one line from newLine (which decides where lines live, say round robin
// over memory nodes) and one exclusive guard of cl to write it (as selcc documents). The
// result is the tree Insert would build, with leaves as full as fill. No pairs: an empty tree,
// as Create makes.
func Build(ctx context.Context, c *selcc.Cluster, cl *selcc.Client, newLine func(context.Context) (selcc.GCL, error), pairs []Pair, fill float64) (selcc.GCL, error) {
	line := c.Options().LineSize
	mk, mkv := Limits(line)
	if !(fill > 0 && fill <= 1) || newLine == nil {
		return 0, fmt.Errorf("blink: build with fill %v: %w", fill, farmem.ErrInvalid)
	}
	for i, p := range pairs {
		if len(p.Key) == 0 || len(p.Key) > mk || len(p.Key)+len(p.Value) > mkv {
			return 0, fmt.Errorf("%w: pair %d: key %d bytes, value %d: %w", ErrKey, i, len(p.Key), len(p.Value), farmem.ErrInvalid)
		}
		if i > 0 && bytes.Compare(pairs[i-1].Key, p.Key) >= 0 {
			return 0, fmt.Errorf("blink: build: pairs not sorted or not distinct at %d: %w", i, farmem.ErrInvalid)
		}
	}
	t := &Tree{cl: cl, line: line, buf: make([]byte, line)}
	budget := max(hdrSize+2*mk+1, int(fill*float64(line)))
	// Level 0: group the pairs into leaves.
	// Each node of a level, with its low key (the first key it covers).
	type built struct {
		node
		low []byte
	}
	var level []*built
	cur := &built{}
	for _, p := range pairs {
		if len(cur.keys) > 0 && cur.size()+4+len(p.Key)+len(p.Value)+len(p.Key) > budget {
			level = append(level, cur)
			cur = &built{low: p.Key}
		}
		cur.keys = append(cur.keys, p.Key)
		cur.vals = append(cur.vals, p.Value)
	}
	level = append(level, cur)
	var lvl uint8
	for {
		gs := make([]selcc.GCL, len(level))
		for i := range level {
			g, err := newLine(ctx)
			if err != nil {
				return 0, err
			}
			gs[i] = g
		}
		// Link the level: each node's high key is its right sibling's first key (a leaf's) or
		// the separator below it (an internal node's, kept in lows).
		lows := make([][]byte, len(level))
		for i, n := range level {
			lows[i] = n.low
		}
		for i, n := range level {
			n.level = lvl
			if i+1 < len(level) {
				n.right, n.high = uint64(gs[i+1]), lows[i+1]
			} else {
				n.inf = true
			}
			if err := t.writeNew(ctx, gs[i], &n.node); err != nil {
				return 0, err
			}
		}
		if len(level) == 1 {
			return gs[0], nil
		}
		// The next level: internal nodes over this one, child i separated by its low key.
		var up []*built
		p := &built{node: node{level: lvl + 1, kids: []uint64{uint64(gs[0])}}, low: lows[0]}
		for i := 1; i < len(level); i++ {
			if len(p.kids) > 1 && p.size()+10+len(lows[i])+len(lows[i]) > budget {
				up = append(up, p)
				p = &built{node: node{level: lvl + 1, kids: []uint64{uint64(gs[i])}}, low: lows[i]}
				continue
			}
			p.keys = append(p.keys, lows[i])
			p.kids = append(p.kids, uint64(gs[i]))
		}
		level = append(up, p)
		lvl++
	}
}
