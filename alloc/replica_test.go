package alloc

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/farmem/farmem/farmem"
	"github.com/farmem/farmem/farmem/local"
	"github.com/farmem/farmem/sim"
)

// replicaFormat formats with r metadata replicas and small chunks.
func replicaFormat(r int) FormatOptions {
	return FormatOptions{ChunkSize: 4 << 10, SymmetricSize: 512 << 10, Replicas: r}
}

// longLeases keep announcements alive through a test (scans never expire them).
var longLeases = Options{Lease: 1 << 40, Refresh: 1 << 39, ScanInterval: 1 << 39}

// symClaims checks that the symmetric chunks two allocators claim, interleaved, never overlap
// each other nor the ones in taken (which it extends).
func symClaims(t *testing.T, ctx context.Context, as []*Allocator, n int, taken map[SymOffset]string) {
	t.Helper()
	for k := range n {
		for i, a := range as {
			o, err := a.AllocSymmetric(ctx, 4<<10, 0) // a whole chunk: one claim each
			require.NoError(t, err)
			who := fmt.Sprintf("allocator %d, claim %d", i, k)
			require.NotContains(t, taken, o, "%s got a chunk handed out before (%s)", who, taken[o])
			taken[o] = who
		}
	}
}

// epochsWork checks deferred free across two allocators: a block retired while another
// client is pinned is held back, and reused once it unpins, with the epoch advancing.
func epochsWork(t *testing.T, ctx context.Context, reader, writer *Allocator) {
	t.Helper()
	p, err := writer.Alloc(ctx, 256, 0)
	require.NoError(t, err)
	require.NoError(t, reader.Pin(ctx))
	require.NoError(t, writer.Retire(ctx, p, 256))
	n, err := writer.Reclaim(ctx)
	require.NoError(t, err)
	require.Zero(t, n, "reused while a reader that could reach it is pinned")
	require.NoError(t, reader.Unpin())
	require.NoError(t, reader.Quiesce(ctx))
	before := writer.Stats().Advances
	freed := 0
	for range 4 {
		n, err := writer.Reclaim(ctx)
		require.NoError(t, err)
		freed += n
	}
	require.Equal(t, 1, freed, "the retired block is reusable once the reader left")
	require.Greater(t, writer.Stats().Advances, before, "the global epoch advanced")
}

// replicaScenario runs on an already formatted fabric with the nodes in down crashed: two
// allocators claim symmetric chunks, defer frees, and one hands over to its successor.
func replicaScenario(t *testing.T, ctx context.Context, open func(i int) farmem.Memory, taken map[SymOffset]string) {
	t.Helper()
	m1, m2 := open(0), open(1)
	a1, err := New(ctx, m1, longLeases)
	require.NoError(t, err)
	a2, err := New(ctx, m2, longLeases)
	require.NoError(t, err)
	symClaims(t, ctx, []*Allocator{a1, a2}, 6, taken)
	epochsWork(t, ctx, a1, a2)
	// Handover: a2 holds chunks; its successor on the same client adopts them.
	_, err = a2.Alloc(ctx, 512, 0)
	require.NoError(t, err)
	require.NoError(t, a2.Close())
	require.Equal(t, uint64(1), a2.Stats().HandedOver)
	a3, err := New(ctx, m2, longLeases)
	require.NoError(t, err)
	require.NoError(t, a3.Adopted().Err)
	require.Equal(t, 1, a3.Adopted().Records, "the successor adopts the record")
	symClaims(t, ctx, []*Allocator{a1, a3}, 3, taken)
	require.NoError(t, a3.Close())
	require.NoError(t, a1.Close())
}

// With r = 3 on local, the allocator works with any one node crashed (the home node
// included); with r = 5, with any two.
func TestReplicatedMetaCrashLocal(t *testing.T) {
	cases := []struct {
		r    int
		down []farmem.NodeID
	}{{3, []farmem.NodeID{1}}, {3, []farmem.NodeID{2}}, {3, []farmem.NodeID{3}}, {5, []farmem.NodeID{1, 2}}, {5, []farmem.NodeID{3, 5}}}
	for _, tc := range cases {
		t.Run(fmt.Sprintf("r%d-down%v", tc.r, tc.down), func(t *testing.T) {
			ctx := context.Background()
			c := newCluster(t, local.Options{Shape: local.Shape{MemoryNodes: tc.r, MemorySize: 1 << 20, ComputeNodes: 2, ClientsPerNode: 16}}, replicaFormat(tc.r))
			m := c.client(t, 0)
			h := c.header(t, m, 1)
			require.Equal(t, tc.r, h.Replicas)
			require.Len(t, MetaNodes(c.f.Topology(), h), tc.r)
			taken := map[SymOffset]string{}
			// Before the crash, then with the nodes down.
			replicaScenario(t, ctx, func(i int) farmem.Memory { return c.client(t, i) }, taken)
			for _, n := range tc.down {
				require.NoError(t, c.f.Crash(n))
			}
			replicaScenario(t, ctx, func(i int) farmem.Memory { return c.client(t, i) }, taken)
		})
	}
}

// More nodes down than r = 3 tolerates: allocation on the metadata fails with ErrNodeDown
// rather than go on without a majority.
func TestReplicatedMetaNoQuorum(t *testing.T) {
	ctx := context.Background()
	c := newCluster(t, local.Options{Shape: local.Shape{MemoryNodes: 3, MemorySize: 1 << 20, ComputeNodes: 1, ClientsPerNode: 16}}, replicaFormat(3))
	a, _ := c.allocator(t, 0, longLeases)
	require.NoError(t, c.f.Crash(1))
	require.NoError(t, c.f.Crash(2))
	_, err := a.AllocSymmetric(ctx, 4<<10, 0)
	require.ErrorIs(t, err, farmem.ErrNodeDown)
	require.ErrorIs(t, a.Pin(ctx), farmem.ErrNodeDown)
}

// A metadata node (the home node) restarts and loses its memory: the allocators go on with the
// other two; once adopted and restored from them it holds the largest bump word and epoch and
// the live announcements, and then another node can crash with nothing handed out twice.
func TestReplicatedMetaRestartLocal(t *testing.T) {
	ctx := context.Background()
	c := newCluster(t, local.Options{Shape: local.Shape{MemoryNodes: 3, MemorySize: 1 << 20, ComputeNodes: 2, ClientsPerNode: 16}}, replicaFormat(3))
	m := c.client(t, 0)
	taken := map[SymOffset]string{}
	replicaScenario(t, ctx, func(i int) farmem.Memory { return c.client(t, i) }, taken)
	require.NoError(t, c.f.Restart(1))
	replicaScenario(t, ctx, func(i int) farmem.Memory { return c.client(t, i) }, taken)
	require.NoError(t, c.f.Adopt(ctx, 1))
	// Adopted, not restored: clients skip it (its epoch word is 0).
	replicaScenario(t, ctx, func(i int) farmem.Memory { return c.client(t, i) }, taken)
	require.NoError(t, Reformat(ctx, m, 1, 1))
	require.NoError(t, Reformat(ctx, m, 1, 1), "idempotent")
	h1, h2, h3 := c.header(t, m, 1), c.header(t, m, 2), c.header(t, m, 3)
	require.Equal(t, max(h2.SymBump, h3.SymBump), h1.SymBump, "the largest symmetric bump word")
	require.Equal(t, max(h2.Epoch, h3.Epoch), h1.Epoch, "the largest epoch")
	require.Equal(t, h1.HeapBase, h1.Bump, "its own heap starts afresh")

	// Again with a pinned client: its announcement is copied to the restored node.
	pinned, _ := c.allocator(t, 1, longLeases)
	require.NoError(t, pinned.Pin(ctx))
	require.NoError(t, c.f.Restart(1))
	require.NoError(t, c.f.Adopt(ctx, 1))
	require.NoError(t, Reformat(ctx, m, 1, 1))
	slot := make([]byte, 8)
	require.NoError(t, m.Read(ctx, farmem.MakeAddr(1, h1.TableOff+8*uint64(pinned.id)), slot))
	require.Equal(t, pinned.ep.word, le64(slot), "the pinned client's announcement was copied")
	require.NoError(t, pinned.Unpin())
	require.NoError(t, pinned.Quiesce(ctx))

	// Now lose another node: the restored one counts in the majority.
	require.NoError(t, c.f.Crash(2))
	replicaScenario(t, ctx, func(i int) farmem.Memory { return c.client(t, i) }, taken)
}

// The same on the simulator, deterministic in virtual time: r = 3 with the home node crashed,
// r = 5 with two.
func TestReplicatedMetaCrashSim(t *testing.T) {
	for _, tc := range []struct {
		r    int
		down []farmem.NodeID
	}{{3, []farmem.NodeID{1}}, {5, []farmem.NodeID{1, 4}}} {
		t.Run(fmt.Sprintf("r%d", tc.r), func(t *testing.T) {
			model := sim.ConnectX6()
			model.MemoryNodes, model.ComputeNodes, model.ClientsPerNode, model.MemorySize = tc.r, 2, 16, 1<<20
			model.Tearing = true
			s, err := sim.New(model, 7)
			require.NoError(t, err)
			t.Cleanup(func() { _ = s.Close() })
			comp := s.Topology().ComputeNodes()
			open := func(i int) farmem.Memory {
				m, err := s.Open(context.Background(), comp[i%len(comp)])
				require.NoError(t, err)
				t.Cleanup(func() { _ = m.Close() })
				return m
			}
			s.Run(func() {
				ctx := context.Background()
				require.NoError(t, FormatAll(ctx, open(0), replicaFormat(tc.r)))
				taken := map[SymOffset]string{}
				replicaScenario(t, ctx, open, taken)
				start := s.Now()
				for _, n := range tc.down {
					require.NoError(t, s.Crash(n))
				}
				replicaScenario(t, ctx, open, taken)
				require.Less(t, s.Now().Sub(start), time.Second, "bounded, in virtual time")
			})
		})
	}
}

// r = 1 keeps the bytes of an unreplicated header, and r must be odd and fit the topology.
func TestReplicasFormatOptions(t *testing.T) {
	c := newCluster(t, local.Options{Shape: local.Shape{MemoryNodes: 3, MemorySize: 1 << 20, ComputeNodes: 1, ClientsPerNode: 16}}, FormatOptions{ChunkSize: 4 << 10})
	m := c.client(t, 0)
	h := c.header(t, m, 2)
	require.Equal(t, 1, h.Replicas)
	require.Equal(t, uint64(h.Home), h.constants()[10], "r = 1 leaves the home word as it was")
	for _, r := range []int{2, 4, 5} {
		_, err := Layout(c.f.Topology(), 1, FormatOptions{Replicas: r})
		require.ErrorIs(t, err, farmem.ErrInvalid, "r = %d", r)
	}
	h3, err := Layout(c.f.Topology(), 2, FormatOptions{Replicas: 3})
	require.NoError(t, err)
	got, err := DecodeHeader(h3.Encode())
	require.NoError(t, err)
	require.Equal(t, 3, got.Replicas)
	require.Equal(t, []farmem.NodeID{2, 3, 1}, MetaNodes(c.f.Topology(), Header{Home: 2, Replicas: 3}))
}

// Round trips with r = 3 against r = 1, measured on the same shape: a symmetric chunk claim,
// New (nothing to adopt, and adopting), a pin, a scan, a retire without a pin, and Close.
func TestReplicatedRoundTrips(t *testing.T) {
	for _, r := range []int{1, 3} {
		t.Run(fmt.Sprint("r", r), func(t *testing.T) {
			ctx := context.Background()
			c := newCluster(t, local.Options{Shape: local.Shape{MemoryNodes: 3, MemorySize: 1 << 20, ComputeNodes: 1, ClientsPerNode: 16}}, replicaFormat(r))
			m := c.client(t, 0)
			rt := func(f func()) uint64 {
				before := m.Stats()
				f()
				return m.Stats().Sub(before).RoundTrips
			}
			want := map[int][6]uint64{
				1: {NewRoundTrips, ChunkClaimRoundTrips, PinRoundTrips, ScanRoundTrips, CloseRoundTrips, NewAdoptRoundTrips},
				3: {NewReplicatedRoundTrips, ChunkClaimRoundTrips, PinRoundTrips, ScanRoundTrips, CloseReplicatedRoundTrips, NewReplicatedAdoptRoundTrips},
			}[r]
			var a *Allocator
			require.Equal(t, want[0], rt(func() {
				var err error
				a, err = New(ctx, m, longLeases)
				require.NoError(t, err)
			}), "New")
			require.Equal(t, want[1], rt(func() {
				_, err := a.AllocSymmetric(ctx, 4<<10, 0)
				require.NoError(t, err)
			}), "symmetric chunk claim")
			require.Equal(t, want[2], rt(func() { require.NoError(t, a.Pin(ctx)) }), "pin")
			require.NoError(t, a.Unpin())
			require.Equal(t, want[3], rt(func() {
				_, err := a.Reclaim(ctx)
				require.NoError(t, err)
			}), "scan")
			_, err := a.Alloc(ctx, 512, 0)
			require.NoError(t, err)
			require.Equal(t, want[4], rt(func() { require.NoError(t, a.Close()) }), "close handing over")
			require.Equal(t, want[5], rt(func() {
				b, err := New(ctx, m, longLeases)
				require.NoError(t, err)
				require.Equal(t, 1, b.Adopted().Records)
				require.NoError(t, b.Close())
			})-want[4], "new adopting")
		})
	}
}

// Concurrent symmetric claims on the simulator (jitter, r = 3, one node crashed midway): the
// CASes race, losers retry from what they read, and no chunk is handed out twice.
func TestReplicatedSymmetricRaceSim(t *testing.T) {
	model := sim.ConnectX6()
	model.MemoryNodes, model.ComputeNodes, model.ClientsPerNode, model.MemorySize = 3, 2, 16, 4<<20
	model.Jitter = 500 * time.Nanosecond
	s, err := sim.New(model, 3)
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	comp := s.Topology().ComputeNodes()
	const clients, each = 8, 12
	got := make([][]SymOffset, clients)
	s.Run(func() {
		ctx := context.Background()
		m0, err := s.Open(ctx, comp[0])
		require.NoError(t, err)
		require.NoError(t, FormatAll(ctx, m0, FormatOptions{ChunkSize: 4 << 10, SymmetricSize: 1 << 20, Replicas: 3}))
		s.At(s.Now().Add(20*time.Microsecond), func() { _ = s.Crash(2) })
		require.NoError(t, s.Parallel(clients, func(g int) {
			m, err := s.Open(ctx, comp[g%len(comp)])
			require.NoError(t, err)
			a, err := New(ctx, m, longLeases)
			require.NoError(t, err)
			for range each {
				o, err := a.AllocSymmetric(ctx, 4<<10, 0)
				require.NoError(t, err)
				got[g] = append(got[g], o)
			}
		}))
	})
	seen := map[SymOffset]int{}
	for g, os := range got {
		require.Len(t, os, each)
		for _, o := range os {
			prev, dup := seen[o]
			require.False(t, dup, "chunk %#x claimed by clients %d and %d", uint64(o), prev, g)
			seen[o] = g
		}
	}
}
