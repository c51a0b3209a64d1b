package smart_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/farmem/farmem/bench/baseline/internal/basetest"
	"github.com/farmem/farmem/bench/baseline/smart"
	"github.com/farmem/farmem/farmem/local"
)

// TestGrownNodeReadOnce grows one node from SMART's smallest class (4 children) to 100
// children by inserts (its inserter's cache holds the root's copy from before the growth),
// then has a client with no cache read a key under it: the parent's child word records the
// class the node grew to (as SMART's parent entry records its child's node type), so the node
// is read once, sized to its class: the root, the node, the leaf.
func TestGrownNodeReadOnce(t *testing.T) {
	f, root := localTree(t, local.Options{})
	ctx := context.Background()
	cn := f.Topology().ComputeNodes()[0]
	w := openClient(t, ctx, f, cn, root, smart.NewCache(1<<20))
	require.NoError(t, w.tree.Insert(ctx, 1, 1))
	require.NoError(t, w.tree.Insert(ctx, 2, 2)) // the node at depth 7 (4 slots) above 1 and 2
	for k := uint64(3); k <= 100; k++ {
		require.NoError(t, w.tree.Insert(ctx, k, k))
	}
	cold := openClient(t, ctx, f, cn, root, nil)
	basetest.Cost(t, cold.m, "cold get", 3, basetest.Verbs{Read: 3}, func() error {
		v, err := cold.tree.Get(ctx, 77)
		require.Equal(t, uint64(77), v)
		return err
	}, nil)
}
