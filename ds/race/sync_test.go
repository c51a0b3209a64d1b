package race_test

import (
	"context"
	"encoding/binary"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/farmem/farmem/alloc"
	"github.com/farmem/farmem/ds/ptrsync"
	"github.com/farmem/farmem/ds/race"
	"github.com/farmem/farmem/farmem"
	"github.com/farmem/farmem/farmem/local"
)

// spinSync is a pessimistic synchronizer for the tests: a CAS spinlock in the first word of the
// slot's 16-byte metadata entry, the new block written only once the lock is held. It checks
// what the lock-based synchronizers of ds/cider rely on: the entry's address and its
// prefetched bytes, Install writing a deferred block, Deadline, Retry on a frozen or changed
// slot.
type spinSync struct {
	t        *testing.T
	prefetch int // Commits that found the entry prefetched
	commits  int
}

func (s *spinSync) LockSize() int { return 16 }

func (s *spinSync) Plan(ptrsync.Kind, uint64) ptrsync.Plan {
	return ptrsync.Plan{DeferWrite: true, Prefetch: true}
}

func (s *spinSync) Commit(ctx context.Context, c ptrsync.Target) (ptrsync.Result, error) {
	m := c.Memory()
	retry := ptrsync.Result{Outcome: ptrsync.Retry}
	if c.Lock() == 0 || len(c.LockBytes()) != 16 {
		s.t.Errorf("change without its metadata entry: %v, %d bytes", c.Lock(), len(c.LockBytes()))
		return retry, errors.New("no metadata")
	}
	s.prefetch++
	me := uint64(m.Info().ID)
	if binary.LittleEndian.Uint64(c.LockBytes()) == me {
		s.t.Errorf("prefetched lock word shows this client holding it")
	}
	backoff := time.Microsecond
	for {
		prev, err := m.CAS(ctx, c.Lock(), 0, me)
		if err != nil {
			return retry, err
		}
		if prev == 0 {
			break
		}
		if m.Runtime().Now() > c.Deadline() {
			return retry, nil
		}
		if err := m.Runtime().Sleep(ctx, backoff); err != nil {
			return retry, err
		}
		backoff = min(2*backoff, 100*time.Microsecond)
	}
	out, err := s.locked(ctx, c)
	if _, uerr := m.CAS(context.WithoutCancel(ctx), c.Lock(), me, 0); err == nil {
		err = uerr
	}
	return out, err
}

// locked is the critical section: re-read the slot (it may have changed between the lookup and
// the lock), then write the block and CAS (Install).
func (s *spinSync) locked(ctx context.Context, c ptrsync.Target) (ptrsync.Result, error) {
	m := c.Memory()
	retry := ptrsync.Result{Outcome: ptrsync.Retry}
	var b [8]byte
	if err := m.Read(ctx, c.Pointer(), b[:]); err != nil {
		return retry, err
	}
	if cur := binary.LittleEndian.Uint64(b[:]); cur != c.Old() {
		// Optimistic writers do not exist here, but splits and deletes do.
		return retry, nil
	}
	if m.Runtime().Now() > c.Deadline() {
		return retry, nil
	}
	prev, _, err := c.Install(ctx, c.Old())
	if err != nil {
		return retry, err
	}
	if prev != c.Old() {
		return retry, nil
	}
	s.commits++
	return ptrsync.Result{Outcome: ptrsync.Committed, Replaced: prev}, nil
}

func TestSynchronizerNeedsMeta(t *testing.T) {
	e := newEnv(t, local.Options{}, race.Params{})
	m, err := e.f.Open(context.Background(), e.comp[0])
	require.NoError(t, err)
	defer m.Close()
	a, err := alloc.New(context.Background(), m, e.ao)
	require.NoError(t, err)
	defer a.Close()
	_, err = race.Open(context.Background(), m, a, e.root, race.Options{Sync: &spinSync{t: t}})
	require.ErrorIs(t, err, farmem.ErrInvalid)
}

// TestLockSynchronizer runs the hot-key and the split workloads with spinSync and checks them.
func TestLockSynchronizer(t *testing.T) {
	p := collide
	p.MetaSize = 16
	e := newEnv(t, local.Options{Shape: local.Shape{ComputeNodes: 2}, Tearing: true, Jitter: 5 * time.Microsecond}, p)
	const n = 6
	cs := make([]*client, n)
	syncs := make([]*spinSync, n)
	for i := range cs {
		syncs[i] = &spinSync{t: t}
		cs[i] = e.open(t, i, race.Options{Sync: syncs[i]})
	}
	// One key, updated and deleted by everyone; then the split workload.
	hotLoad := workload{Keys: 2, Ops: 150, Search: 30, Insert: 20, Update: 40, MaxVal: 40, Unknown: 5}
	for _, w := range []workload{hotLoad, splitLoad} {
		h := kvModel.NewHistory(e.f.Runtime())
		errs := make(chan error, n)
		for _, c := range cs {
			go func() { errs <- w.run(context.Background(), c, h) }()
		}
		for range n {
			require.NoError(t, <-errs)
		}
		h.Check(t)
		audit(t, cs[n-1], true)
		for k := range w.Keys { // each phase starts from an empty map
			if err := cs[0].tab.Delete(context.Background(), key(k)); !errors.Is(err, race.ErrNotFound) {
				require.NoError(t, err)
			}
		}
	}
	commits, calls := 0, 0
	for _, s := range syncs {
		commits += s.commits
		calls += s.prefetch
	}
	t.Logf("%d commits in %d calls", commits, calls)
	require.NotZero(t, commits)
	info, err := cs[0].tab.Info(context.Background())
	require.NoError(t, err)
	require.GreaterOrEqual(t, info.Splits, uint64(3))
}

// planSync is an Optimistic commit behind a plan that does what the test says: bit 0 of next
// defers the block write, bit 1 prefetches the lock entry.
type planSync struct {
	t     *testing.T
	next  byte
	plans int
	opt   ptrsync.Optimistic
}

func (p *planSync) LockSize() int { return 16 }

func (p *planSync) Plan(kind ptrsync.Kind, key uint64) ptrsync.Plan {
	p.plans++
	p.opt.Plan(kind, key)
	return ptrsync.Plan{DeferWrite: p.next&1 != 0, Prefetch: p.next&2 != 0}
}

func (p *planSync) Commit(ctx context.Context, c ptrsync.Target) (ptrsync.Result, error) {
	if p.next&2 != 0 {
		require.Len(p.t, c.LockBytes(), 16, "prefetched entry")
	} else {
		require.Nil(p.t, c.LockBytes(), "entry read without a prefetch")
	}
	require.False(p.t, c.Lock() == 0)
	return p.opt.Commit(ctx, c)
}

// TestPlanner: the synchronizer's plan decides the block write and the prefetch per operation: an
// update whose write is deferred costs one round trip more than one whose block is written early
// (Install's block write in a round trip of its own); a prefetch adds one read to the block's
// round trip.
func TestPlanner(t *testing.T) {
	p := race.Params{MetaSize: 16}
	e := newEnv(t, local.Options{}, p)
	ps := &planSync{t: t}
	c := e.open(t, 0, race.Options{Sync: ps})
	ctx := context.Background()
	k := []byte("planned")
	require.NoError(t, c.tab.Insert(ctx, k, val(1, 8)))
	var reads [4]uint64
	for plan := range byte(4) {
		ps.next = plan
		before := c.m.Stats()
		require.NoError(t, c.tab.Update(ctx, k, val(uint64(plan)+2, 8)))
		d := c.m.Stats().Sub(before)
		wantRTT := uint64(race.UpdateRoundTrips)
		if plan&1 != 0 {
			wantRTT += race.DeferredWriteRoundTrips
		}
		require.Equal(t, wantRTT, d.RoundTrips, "plan %d: %v", plan, d)
		reads[plan] = d.Verbs[farmem.TargetMemory][farmem.OpRead]
		got, err := c.tab.Search(ctx, k)
		require.NoError(t, err)
		require.Equal(t, uint64(plan)+2, unval(got))
	}
	require.Equal(t, reads[0]+1, reads[2], "a prefetch is one more read")
	require.Equal(t, reads[1]+1, reads[3], "a prefetch is one more read")
	require.Equal(t, 4, ps.plans)
}
