package kvstore_test

import (
	"context"
	"encoding/binary"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/farmem/farmem/ds/maxreg"
	"github.com/farmem/farmem/ds/qlock"
	"github.com/farmem/farmem/farmem"
	"github.com/farmem/farmem/farmem/local"
	"github.com/farmem/farmem/kvstore"
)

// swarmParams size the tests' objects: the mixed workload's values (up to 208 bytes) and a
// marker byte, four record slots per writer, eight metadata words, and a short skew (the
// buffers' reuse delay is the lease, the skew and the fabric's down timeout). The lease is one
// a busy machine keeps: a read that takes longer than it starts over, and with 200 µs the local
// fabric's reads under GOMAXPROCS=1 (torn accesses yield the processor mid-copy) almost never
// finished within it, so TestSwarmLincheckLocal's readers started over without end while the
// reads they left behind queued up at the replicas (3 runs of 3 stuck for minutes, gigabytes
// of memory, beside other race-enabled test runs).
var swarmParams = maxreg.Params{ValueSize: 224, Slots: 4, Words: 8, Lease: 5 * time.Millisecond, Skew: 200 * time.Microsecond}

// swarmOptions are store options with the swarm kind (3 replicas by default).
func swarmOptions() kvstore.Options {
	return kvstore.Options{Alloc: quietAlloc, Index: kvstore.Swarm{Params: swarmParams}}
}

// newSwarmLocal is a local fabric of three memory nodes (of lo's MemorySize, default 16
// MiB), not strict (the index's replicated
// memory lays out fresh words with plain writes where atomics later act), with few client
// slots per compute node so that objects (a lane per writer) stay small.
func newSwarmLocal(t *testing.T, lo local.Options) *local.Fabric {
	t.Helper()
	size := lo.MemorySize
	if size == 0 {
		size = 16 << 20
	}
	lo.Shape = local.Shape{MemoryNodes: 3, ComputeNodes: 2, MemorySize: size, ClientsPerNode: 16}
	// The objects' buffers are reused a maxreg ReuseDelay (its Lease, Skew and this) after
	// they were superseded: a short one keeps rewrites of one key from waiting long.
	if lo.DownTimeout == 0 {
		lo.DownTimeout = 20 * time.Millisecond
	}
	f, err := local.New(lo)
	require.NoError(t, err)
	t.Cleanup(func() { _ = f.Close() })
	return f
}

// TestSwarmSemantics: the zero-value kind (as a value and as a pointer) on three memory nodes:
// every operation's answers, the store's factor set from the kind, the optimistic
// synchronizer recorded, and the index replicated.
func TestSwarmSemantics(t *testing.T) {
	t.Parallel()
	for _, kind := range []kvstore.IndexKind{kvstore.Swarm{}, &kvstore.Swarm{}} {
		f := newSwarmLocal(t, local.Options{})
		s := openStore(t, f, kvstore.Options{Alloc: quietAlloc, Index: kind})
		semantics(t, s, "store")
		ss, err := s.Session(context.Background())
		require.NoError(t, err)
		semantics(t, ss, "session")
		require.NoError(t, ss.Close())
		d := s.Descriptor()
		require.Equal(t, "swarm", d.Index)
		require.Equal(t, 3, d.Replicas, "Options.Replicas 0 takes the kind's 3")
		require.Equal(t, kvstore.Optimistic.Name(), d.Sync)
		require.Equal(t, 3, int(d.Roots[0].Node()-0xF0), "the index on the virtual node of 3 replicas")
	}
}

// TestSwarmStaleCache: a client whose location cache names a deleted object sees the
// deletion (a Get, an Update and a Delete through it), follows the key to the object
// inserted since, and an Update never brings a deleted object back.
func TestSwarmStaleCache(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newSwarmLocal(t, local.Options{})
	s := openStore(t, f, swarmOptions())
	a, err := s.Session(ctx)
	require.NoError(t, err)
	defer a.Close()
	b, err := s.Session(ctx)
	require.NoError(t, err)
	defer b.Close()
	k := []byte("stale")
	require.NoError(t, a.Insert(ctx, k, []byte("one")))
	got, err := b.Get(ctx, k) // b caches the object
	require.NoError(t, err)
	require.Equal(t, "one", string(got))
	require.NoError(t, a.Delete(ctx, k))
	require.ErrorIs(t, b.Update(ctx, k, []byte("zombie")), kvstore.ErrNotFound, "an update through a stale cache")
	_, err = a.Get(ctx, k)
	require.ErrorIs(t, err, kvstore.ErrNotFound, "the update did not resurrect the key")
	_, err = b.Get(ctx, k)
	require.ErrorIs(t, err, kvstore.ErrNotFound)

	require.NoError(t, b.Insert(ctx, k, []byte("two"))) // b caches the new object
	require.NoError(t, a.Delete(ctx, k))
	require.NoError(t, a.Insert(ctx, k, []byte("three")))
	got, err = b.Get(ctx, k) // stale: finds the tombstone, then the new object
	require.NoError(t, err)
	require.Equal(t, "three", string(got))
	require.NoError(t, a.Delete(ctx, k))
	require.NoError(t, a.Insert(ctx, k, []byte("four")))
	require.NoError(t, b.Delete(ctx, k), "a delete through a stale cache deletes the live object")
	_, err = a.Get(ctx, k)
	require.ErrorIs(t, err, kvstore.ErrNotFound)
	require.ErrorIs(t, a.Delete(ctx, k), kvstore.ErrNotFound)
}

// TestSwarmRefuse: what the store refuses with the swarm kind, each with ErrInvalid, at Open.
func TestSwarmRefuse(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newSwarmLocal(t, local.Options{})
	for name, o := range map[string]kvstore.Options{
		"one replica":         {Index: kvstore.Swarm{Replicas: 1}},
		"unreplicated store":  {Replicas: 1, Index: kvstore.Swarm{}},
		"even":                {Index: kvstore.Swarm{Replicas: 4}},
		"disagreeing factors": {Replicas: 3, Index: kvstore.Swarm{Replicas: 5}},
		"more than the nodes": {Index: kvstore.Swarm{Replicas: 5}},
		"a lock-based sync":   {Index: kvstore.Swarm{}, Sync: kvstore.DefaultSync()},
		"mcs":                 {Index: &kvstore.Swarm{}, Sync: kvstore.MCS(qlock.Options{})},
		"index instances":     {Index: kvstore.Swarm{}, Replication: twoInstances{}},
		"no room for a value": {Index: kvstore.Swarm{Params: maxreg.Params{ValueSize: 1}}},
	} {
		o.Alloc = quietAlloc
		_, err := kvstore.Open(ctx, f, o)
		require.ErrorIs(t, err, farmem.ErrInvalid, name)
		sw, _ := o.Index.(kvstore.Swarm)
		if p, ok := o.Index.(*kvstore.Swarm); ok {
			sw = *p
		}
		require.ErrorIs(t, sw.Refuse(o, f.Topology()), farmem.ErrInvalid, "%s: Refuse says so too", name)
	}
	require.NoError(t, kvstore.Swarm{}.Refuse(kvstore.Options{Sync: kvstore.Optimistic}, f.Topology()))
	// A value too large for the objects.
	s := openStore(t, f, swarmOptions())
	require.ErrorIs(t, s.Insert(ctx, []byte("big"), make([]byte, swarmParams.ValueSize)), kvstore.ErrTooLarge)
	require.NoError(t, s.Insert(ctx, []byte("big"), make([]byte, swarmParams.ValueSize-1)))
}

// twoInstances is a Replicator over two index instances.
type twoInstances struct{}

func (twoInstances) Name() string  { return "two" }
func (twoInstances) Replicas() int { return 2 }
func (twoInstances) Combine(r []kvstore.Index) (kvstore.Index, error) {
	return nil, errors.New("not used")
}

// TestSwarmRoundTrips asserts a warm Get and a warm Update (the key's object in the
// client's location cache) at one round trip each, exactly, on a Session and through the
// Store's pool, and logs the other operations' costs.
func TestSwarmRoundTrips(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newSwarmLocal(t, local.Options{})
	o := swarmOptions()
	o.MaxClients = 1
	s := openStore(t, f, o)
	ss, err := s.Session(ctx)
	require.NoError(t, err)
	v := []byte("a value of some thirty bytes..")
	require.NoError(t, ss.Insert(ctx, []byte("warm"), v)) // the allocator's first chunk
	type step struct {
		name string
		rtt  uint64 // 0: logged, not asserted
		op   func(kv) error
		err  error
	}
	steps := []step{
		{"insert", 0, func(s kv) error { return s.Insert(ctx, []byte("alpha"), v) }, nil},
		{"get", kvstore.SwarmGetRoundTrips, func(s kv) error { _, err := s.Get(ctx, []byte("alpha")); return err }, nil},
		{"update", kvstore.SwarmUpdateRoundTrips, func(s kv) error { return s.Update(ctx, []byte("alpha"), v) }, nil},
		{"get after update", kvstore.SwarmGetRoundTrips, func(s kv) error { _, err := s.Get(ctx, []byte("alpha")); return err }, nil},
		{"put present", kvstore.SwarmUpdateRoundTrips, func(s kv) error { return s.Put(ctx, []byte("alpha"), v) }, nil},
		{"get absent", 0, func(s kv) error { _, err := s.Get(ctx, []byte("beta")); return err }, kvstore.ErrNotFound},
		{"delete", 0, func(s kv) error { return s.Delete(ctx, []byte("alpha")) }, nil},
		{"get deleted", 0, func(s kv) error { _, err := s.Get(ctx, []byte("alpha")); return err }, kvstore.ErrNotFound},
	}
	for _, via := range []struct {
		name  string
		s     kv
		stats func() farmem.Stats
	}{{"session", ss, ss.Stats}, {"store", s, s.Stats}} {
		for _, st := range steps {
			before := via.stats()
			err := st.op(via.s)
			if st.err != nil {
				require.ErrorIs(t, err, st.err, "%s %s", via.name, st.name)
			} else {
				require.NoError(t, err, "%s %s", via.name, st.name)
			}
			d := via.stats().Sub(before)
			if st.rtt != 0 {
				require.Equal(t, st.rtt, d.RoundTrips, "%s %s: round trips (%v)", via.name, st.name, d)
			}
			t.Logf("%-8s %-16s %v", via.name, st.name, d)
		}
		if via.name == "session" {
			require.NoError(t, ss.Close()) // the store's operations now use its client
		}
	}
}

// TestSwarmLincheckLocal: a linearizable history from goroutines of two stores on a local
// fabric with real tearing and jitter.
func TestSwarmLincheckLocal(t *testing.T) {
	t.Parallel()
	f := newSwarmLocal(t, local.Options{Tearing: true, Jitter: 5 * time.Microsecond, Seed: 7})
	o := swarmOptions()
	stores := []*kvstore.Store{openStore(t, f, o), openStore(t, f, o)}
	w := mix
	w.ops = 60
	require.NoError(t, lincheckStores(t, f.Runtime(), w, stores, 3))
}

// TestSwarmLincheckSim: on the simulator with torn accesses, the home node (the first of the
// index's and objects' replicas, which also holds the store's root) crashed mid-run: a
// linearizable history, no failed operation, every key read back at the end, deterministic.
func TestSwarmLincheckSim(t *testing.T) {
	t.Parallel()
	crashedSim{memNodes: 3, memSize: 64 << 20, opts: swarmOptions(), down: []farmem.NodeID{1},
		gap: 150 * time.Microsecond, ops: 60, strict: true}.check(t)
}

// TestSwarmAdopt: the home node (the first of the index's and objects' replicas) restarts
// empty and is adopted while the store holds keys written, updated and deleted: every indexed
// object's replica there is copied (the header byte for byte, the largest tag), and then
// another replica crashes: every key reads back, and updates, deletes and inserts work on the
// adopted node and the one left.
func TestSwarmAdopt(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	// Small nodes: a restart zeroes the node's memory, which is slow under the race detector.
	f := newSwarmLocal(t, local.Options{Shape: local.Shape{MemorySize: 4 << 20}})
	s := openStore(t, f, swarmOptions())
	const n = 6
	want := map[uint64][]byte{}
	for i := range uint64(n) {
		require.NoError(t, s.Insert(ctx, key(i), val(i, 16)))
		want[i] = val(i, 16)
	}
	require.NoError(t, s.Update(ctx, key(0), val(10, 16)))
	want[0] = val(10, 16)
	require.NoError(t, s.Delete(ctx, key(1)))
	delete(want, 1)
	require.NoError(t, f.Restart(1))
	// While the node is lost, the store runs on the other two.
	require.NoError(t, s.Update(ctx, key(2), val(12, 16)))
	want[2] = val(12, 16)
	rep, err := s.Adopt(ctx, 1)
	require.NoError(t, err)
	require.False(t, rep.Already)
	require.Zero(t, rep.Lost)
	words := uint64(swarmParams.Words)
	m, err := f.Open(ctx, f.Hosted()[0])
	require.NoError(t, err)
	defer m.Close()
	for i := range want {
		addrs, err := kvstore.SwarmObjectAddrs(ctx, s, key(i))
		require.NoError(t, err)
		var tops []uint64
		var hdrs [][]byte
		for _, a := range addrs {
			h := make([]byte, 88)
			require.NoError(t, m.Read(ctx, a, h))
			hdrs = append(hdrs, h)
			w := make([]byte, 8*words)
			require.NoError(t, m.Read(ctx, a+128, w))
			var top uint64
			for k := range words {
				top = max(top, binary.LittleEndian.Uint64(w[8*k:]))
			}
			tops = append(tops, top)
		}
		require.Equal(t, farmem.NodeID(1), addrs[0].Node())
		require.NotZero(t, tops[0], "key %d: the adopted replica holds a tag", i)
		require.Equal(t, max(tops[1], tops[2]), tops[0], "key %d: the adopted replica holds the largest tag", i)
		require.Equal(t, hdrs[1], hdrs[0], "key %d: header copied", i)
	}
	// The next crash: node 3. Node 1 (adopted) and node 2 are the majority now.
	require.NoError(t, f.Crash(3))
	for i, v := range want {
		got, err := s.Get(ctx, key(i))
		require.NoError(t, err, "key %d", i)
		require.Equal(t, v, got, "key %d", i)
	}
	_, err = s.Get(ctx, key(1))
	require.ErrorIs(t, err, kvstore.ErrNotFound)
	require.NoError(t, s.Update(ctx, key(3), val(13, 16)))
	require.NoError(t, s.Delete(ctx, key(4)))
	require.NoError(t, s.Insert(ctx, key(1), val(11, 16)))
	for i, v := range map[uint64][]byte{1: val(11, 16), 3: val(13, 16), 0: val(10, 16)} {
		got, err := s.Get(ctx, key(i))
		require.NoError(t, err)
		require.Equal(t, v, got)
	}
	_, err = s.Get(ctx, key(4))
	require.ErrorIs(t, err, kvstore.ErrNotFound)
}
