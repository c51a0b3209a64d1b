package sherman_test

import (
	"context"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/farmem/farmem/bench/baseline/sherman"
	"github.com/farmem/farmem/farmem/local"
)

// TestShape checks the level walk: the leaves hold every key, each level's children are the
// nodes of the level below, and splits at the half leave an ascending load's leaves about
// half full where a random load's fill more.
func TestShape(t *testing.T) {
	ctx := context.Background()
	const n = 3000
	fill := map[string]float64{}
	for _, order := range []string{"ascending", "random"} {
		e := newEnv(t, local.Options{}, sherman.Params{NodeSize: 256, EntryVersions: true})
		c := e.open(t, 0, sherman.NewShermanCache(1<<20))
		keys := make([]int, n)
		for i := range keys {
			keys[i] = i
		}
		if order == "random" {
			rand.New(rand.NewPCG(3, 4)).Shuffle(n, func(i, j int) { keys[i], keys[j] = keys[j], keys[i] })
		}
		for _, k := range keys {
			require.NoError(t, c.tree.Insert(ctx, k8(uint64(k)+1), uint64(k)))
		}
		sh, err := c.tree.Shape(ctx)
		require.NoError(t, err)
		require.Greater(t, len(sh), 2, "%s: %+v", order, sh)
		leaves := sh[len(sh)-1]
		require.Equal(t, 0, leaves.Level)
		require.Equal(t, n, leaves.Entries)
		require.Equal(t, (256-48)/18, leaves.Capacity, "18-byte entries with Sherman's versions")
		for i := 1; i < len(sh); i++ {
			require.Equal(t, sh[i-1].Entries, sh[i].Nodes, "%s: level %d's children are level %d's nodes", order, sh[i-1].Level, sh[i].Level)
		}
		require.Equal(t, 1, sh[0].Nodes, "one root")
		fill[order] = leaves.Fill()
		t.Logf("%s: %+v", order, sh)
	}
	require.InDelta(t, 0.5, fill["ascending"], 0.05)
	require.Greater(t, fill["random"], 0.6)
}

// TestSplitAtCapacity checks Sherman's split rule: a node splits when an insert brings it to
// its capacity (kLeafCardinality entries, kInternalCardinality separators in Sherman's
// code), so a leaf holds at most its capacity less one, and an internal node one separator
// less than it has room for.
func TestSplitAtCapacity(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, local.Options{}, sherman.Params{NodeSize: 256, EntryVersions: true})
	c := e.open(t, 0, sherman.NewShermanCache(1<<20))
	leafCap := c.tree.LeafCapacity()
	for k := range leafCap - 1 {
		require.NoError(t, c.tree.Insert(ctx, k8(uint64(k)+1), 1))
	}
	require.Zero(t, c.tree.Stats().Splits, "%d entries fit", leafCap-1)
	require.NoError(t, c.tree.Insert(ctx, k8(uint64(leafCap)), 1))
	require.Equal(t, uint64(1), c.tree.Stats().Splits, "the insert reaching %d entries splits", leafCap)

	// Ascending keys: each full leaf splits at its middle and the root collects a separator
	// per split. The root has room for innerSlots-1 separators (innerSlots children); the
	// split that posts its (innerSlots-1)th splits it, growing the tree a level above
	// innerSlots leaves.
	sh, err := c.tree.Shape(ctx)
	require.NoError(t, err)
	require.Len(t, sh, 2)
	innerSlots := sh[0].Capacity // children: separators + 1
	for k := leafCap + 1; ; k++ {
		require.NoError(t, c.tree.Insert(ctx, k8(uint64(k)), 1))
		if sh, err = c.tree.Shape(ctx); err != nil || len(sh) > 2 {
			break
		}
		require.LessOrEqual(t, sh[0].Entries, innerSlots-1, "the root never holds %d separators: %+v", innerSlots-1, sh)
	}
	require.NoError(t, err)
	require.Len(t, sh, 3, "%+v", sh)
	require.Equal(t, innerSlots, sh[2].Nodes, "the root split when it reached %d separators", innerSlots-1)
}
