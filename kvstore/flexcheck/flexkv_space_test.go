package flexcheck_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/farmem/farmem/farmem/local"
	"github.com/farmem/farmem/kvstore"
)

// A FlexKV store (and its Aceso-like baseline) keeps its KV blocks, copied on every memory
// node (FlexKV's Replicas), in the allocator's symmetric area: a store that formats the fabric
// gives that area most of each node, so the pairs can fill half of every 2 MiB node, not only
// the eighth the allocator sets aside by default (there an Insert would fail for want of room
// while the heap stood nearly empty, and updates would wait for reclamation once the area was
// full).
func TestFlexKVBlocksFillMostOfANode(t *testing.T) {
	t.Parallel()
	for _, k := range []*kvstore.FlexKV{{}, {NoProxy: true}} {
		t.Run(k.Name(), func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			const nodeSize = 2 << 20
			f := newLocal(t, local.Options{Shape: local.Shape{MemoryNodes: 2, ComputeNodes: 1, MemorySize: nodeSize}})
			s := openStore(t, f, kvstore.Options{Index: k, Alloc: quietAlloc})
			const valueSize = 1000
			n := uint64(nodeSize / 2 / valueSize) // half a node of pairs on each node
			for i := range n {
				require.NoError(t, s.Insert(ctx, key(i), val(i, valueSize)), "pair %d of %d (%d bytes each)", i, n, valueSize)
			}
			// Every pair replaced once: the new blocks come from the same area.
			for i := range n {
				require.NoError(t, s.Update(ctx, key(i), val(i+n, valueSize)), "update of pair %d", i)
			}
			for _, i := range []uint64{0, n / 2, n - 1} {
				got, err := s.Get(ctx, key(i))
				require.NoError(t, err)
				v, err := unval(got)
				require.NoError(t, err)
				require.Equal(t, i+n, v)
			}
		})
	}
}
