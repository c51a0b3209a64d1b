package hybrid_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/farmem/farmem/ds/hybrid"
	"github.com/farmem/farmem/farmem"
	"github.com/farmem/farmem/farmem/local"
)

// An SMO executor paused after marking its leaf dead, past its lease: another client takes the
// claim over and publishes the recorded plan, and the leaf that replaced the dead one is then
// split in turn. When the paused executor resumes, its publish finds, on the dead leaf's key
// path, neither the dead leaf nor its plan's leaves: the swap was made already (a dead leaf
// leaves its slot only through its plan's swap, and never comes back), so the publish is done,
// not a corrupt tree. (Before, the executor's Insert failed with ErrCorrupt: "the path to
// leaf ... ends at ...", as an update helping an SMO did in the kvstore matrix under load.)
func TestLateExecutorAfterReplacementSplit(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, local.Options{}, hybrid.Params{LeafSlots: 8})
	const lease = time.Millisecond
	var b *client
	var actErr atomic.Value
	a := e.openWith(t, 0, hybrid.Options{Lease: lease}, func(m farmem.Memory) farmem.Memory {
		tm, _ := atStep(m, stepDead, func() {
			// The executor is paused here, its plan recorded, the leaf dead, nothing published.
			time.Sleep(5 * lease) // past the claim's lease (a lower bound only)
			// b helps (its IDU finds the leaf dead and the claim expired), then fills the
			// replacement leaf until it splits.
			for k := uint64(100); k < 106; k++ {
				if err := b.tree.Insert(ctx, key(k), k); err != nil {
					actErr.Store(err)
					return
				}
			}
		})
		return tm
	})
	b = e.open(t, 1, hybrid.Options{Lease: lease})
	// One leaf for the prefix 0 (keys 1-255): 8 keys, 4 deleted, so the next insert compacts it.
	for k := uint64(1); k <= 8; k++ {
		require.NoError(t, a.tree.Insert(ctx, key(k), k))
	}
	for k := uint64(1); k <= 4; k++ {
		require.NoError(t, a.tree.Delete(ctx, key(k)))
	}
	before := b.tree.Stats()
	require.NoError(t, a.tree.Insert(ctx, key(9), 9), "the late executor's insert")
	if err, _ := actErr.Load().(error); err != nil {
		require.NoError(t, err, "the helper's inserts")
	}
	after := b.tree.Stats()
	require.Equal(t, uint64(1), after.Helps-before.Helps, "the helper finished the paused SMO")
	require.Equal(t, uint64(1), after.Splits-before.Splits, "the replacement leaf was split")
	census := audit(t, b)
	want := []uint64{5, 6, 7, 8, 9, 100, 101, 102, 103, 104, 105}
	var got []uint64
	for _, l := range census.Leaves {
		got = append(got, l.Keys...)
	}
	require.ElementsMatch(t, want, got)
	for _, k := range want {
		v, err := b.tree.Get(ctx, key(k))
		require.NoError(t, err)
		require.Equal(t, k, v)
	}
}
