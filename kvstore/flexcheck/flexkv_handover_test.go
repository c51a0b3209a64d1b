package flexcheck_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/farmem/farmem/farmem"
	"github.com/farmem/farmem/kvstore"
	"github.com/farmem/farmem/sim"
)

// TestFlexKVHandOverFaultsSim injects a fault at each step of a hand-over of a partition from
// the memory nodes to a proxy (coordinator c1, target c2, third node c3) on the simulator:
//
//   - pause: c3 cannot be reached, so it cannot be paused: the hand-over rolls back (every
//     node resumed with the old route) and returns ErrHandOver;
//   - load: the target cannot reach the memory nodes: rolled back the same way;
//   - target dies loading: the target crashes as it loads (its answer lost): rolled back;
//   - resume: c3 is cut off once the target has loaded: the hand-over completes, c3 stays
//     paused until, the link healed, its next operation asks the coordinator for the route
//     (within two down timeouts);
//   - target dies: the target crashes once the route is decided (the coordinator resumed
//     itself): the hand-over completes with a dead owner, and the next operations find it
//     down and have the partition recovered.
//
// After each, every node reads every key's last value, writes go on, and a later hand-over
// succeeds.
func TestFlexKVHandOverFaultsSim(t *testing.T) {
	t.Parallel()
	for _, step := range []string{"pause", "load", "target-dies-loading", "resume", "target-dies"} {
		t.Run(step, func(t *testing.T) { handOverFault(t, step) })
	}
}

func handOverFault(t *testing.T, step string) {
	model := sim.ConnectX6()
	model.MemoryNodes, model.ComputeNodes, model.MemorySize = 2, 3, 64<<20
	sm := startSim(t, model, 11)
	sm.Run(func() {
		ctx := context.Background()
		rt := sm.Runtime()
		nodes := sm.Topology().ComputeNodes()
		c1, c2, c3 := nodes[0], nodes[1], nodes[2]
		down := sm.Topology().DownTimeout
		k := &kvstore.FlexKV{ProxyLease: 2 * time.Millisecond}
		s, err := kvstore.Open(ctx, sm, kvstore.Options{Index: k, Alloc: shortLeases, Nodes: []farmem.NodeID{c1}})
		require.NoError(t, err)
		sess := map[farmem.NodeID]kv{}
		var closers []func()
		for _, n := range nodes {
			m, err := sm.Open(ctx, n)
			require.NoError(t, err)
			ss, err := s.SessionOn(ctx, m)
			require.NoError(t, err)
			sess[n] = ss
			closers = append(closers, func() { _ = ss.Close(); _ = m.Close() })
		}
		const p = 1
		ks := keysIn(k, p, 8, 0)
		want := map[uint64]uint64{}
		for i, x := range ks {
			require.NoError(t, s.Insert(ctx, key(x), val(uint64(i), 32)))
			want[x] = uint64(i)
		}
		check := func(stage string, from ...farmem.NodeID) {
			t.Helper()
			for _, n := range from {
				for _, x := range ks {
					got, err := sess[n].Get(ctx, key(x))
					require.NoError(t, err, "%s: key %d from %v", stage, x, n)
					v, err := unval(got)
					require.NoError(t, err)
					require.Equal(t, want[x], v, "%s: key %d from %v", stage, x, n)
				}
			}
		}
		write := func(stage string, n farmem.NodeID, round uint64) {
			t.Helper()
			for _, x := range ks {
				v := round<<16 | x
				require.NoError(t, sess[n].Update(ctx, key(x), val(v, 32)), "%s: update of %d from %v", stage, x, n)
				want[x] = v
			}
		}
		check("before", nodes...)
		st0, _ := k.Stats(c1)
		switch step {
		case "pause":
			require.NoError(t, sm.CutLink(c1, c3))
			err := s.HandOver(ctx, p, c2)
			require.ErrorIs(t, err, kvstore.ErrHandOver)
			for _, n := range []farmem.NodeID{c1, c2} {
				require.False(t, k.Paused(n, p), "%v resumed", n)
				require.Equal(t, farmem.NodeID(0), k.Owner(n, p), "%v keeps the old route", n)
			}
			check("rolled back", c1, c2)
			write("rolled back", c2, 1)
			require.NoError(t, sm.HealLink(c1, c3))
			check("healed", nodes...)
		case "load":
			for _, mn := range sm.Topology().MemoryNodes() {
				require.NoError(t, sm.CutLink(c2, mn))
			}
			err := s.HandOver(ctx, p, c2)
			require.ErrorIs(t, err, kvstore.ErrHandOver)
			for _, n := range nodes {
				require.False(t, k.Paused(n, p), "%v resumed", n)
				require.Equal(t, farmem.NodeID(0), k.Owner(n, p), "%v keeps the old route", n)
			}
			check("rolled back", c1, c3)
			write("rolled back", c3, 1)
			for _, mn := range sm.Topology().MemoryNodes() {
				require.NoError(t, sm.HealLink(c2, mn))
			}
			check("healed", nodes...)
		case "target-dies-loading":
			loads0, _ := k.Stats(c2)
			g := sm.NewGroup()
			g.Go(func() {
				for {
					if st, _ := k.Stats(c2); st.Loads > loads0.Loads {
						break
					}
					require.NoError(t, rt.Sleep(ctx, 100*time.Nanosecond))
				}
				require.NoError(t, sm.Crash(c2))
			})
			require.ErrorIs(t, s.HandOver(ctx, p, c2), kvstore.ErrHandOver)
			require.NoError(t, g.Wait())
			for _, n := range []farmem.NodeID{c1, c3} {
				require.False(t, k.Paused(n, p), "%v resumed", n)
				require.Equal(t, farmem.NodeID(0), k.Owner(n, p), "%v keeps the old route", n)
			}
			check("rolled back", c1, c3)
			write("rolled back", c3, 1)
			check("rolled back", c1, c3)
		case "resume", "target-dies":
			// Inject the fault once the target has loaded the partition (resume: the resumes
			// come after the load's reply) or once the coordinator has resumed itself
			// (target dies: the route is decided).
			loads0, _ := k.Stats(c2)
			g := sm.NewGroup()
			g.Go(func() {
				for {
					if st, _ := k.Stats(c2); step == "resume" && st.Loads > loads0.Loads || step == "target-dies" && k.Owner(c1, p) == c2 {
						break
					}
					require.NoError(t, rt.Sleep(ctx, 100*time.Nanosecond))
				}
				if step == "resume" {
					require.NoError(t, sm.CutLink(c1, c3))
				} else {
					require.NoError(t, sm.Crash(c2))
				}
			})
			require.NoError(t, s.HandOver(ctx, p, c2), "the hand-over completes")
			require.NoError(t, g.Wait())
			require.Equal(t, c2, k.Owner(c1, p))
			if step == "resume" {
				require.True(t, k.Paused(c3, p), "c3 missed its resume")
				require.NoError(t, sm.HealLink(c1, c3))
				start := rt.Now()
				check("c3 asks for the route", c3)
				took := rt.Now().Sub(start)
				t.Logf("c3 resumed %v after the link healed", took)
				require.LessOrEqual(t, took, 2*down+time.Millisecond)
				require.Equal(t, c2, k.Owner(c3, p), "c3 learnt the new route")
				check("proxied", nodes...)
				write("proxied", c3, 1)
				check("proxied", nodes...)
			} else {
				start := rt.Now()
				check("the dead target's partition recovered", c1)
				took := rt.Now().Sub(start)
				t.Logf("partition recovered %v after the hand-over", took)
				require.LessOrEqual(t, took, k.ProxyLease+3*time.Millisecond+2*down+2*time.Millisecond)
				require.Equal(t, farmem.NodeID(0), k.Owner(c1, p))
				require.Equal(t, farmem.NodeID(0), k.Owner(c3, p))
				write("recovered", c3, 1)
				check("recovered", c1, c3)
				st, _ := k.Stats(c1)
				require.Equal(t, st0.Recoveries+1, st.Recoveries)
			}
		}
		st, _ := k.Stats(c1)
		switch step {
		case "pause", "load", "target-dies-loading":
			require.Equal(t, st0.RolledBack+1, st.RolledBack)
		case "resume":
			require.Equal(t, st0.RolledBack, st.RolledBack)
			require.Equal(t, st0.ResumesFailed+1, st.ResumesFailed)
		}
		if step == "target-dies" || step == "target-dies-loading" {
			// c2 is dead and proxies nothing: a hand-over to c3 cannot pause it and rolls back
			// (a stated limit); the partition stays on the memory nodes.
			require.ErrorIs(t, s.HandOver(ctx, p, c3), kvstore.ErrHandOver)
			check("after", c1, c3)
		} else {
			// A later hand-over succeeds, and back.
			require.NoError(t, s.HandOver(ctx, p, c2))
			check("re-proxied", nodes...)
			write("re-proxied", c1, 2)
			require.NoError(t, s.HandOver(ctx, p, 0))
			check("back", nodes...)
		}
		for _, c := range closers {
			c()
		}
		if err := s.Close(); err != nil && step != "pause" && step != "load" && step != "resume" {
			require.ErrorIs(t, err, farmem.ErrNodeDown)
		} else {
			require.NoError(t, err)
		}
	})
}
