package alloc

import (
	"context"
	"encoding/binary"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/farmem/farmem/farmem"
	"github.com/farmem/farmem/farmem/local"
)

func epochCluster(t *testing.T) *testCluster {
	return newCluster(t, local.Options{Shape: local.Shape{MemoryNodes: 2, MemorySize: 4 << 20, ComputeNodes: 2, ClientsPerNode: 16}},
		FormatOptions{ChunkSize: 16 << 10})
}

func globalEpoch(t *testing.T, m farmem.Memory, a *Allocator) uint64 {
	t.Helper()
	b := make([]byte, 8)
	require.NoError(t, m.Read(context.Background(), a.epochAddr, b))
	return binary.LittleEndian.Uint64(b)
}

func slotWord(t *testing.T, m farmem.Memory, a *Allocator) uint64 {
	t.Helper()
	b := make([]byte, 8)
	require.NoError(t, m.Read(context.Background(), a.slotAddr, b))
	return binary.LittleEndian.Uint64(b)
}

// A retired block is reused only once the reader pinned before its unlinking has left.
func TestRetireWaitsForReader(t *testing.T) {
	ctx := context.Background()
	c := epochCluster(t)
	long := Options{Lease: time.Hour, Refresh: time.Minute}
	w, mw := c.allocator(t, 0, long)
	r, _ := c.allocator(t, 1, long)

	x, err := w.Alloc(ctx, 64, 0)
	require.NoError(t, err)
	require.NoError(t, r.Pin(ctx)) // r could now reach x
	require.Equal(t, uint64(1), r.ep.annE)

	require.NoError(t, w.Pin(ctx))
	require.NoError(t, w.Retire(ctx, x, 64)) // x unlinked
	require.NoError(t, w.Unpin())
	require.NoError(t, w.Quiesce(ctx))

	n, err := w.Reclaim(ctx)
	require.NoError(t, err)
	require.Zero(t, n)
	require.Equal(t, uint64(2), globalEpoch(t, mw, w), "every live client had announced 1")
	y, err := w.Alloc(ctx, 64, 0)
	require.NoError(t, err)
	require.NotEqual(t, x, y)
	_, err = w.Reclaim(ctx)
	require.NoError(t, err)
	require.Equal(t, uint64(2), globalEpoch(t, mw, w), "r still announces 1: no advance")
	require.Equal(t, 1, w.Stats().Pending)

	require.NoError(t, r.Unpin())
	require.NoError(t, r.Quiesce(ctx))
	n, err = w.Reclaim(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, n)
	z, err := w.Alloc(ctx, 64, 0)
	require.NoError(t, err)
	require.Equal(t, x, z)
}

// The epoch may advance once past a pinned writer's announcement, and a reader may pin in the
// new epoch and reach a block before the writer unlinks it: the writer's tag must cover that
// epoch too (annE+1, not annE).
func TestRetireTagCoversAdvance(t *testing.T) {
	ctx := context.Background()
	c := epochCluster(t)
	long := Options{Lease: time.Hour, Refresh: time.Minute}
	w, mw := c.allocator(t, 0, long)
	r, _ := c.allocator(t, 1, long)
	x, err := w.Alloc(ctx, 64, 0)
	require.NoError(t, err)

	require.NoError(t, w.Pin(ctx)) // announces 1
	_, err = w.Reclaim(ctx)        // every live announcement is 1: the epoch advances
	require.NoError(t, err)
	require.Equal(t, uint64(2), globalEpoch(t, mw, w))
	require.NoError(t, r.Pin(ctx)) // announces 2, and reaches x
	require.Equal(t, uint64(2), r.ep.annE)
	require.NoError(t, w.Retire(ctx, x, 64)) // then w unlinks x
	require.NoError(t, w.Unpin())
	require.NoError(t, w.Quiesce(ctx))

	n, err := w.Reclaim(ctx)
	require.NoError(t, err)
	require.Zero(t, n, "r, pinned in epoch 2, may still read x")
	require.NoError(t, r.Unpin())
	require.NoError(t, r.Quiesce(ctx))
	n, err = w.Reclaim(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, n)
}

// A client whose last read of the epoch is old announces that stale epoch first; its pin is in
// place only once it has announced the current one, or its tags would be too old.
func TestAnnounceCatchesUp(t *testing.T) {
	ctx := context.Background()
	c := epochCluster(t)
	long := Options{Lease: time.Hour, Refresh: time.Minute}
	w, mw := c.allocator(t, 0, long) // has read epoch 1
	r, _ := c.allocator(t, 1, long)
	z, _ := c.allocator(t, 0, long)
	for range 2 { // z alone moves the epoch to 3
		require.NoError(t, z.Pin(ctx))
		_, err := z.Reclaim(ctx)
		require.NoError(t, err)
		require.NoError(t, z.Unpin())
		require.NoError(t, z.Quiesce(ctx))
	}
	require.Equal(t, uint64(3), globalEpoch(t, mw, w))
	x, err := w.Alloc(ctx, 64, 0)
	require.NoError(t, err)
	require.NoError(t, w.Pin(ctx))
	require.Equal(t, uint64(3), w.ep.annE)
	require.NoError(t, r.Pin(ctx)) // announces 3, reaches x
	require.NoError(t, w.Retire(ctx, x, 64))
	require.NoError(t, w.Unpin())
	require.NoError(t, w.Quiesce(ctx))
	n, err := w.Reclaim(ctx)
	require.NoError(t, err)
	require.Zero(t, n, "r, pinned in epoch 3, may still read x")
}

// Readers that keep pinning move on to newer epochs by themselves, and the block comes back once
// the oldest announcement passes its tag.
func TestRetireReusedAsReadersMoveOn(t *testing.T) {
	ctx := context.Background()
	c := epochCluster(t)
	opts := Options{Lease: time.Second, Refresh: 2 * time.Millisecond}
	w, _ := c.allocator(t, 0, opts)
	r, mr := c.allocator(t, 1, opts)
	rt := mr.Runtime()
	x, err := w.Alloc(ctx, 64, 0)
	require.NoError(t, err)
	require.NoError(t, r.Pin(ctx))
	require.NoError(t, w.Pin(ctx))
	require.NoError(t, w.Retire(ctx, x, 64))
	tag := w.ep.retired[0].tag
	require.NoError(t, w.Unpin())
	require.NoError(t, r.Unpin())
	for round := 0; w.Stats().Pending > 0; round++ {
		require.Less(t, round, 200, "never reclaimed")
		require.NoError(t, rt.Sleep(ctx, 3*time.Millisecond))
		require.NoError(t, r.Pin(ctx)) // re-announces: its announcement is older than Refresh
		require.NoError(t, w.Pin(ctx))
		n, err := w.Reclaim(ctx)
		require.NoError(t, err)
		if n > 0 {
			require.Greater(t, r.ep.annE, tag, "reused while the reader announced %d <= tag %d", r.ep.annE, tag)
			require.Greater(t, w.ep.annE, tag)
		}
		require.NoError(t, w.Unpin())
		require.NoError(t, r.Unpin())
	}
	z, err := w.Alloc(ctx, 64, 0)
	require.NoError(t, err)
	require.Equal(t, x, z)
}

// A stalled reader (pinned, alive, within its lease) holds reuse back however long it stalls;
// when it resumes and unpins, reuse resumes.
func TestStalledReaderHoldsReuse(t *testing.T) {
	ctx := context.Background()
	c := epochCluster(t)
	opts := Options{Lease: time.Minute, Refresh: 2 * time.Millisecond}
	w, mw := c.allocator(t, 0, opts)
	r, _ := c.allocator(t, 1, opts)
	rt := mw.Runtime()
	require.NoError(t, r.Pin(ctx))
	stalledAt := r.ep.annE
	retired := map[farmem.Addr]bool{}
	for range 20 {
		require.NoError(t, w.Pin(ctx))
		x, err := w.Alloc(ctx, 64, 0)
		require.NoError(t, err)
		require.False(t, retired[x], "%v reused while a reader stalls", x)
		retired[x] = true
		require.NoError(t, w.Retire(ctx, x, 64))
		require.NoError(t, w.Unpin())
		require.NoError(t, rt.Sleep(ctx, 3*time.Millisecond))
		n, err := w.Reclaim(ctx)
		require.NoError(t, err)
		require.Zero(t, n)
	}
	require.Equal(t, 20, w.Stats().Pending)
	require.LessOrEqual(t, globalEpoch(t, mw, w), stalledAt+1, "the epoch cannot pass a live announcement by more than one")

	require.NoError(t, r.Unpin()) // resumes; its announcement is old, so it is withdrawn
	for round := 0; w.Stats().Pending > 0; round++ {
		require.Less(t, round, 100, "never reclaimed")
		require.NoError(t, rt.Sleep(ctx, 3*time.Millisecond))
		require.NoError(t, w.Pin(ctx))
		require.NoError(t, w.Unpin())
		_, err := w.Reclaim(ctx)
		require.NoError(t, err)
	}
	for range 20 {
		x, err := w.Alloc(ctx, 64, 0)
		require.NoError(t, err)
		require.True(t, retired[x], "%v is not one of the retired blocks", x)
	}
}

// A crashed reader's announcement expires with its lease, in fabric time; reuse then resumes
// and the stale slot is cleared.
func TestCrashedReaderLeaseExpires(t *testing.T) {
	ctx := context.Background()
	c := epochCluster(t)
	w, mw := c.allocator(t, 0, Options{Lease: time.Hour, Refresh: time.Minute})
	r, mr := c.allocator(t, 1, Options{Lease: 200 * time.Millisecond})
	rt := mw.Runtime()
	require.NoError(t, r.Pin(ctx))
	deadline := r.ep.deadline
	require.NoError(t, c.f.CrashClient(mr.Info().ID))

	x, err := w.Alloc(ctx, 64, 0)
	require.NoError(t, err)
	require.NoError(t, w.Pin(ctx))
	require.NoError(t, w.Retire(ctx, x, 64))
	require.NoError(t, w.Unpin())
	require.NoError(t, w.Quiesce(ctx))
	n, err := w.Reclaim(ctx)
	require.NoError(t, err)
	require.Zero(t, n, "the crashed reader's lease still runs")
	require.NotZero(t, slotWord(t, mw, r))

	// Past the deadline plus the clock skew allowance (and a unit of rounding).
	wait := deadline.Add(time.Millisecond + 2<<unitShift).Sub(rt.Now())
	require.NoError(t, rt.Sleep(ctx, wait))
	n, err = w.Reclaim(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, n)
	require.Zero(t, slotWord(t, mw, r), "the expired announcement is cleared")
	z, err := w.Alloc(ctx, 64, 0)
	require.NoError(t, err)
	require.Equal(t, x, z)
}

// A reader paused past its lease is treated as crashed; when it resumes, Unpin tells it that
// what it read may have been reused.
func TestPausedPastLease(t *testing.T) {
	ctx := context.Background()
	c := epochCluster(t)
	w, mw := c.allocator(t, 0, Options{Lease: time.Hour, Refresh: time.Minute})
	r, _ := c.allocator(t, 1, Options{Lease: 20 * time.Millisecond})
	rt := mw.Runtime()
	require.NoError(t, r.Pin(ctx))
	require.NoError(t, r.Pin(ctx)) // nested
	x, err := w.Alloc(ctx, 64, 0)
	require.NoError(t, err)
	require.NoError(t, w.Retire(ctx, x, 64))
	require.NoError(t, w.Quiesce(ctx))
	require.NoError(t, rt.Sleep(ctx, 30*time.Millisecond))
	n, err := w.Reclaim(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, n)
	require.NoError(t, r.Unpin(), "inner unpin")
	require.ErrorIs(t, r.Unpin(), ErrPinExpired)
	// The next pin is a fresh one.
	require.NoError(t, r.Pin(ctx))
	require.NoError(t, r.Unpin())
}

func TestRenew(t *testing.T) {
	ctx := context.Background()
	c := epochCluster(t)
	a, m := c.allocator(t, 0, Options{Lease: 60 * time.Millisecond, Refresh: 30 * time.Millisecond})
	rt := m.Runtime()
	require.ErrorIs(t, a.Renew(ctx), farmem.ErrInvalid, "not pinned")
	require.NoError(t, a.Pin(ctx))
	for range 4 {
		require.NoError(t, rt.Sleep(ctx, 20*time.Millisecond))
		require.NoError(t, a.Renew(ctx))
	}
	require.NoError(t, a.Unpin(), "renewed past the first lease")

	require.NoError(t, a.Pin(ctx))
	require.NoError(t, rt.Sleep(ctx, 65*time.Millisecond))
	require.ErrorIs(t, a.Renew(ctx), ErrPinExpired)
	require.ErrorIs(t, a.Unpin(), ErrPinExpired)
}

// The costs the package doc states for Pin, Unpin, Retire and Reclaim.
func TestEpochCosts(t *testing.T) {
	ctx := context.Background()
	c := epochCluster(t)
	a, m := c.allocator(t, 0, Options{Lease: time.Second, Refresh: 100 * time.Millisecond})
	rt := m.Runtime()
	x, err := a.Alloc(ctx, 64, 0)
	require.NoError(t, err)

	s := m.Stats()
	require.NoError(t, a.Pin(ctx))
	d := m.Stats().Sub(s)
	require.Equal(t, uint64(PinRoundTrips), d.RoundTrips, "first pin")
	require.Equal(t, uint64(1), d.Verbs[farmem.TargetMemory][farmem.OpMaskedCAS])
	require.Equal(t, uint64(1), d.Verbs[farmem.TargetMemory][farmem.OpRead])
	require.Equal(t, uint64(2), d.TotalVerbs())

	s = m.Stats()
	require.NoError(t, a.Retire(ctx, x, 64))
	require.NoError(t, a.Unpin())
	for range 1000 {
		require.NoError(t, a.Pin(ctx))
		require.NoError(t, a.Pin(ctx))
		require.NoError(t, a.Unpin())
		require.NoError(t, a.Unpin())
	}
	require.Zero(t, m.Stats().Sub(s).TotalVerbs(), "pins within Refresh and a pinned retire cost no verb")

	require.NoError(t, rt.Sleep(ctx, 110*time.Millisecond))
	s = m.Stats()
	require.NoError(t, a.Pin(ctx))
	require.NoError(t, a.Unpin())
	d = m.Stats().Sub(s)
	require.Equal(t, uint64(PinRoundTrips), d.RoundTrips, "a stale announcement is refreshed once")
	require.Equal(t, uint64(2), d.TotalVerbs())

	require.NoError(t, a.Pin(ctx))
	require.NoError(t, rt.Sleep(ctx, 110*time.Millisecond))
	s = m.Stats()
	require.NoError(t, a.Unpin())
	d = m.Stats().Sub(s)
	require.Zero(t, d.RoundTrips, "an old announcement is withdrawn off the critical path")
	require.Equal(t, uint64(1), d.Unsignaled)
	require.Equal(t, uint64(1), d.TotalVerbs())
	require.Zero(t, slotWord(t, m, a))

	y, err := a.Alloc(ctx, 64, 0)
	require.NoError(t, err)
	s = m.Stats()
	require.NoError(t, a.Retire(ctx, y, 64))
	d = m.Stats().Sub(s)
	require.Equal(t, uint64(1), d.VerbsOf(farmem.OpRead), "retire with no live announcement reads the epoch")
	require.Equal(t, uint64(1), d.TotalVerbs())
	require.Equal(t, uint64(RetireUnpinnedRoundTrips), d.RoundTrips)

	s = m.Stats()
	n, err := a.Reclaim(ctx)
	require.NoError(t, err)
	require.Equal(t, 2, n)
	d = m.Stats().Sub(s)
	require.Equal(t, uint64(ScanRoundTrips), d.RoundTrips, "a scan")
	require.Equal(t, uint64(2), d.VerbsOf(farmem.OpRead))
	require.Equal(t, uint64(1), d.Unsignaled, "plus the unsignaled advance")
	require.Equal(t, uint64(8*a.slots), d.BytesIn-8)
}

// RetireAt takes the caller's reading for the retire: one inside the lease tags the block with
// the announced epoch plus one and reads nothing; one past the lease reads the global epoch, as
// Retire does after a lapse. Either reading then serves UnpinSeen.
func TestRetireAt(t *testing.T) {
	ctx := context.Background()
	c := epochCluster(t)
	long := Options{Lease: time.Hour, Refresh: time.Minute}
	w, mw := c.allocator(t, 0, long)
	x, err := w.Alloc(ctx, 64, 0)
	require.NoError(t, err)
	y, err := w.Alloc(ctx, 64, 0)
	require.NoError(t, err)

	require.NoError(t, w.Pin(ctx))
	at := w.ep.seen
	before := mw.Stats()
	require.NoError(t, w.RetireAt(ctx, x, 64, at))
	require.Zero(t, mw.Stats().Sub(before).RoundTrips, "a reading inside the lease reads nothing")
	last := w.ep.retired[len(w.ep.retired)-1]
	require.Equal(t, w.ep.annE+1, last.tag)

	late := w.ep.deadline.Add(time.Second)
	before = mw.Stats()
	require.NoError(t, w.RetireAt(ctx, y, 64, late))
	require.EqualValues(t, 1, mw.Stats().Sub(before).RoundTrips, "a reading past the lease reads the global epoch")
	last = w.ep.retired[len(w.ep.retired)-1]
	require.Equal(t, globalEpoch(t, mw, w), last.tag)
	require.Equal(t, late, w.ep.seen)
	require.ErrorIs(t, w.UnpinSeen(), ErrPinExpired, "the late reading is the section's end")
}
