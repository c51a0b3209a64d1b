package main

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/farmem/farmem/farmem"
	"github.com/farmem/farmem/kvstore"
	"github.com/farmem/farmem/rdma"
)

// partitionCluster is a store on three memory nodes reached over tcp by two compute
// processes, A and B, each with its Store handle, and how to cut a memory node off from some
// of them and heal it: the fabric's in-process fault (rdma.Injector.PartitionNodes) or a link
// of a network namespace taken down.
type partitionCluster struct {
	fabs   [2]*rdma.Fabric
	stores [2]*kvstore.Store
	cut    func(node farmem.NodeID, from ...int) error
	heal   func(node farmem.NodeID, from ...int) error
}

// hosted names the compute nodes of the processes from.
func (pc *partitionCluster) hosted(from []int) []farmem.NodeID {
	var ns []farmem.NodeID
	for _, i := range from {
		ns = append(ns, pc.fabs[i].Hosted()...)
	}
	return ns
}

// TestReplicatedStorePartition: three in-process memory nodes on tcp and two compute
// processes, A and B, running a store of each replicated kind; node 3 is cut off from A (the
// fabric's partition fault: A's verbs to it neither apply nor answer) while writers on both
// run, then healed. No operation fails. Then node 2 is cut off from both, so every read must
// use node 3, the node that missed A's writes: no read from B of A's keys returns a stale
// value (a read may fail with ErrNodeDown, which is logged: see below), and once every key was
// written again every acknowledged write reads back from B through node 3.
//
// Why a read may fail right after the heal: a KV block written while node 3 was cut off is on
// nodes 1 and 2 only; with node 2 cut off too, node 1 alone holds it, and replmem does not count
// node 3's never-written copy (version 0) toward a majority, since a node restarted empty looks
// the same. It answers ErrNoQuorum (ErrNodeDown), never a stale value.
func TestReplicatedStorePartition(t *testing.T) {
	parallel(t, 6*time.Second, false) // mostly waiting out down timeouts
	for _, k := range replicatedKinds() {
		t.Run(k.name, func(t *testing.T) {
			pc := startInProcessPartition(t, k)
			replicatedPartition(t, pc)
		})
	}
}

const partitionDown = 500 * time.Millisecond

func startInProcessPartition(t *testing.T, k storeKind) *partitionCluster {
	servers, addrs := startServers(t, 1, 2, 3)
	cl := &rdma.Cluster{DownTimeout: partitionDown, Memory: addrs}
	pc := &partitionCluster{}
	for i := range pc.fabs {
		pc.fabs[i] = dialCluster(t, cl)
	}
	in := rdma.NewInjector(servers, pc.fabs[:])
	pc.cut = func(node farmem.NodeID, from ...int) error { return in.PartitionNodes(node, pc.hosted(from)...) }
	pc.heal = func(node farmem.NodeID, from ...int) error { return in.HealNodes(node, pc.hosted(from)...) }
	openPartitionStores(t, pc, k)
	return pc
}

// startServers starts in-process memory nodes of procNodeSize on loopback.
func startServers(t *testing.T, ids ...farmem.NodeID) ([]*rdma.Server, []rdma.NodeAddr) {
	var servers []*rdma.Server
	var addrs []rdma.NodeAddr
	for _, id := range ids {
		s, err := rdma.NewServer(rdma.ServerOptions{Node: id, Size: procNodeSize, Secret: clusterSecret(), Logger: quietLogger()})
		require.NoError(t, err)
		addr, err := s.Listen("127.0.0.1:0")
		require.NoError(t, err)
		t.Cleanup(func() { _ = s.Close() })
		servers = append(servers, s)
		addrs = append(addrs, rdma.NodeAddr{ID: id, Addr: addr})
	}
	return servers, addrs
}

// clusterSecret is the cluster secret as farmemd reads it from its secret file.
func clusterSecret() []byte { return []byte(strings.TrimSpace(secret)) }

func dialCluster(t *testing.T, cl *rdma.Cluster) *rdma.Fabric {
	f, err := rdma.Dial(context.Background(), cl, rdma.Options{Secret: clusterSecret(), Logger: quietLogger()})
	require.NoError(t, err)
	t.Cleanup(func() { _ = f.Close() })
	return f
}

func openPartitionStores(t *testing.T, pc *partitionCluster, k storeKind) {
	ctx := context.Background()
	s, err := kvstore.Open(ctx, pc.fabs[0], k.opts())
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	o := k.opts()
	o.NoCreate = true
	s2, err := kvstore.Open(ctx, pc.fabs[1], o)
	require.NoError(t, err)
	t.Cleanup(func() { _ = s2.Close() })
	pc.stores = [2]*kvstore.Store{s, s2}
}

func replicatedPartition(t *testing.T, pc *partitionCluster) {
	a, b := pc.stores[0], pc.stores[1]
	l := startLoad([]*kvstore.Store{a, a, b, b}, 8) // writers 0 and 1 on A, 2 and 3 on B
	defer l.halt()
	start := time.Now()
	l.until(t, "all connected", phaseOps, 0, nil)
	base, n := l.p50(start, time.Now())
	t.Logf("pre-fault p50 %v over %d operations", base, n)

	// The cut lasts until A's fabric has found node 3 down and every writer has gone on
	// meanwhile (A's writing to nodes 1 and 2 alone); with -farmemd.long-faults, 5 s.
	fault := time.Now()
	cutNode3FromA(t, pc)
	l.until(t, "node 3 cut off from A, found down", phaseOps, 0, nil)
	if *longFaults {
		l.phase(t, "node 3 cut off from A", max(0, 5*time.Second-time.Since(fault)))
	}
	healNode3FromA(t, pc, l, base, fault)

	// Every read now has to use node 3: node 2 is cut off from both processes.
	acked := l.snapshot()[:2] // A's writers' keys: what node 3 missed
	require.NoError(t, pc.cut(2, 0, 1))
	t0 := time.Now()
	stale, unavailable := checkAcked(t, b, acked)
	t.Logf("node 2 cut off, reads through node 3 right after the heal: %d stale, %d unavailable (ErrNodeDown or still trying after %v) of %d keys, in %v",
		stale, unavailable, unavailableAfter, countAcked(acked), time.Since(t0).Round(time.Millisecond))
	require.Zero(t, stale, "a read through the node that missed writes returned a stale value")
	require.NoError(t, pc.heal(2, 0, 1))
	// Every key written again with all nodes connected (A's and B's fabrics find node 2 again
	// as the writers use it), then read through node 3 once more: now every acknowledged write
	// must read back.
	l2 := startLoad([]*kvstore.Store{a, a, b, b}, 8)
	defer l2.halt()
	t0 = time.Now()
	require.Eventually(t, func() bool { return l2.everyKeyWritten() }, time.Minute, 10*time.Millisecond)
	l2.halt()
	t.Logf("every key written again in %v (%d operations)", time.Since(t0).Round(time.Millisecond), l2.ops.Load())
	require.NoError(t, pc.cut(2, 0, 1))
	t0 = time.Now()
	stale, unavailable = checkAcked(t, b, l2.snapshot())
	t.Logf("reads through node 3 after that: %d stale, %d unavailable in %v", stale, unavailable, time.Since(t0).Round(time.Millisecond))
	require.Zero(t, stale, "stale values through node 3")
	require.Zero(t, unavailable, "unavailable keys through node 3 after every key was written again")
	require.NoError(t, pc.heal(2, 0, 1))
	require.Zero(t, l2.failed.Load(), "failed operations (first: %v)", l2.first.Load())
}

// cutNode3FromA cuts node 3 off from process A and waits until A's verbs to it time out (its
// fabric reports the node down), B's fabric still reporting it up.
func cutNode3FromA(t *testing.T, pc *partitionCluster) {
	require.NoError(t, pc.cut(3, 0))
	require.Eventually(t, func() bool {
		st, err := pc.fabs[0].NodeStatus(3)
		return err == nil && st.State == farmem.NodeDown
	}, 30*time.Second, 10*time.Millisecond)
	st, err := pc.fabs[1].NodeStatus(3)
	require.NoError(t, err)
	require.Equal(t, farmem.NodeUp, st.State, "B is not cut off")
}

// healNode3FromA heals the cut of node 3 from A made at fault, logs the load's recovery from
// base (its pre-fault median), waits until A's fabric reports node 3 up again, stops the load
// and asserts that none of its operations failed.
func healNode3FromA(t *testing.T, pc *partitionCluster, l *storeLoad, base time.Duration, fault time.Time) {
	require.NoError(t, pc.heal(3, 0))
	healed := time.Now()
	l.recovery(t, "partition of node 3 from A", base, fault, healed)
	require.Eventually(t, func() bool {
		st, err := pc.fabs[0].NodeStatus(3)
		return err == nil && st.State == farmem.NodeUp
	}, 30*time.Second, 10*time.Millisecond)
	t.Logf("node 3 back in A's fabric %v after the heal", time.Since(healed).Round(time.Millisecond))
	l.halt()
	require.Zero(t, l.failed.Load(), "failed operations during the partition (first: %v)", l.first.Load())
}

// checkAcked reads every acknowledged write from s and counts the reads that
// returned another value (stale) and those that returned none: failed with ErrNodeDown (a
// replicated store that cannot assemble a quorum says so) or still trying after
// unavailableAfter. Any other error fails the test.
func checkAcked(t *testing.T, s *kvstore.Store, acked [][]int) (stale, unavailable int) {
	{
		for w := range acked {
			for k, v := range acked[w] {
				if v == 0 {
					continue
				}
				ctx, cancel := context.WithTimeout(context.Background(), unavailableAfter)
				got, err := s.Get(ctx, loadKey(w, k))
				cancel()
				switch {
				case errors.Is(err, farmem.ErrNodeDown) || errors.Is(err, context.DeadlineExceeded):
					unavailable++
				case err != nil:
					require.NoError(t, err, "writer %d key %d", w, k)
				case string(got) != string(loadVal(w, v)):
					stale++
					t.Logf("writer %d key %d: read another value than version %d", w, k, v)
				}
			}
		}
	}
	return stale, unavailable
}

// unavailableAfter bounds a read checkAcked makes: a replicated store that cannot assemble a
// quorum retries with backoff before it gives up.
const unavailableAfter = 4 * partitionDown

func countAcked(acked [][]int) int {
	n := 0
	for _, ks := range acked {
		for _, v := range ks {
			if v != 0 {
				n++
			}
		}
	}
	return n
}
