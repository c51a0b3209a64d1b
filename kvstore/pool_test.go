package kvstore_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/farmem/farmem/farmem"
	"github.com/farmem/farmem/farmem/local"
	"github.com/farmem/farmem/kvstore"
)

// hammer runs n goroutines of Store operations, each on keys of its own, checking every answer
// against what that goroutine wrote.
func hammer(t *testing.T, s *kvstore.Store, n, rounds int) {
	t.Helper()
	ctx := context.Background()
	var wg sync.WaitGroup
	errs := make([]error, n)
	for g := range n {
		wg.Go(func() {
			errs[g] = func() error {
				for r := range rounds {
					k := key(uint64(g*1000 + r%5))
					v := uint64(g<<20 | r)
					if err := s.Put(ctx, k, val(v, 8+r%100)); err != nil {
						return err
					}
					got, err := s.Get(ctx, k)
					if err != nil {
						return err
					}
					if w, err := unval(got); err != nil || w != v {
						return fmt.Errorf("goroutine %d read %d (%v), wrote %d", g, w, err, v)
					}
					if r%3 == 0 {
						if err := s.Delete(ctx, k); err != nil {
							return err
						}
						if _, err := s.Get(ctx, k); !errors.Is(err, kvstore.ErrNotFound) {
							return fmt.Errorf("goroutine %d: get after delete: %v", g, err)
						}
					}
				}
				return nil
			}()
		})
	}
	wg.Wait()
	for g, err := range errs {
		require.NoError(t, err, "goroutine %d", g)
	}
}

// TestPool: many goroutines share a store whose fabric has fewer client slots than goroutines:
// the pool opens clients on both compute nodes up to the fabric's room, then waits for free ones;
// answers stay right; the store's costs are the fabric's.
func TestPool(t *testing.T) {
	t.Parallel()
	// 2 compute nodes of 6 slots, 2 of them for handlers: room for 8 clients.
	f := newLocal(t, local.Options{Shape: local.Shape{MemoryNodes: 2, ComputeNodes: 2, ClientsPerNode: 6, MaxHandlers: 2}, Jitter: 2 * time.Microsecond})
	s := openStore(t, f, kvstore.Options{Alloc: quietAlloc})
	hammer(t, s, 24, 60)
	require.LessOrEqual(t, s.Clients(), 8)
	require.Greater(t, s.Clients(), 1, "the pool grew")
	require.Equal(t, f.Stats(), s.Stats(), "the store's costs are all the fabric's")

	// Sessions hold clients: 8 of them fill the fabric, spread over both nodes.
	ctx := context.Background()
	var held []*kvstore.Session
	perNode := map[farmem.NodeID]int{}
	for range 8 {
		ss, err := s.Session(ctx)
		require.NoError(t, err)
		held = append(held, ss)
		perNode[ss.Memory().Info().Node]++
	}
	require.Equal(t, map[farmem.NodeID]int{farmem.ComputeID(1).Node(): 4, farmem.ComputeID(2).Node(): 4}, perNode)
	// A ninth waits for one to be given back.
	short, cancel := context.WithTimeout(ctx, 10*time.Millisecond)
	defer cancel()
	_, err := s.Session(short)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	got := make(chan error, 1)
	go func() {
		ss, err := s.Session(ctx)
		if err == nil {
			err = ss.Put(ctx, []byte("late"), []byte("v"))
			_ = ss.Close()
		}
		got <- err
	}()
	require.NoError(t, held[3].Put(ctx, []byte("held"), []byte("v")))
	require.NoError(t, held[3].Close())
	require.NoError(t, <-got)
	for _, ss := range held {
		require.NoError(t, ss.Close())
	}
	require.Equal(t, 8, s.Clients())
}

// TestMaxClients: the pool never holds more clients than Options.MaxClients.
func TestMaxClients(t *testing.T) {
	t.Parallel()
	f := newLocal(t, local.Options{Shape: local.Shape{MemoryNodes: 1, ComputeNodes: 2}})
	s := openStore(t, f, kvstore.Options{Alloc: quietAlloc, MaxClients: 3})
	hammer(t, s, 16, 40)
	require.LessOrEqual(t, s.Clients(), 3)
}

// TestSessionOn: a session over a client the caller opened; its costs are counted from when the
// session took it, and its Close leaves the client open.
func TestSessionOn(t *testing.T) {
	t.Parallel()
	f := newLocal(t, local.Options{Shape: local.Shape{MemoryNodes: 1, ComputeNodes: 2}})
	s := openStore(t, f, kvstore.Options{Alloc: quietAlloc})
	ctx := context.Background()
	m, err := f.Open(ctx, f.Topology().ComputeNodes()[1])
	require.NoError(t, err)
	defer m.Close()
	err = m.Read(ctx, farmem.MakeAddr(1, 0), make([]byte, 8))
	require.NoError(t, err)
	before := s.Stats()
	ss, err := s.SessionOn(ctx, m)
	require.NoError(t, err)
	require.Equal(t, 2, s.Clients())
	semantics(t, ss, "on")
	require.Equal(t, ss.Stats(), s.Stats().Sub(before), "only the session worked")
	require.Equal(t, m.Stats().Sub(ss.Stats()).RoundTrips, uint64(1), "the read before the session is not the session's")
	require.NoError(t, ss.Close())
	require.Equal(t, 1, s.Clients())
	_, err = m.FAA(ctx, farmem.MakeAddr(1, 64<<10), 1)
	require.NoError(t, err, "the client is still open")
}

// TestPoolHandsOver: on the simulator, with one client allowed, a goroutine waiting for the
// pool is handed the client the moment it comes back (in virtual time: the release, then the
// operation's own cost), not at its next look at the pool; nothing polls.
func TestPoolHandsOver(t *testing.T) {
	t.Parallel()
	s := newSim(t, 3)
	s.Run(func() {
		ctx := context.Background()
		st, err := kvstore.Open(ctx, s, kvstore.Options{Alloc: quietAlloc, MaxClients: 1})
		require.NoError(t, err)
		defer st.Close()
		require.NoError(t, st.Put(ctx, key(1), val(1, 8)))
		t0 := s.Now()
		_, err = st.Get(ctx, key(1))
		require.NoError(t, err)
		getCost := s.Now().Sub(t0)

		ss, err := st.Session(ctx)
		require.NoError(t, err)
		var releasedAt, doneAt farmem.Time
		require.NoError(t, s.Parallel(2, func(i int) {
			if i == 0 {
				require.NoError(t, s.Runtime().Sleep(ctx, 2500*time.Microsecond))
				releasedAt = s.Now()
				require.NoError(t, ss.Close())
				return
			}
			_, err := st.Get(ctx, key(1)) // waits: the session holds the only client
			require.NoError(t, err)
			doneAt = s.Now()
		}))
		late := doneAt.Sub(releasedAt)
		t.Logf("a Get costs %v; the waiting Get ended %v after the client came back", getCost, late)
		require.GreaterOrEqual(t, late, time.Duration(0))
		require.Less(t, late, 2*getCost+20*time.Microsecond, "woken when the client came back")
	})
}

// TestCloseAfterNodeCrash: a store whose client saw its home node crash closes without
// hanging: it releases what it can and reports the client it could not release (its allocator
// could not hand over), wrapping ErrCloseIncomplete and farmem.ErrNodeDown; a second Close has
// nothing left to do.
func TestCloseAfterNodeCrash(t *testing.T) {
	t.Parallel()
	f := newLocal(t, local.Options{Shape: local.Shape{MemoryNodes: 2, ComputeNodes: 1}})
	ctx := context.Background()
	s, err := kvstore.Open(ctx, f, kvstore.Options{Alloc: quietAlloc})
	require.NoError(t, err)
	for i := range uint64(50) {
		require.NoError(t, s.Put(ctx, key(i), val(i, 100)))
	}
	require.NoError(t, f.Crash(s.Root().Node()))
	require.ErrorIs(t, s.Put(ctx, key(1), val(1, 100)), farmem.ErrNodeDown)
	err = s.Close()
	require.ErrorIs(t, err, kvstore.ErrCloseIncomplete)
	require.ErrorIs(t, err, farmem.ErrNodeDown)
	var ce *kvstore.CloseError
	require.ErrorAs(t, err, &ce)
	require.Len(t, ce.Unreleased, 1)
	require.Empty(t, ce.Open)
	t.Log(err)
	require.Zero(t, s.Clients())
	require.NoError(t, s.Close(), "idempotent")
}

// TestCloseWaitsInFabricTime: on the simulator, Close called from outside the simulation with
// a session never closed waits DefaultCloseWait of virtual time, then reports the session
// (it does not spin or hang while no simulated event drives the clock).
func TestCloseWaitsInFabricTime(t *testing.T) {
	t.Parallel()
	s := newSim(t, 5)
	var st *kvstore.Store
	var id farmem.ClientID
	s.Run(func() {
		ctx := context.Background()
		var err error
		st, err = kvstore.Open(ctx, s, kvstore.Options{Alloc: quietAlloc})
		require.NoError(t, err)
		m, err := s.Open(ctx, s.Topology().ComputeNodes()[1])
		require.NoError(t, err)
		ss, err := st.SessionOn(ctx, m)
		require.NoError(t, err)
		require.NoError(t, ss.Put(ctx, key(1), val(1, 8)))
		id = m.Info().ID
	})
	start := s.Now()
	err := st.Close()
	var ce *kvstore.CloseError
	require.ErrorAs(t, err, &ce)
	require.Equal(t, []kvstore.OpenClient{{ID: id, Session: true}}, ce.Open)
	require.GreaterOrEqual(t, s.Now().Sub(start), kvstore.DefaultCloseWait)
}
