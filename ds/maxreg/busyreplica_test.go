package maxreg_test

import (
	"context"
	"encoding/binary"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/farmem/farmem/ds/maxreg"
	"github.com/farmem/farmem/farmem"
	"github.com/farmem/farmem/farmem/farmemtest"
	"github.com/farmem/farmem/internal/dstest"
	"github.com/farmem/farmem/sim"
)

// busyParams: per-node lanes for two compute nodes sharing one metadata word, two slots.
var busyParams = maxreg.Params{Words: 1, Slots: 2, ValueSize: 16, Writers: 2, PerNode: true,
	Lease: 100 * time.Microsecond, Skew: 10 * time.Microsecond}

// TestPerNodeBusyReplicaPausedPeer: a write of a node whose lane's record writes into its
// buffer are still in flight on one live replica (C: a node-mate's earlier writes, which C
// has not answered yet), whose first round installs on A but loses its CAS on B (a writer of
// the other compute node, sharing the word, moved it there), and whose node B then pauses
// (SIGSTOP) just before the second round. That round skips C (busy) and asks B alone; B never
// answers. A and C, a majority, are reachable once C's earlier writes end: the write must ask
// C then and complete, not fail when B's down timeout ends ("a quorum of 1 of 1 nodes cannot
// form", as it did), and complete before that timeout. B crashed instead (refusing at once)
// must not make the write ask it again and again while C is busy: it ran out of rounds so.
func TestPerNodeBusyReplicaPausedPeer(t *testing.T) {
	for _, crash := range []bool{false, true} {
		name := "paused"
		if crash {
			name = "crashed"
		}
		t.Run(name, func(t *testing.T) { busyReplicaFaultyPeer(t, crash) })
	}
}

func busyReplicaFaultyPeer(t *testing.T, crash bool) {
	const down = time.Millisecond
	s := dstest.Sim(t, 1, func(m *sim.Model) {
		m.MemoryNodes, m.ComputeNodes, m.MemorySize = 3, 2, 1<<20
		m.Jitter = 300 * time.Nanosecond
		m.DownTimeout = down
	})
	s.Run(func() {
		ctx := context.Background()
		rt := s.Runtime()
		addrs := createRep(t, s, busyParams)
		na, nb, nc := addrs[0].Node(), addrs[1].Node(), addrs[2].Node()
		lanes := maxreg.NewLanes()
		opts := maxreg.ReplicatedOptions{Lanes: lanes, EarlyReuse: true}
		// Clients 0 (x) and 2 (w) on the first compute node share its lane; the hook sees w's
		// batches.
		var hook func(v farmemtest.Verb)
		_, xm := dstest.OpenClient(t, s, 0, nil)
		_, wm := dstest.OpenClient(t, s, 2, func(m farmem.Memory) farmem.Memory {
			return &farmemtest.Interposer{Memory: m, Before: func(_ context.Context, v farmemtest.Verb) {
				if hook != nil {
					hook(v)
				}
			}}
		})
		x, err := maxreg.OpenReplicated(ctx, xm, addrs, opts)
		require.NoError(t, err)
		defer x.Close()
		w, err := maxreg.OpenReplicated(ctx, wm, addrs, opts)
		require.NoError(t, err)
		defer w.Close()
		require.Equal(t, x.Writer(), w.Writer(), "one lane for the node")

		// x, cut off from C, writes into both buffers of the lane: each write returns with A
		// and B, its record writes to C stay in flight until the down timeout.
		require.NoError(t, s.Partition(xm.Info().ID, nc))
		for _, v := range []string{"x1", "x2"} {
			_, err := x.Write(ctx, []byte(v))
			require.NoError(t, err)
		}
		started := rt.Now()

		// y, on the other compute node, shares the word: its write moves it on B only.
		ym, _ := dstest.OpenClient(t, s, 1, nil)
		y, err := maxreg.OpenReplicated(ctx, ym, addrs, maxreg.ReplicatedOptions{Lanes: maxreg.NewLanes()})
		require.NoError(t, err)
		defer y.Close()
		yid := ym.Info().ID
		require.NoError(t, s.Partition(yid, na))
		require.NoError(t, s.Partition(yid, nc))
		g := s.NewGroup()
		var yerr error
		g.Go(func() { _, yerr = y.Write(ctx, []byte("y")) })
		word := func(i int) maxreg.Tag {
			buf := make([]byte, 8)
			require.NoError(t, xm.Read(ctx, addrs[i]+128, buf))
			return maxreg.Tag(binary.LittleEndian.Uint64(buf))
		}
		for word(1).Client() != y.Writer() {
			require.NoError(t, rt.Sleep(ctx, 5*time.Microsecond))
		}
		// Well inside x's in-flight writes to C, so that a poll of C has room before B's
		// timeout.
		require.NoError(t, rt.Sleep(ctx, 300*time.Microsecond))

		// w writes: round 0 asks A and B (C busy), installs on A, loses its CAS on B. B pauses
		// before round 1.
		rounds := 0
		var paused farmem.Time
		hook = func(v farmemtest.Verb) {
			if !v.Posted || !hasKind(v, farmem.OpWrite) || !hasKind(v, farmem.OpMaskedCAS) {
				return
			}
			rounds++
			if rounds == 2 {
				require.Equal(t, []farmem.NodeID{nb}, nodesOf(v), "the second round asks B alone")
				if crash {
					require.NoError(t, s.Crash(nb))
				} else {
					require.NoError(t, s.Hang(nb))
				}
				paused = rt.Now()
			}
		}
		before := w.Stats()
		tag, err := w.Write(ctx, []byte("w"))
		hook = nil
		require.NoError(t, err, "A and C, a majority, were reachable")
		require.NotZero(t, paused, "B paused before the second round")
		if !crash {
			require.Less(t, rt.Now().Sub(paused), down, "the write waited out B's down timeout")
		}
		require.Less(t, rt.Now().Sub(started), 2*down)
		st := w.Stats()
		require.Equal(t, uint64(3), st.Rounds-before.Rounds, "rounds: A and B; B; then A and C once C is free")

		require.NoError(t, g.Wait())
		require.ErrorIs(t, yerr, maxreg.ErrNoQuorum)
		require.NoError(t, s.Heal(xm.Info().ID, nc))
		got, val, err := x.Read(ctx) // A and C answer
		require.NoError(t, err)
		require.Equal(t, tag, got)
		require.Equal(t, "w", string(val))
		if !crash {
			require.NoError(t, s.Resume(nb))
		}
	})
}

// hasKind reports whether v's batch holds an op of kind k.
func hasKind(v farmemtest.Verb, k farmem.OpKind) bool {
	for _, op := range v.Batch.Ops {
		if op.Kind == k {
			return true
		}
	}
	return false
}

// nodesOf returns the nodes v's batch addresses, in order of first appearance.
func nodesOf(v farmemtest.Verb) []farmem.NodeID {
	var ns []farmem.NodeID
	for _, op := range v.Batch.Ops {
		n := op.Addr.Node()
		if len(ns) == 0 || ns[len(ns)-1] != n {
			ns = append(ns, n)
		}
	}
	return ns
}
