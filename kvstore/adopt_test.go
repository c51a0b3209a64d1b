package kvstore_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/farmem/farmem/ds/race"
	"github.com/farmem/farmem/farmem"
	"github.com/farmem/farmem/farmem/local"
	"github.com/farmem/farmem/kvstore"
)

// restartCase is a store under which a memory node other than the home node restarts.
type restartCase struct {
	s    *kvstore.Store
	node farmem.NodeID
	// restart restarts the node and returns the store to go on with (nil: the same one).
	restart func() *kvstore.Store
}

type keyState struct {
	val  []byte
	loc  kvstore.Location
	lost bool // its slot's subtable or its block was on the node
}

// runRestart runs the restart scenario: keys spread over every node by sessions on distinct
// clients (so every node holds blocks and subtables), the node restarts, an audit before
// adoption (affected keys fail with ErrNodeLost, the others read back exactly; 0 wrong values,
// 0 ErrNotFound), adoption (reports exactly the lost keys), an audit after (only those absent),
// and new keys that land on the node again.
func runRestart(t *testing.T, rc restartCase, keys int) {
	ctx := context.Background()
	s, node := rc.s, rc.node
	var sess []*kvstore.Session
	for range 3 {
		ss, err := s.Session(ctx)
		require.NoError(t, err)
		sess = append(sess, ss)
	}
	state := map[string]*keyState{}
	for i := range keys {
		k, v := key(uint64(i)), val(uint64(i)*7+1, 16+i%48)
		require.NoError(t, sess[i%len(sess)].Insert(ctx, k, v))
		state[string(k)] = &keyState{val: v}
	}
	for _, ss := range sess {
		require.NoError(t, ss.Close())
	}
	affected := 0
	for k, ks := range state {
		loc, err := s.Locate(ctx, []byte(k))
		require.NoError(t, err)
		ks.loc = loc
		ks.lost = loc.Block.Node() == node || loc.Subtable.Node() == node
		if ks.lost {
			affected++
		}
	}
	t.Logf("%d of %d keys have their slot or block on %v", affected, keys, node)
	require.NotZero(t, affected, "no key on the node: the scenario tests nothing")
	require.Less(t, affected, keys, "every key on the node: the scenario tests nothing")

	if s2 := rc.restart(); s2 != nil {
		s = s2
	}

	do := func(op func() error) error { return op() }
	// Before adoption.
	var wrong, notFound, lostErrs, otherErrs int
	for k, ks := range state {
		var v []byte
		err := do(func() (err error) { v, err = s.Get(ctx, []byte(k)); return err })
		switch {
		case errors.Is(err, kvstore.ErrNotFound):
			notFound++
		case errors.Is(err, farmem.ErrNodeLost):
			lostErrs++
			require.True(t, ks.lost, "key %x elsewhere failed with %v", k, err)
			require.ErrorIs(t, err, farmem.ErrNodeDown)
			require.NotErrorIs(t, err, farmem.ErrOutOfRange)
			require.Contains(t, err.Error(), node.String(), "the error names the node")
		case err != nil:
			otherErrs++
			t.Errorf("key %x: %v", k, err)
		case string(v) != string(ks.val):
			wrong++
		default:
			require.False(t, ks.lost, "key %x on the lost node read back", k)
		}
	}
	t.Logf("before adoption: %d ErrNodeLost, %d wrong values, %d ErrNotFound, %d other errors", lostErrs, wrong, notFound, otherErrs)
	require.Zero(t, wrong, "wrong values")
	require.Zero(t, notFound, "ErrNotFound for acknowledged keys")
	require.Equal(t, affected, lostErrs)
	// Updates of keys elsewhere keep working, and new blocks avoid the lost node.
	moved := 0
	for k, ks := range state {
		if ks.lost || moved == 50 {
			continue
		}
		nv := val(uint64(len(k))+uint64(moved)+1000, 24)
		require.NoError(t, do(func() error { return s.Update(ctx, []byte(k), nv) }))
		ks.val = nv
		loc, err := s.Locate(ctx, []byte(k))
		require.NoError(t, err)
		require.NotEqual(t, node, loc.Block.Node(), "a new block on the lost node")
		ks.loc = loc
		moved++
	}
	nodes, err := s.Nodes(ctx)
	require.NoError(t, err)
	for _, n := range nodes {
		if n.ID == node {
			require.Equal(t, farmem.NodeLost, n.State)
		}
	}

	// Adoption reports exactly the lost keys.
	rep, err := s.Adopt(ctx, node)
	require.NoError(t, err)
	require.False(t, rep.Already)
	require.Equal(t, uint64(1), rep.Generation)
	type slotID struct {
		st farmem.Addr
		i  int
	}
	entries := map[slotID]race.LostEntry{}
	for _, e := range rep.Entries {
		entries[slotID{e.Subtable, e.Index}] = e
	}
	subs := map[farmem.Addr]bool{}
	for _, ls := range rep.Subtables {
		subs[ls.Addr] = true
		require.False(t, ls.Replacement == 0, "lost subtable %v has no replacement", ls.Addr)
	}
	blockLost := 0
	for k, ks := range state {
		switch {
		case ks.loc.Subtable.Node() == node:
			require.True(t, subs[ks.loc.Subtable], "key %x: its subtable %v is not reported lost", k, ks.loc.Subtable)
		case ks.loc.Block.Node() == node:
			blockLost++
			e, ok := entries[slotID{ks.loc.Subtable, ks.loc.Index}]
			require.True(t, ok, "key %x: its slot is not reported", k)
			require.Equal(t, ks.loc.Block, e.Word.Addr())
		}
	}
	require.Equal(t, blockLost, rep.Lost, "the report names exactly the lost entries")
	require.Len(t, rep.Entries, rep.Lost)
	t.Logf("adoption: %d entries lost, %d subtables lost", rep.Lost, len(rep.Subtables))

	// A second adoption finds it done.
	rep2, err := s.Adopt(ctx, node)
	require.NoError(t, err)
	require.True(t, rep2.Already)
	require.Zero(t, rep2.Lost)

	// After: only the lost keys are absent.
	for k, ks := range state {
		v, err := s.Get(ctx, []byte(k))
		if ks.lost {
			require.ErrorIs(t, err, kvstore.ErrNotFound, "lost key %x", k)
			continue
		}
		require.NoError(t, err, "key %x", k)
		require.Equal(t, ks.val, v)
	}
	cen, err := kvstore.AuditRace(ctx, s)
	require.NoError(t, err, "the index's audit after adoption")
	require.Equal(t, keys-affected, cen.Keys)
	require.Zero(t, cen.Frozen+cen.Tentative+cen.Locked)
	nodes, err = s.Nodes(ctx)
	require.NoError(t, err)
	for _, n := range nodes {
		require.Equal(t, farmem.NodeUp, n.State, "node %v", n.ID)
		if n.ID == node {
			require.Equal(t, uint64(1), n.Gen.Generation())
		} else {
			require.Zero(t, n.Gen.Generation())
		}
	}

	// New keys land on the node again, and lost keys can be inserted anew.
	sess = sess[:0]
	for range 3 {
		ss, err := s.Session(ctx)
		require.NoError(t, err)
		sess = append(sess, ss)
	}
	onNode := 0
	for i := range keys / 2 {
		k := key(uint64(keys + i))
		v := val(uint64(i), 900) // large: the allocators' chunks elsewhere run out
		require.NoError(t, sess[i%len(sess)].Insert(ctx, k, v))
		loc, err := s.Locate(ctx, k)
		require.NoError(t, err)
		if loc.Block.Node() == node {
			onNode++
		}
		got, err := s.Get(ctx, k)
		require.NoError(t, err)
		require.Equal(t, v, got)
	}
	for k, ks := range state {
		if ks.lost {
			require.NoError(t, s.Insert(ctx, []byte(k), ks.val), "a lost key inserted anew")
		}
	}
	for _, ss := range sess {
		require.NoError(t, ss.Close())
	}
	t.Logf("after adoption: %d of %d new keys' blocks on %v", onNode, keys/2, node)
	require.NotZero(t, onNode, "no new block on the adopted node")
}

// TestRestartLocal: a non-home memory node of a local fabric restarts (loses its memory) under
// a store; see runRestart.
func TestRestartLocal(t *testing.T) {
	t.Parallel()
	f := newLocal(t, local.Options{Shape: local.Shape{MemoryNodes: 3, MemorySize: 8 << 20}})
	s := openStore(t, f, kvstore.Options{Alloc: quietAlloc, Index: kvstore.Race{Params: race.Params{Groups: 8}}})
	ctx := context.Background()
	require.Equal(t, farmem.NodeID(1), s.Home())
	runRestart(t, restartCase{s: s, node: 2, restart: func() *kvstore.Store { require.NoError(t, f.Restart(2)); return nil }}, 1500)
	_, err := s.Adopt(ctx, 1)
	require.ErrorIs(t, err, farmem.ErrInvalid, "the home node cannot be adopted")
}

// TestRestartSeenFirstByNewStore: the node restarts and the fabric adopts it at once (as a
// process that dials only after the restart meets only the new incarnation); a store opened
// then finds the node's generation word naming the old incarnation, fences the node, and the
// scenario goes on as if the fabric had seen the restart.
func TestRestartSeenFirstByNewStore(t *testing.T) {
	t.Parallel()
	f := newLocal(t, local.Options{Shape: local.Shape{MemoryNodes: 3, MemorySize: 8 << 20}})
	s := openStore(t, f, kvstore.Options{Alloc: quietAlloc, Index: kvstore.Race{Params: race.Params{Groups: 8}}})
	ctx := context.Background()
	runRestart(t, restartCase{s: s, node: 3, restart: func() *kvstore.Store {
		require.NoError(t, f.Restart(3))
		require.NoError(t, f.Adopt(ctx, 3))
		st, err := f.NodeStatus(3)
		require.NoError(t, err)
		require.Equal(t, farmem.NodeUp, st.State, "the fabric knows nothing of the loss")
		s2 := openStore(t, f, kvstore.Options{Alloc: quietAlloc, NoCreate: true})
		st, err = f.NodeStatus(3)
		require.NoError(t, err)
		require.Equal(t, farmem.NodeLost, st.State, "the store's records fenced it")
		return s2
	}}, 1200)
}

// TestRestartLocalNodeStatus: a paused node (Hang) keeps its incarnation and is usable after
// Resume without adoption; a restarted one is fenced until Adopt, whatever it was before.
func TestRestartLocalNodeStatus(t *testing.T) {
	t.Parallel()
	f := newLocal(t, local.Options{Shape: local.Shape{MemoryNodes: 2, MemorySize: 1 << 20}, DownTimeout: 50 * time.Millisecond})
	ctx := context.Background()
	m, err := f.Open(ctx, f.Hosted()[0])
	require.NoError(t, err)
	defer m.Close()
	a := farmem.MakeAddr(2, 4096)
	_, err = m.FAA(ctx, a, 5)
	require.NoError(t, err)
	st0, err := f.NodeStatus(2)
	require.NoError(t, err)
	require.Equal(t, farmem.NodeUp, st0.State)
	require.NotZero(t, st0.Incarnation)

	require.NoError(t, f.Hang(2))
	_, err = m.FAA(ctx, a, 1)
	require.ErrorIs(t, err, farmem.ErrNodeDown)
	require.NotErrorIs(t, err, farmem.ErrNodeLost)
	require.NoError(t, f.Resume(2))
	prev, err := m.FAA(ctx, a, 1)
	require.NoError(t, err)
	require.Equal(t, uint64(5), prev, "a paused node keeps its memory")
	st, _ := f.NodeStatus(2)
	require.Equal(t, st0, st)

	require.NoError(t, f.Restart(2))
	st, _ = f.NodeStatus(2)
	require.Equal(t, farmem.NodeLost, st.State)
	require.Equal(t, st0.Incarnation, st.Incarnation)
	require.NotEqual(t, st0.Incarnation, st.Seen)
	var buf [8]byte
	for _, err := range []error{
		m.Read(ctx, a, buf[:]),
		m.Write(ctx, a, buf[:]),
		func() error { _, err := m.CAS(ctx, a, 0, 1); return err }(),
		func() error { _, err := m.FAA(ctx, a, 1); return err }(),
	} {
		require.ErrorIs(t, err, farmem.ErrNodeLost)
		require.ErrorIs(t, err, farmem.ErrNodeDown)
	}
	require.Equal(t, make([]byte, 8), buf[:], "no silent zero was returned as a value")
	_, err = m.FAA(ctx, farmem.MakeAddr(1, 4096), 1)
	require.NoError(t, err, "other nodes keep serving")
	require.NoError(t, m.(farmem.Restarts).Adopt(ctx, 2))
	st, _ = f.NodeStatus(2)
	require.Equal(t, farmem.NodeStatus{ID: 2, State: farmem.NodeUp, Incarnation: st.Seen, Seen: st.Seen}, st)
	prev, err = m.FAA(ctx, a, 1)
	require.NoError(t, err)
	require.Zero(t, prev, "the new incarnation's memory is zero")
}
