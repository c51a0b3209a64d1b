package flexcheck_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/farmem/farmem/ds/qlock"
	"github.com/farmem/farmem/ds/race"
	"github.com/farmem/farmem/farmem"
	"github.com/farmem/farmem/farmem/local"
	"github.com/farmem/farmem/kvstore"
)

// flexLocal opens a FlexKV store (or the Aceso baseline) on a local fabric of three memory
// and three compute nodes with strict mode on.
func flexLocal(t *testing.T, k *kvstore.FlexKV, lo local.Options) (*local.Fabric, *kvstore.Store) {
	t.Helper()
	lo.Shape = local.Shape{MemoryNodes: 3, ComputeNodes: 3}
	f := newLocal(t, lo)
	s := openStore(t, f, kvstore.Options{Index: k, Alloc: quietAlloc})
	return f, s
}

// sessionOn opens a session on a client of node.
func sessionOn(t *testing.T, f farmem.Fabric, s *kvstore.Store, node farmem.NodeID) *kvstore.Session {
	t.Helper()
	ss, end, err := openSession(context.Background(), f, s, node)
	require.NoError(t, err)
	t.Cleanup(end)
	return ss
}

// TestFlexKVProxy: every operation gives the same answers with partitions on the memory
// nodes, on proxies, and handed back, and the proxies serve them.
func TestFlexKVProxy(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	k := &kvstore.FlexKV{}
	f, s := flexLocal(t, k, local.Options{})
	nodes := f.Topology().ComputeNodes()
	want := map[uint64]uint64{}
	check := func(stage string) {
		t.Helper()
		for i := range uint64(60) {
			got, err := s.Get(ctx, key(i))
			if v, ok := want[i]; ok {
				require.NoError(t, err, "%s: key %d", stage, i)
				x, err := unval(got)
				require.NoError(t, err)
				require.Equal(t, v, x, "%s: key %d", stage, i)
			} else {
				require.ErrorIs(t, err, kvstore.ErrNotFound, "%s: key %d", stage, i)
			}
		}
	}
	mutate := func(round uint64) {
		t.Helper()
		for i := range uint64(60) {
			v := round<<32 | i
			switch (i + round) % 4 {
			case 0:
				err := s.Insert(ctx, key(i), val(v, 24))
				if _, ok := want[i]; ok {
					require.ErrorIs(t, err, kvstore.ErrExists)
				} else {
					require.NoError(t, err)
					want[i] = v
				}
			case 1:
				err := s.Update(ctx, key(i), val(v, 40))
				if _, ok := want[i]; ok {
					require.NoError(t, err)
					want[i] = v
				} else {
					require.ErrorIs(t, err, kvstore.ErrNotFound)
				}
			case 2:
				err := s.Delete(ctx, key(i))
				if _, ok := want[i]; ok {
					require.NoError(t, err)
					delete(want, i)
				} else {
					require.ErrorIs(t, err, kvstore.ErrNotFound)
				}
			default:
				require.NoError(t, s.Put(ctx, key(i), val(v, 8)))
				want[i] = v
			}
		}
	}
	mutate(1)
	check("on the memory nodes")
	for p := range k.Partitions() {
		require.NoError(t, s.HandOver(ctx, p, nodes[p%len(nodes)]))
	}
	for _, n := range nodes {
		for p := range k.Partitions() {
			require.Equal(t, nodes[p%len(nodes)], k.Owner(n, p), "node %v's map", n)
		}
	}
	check("proxied")
	for r := uint64(2); r < 6; r++ {
		mutate(r)
		check("proxied, after writes")
	}
	var served uint64
	for _, n := range nodes {
		st, _ := k.Stats(n)
		served += st.Served
	}
	require.Positive(t, served)
	// Move some partitions between proxies, return the others.
	for p := range k.Partitions() {
		to := farmem.NodeID(0)
		if p%2 == 0 {
			to = nodes[(p+1)%len(nodes)]
		}
		require.NoError(t, s.HandOver(ctx, p, to))
	}
	check("moved")
	mutate(7)
	check("moved, after writes")
	for p := range k.Partitions() {
		require.NoError(t, s.HandOver(ctx, p, 0))
	}
	mutate(8)
	check("handed back")
}

// TestFlexKVFullPartition: an insert into full buckets of a proxied partition hands the
// partition back to the memory nodes, where the subtable splits.
func TestFlexKVFullPartition(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	k := &kvstore.FlexKV{}
	k.Params.InitialDepth = 1
	k.Params.Groups = 1
	f, s := flexLocal(t, k, local.Options{})
	nodes := f.Topology().ComputeNodes()
	require.NoError(t, s.HandOver(ctx, 0, nodes[1]))
	require.NoError(t, s.HandOver(ctx, 1, nodes[2]))
	for i := range uint64(200) {
		require.NoError(t, s.Insert(ctx, key(i), val(i, 8)))
	}
	for i := range uint64(200) {
		got, err := s.Get(ctx, key(i))
		require.NoError(t, err)
		x, err := unval(got)
		require.NoError(t, err)
		require.Equal(t, i, x)
	}
	for p := range 2 {
		require.Equal(t, farmem.NodeID(0), k.Owner(nodes[0], p), "a full partition was handed back")
	}
	// The split partition can be proxied again.
	require.NoError(t, s.HandOver(ctx, 0, nodes[1]))
	require.NoError(t, s.Update(ctx, key(3), val(33, 8)))
	got, err := s.Get(ctx, key(3))
	require.NoError(t, err)
	x, _ := unval(got)
	require.Equal(t, uint64(33), x)
}

// TestFlexKVCosts: a proxied update issues no atomic to a memory node (fabric-wide counts); a
// KV-cache hit costs no round trip and an address-cache hit one; the Aceso baseline's update
// one memory-node CAS.
func TestFlexKVCosts(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	k := &kvstore.FlexKV{}
	f, s := flexLocal(t, k, local.Options{})
	nodes := f.Topology().ComputeNodes()
	for i := range uint64(32) {
		require.NoError(t, s.Insert(ctx, key(i), val(i, 64)))
	}
	p := k.PartitionOf(key(5))
	require.NoError(t, s.HandOver(ctx, p, nodes[1]))
	ss := sessionOn(t, f, s, nodes[0])
	memAtomics := func(st farmem.Stats) uint64 {
		return st.Verbs[farmem.TargetMemory][farmem.OpCAS] + st.Verbs[farmem.TargetMemory][farmem.OpMaskedCAS] +
			st.Verbs[farmem.TargetMemory][farmem.OpFAA]
	}
	require.NoError(t, ss.Update(ctx, key(5), val(50, 64))) // warm the allocator
	before, sb := f.Stats(), ss.Stats()
	require.NoError(t, ss.Update(ctx, key(5), val(51, 64)))
	d, sd := f.Stats().Sub(before), ss.Stats().Sub(sb)
	require.Zero(t, memAtomics(d), "a proxied update: %v", d)
	require.Equal(t, uint64(5), d.Verbs[farmem.TargetMemory][farmem.OpWrite], "three copies of the block, the old one's valid word, the slot written through: %v", d)
	require.Positive(t, d.Verbs[farmem.TargetLocal][farmem.OpCAS], "the proxy's local CAS: %v", d)
	// The node's own last write of the key left its slot in the cache: the shortcut skips the
	// resolution.
	require.Equal(t, uint64(2), sd.RoundTrips, "the block's write, the index RPC: %v", sd)
	t.Logf("proxied update: fabric %v; client %v", d, sd)

	// Reads make the key cache-worthy; then a Get is served from the node's cache.
	var hit bool
	for range 2 * kvstore.FlushReads {
		sb := ss.Stats()
		got, err := ss.Get(ctx, key(5))
		require.NoError(t, err)
		x, _ := unval(got)
		require.Equal(t, uint64(51), x)
		if ss.Stats().Sub(sb).RoundTrips == 0 {
			hit = true
			break
		}
	}
	require.True(t, hit, "a read-mostly key is cached")
	st, _ := k.Stats(nodes[0])
	require.Positive(t, st.KVHits)
	// A write invalidates the cached pair before it commits: the next Get sees it.
	other := sessionOn(t, f, s, nodes[2])
	require.NoError(t, other.Update(ctx, key(5), val(52, 64)))
	got, err := ss.Get(ctx, key(5))
	require.NoError(t, err)
	x, _ := unval(got)
	require.Equal(t, uint64(52), x, "no stale value from the cache")

	// A write through the cached slot address, within the delete lease: no resolution.
	_, err = ss.Get(ctx, key(5))
	require.NoError(t, err)
	st0, _ := k.Stats(nodes[0])
	sb = ss.Stats()
	require.NoError(t, ss.Update(ctx, key(5), val(53, 64)))
	st1, _ := k.Stats(nodes[0])
	if st1.Shortcuts > st0.Shortcuts { // the entry was learnt less than a lease ago
		require.Equal(t, uint64(2), ss.Stats().Sub(sb).RoundTrips, "the block's write, the index RPC")
	}
	// Past the lease the entry's slot is not trusted: the write resolves it.
	_, err = ss.Get(ctx, key(5))
	require.NoError(t, err)
	require.NoError(t, f.Runtime().Sleep(ctx, kvstore.DefaultDeleteLease))
	st0, _ = k.Stats(nodes[0])
	sb = ss.Stats()
	require.NoError(t, ss.Update(ctx, key(5), val(54, 64)))
	st1, _ = k.Stats(nodes[0])
	require.Equal(t, st0.Shortcuts, st1.Shortcuts, "an entry older than the lease is not used for a write")
	require.Equal(t, uint64(3), ss.Stats().Sub(sb).RoundTrips)
	got, err = other.Get(ctx, key(5))
	require.NoError(t, err)
	x, _ = unval(got)
	require.Equal(t, uint64(54), x)

	// An address-cache hit: a key on the memory nodes, read twice.
	var q []byte
	for i := range uint64(32) {
		if k.PartitionOf(key(i)) != p {
			q = key(i)
			break
		}
	}
	require.NotNil(t, q)
	_, err = ss.Get(ctx, q)
	require.NoError(t, err)
	sb = ss.Stats()
	_, err = ss.Get(ctx, q)
	require.NoError(t, err)
	require.Equal(t, uint64(1), ss.Stats().Sub(sb).RoundTrips, "an address-cache hit")
}

// TestAcesoCosts: the baseline's update is one memory-node CAS, and its address-cache hit one
// round trip; it refuses to proxy.
func TestAcesoCosts(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	k := &kvstore.FlexKV{NoProxy: true}
	f, s := flexLocal(t, k, local.Options{})
	nodes := f.Topology().ComputeNodes()
	ss := sessionOn(t, f, s, nodes[0])
	require.NoError(t, ss.Insert(ctx, key(1), val(1, 64)))
	require.NoError(t, ss.Update(ctx, key(1), val(2, 64)))
	before, sb0 := f.Stats(), ss.Stats()
	require.NoError(t, ss.Update(ctx, key(1), val(3, 64)))
	d := f.Stats().Sub(before)
	require.Equal(t, uint64(1), d.Verbs[farmem.TargetMemory][farmem.OpCAS], "%v", d)
	require.Equal(t, uint64(4), d.Verbs[farmem.TargetMemory][farmem.OpWrite], "three copies of the block and the old one's valid word: %v", d)
	require.Equal(t, uint64(kvstore.UpdateRoundTrips), ss.Stats().Sub(sb0).RoundTrips)
	_, err := ss.Get(ctx, key(1))
	require.NoError(t, err)
	sb := ss.Stats()
	got, err := ss.Get(ctx, key(1))
	require.NoError(t, err)
	x, _ := unval(got)
	require.Equal(t, uint64(3), x)
	require.Equal(t, uint64(1), ss.Stats().Sub(sb).RoundTrips)
	require.Equal(t, "aceso", s.Descriptor().Index)
	require.ErrorIs(t, s.HandOver(ctx, 0, nodes[1]), farmem.ErrInvalid)
}

// TestFlexKVStaleAddress: an address cached on one node goes stale when another node updates,
// deletes and re-inserts the key, and when the block is reused; the cache never returns the
// old value.
func TestFlexKVStaleAddress(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	k := &kvstore.FlexKV{NoKVCache: true}
	f, s := flexLocal(t, k, local.Options{})
	nodes := f.Topology().ComputeNodes()
	a, b := sessionOn(t, f, s, nodes[0]), sessionOn(t, f, s, nodes[1])
	for round := range 3 {
		if round == 1 {
			require.NoError(t, s.HandOver(ctx, k.PartitionOf(key(9)), nodes[2]))
		}
		require.NoError(t, b.Put(ctx, key(9), val(uint64(100*round), 32)))
		for i := range uint64(20) {
			got, err := a.Get(ctx, key(9))
			require.NoError(t, err)
			x, _ := unval(got)
			require.Equal(t, uint64(100*round)+i, x, "round %d step %d", round, i)
			switch i % 3 {
			case 0, 1:
				require.NoError(t, b.Update(ctx, key(9), val(uint64(100*round)+i+1, 32)))
			default:
				require.NoError(t, b.Delete(ctx, key(9)))
				_, err := a.Get(ctx, key(9))
				require.ErrorIs(t, err, kvstore.ErrNotFound)
				require.NoError(t, b.Insert(ctx, key(9), val(uint64(100*round)+i+1, 32)))
			}
		}
	}
	st, _ := k.Stats(nodes[0])
	require.Positive(t, st.AddrStale, "stale addresses were detected")
	require.Positive(t, st.AddrHits+st.Misses)
}

// TestFlexKVKeepsSync: partitions on the memory nodes keep the store's synchronizer (here
// the far MCS lock: a locked update's round trips); proxied ones commit at the proxy.
func TestFlexKVKeepsSync(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	k := &kvstore.FlexKV{}
	f := newLocal(t, local.Options{Shape: local.Shape{MemoryNodes: 3, ComputeNodes: 3}})
	s := openStore(t, f, kvstore.Options{Index: k, Alloc: quietAlloc, Sync: kvstore.MCS(qlock.Options{})})
	require.Equal(t, "mcs", s.Sync())
	nodes := f.Topology().ComputeNodes()
	ss := sessionOn(t, f, s, nodes[0])
	require.NoError(t, ss.Insert(ctx, key(1), val(1, 16)))
	require.NoError(t, ss.Update(ctx, key(1), val(2, 16)))
	sb := ss.Stats()
	require.NoError(t, ss.Update(ctx, key(1), val(3, 16)))
	require.Equal(t, uint64(kvstore.LockedUpdateRoundTrips), ss.Stats().Sub(sb).RoundTrips, "the MCS lock on the memory nodes")
	require.NoError(t, s.HandOver(ctx, k.PartitionOf(key(1)), nodes[1]))
	before := f.Stats()
	require.NoError(t, ss.Update(ctx, key(1), val(4, 16)))
	d := f.Stats().Sub(before)
	require.Zero(t, d.Verbs[farmem.TargetMemory][farmem.OpCAS]+d.Verbs[farmem.TargetMemory][farmem.OpMaskedCAS], "no lock, no CAS at the memory nodes: %v", d)
}

// lossyCalls is a client whose next index-write Calls (FlexKV's method 2) lose their reply
// (the proxy ran them) or their request (it did not), as a failed transport would report.
type lossyCalls struct {
	farmem.Memory
	loseReply, loseRequest int
}

func (l *lossyCalls) Call(ctx context.Context, node farmem.NodeID, method uint16, req []byte) ([]byte, error) {
	if method == farmem.OwnerFlexKV.Method(2) {
		switch {
		case l.loseRequest > 0:
			l.loseRequest--
			return nil, fmt.Errorf("request lost: %w", farmem.ErrNodeDown)
		case l.loseReply > 0:
			l.loseReply--
			if _, err := l.Memory.Call(ctx, node, method, req); err != nil {
				return nil, err
			}
			return nil, fmt.Errorf("reply lost: %w", farmem.ErrNodeDown)
		}
	}
	return l.Memory.Call(ctx, node, method, req)
}

// TestFlexKVUnknownCommit: a commit whose outcome is unknown is sent again with the same
// words; the proxy's copy holding the new word tells the client its first attempt committed,
// and a lost request commits on the second; either way the update took effect once.
func TestFlexKVUnknownCommit(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	k := &kvstore.FlexKV{}
	f, s := flexLocal(t, k, local.Options{})
	nodes := f.Topology().ComputeNodes()
	require.NoError(t, s.Insert(ctx, key(1), val(1, 16)))
	require.NoError(t, s.HandOver(ctx, k.PartitionOf(key(1)), nodes[1]))
	m, err := f.Open(ctx, nodes[2])
	require.NoError(t, err)
	defer m.Close()
	lossy := &lossyCalls{Memory: m}
	ss, err := s.SessionOn(ctx, lossy)
	require.NoError(t, err)
	defer ss.Close()
	for i, c := range []struct{ reply, request int }{{1, 0}, {0, 1}, {2, 1}} {
		lossy.loseReply, lossy.loseRequest = c.reply, c.request
		v := uint64(10 + i)
		require.NoError(t, ss.Update(ctx, key(1), val(v, 16)), "case %+v", c)
		got, err := s.Get(ctx, key(1))
		require.NoError(t, err)
		x, _ := unval(got)
		require.Equal(t, v, x, "case %+v", c)
		require.Zero(t, lossy.loseReply+lossy.loseRequest, "every loss was met")
	}
	// A delete whose reply is lost reports success once, and the key is gone.
	lossy.loseReply = 1
	require.NoError(t, ss.Delete(ctx, key(1)))
	_, err = s.Get(ctx, key(1))
	require.ErrorIs(t, err, kvstore.ErrNotFound)
}

// TestFlexKVHandOverFinishesSplits: a partition whose table (split region by region, the
// default) holds a split left half done, since nobody inserts there any more, is handed to a
// proxy and back: the hand-over finishes the split first (race.ReadPartition refuses the
// partition until then) and every key keeps its value through both moves.
func TestFlexKVHandOverFinishesSplits(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newLocal(t, local.Options{Shape: local.Shape{MemoryNodes: 2, ComputeNodes: 2}})
	k := &kvstore.FlexKV{Params: race.Params{Groups: 4, SlotsPerBucket: 4}}
	s := openStore(t, f, kvstore.Options{Alloc: quietAlloc, Index: k})
	root := s.Descriptor().Roots[0]
	m, err := f.Open(ctx, f.Topology().ComputeNodes()[0])
	require.NoError(t, err)
	t.Cleanup(func() { _ = m.Close() })
	const p = 1
	var inserted []uint64
	for _, x := range keysIn(k, p, 2000, 0) {
		require.NoError(t, s.Insert(ctx, key(x), val(x, 16)))
		inserted = append(inserted, x)
		if _, err := race.ReadPartition(ctx, m, root, p); err != nil {
			require.ErrorIs(t, err, race.ErrBusy)
			break
		}
	}
	_, err = race.ReadPartition(ctx, m, root, p)
	require.ErrorIs(t, err, race.ErrBusy, "no split left half done after %d inserts", len(inserted))
	check := func(stage string) {
		t.Helper()
		for _, x := range inserted {
			got, err := s.Get(ctx, key(x))
			require.NoError(t, err, "%s: key %d", stage, x)
			v, err := unval(got)
			require.NoError(t, err)
			require.Equal(t, x, v, "%s: key %d", stage, x)
		}
	}
	t.Logf("%d keys inserted", len(inserted))
	check("half split")
	owner := f.Topology().ComputeNodes()[1]
	require.NoError(t, s.HandOver(ctx, p, owner), "hand-over of a partition with a split half done")
	st, _ := s.FlexStats()
	require.Equal(t, uint64(1), st.Loads)
	require.Zero(t, st.RolledBack)
	check("proxied")
	require.NoError(t, s.HandOver(ctx, p, 0))
	check("handed back")
	subs, err := race.ReadPartition(ctx, m, root, p)
	require.NoError(t, err, "the split has ended")
	n := 0
	for _, sub := range subs {
		for _, w := range sub.Words {
			if w.Committed() {
				n++
			}
		}
	}
	require.Equal(t, len(inserted), n, "committed slots in the partition")
}
