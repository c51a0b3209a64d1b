package replcheck_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/farmem/farmem/alloc"
	"github.com/farmem/farmem/ds/race"
	"github.com/farmem/farmem/farmem"
	"github.com/farmem/farmem/farmem/local"
	"github.com/farmem/farmem/internal/dstest"
)

// opCost is one operation's counted cost.
type opCost struct {
	name  string
	stats farmem.Stats
}

// measureOps runs, uncontended on a fresh table, an insert, a search, an absent search, an
// update and a delete of a key (whose fingerprint matches no other slot of its buckets in
// these tables: the hash is deterministic), asserting each one's round trips against want (by
// name), and returns their costs.
func measureOps(t *testing.T, c *client, want map[string]uint64) []opCost {
	t.Helper()
	ctx := context.Background()
	warm, k1, other := []byte("round-trips/warm"), []byte("round-trips/key"), []byte("round-trips/absent")
	require.NoError(t, c.tab.Insert(ctx, warm, []byte("warm")))
	// One update and delete first, so the allocator's size classes are warm.
	require.NoError(t, c.tab.Update(ctx, warm, []byte("warm2")))
	var out []opCost
	cost := func(name string, f func() error, wantErr error) {
		t.Helper()
		d := dstest.Cost(t, c.m, name, f, wantErr)
		require.Equal(t, want[name], d.RoundTrips, "%s: round trips (%v)", name, d)
		out = append(out, opCost{name, d})
	}
	cost("insert", func() error { return c.tab.Insert(ctx, k1, []byte("value-1")) }, nil)
	cost("search", func() error {
		v, err := c.tab.Search(ctx, k1)
		if err == nil && string(v) != "value-1" {
			return fmt.Errorf("search found %q", v)
		}
		return err
	}, nil)
	cost("search absent", func() error { _, err := c.tab.Search(ctx, other); return err }, race.ErrNotFound)
	cost("update", func() error { return c.tab.Update(ctx, k1, []byte("value-2")) }, nil)
	cost("delete", func() error { return c.tab.Delete(ctx, k1) }, nil)
	return out
}

// TestReplicatedRoundTrips asserts the round trips of each operation of an unreplicated table
// and of one replicated on three nodes, measured in the same run, and prints their costs side
// by side: round trips, verbs and bytes per operation.
func TestReplicatedRoundTrips(t *testing.T) {
	t.Parallel() // counts round trips, which other tests do not change
	const groups = 4
	plain := plainEnv(t, race.Params{Groups: groups})
	c1 := plain.open(t, 0, race.Options{})
	r1 := measureOps(t, c1, map[string]uint64{
		"insert": race.InsertRoundTrips, "search": race.SearchRoundTrips, "search absent": race.SearchAbsentRoundTrips,
		"update": race.UpdateRoundTrips, "delete": race.DeleteRoundTrips,
	})
	repl := replEnv(t, 4, 3, race.Params{Groups: groups})
	c3 := repl.open(t, 0, race.Options{})
	r3 := measureOps(t, c3, map[string]uint64{
		"insert": race.ReplicatedInsertRoundTrips, "search": race.ReplicatedSearchRoundTrips,
		"search absent": race.ReplicatedSearchAbsentRoundTrips,
		"update":        race.ReplicatedUpdateRoundTrips, "delete": race.ReplicatedDeleteRoundTrips,
	})
	var b strings.Builder
	fmt.Fprintf(&b, "\n%-14s %11s %11s %11s %15s %15s\n", "op", "RTT r=1/r=3", "verbs", "CAS", "bytes out", "bytes in")
	for i := range r1 {
		x, y := r1[i].stats, r3[i].stats
		cas := func(s farmem.Stats) uint64 { return s.VerbsOf(farmem.OpCAS) + s.VerbsOf(farmem.OpMaskedCAS) }
		fmt.Fprintf(&b, "%-14s %5d/%-5d %5d/%-5d %5d/%-5d %7d/%-7d %7d/%-7d\n", r1[i].name,
			x.RoundTrips, y.RoundTrips, x.TotalVerbs(), y.TotalVerbs(), cas(x), cas(y), x.BytesOut, y.BytesOut, x.BytesIn, y.BytesIn)
	}
	t.Log(b.String())
}

// plainEnv is a local fabric of four memory nodes with strict mode on and an unreplicated
// table.
func plainEnv(t testing.TB, p race.Params) *env {
	t.Helper()
	f, root := dstest.Local(t, local.Options{Shape: local.Shape{MemoryNodes: 4, ComputeNodes: 1}}, func(ctx context.Context, m farmem.Memory, a *alloc.Allocator) (farmem.Addr, error) {
		return race.Create(ctx, m, a, p)
	})
	return &env{f: f, root: root, comp: f.Topology().ComputeNodes()}
}
