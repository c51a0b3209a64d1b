package selcc_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/farmem/farmem/ds/selcc"
	"github.com/farmem/farmem/farmem"
	"github.com/farmem/farmem/farmem/local"
)

// TestReleaseReacquireRace: a one-frame cache, so every miss evicts the other line and the
// evicted line is taken again at once, while other nodes write both lines. A re-acquisition
// that overtook its own release would add the node's shared bit twice (a carry into the next
// node's bit) or find itself named exclusive holder; the checks see either as SWMR violations,
// lost writes or a non-zero latch word after Close.
func TestReleaseReacquireRace(t *testing.T) {
	for seed := uint64(1); seed <= 3; seed++ {
		r := simRig(t, simModel(4, 2), seed, selcc.Options{LineSize: 64, Frames: 1, EvictBatch: 1})
		gs := r.lines(t, 2)
		sw := newSWMR(len(gs))
		h := register.NewHistory(r.f.Runtime())
		incs := r.workload(t, 8, 80, 0.3, gs, sw, h, 0)
		require.Zero(t, sw.violations.Load())
		require.Zero(t, sw.torn.Load())
		h.Check(t)
		var ev uint64
		for _, n := range r.comp {
			ev += r.c.NodeStats(n).Evicted
		}
		require.Greater(t, ev, uint64(100), "too few evictions to race")
		r.do(func() { require.NoError(t, r.c.Close()) })
		latches, ctrs := r.farWords(t, gs)
		for i := range gs {
			require.Zero(t, latches[i])
			require.Equal(t, uint64(incs[i]), ctrs[i])
		}
	}
}

// TestLocalReadersOneShare: many clients of one node miss on one line at once; the global
// shared acquisition runs once, under the frame's exclusive latch (never under a shared one),
// so the node's share is added once.
func TestLocalReadersOneShare(t *testing.T) {
	r := localRig(t, local.Options{Shape: local.Shape{ComputeNodes: 2}, Jitter: 5 * time.Microsecond, Latency: time.Microsecond},
		selcc.Options{LineSize: 64, Frames: 4})
	gs := r.lines(t, 1)
	const n = 8
	cls := make([]*selcc.Client, n)
	for i := range n {
		_, cls[i] = r.client(t, 2*i) // all on the first compute node
	}
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		wg.Go(func() {
			ctx := context.Background()
			gd, err := cls[i].RLock(ctx, gs[0])
			if err == nil {
				err = gd.Unlock(ctx)
			}
			errs[i] = err
		})
	}
	wg.Wait()
	for _, err := range errs {
		require.NoError(t, err)
	}
	latches, _ := r.farWords(t, gs)
	require.Equal(t, selcc.Bitmap{}.Shared(r.comp[0].ComputeID()), latches[0])
}

// recorder logs, in order, a client's latch FAAs that undo a shared attempt and its
// invalidation messages.
type recorder struct {
	farmem.Memory
	mu     sync.Mutex
	events []string
	undo   uint64
}

func (m *recorder) FAA(ctx context.Context, a farmem.Addr, d uint64) (uint64, error) {
	v, err := m.Memory.FAA(ctx, a, d)
	if d == m.undo {
		m.log("undo-done")
	}
	return v, err
}

func (m *recorder) Send(ctx context.Context, n farmem.NodeID, method uint16, req []byte) error {
	m.log("send")
	return m.Memory.Send(ctx, n, method, req)
}

func (m *recorder) log(e string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.events = append(m.events, e)
}

// TestUndoBeforeInvalidation: a reader that fails against an exclusive holder has its undo FAA
// completed before its PeerRd goes out (the holder's downgrade adds the reader's share, which
// must not meet the reader's own), and the reader then gets the holder's write by forwarding.
func TestUndoBeforeInvalidation(t *testing.T) {
	r := localRig(t, local.Options{Shape: local.Shape{ComputeNodes: 2}}, selcc.Options{LineSize: 64, Frames: 4})
	gs := r.lines(t, 1)
	ctx := context.Background()
	_, w := r.client(t, 0)
	gd, err := w.Lock(ctx, gs[0])
	require.NoError(t, err)
	require.NoError(t, gd.WriteUint64(ctx, 0, 42))
	require.NoError(t, gd.Unlock(ctx)) // lazily still held M by node 0

	m, err := r.f.Open(ctx, r.comp[1])
	require.NoError(t, err)
	defer m.Close()
	rec := &recorder{Memory: m, undo: selcc.ReleaseSharedDelta(selcc.Bitmap{}, r.comp[1].ComputeID())}
	cl, err := r.c.Client(ctx, rec)
	require.NoError(t, err)
	gd, err = cl.RLock(ctx, gs[0])
	require.NoError(t, err)
	v, err := gd.ReadUint64(ctx, 0)
	require.NoError(t, err)
	require.Equal(t, uint64(42), v)
	require.NoError(t, gd.Unlock(ctx))
	require.Equal(t, []string{"undo-done", "send"}, rec.events)
	latches, _ := r.farWords(t, gs)
	cd := selcc.Bitmap{}
	require.Equal(t, cd.Shared(r.comp[0].ComputeID())+cd.Shared(r.comp[1].ComputeID()), latches[0], "both share after the downgrade")
}

// TestGroupNonHoldersDrop: under the group codec a writer invalidates every member of a
// non-empty group; the members that hold nothing drop the message and leave the count alone,
// and the one real sharer releases, so the writer gets the line.
func TestGroupNonHoldersDrop(t *testing.T) {
	r := simRig(t, simModel(64, 1), 1, selcc.Options{LineSize: 64, Frames: 4})
	gs := r.lines(t, 1)
	// comp[8] is compute id 9: group 0, with ids 1, 17, 25, ...
	_, reader := r.client(t, 8)
	_, writer := r.client(t, 1) // id 2, group 1
	r.do(func() {
		ctx := context.Background()
		gd, err := reader.RLock(ctx, gs[0])
		require.NoError(t, err)
		require.NoError(t, gd.Unlock(ctx))
		gd, err = writer.Lock(ctx, gs[0])
		require.NoError(t, err)
		require.NoError(t, gd.Unlock(ctx))
	})
	g := r.c.Options().Codec.(selcc.Groups)
	latches, _ := r.farWords(t, gs)
	require.Equal(t, g.Exclusive(2), latches[0])
	var dropped uint64
	for i, n := range r.comp {
		st := r.c.NodeStats(n)
		if i == 8 {
			require.Equal(t, uint64(1), st.Handled, "the real sharer released")
			continue
		}
		require.Zero(t, st.Handled, "%v holds nothing and changed the word", n)
		dropped += st.Dropped
	}
	require.Equal(t, uint64(len(g.Sharers(g.Shared(9), nil))-1), dropped, "every other member of the group dropped")
}

// TestRepairDeadNode: a node dies holding one line exclusive and another shared; a peer's
// acquisition fails with ErrNodeDown instead of hanging; the repair scan removes both holds and
// the lines are usable again.
func TestRepairDeadNode(t *testing.T) {
	r := localRig(t, local.Options{Shape: local.Shape{ComputeNodes: 3}}, selcc.Options{LineSize: 64, Frames: 4})
	gs := r.lines(t, 2)
	ctx := context.Background()
	_, victim := r.client(t, 2)
	gd, err := victim.Lock(ctx, gs[0])
	require.NoError(t, err)
	require.NoError(t, gd.WriteUint64(ctx, 0, 5))
	require.NoError(t, gd.Unlock(ctx))
	gd, err = victim.RLock(ctx, gs[1])
	require.NoError(t, err)
	require.NoError(t, gd.Unlock(ctx))
	dead := r.comp[2]
	require.NoError(t, r.lf.Crash(dead))

	_, cl := r.client(t, 0)
	_, err = cl.Lock(ctx, gs[0])
	require.ErrorIs(t, err, farmem.ErrNodeDown)
	_, err = cl.Lock(ctx, gs[1])
	require.ErrorIs(t, err, farmem.ErrNodeDown)

	n, err := cl.Repair(ctx, dead.ComputeID(), gs)
	require.NoError(t, err)
	require.Equal(t, 2, n)
	for _, g := range gs {
		gd, err := cl.Lock(ctx, g)
		require.NoError(t, err)
		v, err := gd.ReadUint64(ctx, 0)
		require.NoError(t, err)
		require.Zero(t, v, "the dead node's dirty line was lost (write-back)")
		require.NoError(t, gd.Unlock(ctx))
	}
}

// TestDurabilityModes: WriteBackOnRelease puts a released write in far memory at once;
// WriteBack keeps it in the cache until the line leaves.
func TestDurabilityModes(t *testing.T) {
	for _, d := range []selcc.Durability{selcc.WriteBack, selcc.WriteBackOnRelease} {
		r := localRig(t, local.Options{Shape: local.Shape{ComputeNodes: 2}}, selcc.Options{LineSize: 64, Frames: 4, Durability: d})
		gs := r.lines(t, 1)
		ctx := context.Background()
		m, cl := r.client(t, 0)
		gd, err := cl.Lock(ctx, gs[0])
		require.NoError(t, err)
		require.NoError(t, gd.WriteUint64(ctx, 8, 9))
		before := m.Stats().RoundTrips
		require.NoError(t, gd.Unlock(ctx))
		after := m.Stats().RoundTrips
		var b [8]byte
		require.NoError(t, m.Read(ctx, gs[0].Body().Add(8), b[:]))
		if d == selcc.WriteBack {
			require.Zero(t, getU64(b[:]))
			require.Equal(t, before, after)
		} else {
			require.Equal(t, uint64(9), getU64(b[:]))
			require.Equal(t, before+1, after)
		}
	}
}

// TestConflictCosts: a writer that finds the line M on another node pays one round trip (its
// failed CAS and READ) and one message; the holder's handler pays two (the hand-over FAA, then
// the forward): three in all, as an RPC directory would. Dirty bounds: closing writes back only
// the bytes written.
func TestConflictCosts(t *testing.T) {
	r := localRig(t, local.Options{Shape: local.Shape{ComputeNodes: 2}}, selcc.Options{LineSize: 2048, Frames: 4})
	gs := r.lines(t, 1)
	ctx := context.Background()
	_, a := r.client(t, 0)
	gd, err := a.Lock(ctx, gs[0])
	require.NoError(t, err)
	require.NoError(t, gd.WriteUint64(ctx, 64, 1))
	require.NoError(t, gd.Unlock(ctx))

	mb, b := r.client(t, 1)
	before, fb := mb.Stats(), r.f.Stats()
	gd, err = b.Lock(ctx, gs[0])
	require.NoError(t, err)
	v, err := gd.ReadUint64(ctx, 64)
	require.NoError(t, err)
	require.Equal(t, uint64(1), v)
	require.NoError(t, gd.WriteUint64(ctx, 128, 2))
	require.NoError(t, gd.Unlock(ctx))
	after, fa := mb.Stats(), r.f.Stats()
	require.Equal(t, uint64(1), after.RoundTrips-before.RoundTrips, "requester")
	require.Equal(t, uint64(1), after.Messages-before.Messages)
	require.Equal(t, uint64(3), fa.RoundTrips-fb.RoundTrips, "requester and holder together")

	// B holds the line M with the whole line dirty (it came by hand-over, unwritten back); a
	// reader on A gets it by downgrade: B writes the line back once.
	fb = r.f.Stats()
	gd, err = a.RLock(ctx, gs[0])
	require.NoError(t, err)
	v, err = gd.ReadUint64(ctx, 128)
	require.NoError(t, err)
	require.Equal(t, uint64(2), v)
	require.NoError(t, gd.Unlock(ctx))
	fa = r.f.Stats()
	// case 2: the reader's attempt, its undo, the holder's write-back and downgrade (one
	// batch), the forward: one more than case 1, for the undo.
	require.Equal(t, uint64(4), fa.RoundTrips-fb.RoundTrips, "case 2")

	// Now both share it; A writes 8 bytes (upgrade after B releases), then Close writes back 8
	// bytes of body, not the line. The write-back's extent is checked in far memory, not by
	// the fabric's byte count: that count includes local latch verbs, and B's handler, which
	// acknowledged A in the batch of its release FAA, may still be unlatching its frame when
	// Close starts (Close then waits for that latch, with verbs of its own).
	gd, err = a.Lock(ctx, gs[0])
	require.NoError(t, err)
	require.NoError(t, gd.WriteUint64(ctx, 512, 3))
	require.NoError(t, gd.Unlock(ctx))
	m, err := r.f.Open(ctx, r.comp[0])
	require.NoError(t, err)
	defer m.Close()
	marks := []uint64{0, 504, 520, 2040} // body offsets around the dirty range [512, 520)
	for _, off := range marks {
		var mk [8]byte
		putU64(mk[:], 0xa5a5a5a5)
		require.NoError(t, m.Write(ctx, gs[0].Body().Add(off), mk[:]))
	}
	fb = r.f.Stats()
	require.NoError(t, r.c.Close())
	fa = r.f.Stats()
	d := fa.Sub(fb)
	require.Equal(t, uint64(1), d.Verbs[farmem.TargetMemory][farmem.OpWrite], "write-backs: %v", d)
	require.Equal(t, uint64(1), d.Verbs[farmem.TargetMemory][farmem.OpFAA], "releases: %v", d)
	var w [8]byte
	for _, off := range marks {
		require.NoError(t, m.Read(ctx, gs[0].Body().Add(off), w[:]))
		require.Equal(t, uint64(0xa5a5a5a5), getU64(w[:]), "eviction wrote back more than the dirty range (offset %d)", off)
	}
	require.NoError(t, m.Read(ctx, gs[0].Body().Add(512), w[:]))
	require.Equal(t, uint64(3), getU64(w[:]))
}

// TestCloseWaitsForLatchedFrame: a Close that finds a frame latched (here by an open guard)
// waits for the latch instead of retrying its try-lock in a loop, and releases the line once
// the guard is gone.
func TestCloseWaitsForLatchedFrame(t *testing.T) {
	r := localRig(t, local.Options{Shape: local.Shape{ComputeNodes: 1}}, selcc.Options{LineSize: 64, Frames: 4})
	gs := r.lines(t, 1)
	ctx := context.Background()
	_, a := r.client(t, 0)
	gd, err := a.Lock(ctx, gs[0])
	require.NoError(t, err)
	require.NoError(t, gd.WriteUint64(ctx, 0, 7))
	fb := r.f.Stats()
	done := make(chan error, 1)
	go func() { done <- r.c.Close() }()
	time.Sleep(50 * time.Millisecond)
	select {
	case err := <-done:
		t.Fatalf("Close returned (%v) while a guard held its frame", err)
	default:
	}
	require.NoError(t, gd.Unlock(ctx))
	require.NoError(t, <-done)
	d := r.f.Stats().Sub(fb)
	require.Less(t, d.FailedCAS, uint64(10), "Close retried the latch in a loop: %v", d)
	m, err := r.f.Open(ctx, r.comp[0])
	require.NoError(t, err)
	defer m.Close()
	var w [8]byte
	require.NoError(t, m.Read(ctx, gs[0].Body(), w[:]))
	require.Equal(t, uint64(7), getU64(w[:]))
	require.NoError(t, m.Read(ctx, gs[0].Latch(), w[:]))
	require.Zero(t, getU64(w[:]), "latch word after Close")
}

// TestSilentHolder: a holder that hangs (fail-silent) makes a conflicting acquisition fail with
// ErrNodeDown within the reply timeout instead of waiting forever.
func TestSilentHolder(t *testing.T) {
	r := localRig(t, local.Options{Shape: local.Shape{ComputeNodes: 2}, DownTimeout: 20 * time.Millisecond},
		selcc.Options{LineSize: 64, Frames: 4, ReplyTimeout: 50 * time.Millisecond})
	gs := r.lines(t, 1)
	ctx := context.Background()
	_, a := r.client(t, 0)
	gd, err := a.Lock(ctx, gs[0])
	require.NoError(t, err)
	require.NoError(t, gd.Unlock(ctx))
	require.NoError(t, r.lf.Hang(r.comp[0]))
	defer func() { _ = r.lf.Resume(r.comp[0]) }()
	_, b := r.client(t, 1)
	_, err = b.Lock(ctx, gs[0])
	require.ErrorIs(t, err, farmem.ErrNodeDown)
}
