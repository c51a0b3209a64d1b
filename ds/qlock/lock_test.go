package qlock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/farmem/farmem/ds/qlock"
	"github.com/farmem/farmem/farmem"
	"github.com/farmem/farmem/farmem/local"
)

// A lease no critical section of these tests comes near on a loaded machine.
var calm = qlock.Options{Lease: 5 * time.Second}

// TestMutualExclusionLocal: clients on three compute nodes increment a far counter with a
// plain read and a plain write under the lock, with jitter on every verb; nothing is lost,
// the history is a linearizable counter, and grants follow queue order.
func TestMutualExclusionLocal(t *testing.T) {
	r := localRig(t, local.Options{Jitter: 20 * time.Microsecond, Latency: 2 * time.Microsecond})
	h := counter.NewHistory(r.f.Runtime())
	var g grantLog
	const n, k = 6, 60
	r.increments(t, n, k, calm, h, &g, 10*time.Microsecond, false)
	m, _ := r.client(t, 0, calm)
	v, err := readWord(context.Background(), m, r.ctr)
	require.NoError(t, err)
	require.Equal(t, uint64(n*k), v)
	h.Check(t)
	queued := g.fifo(t)
	t.Logf("%d grants, %d after queueing", len(g.grants), queued)
	require.Greater(t, queued, n*k/4, "too little contention to test anything")
}

// TestMutualExclusionSim is the same on the simulator, where many more clients queue.
func TestMutualExclusionSim(t *testing.T) {
	for seed := uint64(1); seed <= 2; seed++ {
		r := simRig(t, seed)
		h := counter.NewHistory(r.f.Runtime())
		var g grantLog
		const n, k = 16, 40
		r.increments(t, n, k, qlock.Options{Lease: time.Millisecond}, h, &g, 2*time.Microsecond, false)
		var v uint64
		m, _ := r.client(t, 0, calm)
		r.do(func() {
			var err error
			v, err = readWord(context.Background(), m, r.ctr)
			require.NoError(t, err)
		})
		require.Equal(t, uint64(n*k), v)
		h.Check(t)
		queued := g.fifo(t)
		require.Greater(t, queued, n*k/2)
	}
}

// TestBrokenLockCaught: a lock that lets a queued client in without waiting for its
// predecessor (its Memory answers the Wait on the grant word at once) loses increments, which
// the counter check must catch.
func TestBrokenLockCaught(t *testing.T) {
	// Whether four clients' increments overlap depends on the scheduler: on a loaded machine a
	// round can run them one after another, so the check gets several rounds to catch one.
	var verr error
	for round := 0; round < 10 && verr == nil; round++ {
		r := localRig(t, local.Options{Jitter: 20 * time.Microsecond, Latency: 2 * time.Microsecond})
		h := counter.NewHistory(r.f.Runtime())
		var g grantLog
		r.increments(t, 4, 40, calm, h, &g, 0, true)
		_, verr = h.Verify()
	}
	require.Error(t, verr, "a lock without waiting passed the counter check in every round")
}

// TestUncontendedCost: an uncontended acquisition is one MaskedCAS, its release one CAS; a
// queued acquisition adds the link write, and a hand-over is two writes and the epoch FAA;
// round trips are the package's constants.
func TestUncontendedCost(t *testing.T) {
	r := localRig(t, local.Options{})
	ctx := context.Background()
	m, l := r.client(t, 0, calm)
	m2, l2 := r.client(t, 1, calm)
	before := m.Stats()
	a, _, err := l.Lock(ctx, r.entry)
	require.NoError(t, err)
	require.True(t, a.Immediate())
	require.NoError(t, a.Release(ctx, 0, 0))
	d := m.Stats().Sub(before)
	require.Equal(t, uint64(qlock.LockRoundTrips+qlock.ReleaseRoundTrips), d.RoundTrips)
	require.Equal(t, uint64(1), d.Verbs[farmem.TargetMemory][farmem.OpMaskedCAS])
	require.Equal(t, uint64(1), d.Verbs[farmem.TargetMemory][farmem.OpCAS])
	require.Equal(t, uint64(2), d.VerbsTo(farmem.TargetMemory))

	// Queued: the second client enqueues behind the first, which hands over.
	a, _, err = l.Lock(ctx, r.entry)
	require.NoError(t, err)
	before2 := m2.Stats()
	b, err := l2.Enqueue(ctx, r.entry, false)
	require.NoError(t, err)
	require.False(t, b.Immediate())
	require.Equal(t, a.Ticket(), b.Pred())
	before = m.Stats()
	require.NoError(t, a.Release(ctx, 42, 7))
	d = m.Stats().Sub(before)
	require.Equal(t, uint64(qlock.HandOverRoundTrips), d.RoundTrips, "hand-over")
	require.Equal(t, uint64(2), d.Verbs[farmem.TargetCompute][farmem.OpWrite])
	require.Equal(t, uint64(1), d.Verbs[farmem.TargetMemory][farmem.OpFAA])
	msg, err := b.Await(ctx, qlock.Granted)
	require.NoError(t, err)
	require.Equal(t, qlock.Msg{Kind: qlock.Granted, Word: 42, Aux: 7}, msg)
	require.NoError(t, b.Release(ctx, 0, 0))
	d2 := m2.Stats().Sub(before2)
	require.Equal(t, uint64(1), d2.Verbs[farmem.TargetMemory][farmem.OpMaskedCAS])
	require.Equal(t, uint64(1), d2.Verbs[farmem.TargetCompute][farmem.OpWrite], "the link")
	require.Equal(t, uint64(1), d2.Verbs[farmem.TargetMemory][farmem.OpCAS], "the release")
	require.Equal(t, uint64(qlock.LockRoundTrips+qlock.LinkRoundTrips+qlock.ReleaseRoundTrips), d2.RoundTrips)
}

// TestClosing: a closing acquisition refuses later ones until it releases.
func TestClosing(t *testing.T) {
	r := localRig(t, local.Options{})
	ctx := context.Background()
	_, l := r.client(t, 0, calm)
	_, l2 := r.client(t, 1, calm)
	a, _, err := l.Lock(ctx, r.entry)
	require.NoError(t, err)
	c, err := l2.Enqueue(ctx, r.entry, true)
	require.NoError(t, err)
	_, err = l.Enqueue(ctx, r.entry, false)
	require.ErrorIs(t, err, qlock.ErrClosedEntry)
	require.NoError(t, a.Release(ctx, 0, 0))
	_, err = c.Await(ctx, qlock.Granted)
	require.NoError(t, err)
	require.NoError(t, c.Release(ctx, 0, 0))
	a, _, err = l.Lock(ctx, r.entry)
	require.NoError(t, err, "open again once the closing acquisition released")
	require.True(t, a.Immediate())
	require.NoError(t, a.Release(ctx, 0, 0))
}

// TestStaleMessagesIgnored: a message for an earlier acquisition of the receiver, and a
// payload overwritten after its grant word, are not taken for current ones.
func TestStaleMessagesIgnored(t *testing.T) {
	r := localRig(t, local.Options{})
	ctx := context.Background()
	_, l := r.client(t, 0, calm)
	_, l2 := r.client(t, 1, calm)
	a, _, err := l.Lock(ctx, r.entry)
	require.NoError(t, err)
	b, err := l2.Enqueue(ctx, r.entry, false)
	require.NoError(t, err)
	old := qlock.MakeTicket(b.Ticket().Client(), b.Ticket().Seq()-1)
	require.NoError(t, a.Send(ctx, old, qlock.Msg{Kind: qlock.Granted, Word: 1}, false))
	wctx, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	_, err = b.Await(wctx, qlock.Granted)
	cancel()
	require.ErrorIs(t, err, context.DeadlineExceeded, "a message for an earlier acquisition was accepted")
	require.NoError(t, a.Send(ctx, b.Ticket(), qlock.Msg{Kind: qlock.Done, Word: 5, Aux: 3}, false))
	// A stalled writer overwrites the payload after the grant word landed.
	node, err := l.NodeOf(b.Ticket())
	require.NoError(t, err)
	m := l.Memory()
	require.NoError(t, writeWord(ctx, m, node.Add(8), 6))
	msg, err := b.Await(ctx, qlock.Done)
	require.NoError(t, err)
	require.True(t, msg.Damaged)
	require.Equal(t, qlock.Done, msg.Kind)
	require.Zero(t, msg.Word)
	require.NoError(t, a.Release(ctx, 0, 0))
	_, err = b.Await(ctx, qlock.Granted)
	require.NoError(t, err)
	require.NoError(t, b.Release(ctx, 0, 0))
}

// lostErr tells whether an error is the lock being lost to a reset.
func lostErr(err error) bool { return errors.Is(err, qlock.ErrReset) }
