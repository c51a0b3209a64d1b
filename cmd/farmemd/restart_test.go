package main

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/farmem/farmem/alloc"
	"github.com/farmem/farmem/ds/race"
	"github.com/farmem/farmem/farmem"
	"github.com/farmem/farmem/kvstore"
	"github.com/farmem/farmem/rdma"
)

func restartKey(i int) []byte { return fmt.Appendf(nil, "rk%08d", i) }

func restartVal(i, n int) []byte {
	b := make([]byte, n)
	binary.LittleEndian.PutUint64(b, uint64(i)*2654435761+7)
	return b
}

// retryDown runs op until it returns anything but a plain ErrNodeDown (a connection to the dead
// process failing: the next op dials the new one), for at most a minute.
func retryDown(op func() error) error {
	deadline := time.Now().Add(time.Minute)
	for {
		err := op()
		if !errors.Is(err, farmem.ErrNodeDown) || errors.Is(err, farmem.ErrNodeLost) || time.Now().After(deadline) {
			return err
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestRestartUnderStore: three farmemd processes; a store on them; node 2 (not the home node)
// is killed and restarted at the same address with new memory while readers keep reading keys
// held elsewhere. The same client (never restarted) reconnects: keys whose slot or value lived
// on node 2 fail with ErrNodeLost naming it, the others read back exactly (0 wrong values, 0
// ErrNotFound), Store.Adopt reports exactly the lost keys, only those are absent afterwards, and
// new keys are placed on node 2 again.
func TestRestartUnderStore(t *testing.T) {
	parallel(t, 2600*time.Millisecond, true) // its own farmemd processes; 900 keys inserted, then readers
	dir := t.TempDir()
	ds := startDaemons(t, dir, 3, "16MiB")
	const down = time.Second
	cf := writeCluster(t, dir, ds, fmt.Sprintf("down-timeout %v\n", down))
	f := dial(t, cf, rdma.Options{})
	ctx := context.Background()
	s, err := kvstore.Open(ctx, f, kvstore.Options{
		Alloc: alloc.Options{Lease: 30 * time.Second, Refresh: time.Second},
		Index: kvstore.Race{Params: race.Params{Groups: 8}},
	})
	require.NoError(t, err)
	defer s.Close()
	require.Equal(t, farmem.NodeID(1), s.Home())
	const node = farmem.NodeID(2)

	// Keys from three sessions (three clients, each preferring another node).
	const keys = 900
	var sess []*kvstore.Session
	for range 3 {
		ss, err := s.Session(ctx)
		require.NoError(t, err)
		sess = append(sess, ss)
	}
	for i := range keys {
		require.NoError(t, sess[i%3].Insert(ctx, restartKey(i), restartVal(i, 16+i%40)))
	}
	for _, ss := range sess {
		require.NoError(t, ss.Close())
	}
	locs := make([]kvstore.Location, keys)
	lost := make([]bool, keys)
	affected := 0
	var elsewhere []int
	for i := range keys {
		locs[i], err = s.Locate(ctx, restartKey(i))
		require.NoError(t, err)
		lost[i] = locs[i].Block.Node() == node || locs[i].Subtable.Node() == node
		if lost[i] {
			affected++
		} else {
			elsewhere = append(elsewhere, i)
		}
	}
	t.Logf("%d of %d keys have their slot or block on %v", affected, keys, node)
	require.NotZero(t, affected)
	require.NotEmpty(t, elsewhere)
	st0, err := f.NodeStatus(node)
	require.NoError(t, err)
	require.Equal(t, farmem.NodeUp, st0.State)

	// Readers of keys held elsewhere run through the restart, paced as the kill tests' writers
	// are (loadPace): a couple of thousand reads spread over the second and a half, where flat
	// out they made some 22000 and kept a processor busy.
	var stop atomic.Bool
	var reads, readErrs atomic.Int64
	var firstErr atomic.Value
	var wg sync.WaitGroup
	for r := range 2 {
		wg.Go(func() {
			for j := r; !stop.Load(); j++ {
				if j > r {
					time.Sleep(loadPace)
				}
				i := elsewhere[j%len(elsewhere)]
				v, err := s.Get(ctx, restartKey(i))
				reads.Add(1)
				if err != nil || string(v) != string(restartVal(i, 16+i%40)) {
					readErrs.Add(1)
					firstErr.CompareAndSwap(nil, fmt.Sprintf("key %d: %v", i, err))
				}
			}
		})
	}
	time.Sleep(100 * time.Millisecond)
	d2 := ds[1]
	d2.kill9()
	time.Sleep(down / 2)
	d2b := startDaemon(t, dir, node, "16MiB", d2.addr)
	require.Equal(t, d2.addr, d2b.addr)
	time.Sleep(down)
	stop.Store(true)
	wg.Wait()
	t.Logf("readers of keys elsewhere: %d reads through the restart, %d failed (first: %v)", reads.Load(), readErrs.Load(), firstErr.Load())
	require.Zero(t, readErrs.Load(), "keys held elsewhere kept working")

	// The audit before adoption, on the same (never restarted) client process.
	var wrong, notFound, lostErrs int
	for i := range keys {
		var v []byte
		err := retryDown(func() (err error) { v, err = s.Get(ctx, restartKey(i)); return err })
		switch {
		case errors.Is(err, kvstore.ErrNotFound):
			notFound++
		case errors.Is(err, farmem.ErrNodeLost):
			lostErrs++
			require.True(t, lost[i], "key %d held elsewhere: %v", i, err)
			require.NotErrorIs(t, err, farmem.ErrOutOfRange)
			require.Contains(t, err.Error(), node.String())
		case err != nil:
			t.Fatalf("key %d: %v", i, err)
		case string(v) != string(restartVal(i, 16+i%40)):
			wrong++
		default:
			require.False(t, lost[i], "key %d on the restarted node read back", i)
		}
	}
	t.Logf("audit before adoption: %d ErrNodeLost, %d wrong values, %d ErrNotFound", lostErrs, wrong, notFound)
	require.Zero(t, wrong)
	require.Zero(t, notFound)
	require.Equal(t, affected, lostErrs)
	st, err := f.NodeStatus(node)
	require.NoError(t, err)
	require.Equal(t, farmem.NodeLost, st.State)
	require.Equal(t, st0.Incarnation, st.Incarnation)
	require.NotEqual(t, st0.Incarnation, st.Seen)
	status, err := f.Status(ctx, node)
	require.NoError(t, err)
	require.Equal(t, st.Seen, status.Incarnation, "the node's own status names its new incarnation")

	// A second compute process (another fabric) dialing now meets only the new incarnation:
	// the store's generation table makes it fence the node all the same.
	firstLost, firstKept := -1, -1
	for i := range keys {
		if lost[i] && locs[i].Block.Node() == node && locs[i].Subtable.Node() != node {
			firstLost = i
		}
		if !lost[i] {
			firstKept = i
		}
	}
	require.True(t, firstLost >= 0 && firstKept >= 0)
	f2 := dial(t, cf, rdma.Options{})
	st2, err := f2.NodeStatus(node)
	require.NoError(t, err)
	require.Equal(t, farmem.NodeUp, st2.State, "the new fabric knows only the new incarnation")
	s2, err := kvstore.Open(ctx, f2, kvstore.Options{NoCreate: true})
	require.NoError(t, err)
	defer s2.Close()
	st2, err = f2.NodeStatus(node)
	require.NoError(t, err)
	require.Equal(t, farmem.NodeLost, st2.State, "fenced from the store's records")
	_, err = s2.Get(ctx, restartKey(firstLost))
	require.ErrorIs(t, err, farmem.ErrNodeLost)
	v, err := s2.Get(ctx, restartKey(firstKept))
	require.NoError(t, err)
	require.Equal(t, restartVal(firstKept, 16+firstKept%40), v)

	// Adoption reports exactly the lost keys.
	rep, err := s.Adopt(ctx, node)
	require.NoError(t, err)
	require.Equal(t, uint64(1), rep.Generation)
	type slotID struct {
		st farmem.Addr
		i  int
	}
	entries := map[slotID]bool{}
	for _, e := range rep.Entries {
		entries[slotID{e.Subtable, e.Index}] = true
	}
	subs := map[farmem.Addr]bool{}
	for _, ls := range rep.Subtables {
		subs[ls.Addr] = true
	}
	blockLost := 0
	for i, loc := range locs {
		switch {
		case loc.Subtable.Node() == node:
			require.True(t, subs[loc.Subtable], "key %d: its subtable is not reported", i)
		case loc.Block.Node() == node:
			blockLost++
			require.True(t, entries[slotID{loc.Subtable, loc.Index}], "key %d: its slot is not reported", i)
		}
	}
	require.Equal(t, blockLost, rep.Lost)
	t.Logf("adoption: %d entries and %d subtables lost", rep.Lost, len(rep.Subtables))
	rep2, err := s2.Adopt(ctx, node)
	require.NoError(t, err)
	require.True(t, rep2.Already, "the second process finds the loss acknowledged")
	require.Equal(t, uint64(1), rep2.Generation)
	_, err = s2.Get(ctx, restartKey(firstLost))
	require.ErrorIs(t, err, kvstore.ErrNotFound)
	for i := range keys {
		v, err := s.Get(ctx, restartKey(i))
		if lost[i] {
			require.ErrorIs(t, err, kvstore.ErrNotFound, "lost key %d", i)
			continue
		}
		require.NoError(t, err)
		require.Equal(t, restartVal(i, 16+i%40), v)
	}

	// New keys are placed on the node again.
	sess = sess[:0]
	for range 3 {
		ss, err := s.Session(ctx)
		require.NoError(t, err)
		sess = append(sess, ss)
	}
	onNode := 0
	for i := keys; i < keys+300; i++ {
		require.NoError(t, sess[i%3].Insert(ctx, restartKey(i), restartVal(i, 900)))
		loc, err := s.Locate(ctx, restartKey(i))
		require.NoError(t, err)
		if loc.Block.Node() == node {
			onNode++
		}
		v, err := s.Get(ctx, restartKey(i))
		require.NoError(t, err)
		require.Equal(t, restartVal(i, 900), v)
	}
	for _, ss := range sess {
		require.NoError(t, ss.Close())
	}
	t.Logf("%d of 300 new keys placed on %v", onNode, node)
	require.NotZero(t, onNode)
	nodes, err := s.Nodes(ctx)
	require.NoError(t, err)
	for _, n := range nodes {
		require.Equal(t, farmem.NodeUp, n.State)
	}
}

// TestPauseResumeUnderStore: a farmemd paused with SIGSTOP for longer than the down timeout is
// reported down (ErrNodeDown, not ErrNodeLost) and, once resumed with SIGCONT, is usable again
// by the same client, with the same incarnation and its memory intact, without adoption.
func TestPauseResumeUnderStore(t *testing.T) {
	parallel(t, 4300*time.Millisecond, false) // its own farmemd processes; mostly waiting out down timeouts
	dir := t.TempDir()
	ds := startDaemons(t, dir, 2, "8MiB")
	n2 := ds[1]
	const down = time.Second
	cf := writeCluster(t, dir, ds, fmt.Sprintf("down-timeout %v\n", down))
	f := dial(t, cf, rdma.Options{})
	ctx := context.Background()
	m, err := f.Open(ctx, f.Hosted()[0])
	require.NoError(t, err)
	defer m.Close()
	a := farmem.MakeAddr(2, 1<<20)
	_, err = m.FAA(ctx, a, 41)
	require.NoError(t, err)
	st0, err := f.NodeStatus(2)
	require.NoError(t, err)

	require.NoError(t, n2.stop())
	_, err = m.FAA(ctx, a, 1) // waits out the down timeout
	require.ErrorIs(t, err, farmem.ErrNodeDown)
	require.NotErrorIs(t, err, farmem.ErrNodeLost)
	// The next op dials (and fails after the down timeout): the fabric knows it is down.
	_, err = m.FAA(ctx, a, 1)
	require.ErrorIs(t, err, farmem.ErrNodeDown)
	// The fabric marks the node down when it sees the failure (perhaps just after the verb
	// returned, on a loaded machine).
	require.Eventually(t, func() bool {
		st, err := f.NodeStatus(2)
		return err == nil && st.State == farmem.NodeDown
	}, 30*time.Second, 10*time.Millisecond)
	time.Sleep(2 * down) // well past the down timeout, while the fabric re-dials with backoff

	require.NoError(t, n2.cmd.Process.Signal(syscall.SIGCONT))
	// The background re-dialer finds it up again on its own (bounded by its backoff, twice
	// the down timeout, plus a handshake).
	require.Eventually(t, func() bool {
		st, err := f.NodeStatus(2)
		return err == nil && st.State == farmem.NodeUp
	}, 30*time.Second, 10*time.Millisecond)
	st, err := f.NodeStatus(2)
	require.NoError(t, err)
	require.Equal(t, st0, st, "the same incarnation")
	var prev uint64
	require.NoError(t, retryDown(func() (err error) { prev, err = m.FAA(ctx, a, 1); return err }))
	require.GreaterOrEqual(t, prev, uint64(41), "the memory survived the pause")
}
