package sherman_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/farmem/farmem/bench/baseline/sherman"
	"github.com/farmem/farmem/farmem"
	"github.com/farmem/farmem/farmem/local"
)

// TestParentCacheHoldsLeafParentsOnly checks NewShermanParentCache against Sherman's rule: it
// files level-1 pages only; a Get whose leaf's parent it holds reads the leaf alone, and one
// whose parent it does not hold walks from the kept root, reading every level (no read of the
// root pointer); a root grown by another compute node is found again.
func TestParentCacheHoldsLeafParentsOnly(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, local.Options{}, sherman.Params{NodeSize: 256, EntryVersions: true})
	loader := e.open(t, 0, sherman.NewShermanCache(1<<20))
	const n = 3000
	for i := range uint64(n) {
		require.NoError(t, loader.tree.Insert(ctx, k8(i+1), i))
	}
	sh, err := loader.tree.Shape(ctx)
	require.NoError(t, err)
	height := len(sh)
	require.Greater(t, height, 3, "%+v", sh)
	parents := sh[height-2]
	require.Equal(t, 1, parents.Level)

	reads := func(c *client, k uint64) uint64 {
		t.Helper()
		before := c.m.Stats()
		v, err := c.tree.Get(ctx, k8(k+1))
		require.NoError(t, err)
		require.Equal(t, k, v)
		d := c.m.Stats().Sub(before)
		require.Equal(t, d.VerbsOf(farmem.OpRead), d.RoundTrips, "Gets only read: %v", d)
		return d.VerbsOf(farmem.OpRead)
	}

	// A budget for every parent: after one pass each Get reads its leaf only.
	full := sherman.NewShermanParentCache(1 << 20)
	c := e.open(t, 1, full)
	require.Equal(t, uint64(height+1), reads(c, 0), "cold: the root pointer, then every level")
	for k := uint64(0); k < n; k += 7 {
		reads(c, k)
	}
	st := full.Stats()
	require.Equal(t, parents.Nodes, st.Entries, "level-1 pages only: %+v", st)
	for k := uint64(3); k < n; k += 101 {
		require.Equal(t, uint64(1), reads(c, k))
	}

	// A budget of one page: most Gets miss their parent and read every level from the kept
	// root, never the root pointer again.
	one := sherman.NewShermanParentCache(int64(sherman.CacheEntryOverhead + 256))
	c1 := e.open(t, 2, one)
	reads(c1, 0)
	walks := 0
	for k := uint64(5); k < n; k += 97 {
		switch r := reads(c1, k); r {
		case 1:
		case uint64(height):
			walks++
		default:
			t.Fatalf("Get %d: %d reads, want 1 or %d", k, r, height)
		}
	}
	require.Greater(t, walks, 20)
	require.LessOrEqual(t, one.Stats().Entries, 1)

	// Another compute node grows the root: the kept address names a node with a high fence
	// now, and the next walk reads the root pointer again and goes on from the new root.
	for i := uint64(n); i < 6*n; i++ {
		require.NoError(t, loader.tree.Insert(ctx, k8(i+1), i))
	}
	sh2, err := loader.tree.Shape(ctx)
	require.NoError(t, err)
	require.Greater(t, len(sh2), height, "the tree grew: %+v", sh2)
	for k := uint64(11); k < 6*n; k += 509 {
		r := reads(c1, k)
		require.LessOrEqual(t, r, uint64(len(sh2)+3), "Get %d", k)
	}
	require.LessOrEqual(t, reads(c, 5*n), uint64(len(sh2)+3), "the full cache's kept root is stale too")
	require.Equal(t, uint64(1), reads(c, 5*n), "its parent was just filed")
}
