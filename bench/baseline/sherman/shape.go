package sherman

import (
	"context"
	"fmt"

	"github.com/farmem/farmem/farmem"
)

// LevelShape is one level of a tree: Nodes nodes holding Entries entries (a leaf's keys, an
// internal node's children), each with room for Capacity (a node splits on reaching it, as
// Sherman's do, so it holds at most Capacity-1).
type LevelShape struct {
	Level, Nodes, Entries, Capacity int
}

// Fill is the level's mean entries per node over its capacity.
func (s LevelShape) Fill() float64 {
	if s.Nodes == 0 || s.Capacity == 0 {
		return 0
	}
	return float64(s.Entries) / float64(s.Nodes*s.Capacity)
}

// Shape walks the tree level by level, root level first, reading every node once (each
// level from its leftmost node by sibling pointers: one round trip per node), and returns
// each level's nodes and fill. It is meant for a quiescent tree: under concurrent splits the
// counts are a mix of before and after.
func (t *Tree) Shape(ctx context.Context) ([]LevelShape, error) {
	cur, err := t.rootPtr(ctx)
	if err != nil {
		return nil, err
	}
	var out []LevelShape
	for cur != 0 {
		first, err := t.read(ctx, cur)
		if err != nil {
			return nil, err
		}
		s := LevelShape{Level: first.level, Capacity: t.l.leafCap}
		if !first.leaf() {
			s.Capacity = t.l.innerCap + 1
		}
		for n := first; ; {
			s.Nodes++
			s.Entries += len(n.vals)
			if n.sibling == 0 {
				break
			}
			if s.Nodes > 1<<30 {
				return nil, fmt.Errorf("%w: a sibling chain that does not end at level %d", ErrParams, s.Level)
			}
			if n, err = t.read(ctx, n.sibling); err != nil {
				return nil, err
			}
		}
		out = append(out, s)
		if first.leaf() {
			break
		}
		cur = farmem.Addr(first.vals[0])
	}
	return out, nil
}
