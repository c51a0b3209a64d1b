package flexcheck_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/farmem/farmem/farmem"
	"github.com/farmem/farmem/farmem/farmemtest"
	"github.com/farmem/farmem/kvstore"
)

// managerKind is flexKind with 8 partitions, so that every compute node's hot-to-cold list
// holds several and the knob's ratios move some.
func managerKind() *kvstore.FlexKV {
	k := flexKind()
	k.Params.InitialDepth = 3
	k.ProxyLease = 2 * time.Millisecond
	return k
}

// TestFlexKVManagerSim: the manager (Algorithm 1 reassigning partitions by hotness, the knob
// moving the offload ratio, the split resizing caches) drives every hand-over while a
// lincheck workload runs on three compute nodes; mid-run the compute node of a proxy the
// manager chose crashes (its clients with it). The history, ended by a survivor's read of
// every key, linearizes; the manager saw the node dead and its partitions went back to the
// memory nodes; the manager moved partitions before the crash and after it.
func TestFlexKVManagerSim(t *testing.T) {
	t.Parallel()
	for seed := range uint64(stressScale()) {
		managerSim(t, seed+1)
	}
}

func managerSim(t *testing.T, seed uint64) {
	sm := crashSim(t, seed)
	sm.Run(func() {
		ctx := context.Background()
		rt := sm.Runtime()
		nodes := sm.Topology().ComputeNodes()
		coord, live, doomed := nodes[0], nodes[1], nodes[2]
		k := managerKind()
		s, err := kvstore.Open(ctx, sm, kvstore.Options{Index: k, Alloc: shortLeases, Nodes: []farmem.NodeID{coord, live}})
		require.NoError(t, err)
		h := kvModel.NewHistory(rt)
		const workers = 9
		w := flexMix
		w.Ops = 500
		var left atomic.Int32
		left.Store(workers)
		var mu sync.Mutex
		var trace []kvstore.ManagerPeriod
		var crashAt farmem.Time
		mctx, stopManager := sm.WithCancel(ctx)
		err = farmemtest.Parallel(rt, workers+2, func(g int) error {
			switch g {
			case workers + 1:
				return s.RunManager(mctx, kvstore.ManagerOptions{Period: 300 * time.Microsecond, Ratio: 0.5, NodeMemory: 4 << 10, EntryBytes: 128,
					Trace: func(p kvstore.ManagerPeriod) {
						mu.Lock()
						trace = append(trace, p)
						mu.Unlock()
					}})
			case workers:
				// Crash the doomed node once the manager has given it a partition.
				if err := rt.Sleep(ctx, time.Millisecond); err != nil {
					return err
				}
				for range 200 {
					for p := range k.Partitions() {
						if k.Owner(coord, p) == doomed && !k.Paused(coord, p) {
							crashAt = rt.Now()
							return sm.Crash(doomed)
						}
					}
					if err := rt.Sleep(ctx, 50*time.Microsecond); err != nil {
						return err
					}
				}
				return errors.New("the manager never gave the doomed node a partition")
			}
			defer func() {
				if left.Add(-1) == 0 {
					stopManager()
				}
			}()
			node := nodes[g%len(nodes)]
			ss, end, err := openSession(ctx, sm, s, node)
			if err != nil {
				return err
			}
			defer end()
			ww := w
			ww.Unknown = 50
			if node == doomed {
				ww.Unknown = 1 // its ops fail from the crash on
			}
			return ww.Run(ctx, ss, g, rt.NewRand(), h)
		})
		stopManager()
		require.NoError(t, err)
		sum := endWithReads(t, ctx, s, h, workers, seed)
		require.NotZero(t, crashAt)
		var before, after, reassigned int
		sawDead := false
		for _, p := range trace {
			if p.At < crashAt {
				before += p.Moved
			} else {
				after += p.Moved + p.Recovered
			}
			if p.Reassigned {
				reassigned++
			}
			for _, d := range p.Dead {
				sawDead = sawDead || d == doomed
			}
		}
		for p := range k.Partitions() {
			require.NotEqual(t, doomed, k.Owner(coord, p), "partition %d left with the dead node", p)
		}
		st, _ := k.Stats(coord)
		t.Logf("seed %d: %v; %d periods, %d reassignments, %d hand-overs before the crash, %d after (recoveries %d), last ratio %.1f",
			seed, sum, len(trace), reassigned, before, after, st.Recoveries, trace[len(trace)-1].Next)
		require.Positive(t, before, "the manager moved partitions before the crash")
		require.True(t, sawDead, "the manager saw the crashed node dead")
		if err := s.Close(); err != nil {
			require.ErrorIs(t, err, farmem.ErrNodeDown, "only the dead node's state cannot be released")
		}
	})
}
