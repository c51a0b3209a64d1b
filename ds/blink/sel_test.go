package blink_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/farmem/farmem/ds/blink"
	"github.com/farmem/farmem/ds/selcc"
	"github.com/farmem/farmem/farmem/local"
)

// The SEL baseline (SELCC §7.2's "B-tree over SEL") is the same tree over a cluster opened in
// selcc.SEL mode: no cache, every node access takes the global latch with the line's READ in one
// round trip and releases it (writing the changed range back) in another.

// TestSELRoundTrips asserts SEL's cost on a tree of h levels, with a warm client and a single
// compute node (so no latch conflicts): every operation that reaches a leaf costs 2h round
// trips (two per node on its path), whether it reads or writes, and however often it ran
// before (nothing is cached). A scan that stays in one leaf costs the same.
func TestSELRoundTrips(t *testing.T) {
	r := localRig(t, local.Options{Shape: local.Shape{MemoryNodes: 2, ComputeNodes: 1}},
		selcc.Options{Mode: selcc.SEL, LineSize: 256})
	c := r.client(t, 0)
	ctx := context.Background()
	for i := range uint64(400) {
		require.NoError(t, c.t.Insert(ctx, ycsbKey(i), []byte("value")))
	}
	h, err := blink.FarHeight(ctx, c.m, r.root, 256)
	require.NoError(t, err)
	require.GreaterOrEqual(t, h, 3, "400 keys on 256-byte lines make a tree of three levels or more")
	for i := range uint64(400) { // a cache would be warm now
		_, err := c.t.Get(ctx, ycsbKey(i))
		require.NoError(t, err)
	}
	want := uint64(2 * h)
	cost := func(name string, op func() error) {
		before := c.m.Stats()
		require.NoError(t, op())
		d := c.m.Stats().Sub(before)
		require.Equal(t, want, d.RoundTrips, "%s on %d levels (%v)", name, h, d)
	}
	k := ycsbKey(77)
	for range 3 {
		cost("get", func() error { _, err := c.t.Get(ctx, k); return err })
	}
	cost("scan within a leaf", func() error { _, err := c.t.Scan(ctx, k, nil, 1); return err })
	cost("update", func() error { return c.t.Update(ctx, k, []byte("other")) })
	cost("delete", func() error { return c.t.Delete(ctx, k) })
	cost("insert", func() error { return c.t.Insert(ctx, k, []byte("again")) })
	cost("get missing", func() error {
		if _, err := c.t.Get(ctx, []byte("user-absent")); err == nil {
			return fmt.Errorf("found an absent key")
		}
		return nil
	})
	got, err := c.t.Get(ctx, k)
	require.NoError(t, err)
	require.Equal(t, []byte("again"), got)
	// Nothing stayed cached: far memory holds every write, with no Close.
	far, err := blink.FarPairs(ctx, c.m, r.root, 256)
	require.NoError(t, err)
	require.Len(t, far, 400)
	require.Equal(t, "again", far[string(k)])
}

// TestSELLinearizable runs the linearizability workload (splits, readers moving right, scans)
// over SEL: 6 clients on 2 compute nodes on local with tearing, jitter and strict mode, and
// 3 x 2 clients on sim.
func TestSELLinearizable(t *testing.T) {
	t.Run("local", func(t *testing.T) {
		r := localRig(t, local.Options{Shape: local.Shape{MemoryNodes: 2, ComputeNodes: 2}, Tearing: true, Jitter: 5 * time.Microsecond},
			selcc.Options{Mode: selcc.SEL, LineSize: 256})
		lincheckRun(t, r, 6, splitLoad)
	})
	t.Run("sim", func(t *testing.T) {
		r := simRig(t, 3, 2, 1, selcc.Options{Mode: selcc.SEL, LineSize: 256})
		lincheckRun(t, r, 6, splitLoad)
	})
}
