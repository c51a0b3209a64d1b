package replcheck_test

import (
	"context"
	"encoding/binary"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/farmem/farmem/alloc"
	"github.com/farmem/farmem/farmem"
	"github.com/farmem/farmem/farmem/farmemtest"
	"github.com/farmem/farmem/farmem/local"
	"github.com/farmem/farmem/kvstore"
	"github.com/farmem/farmem/kvstore/kvstoretest"
)

// Replicated store metadata, tested with an unreplicated RACE index kept off the metadata
// nodes (Alloc.Nodes names the last memory node only): what these tests crash and restart is
// metadata alone, so every operation must succeed. A crashed node that also holds index slots
// or values needs a replicated index (a Repopulator).

// metaOptions are store options with r metadata replicas over the first r of r+1 memory nodes,
// the index (unreplicated: Race.Replicas 1) and the values on the last one.
func metaOptions(r int) kvstore.Options {
	ao := quietAlloc
	ao.Nodes = []farmem.NodeID{farmem.NodeID(r + 1)}
	return kvstore.Options{Replicas: r, Alloc: ao, Index: kvstore.Race{Replicas: 1}}
}

// rawWord reads the word at off of node n.
func rawWord(t *testing.T, m farmem.Memory, n farmem.NodeID, off uint64) uint64 {
	t.Helper()
	var b [8]byte
	require.NoError(t, m.Read(context.Background(), farmem.MakeAddr(n, off), b[:]))
	return binary.LittleEndian.Uint64(b[:])
}

// TestReplicatedMetaOpen: the replication factor is recorded at creation, a store opens with
// the first (home) node down and runs, Inspect finds it from a majority, and options that
// disagree with the record fail with ErrMismatch.
func TestReplicatedMetaOpen(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newLocal(t, local.Options{Shape: local.Shape{MemoryNodes: 4, ComputeNodes: 2, MemorySize: 4 << 20}})
	s := openStore(t, f, metaOptions(3))
	for i := range 32 {
		require.NoError(t, s.Put(ctx, key(uint64(i)), val(uint64(i), 24)))
	}
	info, err := kvstore.Inspect(ctx, probe(t, f))
	require.NoError(t, err)
	require.Equal(t, 3, info.Descriptor.Replicas, "the factor is recorded")
	m := probe(t, f)
	for _, n := range []farmem.NodeID{1, 2, 3} {
		require.Equal(t, uint64(info.Word), rawWord(t, m, n, kvstore.RootOffset), "root word on %v", n)
	}
	require.Zero(t, rawWord(t, m, 4, kvstore.RootOffset), "not on a node outside the metadata")
	require.NoError(t, s.Close())

	require.NoError(t, f.Crash(1))
	o := metaOptions(3)
	o.Replicas = 0 // take the recorded factor
	s2 := openStore(t, f, o)
	for i := range 32 {
		got, err := s2.Get(ctx, key(uint64(i)))
		require.NoError(t, err)
		require.Equal(t, val(uint64(i), 24), got)
	}
	for i := range 32 {
		require.NoError(t, s2.Put(ctx, key(uint64(100+i)), val(uint64(i), 40)))
	}
	info2, err := kvstore.Inspect(ctx, probe(t, f))
	require.NoError(t, err, "Inspect with the home node down")
	require.Equal(t, info.Word, info2.Word)
	for _, r := range []int{1, 5} {
		o := metaOptions(3)
		o.Replicas = r
		_, err := kvstore.Open(ctx, f, o)
		require.ErrorIs(t, err, kvstore.ErrMismatch, "r = %d against a recorded 3", r)
	}
	require.NoError(t, s2.Close())
}

// An unreplicated store keeps its layout: no factor in the descriptor, the root on the home
// node only, and Open fails with ErrMismatch when asked for replicas.
func TestUnreplicatedMetaUnchanged(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newLocal(t, local.Options{Shape: local.Shape{MemoryNodes: 3, ComputeNodes: 1, MemorySize: 4 << 20}})
	s := openStore(t, f, kvstore.Options{Alloc: quietAlloc})
	info, err := kvstore.Inspect(ctx, probe(t, f))
	require.NoError(t, err)
	require.Zero(t, info.Descriptor.Replicas)
	m := probe(t, f)
	require.Zero(t, rawWord(t, m, 2, kvstore.RootOffset))
	require.NoError(t, s.Close())
	_, err = kvstore.Open(ctx, f, kvstore.Options{Alloc: quietAlloc, Replicas: 3})
	require.ErrorIs(t, err, kvstore.ErrMismatch)
}

// repopKind is the RACE index whose handles record Repopulate calls (a stand-in for a
// replicated index, which copies its slots and values there).
type repopKind struct {
	kvstore.Race
	mu    *sync.Mutex
	calls *[]farmem.NodeID
}

type repopIndex struct {
	kvstore.Index
	k repopKind
}

func (k repopKind) Open(ctx context.Context, env kvstore.IndexEnv, root farmem.Addr) (kvstore.Index, error) {
	x, err := k.Race.Open(ctx, env, root)
	if err != nil {
		return nil, err
	}
	return repopIndex{Index: x, k: k}, nil
}

func (x repopIndex) Repopulate(ctx context.Context, node farmem.NodeID) error {
	x.k.mu.Lock()
	defer x.k.mu.Unlock()
	*x.k.calls = append(*x.k.calls, node)
	return nil
}

// TestReplicatedMetaAdopt: the home node restarts under a running store; the store goes on;
// Adopt copies the root word, descriptor and generation words from the others and restores the
// allocator's metadata, calls the index's Repopulate, and raises the generation; then another
// node crashes and a new Open still finds the store (the restored node counts in the majority).
func TestReplicatedMetaAdopt(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newLocal(t, local.Options{Shape: local.Shape{MemoryNodes: 4, ComputeNodes: 2, MemorySize: 4 << 20}})
	var calls []farmem.NodeID
	o := metaOptions(3)
	o.Index = repopKind{mu: &sync.Mutex{}, calls: &calls}
	s := openStore(t, f, o)
	for i := range 32 {
		require.NoError(t, s.Put(ctx, key(uint64(i)), val(uint64(i), 24)))
	}
	m := probe(t, f)
	root := rawWord(t, m, 2, kvstore.RootOffset)
	require.NoError(t, f.Restart(1))
	for i := range 32 {
		require.NoError(t, s.Put(ctx, key(uint64(i)), val(uint64(i)+1000, 24)), "running with the home node lost")
	}
	rep, err := s.Adopt(ctx, 1)
	require.NoError(t, err)
	require.False(t, rep.Already)
	require.Equal(t, uint64(1), rep.Generation)
	require.Zero(t, rep.Lost)
	require.Equal(t, []farmem.NodeID{1}, calls, "the index repopulated the node")
	require.Equal(t, root, rawWord(t, m, 1, kvstore.RootOffset), "root word restored")
	h1, err := alloc.Open(ctx, m, 1)
	require.NoError(t, err, "allocator header restored")
	require.Equal(t, 3, h1.Replicas)
	nodes, err := s.Nodes(ctx)
	require.NoError(t, err)
	require.Equal(t, uint64(1), nodes[0].Gen.Generation())
	again, err := s.Adopt(ctx, 1)
	require.NoError(t, err)
	require.True(t, again.Already)

	require.NoError(t, f.Crash(2))
	for i := range 32 {
		require.NoError(t, s.Put(ctx, key(uint64(i)), val(uint64(i)+2000, 24)), "running with node 2 down")
	}
	s2 := openStore(t, f, o)
	for i := range 32 {
		got, err := s2.Get(ctx, key(uint64(i)))
		require.NoError(t, err)
		require.Equal(t, val(uint64(i)+2000, 24), got)
	}
	require.NoError(t, s2.Close())
	require.NoError(t, s.Close())
}

// TestReplicatedMetaLincheckLocal: a linearizable history from goroutines of two stores while
// the home node crashes, then (once restarted) is adopted while they run, then another
// metadata node crashes; no operation fails.
func TestReplicatedMetaLincheckLocal(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newLocal(t, local.Options{Shape: local.Shape{MemoryNodes: 4, ComputeNodes: 2, MemorySize: 4 << 20}, Tearing: true, Jitter: 5 * time.Microsecond, Seed: 3})
	o := metaOptions(3)
	stores := []*kvstore.Store{openStore(t, f, o), openStore(t, f, o)}
	rt := f.Runtime()
	h := kvModel.NewHistory(rt)
	w := mix
	w.Ops = 120
	w.Unknown = 1 // no unknown outcome is expected: the first fails the test below
	phase := func(fault func()) {
		done := make(chan struct{})
		go func() {
			defer close(done) // also when fault fails
			time.Sleep(2 * time.Millisecond)
			fault()
		}()
		err := farmemtest.Parallel(rt, 6, func(g int) error {
			return w.Run(ctx, stores[g%2], g, rt.NewRand(), h)
		})
		<-done
		require.NoError(t, err)
	}
	phase(func() { require.NoError(t, f.Crash(1)) })
	phase(func() {
		require.NoError(t, f.Restart(1))
		_, err := stores[0].Adopt(ctx, 1)
		require.NoError(t, err)
		_, err = stores[1].Adopt(ctx, 1)
		require.NoError(t, err)
	})
	phase(func() { require.NoError(t, f.Crash(2)) })
	sum, verdict := h.Verify()
	t.Logf("%v", sum)
	require.NoError(t, verdict)
	require.Zero(t, sum.Failed+sum.Unknown, "operations failed")
	for _, s := range stores {
		require.NoError(t, s.Close())
	}
}

// TestReplicatedMetaSim: on the simulator, r = 3 with the home node crashed mid-run and r = 5
// with two nodes crashed: a linearizable history, no failed operation, deterministic.
func TestReplicatedMetaSim(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		r    int
		down []farmem.NodeID
	}{{3, []farmem.NodeID{1}}, {5, []farmem.NodeID{1, 3}}} {
		kvstoretest.CrashedSim{MemNodes: tc.r + 1, MemSize: 16 << 20, Opts: metaOptions(tc.r), Down: tc.down,
			Gap: 200 * time.Microsecond, Ops: 100}.Check(t)
	}
}

// probe opens a client on f's first compute node, closed with the test.
func probe(t *testing.T, f farmem.Fabric) farmem.Memory {
	t.Helper()
	m, err := f.Open(context.Background(), f.Topology().ComputeNodes()[0])
	require.NoError(t, err)
	t.Cleanup(func() { _ = m.Close() })
	return m
}

// TestReplicatedMetaCreateFirstNodeDown: a store is created on a fresh fabric whose first
// node is down (formatted on the majority that answers), runs, and once that node restarts
// empty it is adopted: restored, not formatted fresh.
func TestReplicatedMetaCreateFirstNodeDown(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newLocal(t, local.Options{Shape: local.Shape{MemoryNodes: 4, ComputeNodes: 1, MemorySize: 4 << 20}})
	require.NoError(t, f.Crash(1))
	s := openStore(t, f, metaOptions(3))
	for i := range 16 {
		require.NoError(t, s.Put(ctx, key(uint64(i)), val(uint64(i), 24)))
	}
	m := probe(t, f)
	require.NoError(t, f.Restart(1))
	rep, err := s.Adopt(ctx, 1)
	require.NoError(t, err)
	require.Equal(t, uint64(1), rep.Generation)
	h1, err := alloc.Open(ctx, m, 1)
	require.NoError(t, err)
	h2, err := alloc.Open(ctx, m, 2)
	require.NoError(t, err)
	require.Equal(t, h2.SymBump, h1.SymBump, "restored from its peers, not formatted fresh")
	require.Equal(t, rawWord(t, m, 2, kvstore.RootOffset), rawWord(t, m, 1, kvstore.RootOffset))
	require.NoError(t, f.Crash(3))
	for i := range 16 {
		got, err := s.Get(ctx, key(uint64(i)))
		require.NoError(t, err)
		require.Equal(t, val(uint64(i), 24), got)
	}
}

// TestReplicatedMetaRoundTrips measures, on one shape, the round trips of opening an existing
// store and of adopting a restarted node (not the home node) with r = 1 and r = 3 on four
// memory nodes, and checks the r = 3 Open against r = 1's.
func TestReplicatedMetaRoundTrips(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	measure := func(r int) (open, adopt uint64) {
		f := newLocal(t, local.Options{Shape: local.Shape{MemoryNodes: 4, ComputeNodes: 1, MemorySize: 4 << 20}})
		// The adoption's Repopulate sleeps a pin budget, a quarter of the lease.
		o := kvstore.Options{Replicas: r, Alloc: kvstoretest.ShortLeaseAlloc}
		s := openStore(t, f, o)
		require.NoError(t, s.Put(ctx, key(1), val(1, 24)))
		require.NoError(t, s.Close())
		before := f.Stats().RoundTrips
		s2 := openStore(t, f, o)
		open = f.Stats().RoundTrips - before
		require.NoError(t, f.Restart(2)) // not the home node: r = 1 can adopt it too
		before = f.Stats().RoundTrips
		_, err := s2.Adopt(ctx, 2)
		require.NoError(t, err)
		adopt = f.Stats().RoundTrips - before
		return open, adopt
	}
	o1, a1 := measure(1)
	o3, a3 := measure(3)
	t.Logf("round trips: Open %d (r = 1) vs %d (r = 3); Adopt of node 2 %d (r = 1) vs %d (r = 3, a metadata node)", o1, o3, a1, a3)
	require.Equal(t, o1+2, o3, "r = 3 Open costs two round trips more than r = 1: its allocator reads, then takes, the handover words it adopts on their own (alloc.NewReplicatedAdoptRoundTrips against NewAdoptRoundTrips)")
}
