package flexcheck_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/farmem/farmem/farmem"
	"github.com/farmem/farmem/farmem/local"
	"github.com/farmem/farmem/kvstore"
	"github.com/farmem/farmem/sim"
)

// backupReads runs the backup-read scenario on a FlexKV store over 3 memory nodes (3 copies of
// every KV block): keys are inserted, half the partitions proxied, every key read once (so
// nodes cache addresses or pairs), then crash fails a memory node other than the home node.
// Every key whose slot is still reachable (on a live memory node, or in a proxy's copy) is
// read from every compute node and gives its value, also the keys whose block's primary was on
// the crashed node (read from a backup, through the index when an address was cached); the
// others fail with ErrNodeDown, never a wrong value or ErrNotFound. An update of a key whose
// block's primary is down fails with ErrNodeDown.
func backupReads(t *testing.T, f farmem.Fabric, s *kvstore.Store, k *kvstore.FlexKV, crash func(farmem.NodeID) error) {
	ctx := context.Background()
	nodes := f.Topology().ComputeNodes()
	mns := f.Topology().MemoryNodes()
	require.Len(t, mns, 3)
	dead := mns[2]
	const keys = 96
	for i := range uint64(keys) {
		require.NoError(t, s.Insert(ctx, key(i), val(i, 24)))
	}
	proxied := map[int]bool{}
	for p := 0; p < k.Partitions(); p += 2 {
		require.NoError(t, s.HandOver(ctx, p, nodes[1+p/2%(len(nodes)-1)]))
		proxied[p] = true
	}
	var sess []*kvstore.Session
	for _, n := range nodes {
		sess = append(sess, sessionOn(t, f, s, n))
	}
	locs := map[uint64]kvstore.Location{}
	for i := range uint64(keys) {
		loc, err := s.Locate(ctx, key(i))
		require.NoError(t, err)
		locs[i] = loc
		for _, ss := range sess {
			got, err := ss.Get(ctx, key(i))
			require.NoError(t, err)
			x, err := unval(got)
			require.NoError(t, err)
			require.Equal(t, i, x)
		}
	}
	require.NoError(t, crash(dead))
	var fromBackup, lost, primaryDown uint64
	var updated bool
	for i := range uint64(keys) {
		loc := locs[i]
		reachable := loc.Subtable.Node() != dead || proxied[k.PartitionOf(key(i))]
		onDead := loc.Block.Node() == dead
		for _, ss := range sess {
			got, err := ss.Get(ctx, key(i))
			if !reachable {
				require.ErrorIs(t, err, farmem.ErrNodeDown, "key %d: its slot is on the crashed node", i)
				continue
			}
			require.NoError(t, err, "key %d (block on %v, slot on %v)", i, loc.Block.Node(), loc.Subtable.Node())
			x, err := unval(got)
			require.NoError(t, err)
			require.Equal(t, i, x)
			if onDead {
				fromBackup++
			}
		}
		if !reachable {
			lost++
		}
		if onDead {
			primaryDown++
			if reachable && !updated {
				err := sess[0].Update(ctx, key(i), val(i+1000, 24))
				require.ErrorIs(t, err, farmem.ErrNodeDown, "an update of key %d whose block's primary is down", i)
				updated = true
				// It had no effect: the key still reads its value.
				got, err := sess[1].Get(ctx, key(i))
				require.NoError(t, err)
				x, _ := unval(got)
				require.Equal(t, i, x)
			}
		}
	}
	t.Logf("%d keys: %d with their block's primary on the crashed node, %d with their slot there; %d reads served from a backup copy", keys, primaryDown, lost, fromBackup)
	require.Positive(t, fromBackup, "reads were served from backup copies")
	require.True(t, updated)
}

// TestFlexKVBackupReadsLocal: the backup-read scenario on a local fabric (tearing, strict mode).
func TestFlexKVBackupReadsLocal(t *testing.T) {
	t.Parallel()
	k := &kvstore.FlexKV{}
	f, s := flexLocal(t, k, local.Options{Tearing: true, Jitter: 2 * time.Microsecond})
	backupReads(t, f, s, k, f.Crash)
}

// TestFlexKVBackupReadsSim: the same on the simulator.
func TestFlexKVBackupReadsSim(t *testing.T) {
	t.Parallel()
	model := sim.ConnectX6()
	model.MemoryNodes, model.ComputeNodes, model.MemorySize = 3, 3, 64<<20
	model.Tearing = true
	sm := startSim(t, model, 3)
	sm.Run(func() {
		k := &kvstore.FlexKV{}
		s, err := kvstore.Open(context.Background(), sm, kvstore.Options{Index: k, Alloc: shortLeases})
		require.NoError(t, err)
		t.Cleanup(func() { _ = s.Close() })
		backupReads(t, sm, s, k, sm.Crash)
	})
}

// TestFlexKVBackupDisagreeLocal: when the copies disagree (a backup damaged), a reader whose
// primary is down skips the copy that fails validation and reads the next; with every backup
// damaged the read fails with ErrNodeDown, never a wrong value.
func TestFlexKVBackupDisagreeLocal(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	k := &kvstore.FlexKV{}
	f, s := flexLocal(t, k, local.Options{})
	mns := f.Topology().MemoryNodes()
	dead := mns[2]
	// Two keys whose blocks' primaries are on the node to crash and whose slots are not.
	var picked []uint64
	var locs []kvstore.Location
	for i := uint64(0); len(picked) < 2 && i < 500; i++ {
		require.NoError(t, s.Insert(ctx, key(i), val(i, 40)))
		loc, err := s.Locate(ctx, key(i))
		require.NoError(t, err)
		if loc.Block.Node() == dead && loc.Subtable.Node() != dead {
			picked = append(picked, i)
			locs = append(locs, loc)
		}
	}
	require.Len(t, picked, 2)
	m, err := f.Open(ctx, f.Topology().ComputeNodes()[0])
	require.NoError(t, err)
	defer m.Close()
	// The copies sit on the next memory nodes in id order, at the block's offset.
	backup := func(loc kvstore.Location, i int) farmem.Addr {
		return farmem.MakeAddr(mns[i%len(mns)], loc.Block.Offset())
	}
	garbage := make([]byte, 32)
	for j := range garbage {
		garbage[j] = byte(0xa5 ^ j)
	}
	// Key 0: its first backup damaged; key 1: both.
	require.NoError(t, m.Write(ctx, backup(locs[0], 0), garbage))
	require.NoError(t, m.Write(ctx, backup(locs[1], 0), garbage))
	require.NoError(t, m.Write(ctx, backup(locs[1], 1), garbage))
	require.NoError(t, f.Crash(dead))
	ss := sessionOn(t, f, s, f.Topology().ComputeNodes()[1])
	got, err := ss.Get(ctx, key(picked[0]))
	require.NoError(t, err)
	x, err := unval(got)
	require.NoError(t, err)
	require.Equal(t, picked[0], x, "the second backup's copy")
	_, err = ss.Get(ctx, key(picked[1]))
	require.ErrorIs(t, err, farmem.ErrNodeDown, "no valid copy left")
}
