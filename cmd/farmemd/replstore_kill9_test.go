package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/farmem/farmem/alloc"
	"github.com/farmem/farmem/ds/race"
	"github.com/farmem/farmem/farmem"
	"github.com/farmem/farmem/kvstore"
	"github.com/farmem/farmem/rdma"
)

// TestReplicatedStoreKill9: three farmemd processes, a store with Options.Replicas = 3 alone:
// its metadata and its RACE index (slots, directory, values) on all three, no other node.
// Writers run throughout: node 1 (the home node) is SIGKILLed, restarted empty at its address
// and adopted (metadata restored, index repopulated from nodes 2 and 3) while they run, then
// node 2 is SIGKILLed. No operation fails and every acknowledged write reads back, from nodes
// 1 and 3 alone; a second process then finds the store on them.
func TestReplicatedStoreKill9(t *testing.T) {
	t.Parallel() // its own farmemd processes
	replicatedKill9(t, 3)
}

// TestReplicatedMetaKill9: the same with four farmemd processes and an unreplicated index
// (Race.Replicas = 1) whose slots and values live on node 4, which is never killed: what is
// killed holds the store's and the allocator's replicated metadata only, and Adopt restores it
// and finds nothing of the index's to purge.
func TestReplicatedMetaKill9(t *testing.T) {
	t.Parallel() // its own farmemd processes
	replicatedKill9(t, 1)
}

// replicatedKill9 runs the scenario with r = 3 metadata on nodes 1-3 and the RACE index
// replicated on them (indexReplicas 3) or unreplicated on a fourth node (indexReplicas 1).
func replicatedKill9(t *testing.T, indexReplicas int) {
	dir := t.TempDir()
	nodes := 3
	opts := kvstore.Options{
		Replicas: 3,
		Alloc:    alloc.Options{Lease: 30 * time.Second, Refresh: time.Second},
		Index:    kvstore.Race{Params: race.Params{Groups: 8}},
	}
	reopen := kvstore.Options{NoCreate: true}
	if indexReplicas == 1 {
		nodes = 4
		opts.Alloc.Nodes = []farmem.NodeID{4}
		opts.Index = kvstore.Race{Params: race.Params{Groups: 8}, Replicas: 1}
		reopen.Alloc.Nodes = opts.Alloc.Nodes
	}
	var ds []*daemon
	for id := range nodes {
		ds = append(ds, startDaemon(t, dir, farmem.NodeID(id+1), "16MiB", "127.0.0.1:0"))
	}
	// Sizes stated, so that a process dialing while a node is down can lay it out.
	var sized strings.Builder
	for _, d := range ds {
		fmt.Fprintf(&sized, "memory %d %s size=%d\n", d.id, d.addr, 16<<20)
	}
	sized.WriteString("secret-file secret\ndown-timeout 1s\n")
	cf := filepath.Join(dir, "cluster-sized")
	require.NoError(t, os.WriteFile(cf, []byte(sized.String()), 0o644))
	f := dial(t, cf, rdma.Options{})
	ctx := context.Background()
	s, err := kvstore.Open(ctx, f, opts)
	require.NoError(t, err)
	defer s.Close()
	if indexReplicas > 1 {
		require.Equal(t, race.VirtualNodeBase+3, s.Descriptor().Roots[0].Node(), "the index is replicated")
	} else {
		require.Equal(t, farmem.NodeID(4), s.Descriptor().Roots[0].Node(), "the index lives on node 4")
	}

	const writers, keysPer = 3, 64
	var stop atomic.Bool
	var ops, failed atomic.Int64
	var firstErr atomic.Value
	acked := make([][]int, writers) // per writer, per key: the last acknowledged version
	var wg sync.WaitGroup
	for w := range writers {
		acked[w] = make([]int, keysPer)
		wg.Go(func() {
			for v := 1; !stop.Load(); v++ {
				k := v % keysPer
				key := fmt.Appendf(nil, "w%d-k%d", w, k)
				err := s.Put(ctx, key, restartVal(w*1_000_000+v, 24))
				ops.Add(1)
				if err != nil {
					failed.Add(1)
					firstErr.CompareAndSwap(nil, fmt.Sprintf("put %s: %v", key, err))
					continue
				}
				acked[w][k] = v
				got, err := s.Get(ctx, key)
				ops.Add(1)
				switch {
				case err != nil:
					failed.Add(1)
					firstErr.CompareAndSwap(nil, fmt.Sprintf("get %s: %v", key, err))
				case string(got) != string(restartVal(w*1_000_000+v, 24)):
					failed.Add(1)
					firstErr.CompareAndSwap(nil, fmt.Sprintf("get %s: not the value just written", key))
				}
			}
		})
	}
	phase := func(name string) {
		before := ops.Load()
		time.Sleep(300 * time.Millisecond)
		t.Logf("%s: %d operations, %d failed so far", name, ops.Load()-before, failed.Load())
	}
	phase("all up")
	ds[0].kill9()
	phase("node 1 killed")
	d1 := startDaemon(t, dir, 1, "16MiB", ds[0].addr)
	require.Equal(t, ds[0].addr, d1.addr)
	phase("node 1 restarted empty")
	rep, err := s.Adopt(ctx, 1)
	require.NoError(t, err)
	require.Equal(t, uint64(1), rep.Generation)
	require.Zero(t, rep.Lost, "repopulated (or, with the index on node 4, nothing to purge)")
	phase("node 1 adopted")
	ds[1].kill9()
	phase("node 2 killed")
	stop.Store(true)
	wg.Wait()
	lost := 0
	for w := range writers {
		for k, v := range acked[w] {
			if v == 0 {
				continue
			}
			got, err := s.Get(ctx, fmt.Appendf(nil, "w%d-k%d", w, k))
			if err != nil || string(got) != string(restartVal(w*1_000_000+v, 24)) {
				lost++
				t.Logf("writer %d key %d: %v", w, k, err)
			}
		}
	}
	t.Logf("%d operations, %d failed (first: %v), %d acknowledged writes lost", ops.Load(), failed.Load(), firstErr.Load(), lost)
	require.Zero(t, failed.Load(), "failed operations")
	require.Zero(t, lost, "lost acknowledged writes")
	// A second process finds the store from nodes 1 (restored) and 3.
	f2 := dial(t, cf, rdma.Options{})
	s2, err := kvstore.Open(ctx, f2, reopen)
	require.NoError(t, err)
	v, err := s2.Get(ctx, []byte("w0-k1"))
	require.NoError(t, err)
	require.NotEmpty(t, v)
	require.NoError(t, s2.Close())
}
