package kvstore

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/farmem/farmem/ds/maxreg"
	"github.com/farmem/farmem/ds/race"
	"github.com/farmem/farmem/farmem"
	"github.com/farmem/farmem/farmem/farmemtest"
	"github.com/farmem/farmem/farmem/local"
)

// TestSwarmAdoptVerbAcrossAdoption: a client opens an object's register (its first verb, a
// read of the replicas' headers) and stalls between the view's look, which finds node 3 clear
// (lost, not yet adopted: the fabric fails its ops), and the verb's post to the transport;
// meanwhile a store adopts node 3: the client's own store, or another Swarm store on the same
// fabric. Were the fabric's adoption to come first, the verb would be bound to node 3's new
// incarnation (a verb reaches the incarnation adopted when it is posted) and read its zeroed
// memory as a replica's header: "replicas' headers differ", and the Get fails. The adoption
// fences node 3 first in the views of every Swarm store on the fabric and waits for the
// verbs that looked before (swarmFenceAhead), so the stalled verb reaches the old incarnation
// and fails there, and the Get reads the value from the other two replicas. The stall is the
// test's Interposer, under the view (fencedMemory), which waits until the adoption either
// fenced node 3 ahead in the client's view or got the fabric's adoption done. When the other
// store adopted first, the client's store's own adoption (Already) fences nothing anew in
// the other's views.
func TestSwarmAdoptVerbAcrossAdoption(t *testing.T) {
	t.Parallel()
	for _, other := range []bool{false, true} {
		name := map[bool]string{false: "own store adopts", true: "other store adopts"}[other]
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			testSwarmAdoptVerbAcrossAdoption(t, other)
		})
	}
}

func testSwarmAdoptVerbAcrossAdoption(t *testing.T, other bool) {
	ctx := context.Background()
	// 2 MiB nodes hold the store and its one key; larger ones cost seconds of the race
	// detector's shadow memory and of Restart zeroing node 3.
	f, err := local.New(local.Options{Shape: local.Shape{MemoryNodes: 3, ComputeNodes: 1, MemorySize: 2 << 20, ClientsPerNode: 16},
		DownTimeout: 20 * time.Millisecond})
	require.NoError(t, err)
	t.Cleanup(func() { _ = f.Close() })
	// A small index (eight groups) keeps the adoption's repopulation short.
	o := Options{Index: Swarm{Params: maxreg.Params{ValueSize: 64, Slots: 2}, Index: race.Params{Groups: 8}}}
	s, err := Open(ctx, f, o)
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	adopter := s
	if other {
		adopter, err = Open(ctx, f, o)
		require.NoError(t, err)
		t.Cleanup(func() { _ = adopter.Close() })
	}
	key := []byte("across")
	require.NoError(t, s.Insert(ctx, key, []byte("value")))
	addrs, err := SwarmObjectAddrs(ctx, s, key)
	require.NoError(t, err)
	require.Equal(t, farmem.NodeID(3), addrs[2].Node())

	hosted := f.Hosted()[0]
	view := swarmViewOf(s.healthOf(hosted), f, f, s.meta)
	m, err := f.Open(ctx, hosted)
	require.NoError(t, err)
	t.Cleanup(func() { _ = m.Close() })
	adopted := make(chan error, 1)
	armed, fired := false, false
	ip := &farmemtest.Interposer{Memory: m}
	ip.Before = func(_ context.Context, v farmemtest.Verb) {
		if !armed || fired || len(v.Batch.Ops) != len(addrs) {
			return
		}
		for i, op := range v.Batch.Ops {
			if op.Kind != farmem.OpRead || op.Addr != addrs[i] {
				return
			}
		}
		fired = true // the register's header read, past the view
		go func() {
			rep, err := adopter.Adopt(ctx, 3)
			if err == nil && rep.Lost != 0 {
				err = errors.New("the adoption lost keys")
			}
			adopted <- err
		}()
		for deadline := time.Now().Add(time.Minute); ; time.Sleep(50 * time.Microsecond) {
			if farmem.StatusOf(f, 3).State == farmem.NodeUp || isFenced(view.fencedSet(), 3) {
				return
			}
			if time.Now().After(deadline) {
				t.Error("the adoption neither fenced node 3 nor adopted it in a minute")
				return
			}
		}
	}
	// The session opens (reading every node's allocator header) before the restart; its first
	// look at the key comes after it.
	ss, err := s.SessionOn(ctx, ip)
	require.NoError(t, err)
	defer ss.Close()
	require.NoError(t, f.Restart(3))
	armed = true
	got, err := ss.Get(ctx, key)
	require.True(t, fired, "the Get opened the register")
	require.NoError(t, err)
	require.Equal(t, "value", string(got))
	require.NoError(t, <-adopted)
	if other {
		require.Equal(t, []farmem.NodeID{3}, view.fencedSet(), "the client's store did not adopt node 3 yet")
		// The second adoption finds the fabric's done: it fences nothing anew in the views of
		// the store that adopted first (which count node 3 throughout).
		av := swarmViewOf(adopter.healthOf(hosted), f, f, adopter.meta)
		require.Empty(t, av.fencedSet())
		gen := av.gens()[3]
		rep, err := s.Adopt(ctx, 3)
		require.NoError(t, err)
		require.True(t, rep.Already)
		require.Empty(t, av.fencedSet())
		require.Equal(t, gen, av.gens()[3], "the adopter's view was not fenced again")
	}
	require.Empty(t, view.fencedSet(), "node 3 counts again")
	for _, g := range []getter{ss, s} {
		got, err = g.Get(ctx, key)
		require.NoError(t, err)
		require.Equal(t, "value", string(got))
	}
}
