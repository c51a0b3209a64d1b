package race_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/farmem/farmem/ds/race"
	"github.com/farmem/farmem/farmem"
	"github.com/farmem/farmem/farmem/farmemtest"
	"github.com/farmem/farmem/farmem/local"
)

// TestDeleteIf: the conditional removal removes the key's entry when it holds the value
// asked for, and refuses (ErrChanged, ErrNotFound) otherwise, leaving the entry as it was;
// round trips and atomics asserted exactly (uncontended, m.Stats() deltas).
func TestDeleteIf(t *testing.T) {
	const groups = 8
	e := newEnv(t, local.Options{}, race.Params{Groups: groups})
	c := e.open(t, 0, race.Options{})
	ctx := context.Background()
	used := map[string]bool{}
	search := func(k []byte) string {
		t.Helper()
		v, err := c.tab.Search(ctx, k)
		if err != nil {
			require.ErrorIs(t, err, race.ErrNotFound)
			return "<absent>"
		}
		return string(v)
	}
	// Keys found first (see TestRoundTrips: a slow search must not age the allocator's
	// announcement inside a measured operation).
	warm := placed(t, c.tab, 15, 15, 1, used)
	k := placed(t, c.tab, 2, 9, 0x42, used)
	absent := placed(t, c.tab, 4, 11, 0x42, used)
	require.NoError(t, c.tab.Insert(ctx, warm, []byte("warm")))

	require.NoError(t, c.tab.Insert(ctx, k, []byte("one")))
	c.assertCost(t, "another value", race.DeleteIfRoundTrips-1, 0, func() error { return c.tab.DeleteIf(ctx, k, []byte("two")) }, race.ErrChanged)
	require.Equal(t, "one", search(k), "a refused removal leaves the entry")
	c.assertCost(t, "a prefix of the value", race.DeleteIfRoundTrips-1, 0, func() error { return c.tab.DeleteIf(ctx, k, []byte("on")) }, race.ErrChanged)
	c.assertCost(t, "absent", race.DeleteIfAbsentRoundTrips, 0, func() error { return c.tab.DeleteIf(ctx, absent, []byte("one")) }, race.ErrNotFound)
	c.assertCost(t, "matching", race.DeleteIfRoundTrips, 1, func() error { return c.tab.DeleteIf(ctx, k, []byte("one")) }, nil)
	require.Equal(t, "<absent>", search(k))
	c.assertCost(t, "removed already", race.DeleteIfAbsentRoundTrips, 0, func() error { return c.tab.DeleteIf(ctx, k, []byte("one")) }, race.ErrNotFound)

	// The key inserted again with the value it held: a removal conditioned on it takes the
	// new entry (the comparison is on the value), and an empty value compares too.
	require.NoError(t, c.tab.Insert(ctx, k, []byte("one")))
	require.NoError(t, c.tab.DeleteIf(ctx, k, []byte("one")))
	require.NoError(t, c.tab.Insert(ctx, k, nil))
	require.ErrorIs(t, c.tab.DeleteIf(ctx, k, []byte("x")), race.ErrChanged)
	require.NoError(t, c.tab.DeleteIf(ctx, k, nil))
	require.Equal(t, "<absent>", search(k))
	require.Equal(t, "warm", search(warm))
	audit(t, c, true)
}

// TestDeleteIfRace: the slot changes between the removal's read of the key's block and its
// CAS (another client's Update, run from an Interposer right before that CAS). Given
// another value, the CAS fails, the winner's block is read and does not match, and the
// removal refuses with ErrChanged, the other client's value intact; given the same value (a
// new block), the removal retries over it and removes it.
func TestDeleteIfRace(t *testing.T) {
	for _, tc := range []struct {
		name    string
		newVal  string
		wantErr error
		want    string
		// wantRTT: the lookup, the block, the failed CAS, the winner's block (Same), and then
		// either the second CAS or the second lookup (whose block is known: no read).
		wantRTT, wantCAS uint64
	}{
		{"another value", "two", race.ErrChanged, "two", 5, 1},
		{"the same value", "one", nil, "<absent>", 5, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, local.Options{}, race.Params{})
			ctx := context.Background()
			other := e.open(t, 1, race.Options{})
			k := []byte("contended")
			armed, fired := false, false
			c := e.openWith(t, 0, race.Options{}, func(m farmem.Memory) farmem.Memory {
				return &farmemtest.Interposer{Memory: m, Before: func(ctx context.Context, v farmemtest.Verb) {
					if armed && !fired && v.Single && v.Batch.Ops[0].Kind == farmem.OpCAS {
						fired = true
						require.NoError(t, other.tab.Update(ctx, k, []byte(tc.newVal)))
					}
				}}
			})
			require.NoError(t, c.tab.Insert(ctx, k, []byte("one")))
			armed = true
			before := c.m.Stats()
			err := c.tab.DeleteIf(ctx, k, []byte("one"))
			d := c.m.Stats().Sub(before)
			require.True(t, fired, "the other client's update ran before the removal's CAS")
			if tc.wantErr != nil {
				require.ErrorIs(t, err, tc.wantErr)
			} else {
				require.NoError(t, err)
			}
			require.Equal(t, tc.wantRTT, d.RoundTrips, "round trips (%v)", d)
			require.Equal(t, tc.wantCAS, d.VerbsOf(farmem.OpCAS), "CASes (%v)", d)
			v, err := other.tab.Search(ctx, k)
			if tc.want == "<absent>" {
				require.ErrorIs(t, err, race.ErrNotFound)
			} else {
				require.NoError(t, err)
				require.Equal(t, tc.want, string(v))
			}
			audit(t, c, true)
		})
	}
}

// TestDeleteIfNeedsOptimistic: a handle with a lock-based synchronizer refuses the
// conditional removal, which would change a slot under its writers' locks.
func TestDeleteIfNeedsOptimistic(t *testing.T) {
	e := newEnv(t, local.Options{}, race.Params{MetaSize: 16})
	c := e.open(t, 0, race.Options{Sync: &spinSync{t: t}})
	ctx := context.Background()
	require.NoError(t, c.tab.Insert(ctx, []byte("k"), []byte("v")))
	require.ErrorIs(t, c.tab.DeleteIf(ctx, []byte("k"), []byte("v")), farmem.ErrNotSupported)
	v, err := c.tab.Search(ctx, []byte("k"))
	require.NoError(t, err)
	require.Equal(t, "v", string(v))
}
