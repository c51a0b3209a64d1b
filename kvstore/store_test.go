package kvstore_test

import (
	"bytes"
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/farmem/farmem/alloc"
	"github.com/farmem/farmem/ds/race"
	"github.com/farmem/farmem/farmem"
	"github.com/farmem/farmem/farmem/local"
	"github.com/farmem/farmem/kvstore"
	"github.com/farmem/farmem/kvstore/kvstoretest"
)

// kv is what Store and Session have in common, so tests run on both.
type kv = kvstoretest.Scanner

// semantics checks each operation's answers on keys no one else touches (kvstoretest.Semantics).
func semantics(t *testing.T, s kv, tag string) { t.Helper(); kvstoretest.Semantics(t, s, tag) }

func TestSemantics(t *testing.T) {
	t.Parallel()
	f := newLocal(t, local.Options{Shape: local.Shape{MemoryNodes: 2, ComputeNodes: 2}})
	s := openStore(t, f, kvstore.Options{Alloc: quietAlloc})
	semantics(t, s, "store")
	ss, err := s.Session(context.Background())
	require.NoError(t, err)
	semantics(t, ss, "session")
	require.NoError(t, ss.Close())
	require.NoError(t, ss.Close(), "idempotent")
	require.Equal(t, "race", s.Descriptor().Index)
	require.Equal(t, "none", s.Descriptor().Replication)
	require.Equal(t, kvstore.DefaultSync().Name(), s.Sync())
	require.False(t, s.Ordered())
}

// TestLimits checks the documented limits: keys of 1..MaxKey bytes, key and value together at
// most MaxKV; anything else is refused before any verb.
func TestLimits(t *testing.T) {
	t.Parallel()
	f := newLocal(t, local.Options{})
	s := openStore(t, f, kvstore.Options{Alloc: quietAlloc})
	ctx := context.Background()
	lim := s.Limits()
	require.Equal(t, race.MaxKV, lim.MaxKV)
	require.Equal(t, 16288, lim.MaxKV, "the documented limit")

	k := bytes.Repeat([]byte("k"), 100)
	big := make([]byte, lim.MaxKV-len(k))
	for i := range big {
		big[i] = byte(i)
	}
	require.NoError(t, s.Insert(ctx, k, big), "exactly MaxKV")
	v, err := s.Get(ctx, k)
	require.NoError(t, err)
	require.Equal(t, big, v)

	before := s.Stats()
	tooBig := append(big, 0)
	for name, err := range map[string]error{
		"insert":       s.Insert(ctx, k, tooBig),
		"update":       s.Update(ctx, k, tooBig),
		"put":          s.Put(ctx, k, tooBig),
		"long key":     s.Put(ctx, make([]byte, lim.MaxKey+1), nil),
		"long key get": func() error { _, err := s.Get(ctx, make([]byte, lim.MaxKey+1)); return err }(),
	} {
		require.ErrorIs(t, err, kvstore.ErrTooLarge, name)
		require.ErrorIs(t, err, farmem.ErrInvalid, name)
	}
	for name, err := range map[string]error{
		"insert": s.Insert(ctx, nil, []byte("v")),
		"get":    func() error { _, err := s.Get(ctx, []byte{}); return err }(),
		"update": s.Update(ctx, nil, nil),
		"put":    s.Put(ctx, nil, nil),
		"delete": s.Delete(ctx, nil),
	} {
		require.ErrorIs(t, err, kvstore.ErrEmptyKey, name)
		require.ErrorIs(t, err, farmem.ErrInvalid, name)
	}
	require.Equal(t, before, s.Stats(), "refused operations send nothing")
	v, err = s.Get(ctx, k)
	require.NoError(t, err)
	require.Equal(t, big, v, "the refused writes changed nothing")
}

// TestClosed: operations on a closed store or session fail with farmem.ErrClosed; Close is
// idempotent; Close waits for an open session until its context ends and reports it, and the
// session's client is released when the session ends.
func TestClosed(t *testing.T) {
	t.Parallel()
	f := newLocal(t, local.Options{})
	ctx := context.Background()
	s, err := kvstore.Open(ctx, f, kvstore.Options{Alloc: quietAlloc})
	require.NoError(t, err)
	require.NoError(t, s.Put(ctx, []byte("k"), []byte("v")))
	ss, err := s.Session(ctx)
	require.NoError(t, err)
	done, err := s.Session(ctx)
	require.NoError(t, err)
	require.NoError(t, done.Close())
	_, err = done.Get(ctx, []byte("k"))
	require.ErrorIs(t, err, farmem.ErrClosed, "closed session")

	short, cancel := f.Runtime().WithTimeout(ctx, 20*time.Millisecond)
	defer cancel()
	err = s.CloseContext(short)
	require.ErrorIs(t, err, kvstore.ErrCloseIncomplete)
	var ce *kvstore.CloseError
	require.ErrorAs(t, err, &ce)
	require.Empty(t, ce.Unreleased)
	require.Equal(t, []kvstore.OpenClient{{ID: ss.Memory().Info().ID, Session: true}}, ce.Open)
	require.ErrorContains(t, err, fmt.Sprintf("client %d (session)", ss.Memory().Info().ID))
	require.ErrorAs(t, s.CloseContext(short), &ce, "idempotent: still open")
	_, err = s.Get(ctx, []byte("k"))
	require.ErrorIs(t, err, farmem.ErrClosed)
	require.ErrorIs(t, s.Put(ctx, []byte("k"), nil), farmem.ErrClosed)
	require.ErrorIs(t, s.Insert(ctx, []byte("k"), nil), farmem.ErrClosed)
	require.ErrorIs(t, s.Update(ctx, []byte("k"), nil), farmem.ErrClosed)
	require.ErrorIs(t, s.Delete(ctx, []byte("k")), farmem.ErrClosed)
	_, err = s.Session(ctx)
	require.ErrorIs(t, err, farmem.ErrClosed)
	_, err = ss.Get(ctx, []byte("k"))
	require.ErrorIs(t, err, farmem.ErrClosed, "session of a closed store")
	require.Equal(t, 1, s.Clients(), "the session still holds its client")
	require.NoError(t, ss.Close())
	require.Zero(t, s.Clients(), "closed when given back")
	require.NoError(t, s.Close(), "everything released")
	require.NoError(t, s.Close())

	// The data is in far memory: a new store finds it.
	s2 := openStore(t, f, kvstore.Options{Alloc: quietAlloc})
	v, err := s2.Get(ctx, []byte("k"))
	require.NoError(t, err)
	require.Equal(t, "v", string(v))
}

// TestReopen: a second Open of the same fabric, while the first is open and after it closed,
// finds the same store; NoCreate on a fresh fabric finds none and writes nothing; Inspect finds
// the store from the fabric alone.
func TestReopen(t *testing.T) {
	t.Parallel()
	f := newLocal(t, local.Options{Shape: local.Shape{MemoryNodes: 3, ComputeNodes: 2}})
	ctx := context.Background()
	m, err := f.Open(ctx, f.Topology().ComputeNodes()[0])
	require.NoError(t, err)
	defer m.Close()

	_, err = kvstore.Open(ctx, f, kvstore.Options{NoCreate: true})
	require.ErrorIs(t, err, kvstore.ErrNoStore)
	_, err = kvstore.Inspect(ctx, m)
	require.ErrorIs(t, err, kvstore.ErrNoStore)
	hdr := make([]byte, 4096)
	require.NoError(t, m.Read(ctx, farmem.MakeAddr(1, 0), hdr))
	require.Equal(t, make([]byte, 4096), hdr, "NoCreate wrote nothing")

	a := openStore(t, f, kvstore.Options{Alloc: quietAlloc})
	require.NoError(t, a.Insert(ctx, []byte("hello"), []byte("world")))
	b := openStore(t, f, kvstore.Options{Alloc: quietAlloc, NoCreate: true})
	require.Equal(t, a.Descriptor(), b.Descriptor())
	require.Equal(t, a.Root(), b.Root())
	v, err := b.Get(ctx, []byte("hello"))
	require.NoError(t, err)
	require.Equal(t, "world", string(v))
	require.NoError(t, b.Update(ctx, []byte("hello"), []byte("there")))
	v, err = a.Get(ctx, []byte("hello"))
	require.NoError(t, err)
	require.Equal(t, "there", string(v))

	info, err := kvstore.Inspect(ctx, m)
	require.NoError(t, err)
	require.Equal(t, kvstore.RootReady, info.Word.State())
	require.Equal(t, a.Root(), info.Root)
	require.Equal(t, farmem.MakeAddr(1, kvstore.RootOffset), info.Root, "home is the lowest memory node by default")
	require.Equal(t, a.Descriptor(), info.Descriptor)
	require.Equal(t, info.Word.Descriptor().Node().IsCompute(), false)
}

// otherKind is a race index under another name, to check that a store opens only with its own.
type otherKind struct{ kvstore.Race }

func (otherKind) Name() string { return "other" }

func TestMismatch(t *testing.T) {
	t.Parallel()
	f := newLocal(t, local.Options{})
	ctx := context.Background()
	openStore(t, f, kvstore.Options{Alloc: quietAlloc})
	_, err := kvstore.Open(ctx, f, kvstore.Options{Index: otherKind{}})
	require.ErrorIs(t, err, kvstore.ErrMismatch)
	_, err = kvstore.Open(ctx, f, kvstore.Options{Replication: kvstoretest.Mirror{N: 2}})
	require.ErrorIs(t, err, kvstore.ErrMismatch)
	_, err = kvstore.Open(ctx, f, kvstore.Options{Replication: kvstoretest.Mirror{N: kvstore.MaxReplicas + 1}})
	require.ErrorIs(t, err, farmem.ErrInvalid)
	_, err = kvstore.SyncByName("no-such")
	require.ErrorIs(t, err, farmem.ErrInvalid)
	for _, n := range kvstore.SyncNames() {
		sy, err := kvstore.SyncByName(n)
		require.NoError(t, err)
		require.Equal(t, n, sy.Name())
	}
	require.Equal(t, kvstore.SyncNames()[0], kvstore.DefaultSync().Name())
}

// TestRacingCreators: several stores open one fresh fabric at once (formatting it and racing
// for the root word); all find the same store, and the fabric holds one descriptor.
func TestRacingCreators(t *testing.T) {
	t.Parallel()
	for round := range 4 {
		f := newLocal(t, local.Options{Shape: local.Shape{MemoryNodes: 2, ComputeNodes: 4}, Jitter: 20 * time.Microsecond, Seed: uint64(round + 1)})
		ctx := context.Background()
		const n = 6
		stores := make([]*kvstore.Store, n)
		errs := make([]error, n)
		var wg sync.WaitGroup
		for i := range n {
			wg.Go(func() {
				stores[i], errs[i] = kvstore.Open(ctx, f, kvstore.Options{Alloc: quietAlloc, Nodes: []farmem.NodeID{farmem.ComputeID(1 + i%4).Node()}})
			})
		}
		wg.Wait()
		for i := range n {
			require.NoError(t, errs[i])
			t.Cleanup(func() { _ = stores[i].Close() })
			require.Equal(t, stores[0].Descriptor(), stores[i].Descriptor(), "round %d store %d", round, i)
		}
		require.NoError(t, stores[n-1].Insert(ctx, []byte("k"), []byte("v")))
		for i := range n {
			v, err := stores[i].Get(ctx, []byte("k"))
			require.NoError(t, err)
			require.Equal(t, "v", string(v))
		}
	}
}

// TestCreatorTakeover: a creator that claimed the root word and died (or stalls past its lease)
// is taken over once its lease has run out; one whose lease runs is waited for.
func TestCreatorTakeover(t *testing.T) {
	t.Parallel()
	f := newLocal(t, local.Options{})
	ctx := context.Background()
	m, err := f.Open(ctx, f.Topology().ComputeNodes()[0])
	require.NoError(t, err)
	defer m.Close()
	require.NoError(t, alloc.FormatAll(ctx, m, alloc.FormatOptions{}))
	root := farmem.MakeAddr(1, kvstore.RootOffset)

	// A dead creator's claim (client 42), with a second of lease left (long enough that the
	// Open below, timed out after 20ms, still meets it on a loaded machine: with 60ms it once
	// did not).
	deadline := f.Runtime().Now().Add(time.Second)
	claim := uint64(1)<<62 | uint64(42)<<46 | (uint64(deadline)>>18 + 1)
	_, err = m.CAS(ctx, root, 0, claim)
	require.NoError(t, err)
	info, err := kvstore.Inspect(ctx, m)
	require.NoError(t, err)
	require.Equal(t, kvstore.RootClaimed, info.Word.State())
	require.Equal(t, farmem.ClientID(42), info.Word.Claimant())

	// While the lease runs, Open waits.
	short, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	defer cancel()
	_, err = kvstore.Open(short, f, kvstore.Options{Alloc: quietAlloc})
	require.ErrorIs(t, err, context.DeadlineExceeded)
	// Then it takes the claim over and creates the store.
	s := openStore(t, f, kvstore.Options{Alloc: quietAlloc})
	require.GreaterOrEqual(t, f.Runtime().Now(), deadline, "created before the dead creator's lease ran out")
	require.NotEqual(t, farmem.ClientID(42), s.Descriptor().Creator)
	info, err = kvstore.Inspect(ctx, m)
	require.NoError(t, err)
	require.Equal(t, kvstore.RootReady, info.Word.State())
	require.NoError(t, s.Put(ctx, []byte("k"), []byte("v")))

	// NoCreate on a fabric whose creator died reports no store.
	f2 := newLocal(t, local.Options{})
	m2, err := f2.Open(ctx, f2.Topology().ComputeNodes()[0])
	require.NoError(t, err)
	defer m2.Close()
	require.NoError(t, alloc.FormatAll(ctx, m2, alloc.FormatOptions{}))
	_, err = m2.CAS(ctx, root, 0, uint64(1)<<62|uint64(42)<<46|1)
	require.NoError(t, err)
	_, err = kvstore.Open(ctx, f2, kvstore.Options{NoCreate: true})
	require.ErrorIs(t, err, kvstore.ErrNoStore)

	// A root word that is none of the states is refused, not overwritten.
	_, err = m2.CAS(ctx, root, uint64(1)<<62|uint64(42)<<46|1, 3<<62)
	require.NoError(t, err)
	_, err = kvstore.Open(ctx, f2, kvstore.Options{})
	require.ErrorIs(t, err, kvstore.ErrBadRoot)
}

// TestSyncRecorded: a store records its synchronizer; Open without one uses it, Open with
// another is refused.
func TestSyncRecorded(t *testing.T) {
	t.Parallel()
	f := newLocal(t, local.Options{})
	ctx := context.Background()
	a := openStore(t, f, kvstore.Options{Alloc: quietAlloc, Sync: kvstore.Optimistic})
	require.Equal(t, "optimistic", a.Descriptor().Sync)
	b := openStore(t, f, kvstore.Options{Alloc: quietAlloc})
	require.Equal(t, "optimistic", b.Sync(), "the recorded one")
	for _, name := range kvstore.SyncNames() {
		if name == "optimistic" {
			continue
		}
		sy, err := kvstore.SyncByName(name)
		require.NoError(t, err)
		_, err = kvstore.Open(ctx, f, kvstore.Options{Sync: sy})
		require.ErrorIs(t, err, kvstore.ErrMismatch, name)
	}
	fresh := newLocal(t, local.Options{})
	c := openStore(t, fresh, kvstore.Options{Alloc: quietAlloc})
	require.Equal(t, kvstore.DefaultSync().Name(), c.Descriptor().Sync)
}
