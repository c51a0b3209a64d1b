package blink

import (
	"context"

	"github.com/farmem/farmem/ds/selcc"
	"github.com/farmem/farmem/farmem"
)

// FarPairs walks the tree as far memory holds it (plain READs of the lines' bodies, no latch,
// no cache): down the leftmost path, then along the leaf level; it returns every pair found.
func FarPairs(ctx context.Context, m farmem.Memory, root selcc.GCL, line int) (map[string]string, error) {
	buf := make([]byte, line)
	read := func(g uint64) (*node, error) {
		if err := m.Read(ctx, selcc.GCL(g).Body(), buf); err != nil {
			return nil, err
		}
		return decode(buf)
	}
	n, err := read(uint64(root))
	if err != nil {
		return nil, err
	}
	for n.level > 0 {
		if n, err = read(n.kids[0]); err != nil {
			return nil, err
		}
	}
	out := map[string]string{}
	for {
		for i, k := range n.keys {
			out[string(k)] = string(n.vals[i])
		}
		if n.right == 0 {
			return out, nil
		}
		if n, err = read(n.right); err != nil {
			return nil, err
		}
	}
}
