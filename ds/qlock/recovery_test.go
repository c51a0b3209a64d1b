package qlock_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/farmem/farmem/ds/qlock"
	"github.com/farmem/farmem/farmem"
	"github.com/farmem/farmem/farmem/farmemtest"
	"github.com/farmem/farmem/farmem/lincheck"
	"github.com/farmem/farmem/farmem/local"
)

// errLost is a fenced write that found the counter changed: the writer had lost the lock.
var errLost = errors.New("fenced write refused")

// fenced is one increment whose write is a CAS from the value read (the fenced write the
// package doc asks of holders that may be paused past their lease), or a plain write when
// plain is set (the broken variant).
func (r *rig) fenced(ctx context.Context, m farmem.Memory, l *qlock.Locker, rec *lincheck.Client[lincheck.CounterInput, uint64],
	inside func(), plain bool) error {
	op := rec.Call(counter.Add(0, 1))
	a, _, err := l.Lock(ctx, r.entry)
	if err != nil {
		op.End(0, err)
		return err
	}
	v, err := readWord(ctx, m, r.ctr)
	if err != nil {
		op.End(0, err)
		return err
	}
	if inside != nil {
		inside()
	}
	if plain {
		if err := writeWord(ctx, m, r.ctr, v+1); err != nil {
			op.End(0, err)
			return err
		}
	} else {
		prev, err := m.CAS(ctx, r.ctr, v, v+1)
		if err != nil {
			op.End(0, err)
			return err
		}
		if prev != v {
			op.Fail() // the CAS changed nothing
			if err := a.Release(ctx, 0, 0); !errors.Is(err, qlock.ErrReset) {
				return errors.Join(errLost, errors.New("the release of a lost lock did not report the reset"), err)
			}
			return errLost
		}
	}
	rerr := a.Release(ctx, 0, 0)
	op.Return(v)
	if rerr != nil && !errors.Is(rerr, qlock.ErrReset) {
		return rerr
	}
	return nil
}

// recoveryRun: client 0 takes the lock and then does victim's thing inside its critical
// section; n-1 others, started once it holds the lock, do k fenced increments each. It
// returns the victim's error, the others' Lockers and the history.
func (r *rig) recoveryRun(t *testing.T, o qlock.Options, n, k int, inside func(m farmem.Memory), plain bool) (error, []*qlock.Locker, *counterHistory) {
	t.Helper()
	h := counter.NewHistory(r.f.Runtime())
	ms := make([]farmem.Memory, n)
	ls := make([]*qlock.Locker, n)
	for i := range n {
		ms[i], ls[i] = r.client(t, i, o)
	}
	var held atomic.Bool
	var victimErr error
	r.do(func() {
		err := farmemtest.Parallel(r.f.Runtime(), n, func(i int) error {
			ctx := context.Background()
			m := ms[i]
			rt := m.Runtime()
			rec := h.Client(int(m.Info().ID))
			if i == 0 {
				victimErr = r.fenced(ctx, m, ls[0], rec, func() { held.Store(true); inside(m) }, plain)
				return nil
			}
			for !held.Load() {
				_ = rt.Sleep(ctx, 10*time.Microsecond)
			}
			for range k {
				if err := r.fenced(ctx, m, ls[i], rec, nil, plain); err != nil {
					return err
				}
			}
			return nil
		})
		require.NoError(t, err)
	})
	return victimErr, ls[1:], h
}

func totalStats(ls []*qlock.Locker) qlock.Stats {
	var s qlock.Stats
	for _, l := range ls {
		x := l.Stats()
		s.Enqueues += x.Enqueues
		s.Immediate += x.Immediate
		s.Waits += x.Waits
		s.Checks += x.Checks
		s.Resets += x.Resets
		s.Abandoned += x.Abandoned
		s.Handovers += x.Handovers
		s.Frees += x.Frees
		s.Lost += x.Lost
	}
	return s
}

// crashed: the holder crashes inside its critical section; the others reset the lock once its
// epoch has stood still for a lease, and go on.
func crashedHolder(t *testing.T, r *rig, o qlock.Options) {
	const n, k = 5, 20
	verr, others, h := r.recoveryRun(t, o, n, k, func(m farmem.Memory) {
		require.NoError(t, r.fi.CrashClient(m.Info().ID))
	}, false)
	require.ErrorIs(t, verr, farmem.ErrNodeDown)
	s := totalStats(others)
	t.Logf("others: %+v", s)
	require.Positive(t, s.Resets, "nobody reset the dead holder's lock")
	sum := h.Check(t)
	require.Equal(t, (n-1)*k, sum.OK)
}

// paused: the holder stalls inside its critical section for several leases; the others reset
// the lock and go on; when the holder wakes its fenced write is refused and its release
// reports the reset.
func pausedHolder(t *testing.T, r *rig, o qlock.Options, pause func(m farmem.Memory)) {
	const n, k = 5, 20
	verr, others, h := r.recoveryRun(t, o, n, k, pause, false)
	require.ErrorIs(t, verr, errLost, "the paused holder's write went through")
	s := totalStats(others)
	t.Logf("others: %+v", s)
	require.Positive(t, s.Resets)
	sum := h.Check(t)
	require.Equal(t, (n-1)*k, sum.OK)
}

func TestCrashedHolderLocal(t *testing.T) {
	crashedHolder(t, localRig(t, local.Options{Jitter: 10 * time.Microsecond}), qlock.Options{Lease: 30 * time.Millisecond})
}

func TestCrashedHolderSim(t *testing.T) {
	crashedHolder(t, simRig(t, 3), qlock.Options{Lease: time.Millisecond})
}

func TestPausedHolderLocal(t *testing.T) {
	o := qlock.Options{Lease: 30 * time.Millisecond}
	r := localRig(t, local.Options{Jitter: 10 * time.Microsecond})
	pausedHolder(t, r, o, func(m farmem.Memory) {
		// Paused for six leases, and then until another client has moved the counter: on the
		// wall clock of a loaded machine the others may take longer than six leases to reset
		// the lock, and the pause tests nothing until they have.
		ctx := context.Background()
		v0, err := readWord(ctx, m, r.ctr)
		if err != nil {
			t.Errorf("read the counter: %v", err)
			return
		}
		_ = m.Runtime().Sleep(ctx, 6*o.Lease)
		for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); {
			if v, err := readWord(ctx, m, r.ctr); err != nil || v != v0 {
				return
			}
			_ = m.Runtime().Sleep(ctx, o.Lease)
		}
		t.Errorf("no other client moved the counter in a minute of the holder's pause")
	})
}

// TestPausedHolderSim pauses the holder with the simulator's PauseClient: its goroutine stops
// at its next verb (the fenced write) and resumes five leases later.
func TestPausedHolderSim(t *testing.T) {
	r := simRig(t, 4)
	o := qlock.Options{Lease: time.Millisecond}
	pausedHolder(t, r, o, func(m farmem.Memory) {
		id := m.Info().ID
		r.s.At(r.s.Now().Add(5*o.Lease), func() { require.NoError(t, r.s.ResumeClient(id)) })
		require.NoError(t, r.s.PauseClient(id))
	})
}

// TestUnfencedPausedHolderCaught: the same with plain writes: the paused holder's late write
// overwrites its successors' increments, which the counter check catches. Fencing is what
// makes recovery safe.
func TestUnfencedPausedHolderCaught(t *testing.T) {
	r := simRig(t, 5)
	o := qlock.Options{Lease: time.Millisecond}
	const n, k = 5, 20
	verr, _, h := r.recoveryRun(t, o, n, k, func(m farmem.Memory) {
		_ = m.Runtime().Sleep(context.Background(), 5*o.Lease)
	}, true)
	require.NoError(t, verr)
	_, err := h.Verify()
	require.Error(t, err, "a paused holder's unfenced write went unnoticed")
}

// TestChaosSim: twelve clients increment with fenced writes while clients are crashed and
// paused at random times (holders, waiters, clients between their enqueue and their link):
// the survivors finish, the lock is reset as often as needed, and the counter stays
// linearizable.
func TestChaosSim(t *testing.T) {
	for seed := uint64(10); seed < 13; seed++ {
		r := simRig(t, seed)
		o := qlock.Options{Lease: 500 * time.Microsecond}
		const n, k = 12, 40
		h := counter.NewHistory(r.f.Runtime())
		ms := make([]farmem.Memory, n)
		ls := make([]*qlock.Locker, n)
		for i := range n {
			ms[i], ls[i] = r.client(t, i, o)
		}
		var lost atomic.Int64
		r.do(func() {
			start := r.s.Now()
			rnd := r.s.Runtime().NewRand()
			for i := range 4 {
				id := ms[i].Info().ID
				at := start.Add(time.Duration(20+rnd.IntN(400)) * time.Microsecond)
				if i < 2 {
					r.s.At(at, func() { _ = r.s.CrashClient(id) })
					continue
				}
				r.s.At(at, func() { _ = r.s.PauseClient(id) })
				r.s.At(at.Add(time.Duration(1+rnd.IntN(4))*o.Lease), func() { _ = r.s.ResumeClient(id) })
			}
			err := farmemtest.Parallel(r.f.Runtime(), n, func(i int) error {
				ctx := context.Background()
				rec := h.Client(int(ms[i].Info().ID))
				for range k {
					err := r.fenced(ctx, ms[i], ls[i], rec, nil, false)
					switch {
					case errors.Is(err, errLost):
						lost.Add(1)
					case errors.Is(err, farmem.ErrNodeDown) && i < 2:
						return nil // crashed
					case err != nil:
						return err
					}
				}
				return nil
			})
			require.NoError(t, err)
		})
		s := totalStats(ls[2:])
		sum := h.Check(t)
		t.Logf("seed %d: %v; lost %d; %+v", seed, sum, lost.Load(), s)
		require.Positive(t, s.Resets)
		require.GreaterOrEqual(t, sum.OK, (n-2)*k-int(lost.Load()))
	}
}

// TestWatchResetsDeadCloser: a client that queued a closing acquisition and died keeps the
// entry closed; a refused client, outside the queue, watches the entry and resets it once its
// lock word and epoch have stood still for a lease.
func TestWatchResetsDeadCloser(t *testing.T) {
	for _, r := range []*rig{localRig(t, local.Options{}), simRig(t, 6)} {
		o := qlock.Options{Lease: 20 * time.Millisecond}
		m0, dead := r.client(t, 0, o)
		_, l := r.client(t, 1, o)
		r.do(func() {
			ctx := context.Background()
			_, err := dead.Enqueue(ctx, r.entry, true)
			require.NoError(t, err)
			require.NoError(t, r.fi.CrashClient(m0.Info().ID))
			_, err = l.Enqueue(ctx, r.entry, false)
			require.ErrorIs(t, err, qlock.ErrClosedEntry)
			w := l.Watch(r.entry)
			rt := l.Memory().Runtime()
			start := rt.Now()
			for {
				reset, err := w.Check(ctx)
				require.NoError(t, err)
				if reset {
					break
				}
				require.Less(t, rt.Now().Sub(start), 10*o.Lease, "never reset")
				require.NoError(t, rt.Sleep(ctx, o.Lease/4))
			}
			require.GreaterOrEqual(t, rt.Now().Sub(start), o.Lease, "reset before a lease")
			a, _, err := l.Lock(ctx, r.entry)
			require.NoError(t, err)
			require.True(t, a.Immediate())
			require.NoError(t, a.Release(ctx, 0, 0))
		})
	}
}
