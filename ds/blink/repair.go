package blink

import (
	"context"
	"fmt"

	"github.com/farmem/farmem/ds/selcc"
	"github.com/farmem/farmem/farmem"
)

// Lines returns every line of the tree as far memory holds it, read with m directly (plain
// READs of the bodies, no latch, no cache): each level from its leftmost node along the sibling
// chain. One round trip per line. It is for recovery ([Tree.Repair]): run it while no client
// changes the tree (a line being written back meanwhile may read torn), and only under
// selcc.WriteBackOnRelease (under WriteBack far memory may not hold the tree's shape).
func (t *Tree) Lines(ctx context.Context, m farmem.Memory) ([]selcc.GCL, error) {
	buf := make([]byte, t.line)
	read := func(g uint64) (*node, error) {
		if err := m.Read(ctx, selcc.GCL(g).Body(), buf); err != nil {
			return nil, err
		}
		n, err := decode(buf)
		if err != nil {
			return nil, fmt.Errorf("%v: %w", selcc.GCL(g), err)
		}
		return n, nil
	}
	var out []selcc.GCL
	seen := map[uint64]bool{}
	first := uint64(t.root)
	for first != 0 {
		var next uint64
		for g := first; g != 0; {
			if seen[g] {
				return nil, fmt.Errorf("blink: %v reached twice: %w", selcc.GCL(g), ErrCorrupt)
			}
			seen[g] = true
			out = append(out, selcc.GCL(g))
			n, err := read(g)
			if err != nil {
				return nil, err
			}
			if next == 0 && n.level > 0 {
				next = n.kids[0]
			}
			g = n.right
		}
		first = next
	}
	return out, nil
}

// Repair removes the holds of dead, a compute node that died holding latches, from every line
// of the tree (selcc.Client.Repair over [Tree.Lines]), so the survivors can take them again; it
// returns the number of holds removed. Only a node that is really gone may be repaired. Its
// acknowledged writes are in far memory under selcc.WriteBackOnRelease; a write whose guard it
// had not released is lost (the operation was never acknowledged). Run it while no client
// changes the tree (see Lines). Costs: one round trip per line to find them, and what
// selcc.Client.Repair costs.
func (t *Tree) Repair(ctx context.Context, m farmem.Memory, dead farmem.ComputeID) (int, error) {
	lines, err := t.Lines(ctx, m)
	if err != nil {
		return 0, err
	}
	return t.cl.Repair(ctx, dead, lines)
}
