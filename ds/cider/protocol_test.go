package cider_test

import (
	"context"
	"encoding/binary"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/farmem/farmem/bench/ptrarray"
	"github.com/farmem/farmem/ds/cider"
	"github.com/farmem/farmem/ds/ptrsync"
	"github.com/farmem/farmem/ds/qlock"
	"github.com/farmem/farmem/ds/race"
	"github.com/farmem/farmem/farmem"
	"github.com/farmem/farmem/farmem/local"
	"github.com/farmem/farmem/sim"
)

// A word pointer: the protocol tests drive CIDER directly over one pointer word whose value is
// key << 32 | version, so that a test can change which key the pointer belongs to (as a RACE
// slot does when a key is deleted or moved by a split and another inserted) while updates
// are queued on its lock.
var (
	wordPtr  = farmem.MakeAddr(1, 1<<20)
	wordLock = farmem.MakeAddr(1, 1<<20+64)
)

// wordTarget is an update of key over the word pointer.
type wordTarget struct {
	m        farmem.Memory
	key, old uint64
	version  uint64
}

func (w *wordTarget) Kind() ptrsync.Kind    { return ptrsync.Update }
func (w *wordTarget) LockBytes() []byte     { return nil }
func (w *wordTarget) Pointer() farmem.Addr  { return wordPtr }
func (w *wordTarget) Lock() farmem.Addr     { return wordLock }
func (w *wordTarget) Old() uint64           { return w.old }
func (w *wordTarget) Deadline() farmem.Time { return w.m.Runtime().Now().Add(time.Second) }
func (w *wordTarget) Memory() farmem.Memory { return w.m }
func (w *wordTarget) Same(_ context.Context, v uint64) (bool, error) {
	return v>>32 == w.key, nil
}
func (w *wordTarget) Install(ctx context.Context, exp uint64) (uint64, uint64, error) {
	nw := w.key<<32 | w.version
	prev, err := w.m.CAS(ctx, wordPtr, exp, nw)
	return prev, nw, err
}

func readWordPtr(t *testing.T, m farmem.Memory) uint64 {
	var b [8]byte
	require.NoError(t, m.Read(context.Background(), wordPtr, b[:]))
	return binary.LittleEndian.Uint64(b[:])
}

// protoRig is a small simulated cluster with three pessimistic CIDER clients, whose verbs the
// tests can act after (hs).
type protoRig struct {
	s  *sim.Sim
	ms []farmem.Memory
	ss []*cider.CIDER
	hs []*afterVerbs
}

func newProtoRig(t *testing.T, n int) *protoRig {
	m := sim.ConnectX6()
	m.ComputeNodes, m.ClientsPerNode, m.MaxHandlers = 3, 4, 1
	s, err := sim.New(m, 1)
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	r := &protoRig{s: s}
	comp := s.Topology().ComputeNodes()
	credits := cider.NewCredits(0)
	for i := range n {
		raw, err := s.Open(context.Background(), comp[i%len(comp)])
		require.NoError(t, err)
		h := new(afterVerbs)
		mm := interposed(raw, h)
		r.hs = append(r.hs, h)
		t.Cleanup(func() { require.Empty(t, h.armed, "client %d: an armed action never ran", i) })
		c, err := cider.NewCIDER(mm, credits, cider.Options{Mode: cider.AlwaysPessimistic,
			Lock: qlock.Options{Lease: time.Millisecond}})
		require.NoError(t, err)
		r.ms, r.ss = append(r.ms, mm), append(r.ss, c)
	}
	return r
}

// update is client i's update of key, starting at delay: it reads the pointer and commits once.
type attempt struct {
	out ptrsync.Result
	err error
}

func (r *protoRig) update(t *testing.T, g *sim.Group, i int, key uint64, delay time.Duration, got *attempt) {
	r.updateWith(t, g, i, key, delay, got, false)
}

// updateWith is update; with unchecked set the target's Same accepts any word (a member that
// takes its batch's outcome as its own without checking it concerns its key).
func (r *protoRig) updateWith(t *testing.T, g *sim.Group, i int, key uint64, delay time.Duration, got *attempt, unchecked bool) {
	g.Go(func() {
		ctx := context.Background()
		m := r.ms[i]
		_ = m.Runtime().Sleep(ctx, delay)
		var tg ptrsync.Target = &wordTarget{m: m, key: key, old: readWordPtr(t, m), version: uint64(100 + i)}
		if unchecked {
			tg = uncheckedTarget{tg}
		}
		r.ss[i].Plan(ptrsync.Update, key)
		got.out, got.err = r.ss[i].Commit(ctx, tg)
	})
}

// uncheckedTarget is a target whose Same accepts every word.
type uncheckedTarget struct{ ptrsync.Target }

func (uncheckedTarget) Same(context.Context, uint64) (bool, error) { return true, nil }

// holdFirst makes client i, once it has enqueued on the word pointer's lock (and holds it,
// the lock being free), pause for d before it looks for a successor, so that others queue.
func (r *protoRig) holdFirst(i int, d time.Duration) {
	r.hs[i].arm(enqueued(wordLock), func() { _ = r.ms[i].Runtime().Sleep(context.Background(), d) })
}

// TestBatchOfAnotherKey: a coordinator and a participant queued for key A; then the pointer
// changes to key B (a RACE slot reused after a delete or a split) and an update of B queues
// behind them and becomes the executor. The batch commits B's value over a B word: the
// members must not take that as their update of A (they retry); with targets whose Same
// check accepts any word, they report a combined update of a key that is not there.
func TestBatchOfAnotherKey(t *testing.T) {
	const keyA, keyB = 7, 9
	for _, defect := range []bool{false, true} {
		r := newProtoRig(t, 3)
		var c, p, e attempt
		r.s.Run(func() {
			ctx := context.Background()
			_, err := r.ms[0].CAS(ctx, wordPtr, 0, keyA<<32|1)
			require.NoError(t, err)
			r.holdFirst(0, 100*time.Microsecond)
			g := r.s.NewGroup()
			r.updateWith(t, g, 0, keyA, 0, &c, defect)
			r.updateWith(t, g, 1, keyA, 20*time.Microsecond, &p, defect)
			g.Go(func() { // the pointer now belongs to B
				_ = r.ms[2].Runtime().Sleep(ctx, 40*time.Microsecond)
				_, err := r.ms[2].CAS(ctx, wordPtr, keyA<<32|1, keyB<<32|5)
				require.NoError(t, err)
			})
			r.update(t, g, 2, keyB, 60*time.Microsecond, &e)
			require.NoError(t, g.Wait())
		})
		for _, a := range []attempt{c, p, e} {
			require.NoError(t, a.err)
		}
		require.Equal(t, ptrsync.Committed, e.out.Outcome)
		require.Equal(t, uint64(1), r.ss[2].Stats().Batches)
		require.Equal(t, uint64(3), r.ss[2].Stats().Batched)
		require.Equal(t, uint64(1), r.ss[0].Stats().Coordinator)
		require.Equal(t, uint64(1), r.ss[1].Stats().Participant)
		if defect {
			require.Equal(t, ptrsync.Combined, c.out.Outcome, "the defect reports A's update combined into B's batch")
			require.Equal(t, ptrsync.Combined, p.out.Outcome)
			continue
		}
		require.Equal(t, ptrsync.Retry, c.out.Outcome, "the coordinator took B's batch for its update of A")
		require.Equal(t, ptrsync.Retry, p.out.Outcome, "the participant took B's batch for its update of A")
		require.Equal(t, uint64(1), r.ss[0].Stats().Unconfirmed)
		require.Equal(t, uint64(1), r.ss[1].Stats().Unconfirmed)
	}
}

// batchOfThree lines up a batch of key 1 (coordinator, participant, executor: clients 0, 1, 2)
// with the pointer holding 1<<32|1; fault arms an action that kills one of them.
func (r *protoRig) batchOfThree(t *testing.T, fault func()) (c, p, e attempt) {
	r.s.Run(func() {
		ctx := context.Background()
		_, err := r.ms[0].CAS(ctx, wordPtr, 0, 1<<32|1)
		require.NoError(t, err)
		r.holdFirst(0, 100*time.Microsecond)
		fault()
		g := r.s.NewGroup()
		r.update(t, g, 0, 1, 0, &c)
		r.update(t, g, 1, 1, 20*time.Microsecond, &p)
		r.update(t, g, 2, 1, 40*time.Microsecond, &e)
		require.NoError(t, g.Wait())
	})
	return c, p, e
}

// crash returns an action that crashes client i.
func (r *protoRig) crash(t *testing.T, i int) func() {
	return func() { require.NoError(t, r.s.CrashClient(r.ms[i].Info().ID)) }
}

// TestExecutorDiesAfterItsCAS (Q10): the executor crashes after its CAS, before it answers the
// coordinator. The coordinator and the participant do not know whether the batch landed: they
// wait for the lock's lease, see it reset, and retry their updates, which is safe because a
// combined update is overwritten at the instant it takes effect.
func TestExecutorDiesAfterItsCAS(t *testing.T) {
	r := newProtoRig(t, 3)
	c, p, e := r.batchOfThree(t, func() { r.hs[2].arm(casAt(wordPtr), r.crash(t, 2)) })
	require.Equal(t, ptrsync.Committed, e.out.Outcome, "the executor knows its own CAS landed")
	r.s.Run(func() { require.Equal(t, uint64(1)<<32|102, readWordPtr(t, r.ms[0]), "the executor's CAS landed") })
	for _, a := range []attempt{c, p} {
		require.NoError(t, a.err)
		require.Equal(t, ptrsync.Retry, a.out.Outcome)
	}
	require.Positive(t, r.ss[0].Stats().Resets+r.ss[1].Stats().Resets)
	// Retrying works, over the reset lock.
	r.s.Run(func() {
		g := r.s.NewGroup()
		r.update(t, g, 0, 1, 0, &c)
		r.update(t, g, 1, 1, 0, &p)
		require.NoError(t, g.Wait())
	})
	for _, a := range []attempt{c, p} {
		require.NoError(t, a.err)
		require.NotEqual(t, ptrsync.Retry, a.out.Outcome)
	}
}

// TestCoordinatorDiesAfterHandOff: the coordinator crashes right after handing its batch to the
// executor. The executor commits its own update and, the lock never coming back to it, returns
// once the lease expires; the participant retries.
func TestCoordinatorDiesAfterHandOff(t *testing.T) {
	r := newProtoRig(t, 3)
	c, p, e := r.batchOfThree(t, func() { r.hs[0].arm(sentWithoutBump, r.crash(t, 0)) })
	require.ErrorIs(t, c.err, farmem.ErrNodeDown)
	require.NoError(t, e.err)
	require.Equal(t, ptrsync.Committed, e.out.Outcome)
	require.NoError(t, p.err)
	require.Equal(t, ptrsync.Retry, p.out.Outcome)
	require.Equal(t, uint64(1), r.ss[2].Stats().Resets, "the executor saw the lock reset")
}

// TestNoABAAcrossDeleteInsertCycles (Q5): an update reads key k's pointer and stalls while
// another client deletes and re-inserts k forty times (the paper's 4-bit versions would have
// wrapped twice). The pointer carries no version: it names its block, and the allocator's
// epochs keep a block the stalled update may still CAS from from being reused, so the pointer
// never holds the stalled update's word again, its CAS fails and it retries over the current
// incarnation. With deletes that free the block at once instead of retiring it (the defect,
// done here by hand: a CAS of the pointer to 0 and an immediate Free), the word comes back
// after one cycle: the ABA that the epochs prevent.
func TestNoABAAcrossDeleteInsertCycles(t *testing.T) {
	for _, defect := range []bool{false, true} {
		e := newLocalEnv(t, local.Options{}, 4, race.Params{})
		ctx := context.Background()
		stalled, resume := make(chan struct{}), make(chan struct{})
		first := true
		u := e.openWith(t, 0, arrayKV, ciderAuto, func(s ptrsync.Synchronizer) ptrsync.Synchronizer {
			return &stall{Synchronizer: s, before: func() {
				if first {
					first = false
					close(stalled)
					<-resume
				}
			}}
		})
		d := e.open(t, 1, arrayKV, ciderAuto)
		require.NoError(t, d.kv.Insert(ctx, 0, val(1, 8)))
		ptrAddr := d.arr.Record(0).Add(ptrarray.RecordSize - 8)
		ptr := func() uint64 {
			var b [8]byte
			require.NoError(t, d.m.Read(ctx, ptrAddr, b[:]))
			return binary.LittleEndian.Uint64(b[:])
		}
		del := func() {
			if !defect {
				require.NoError(t, d.kv.Delete(ctx, 0))
				return
			}
			w := ptr()
			prev, err := d.m.CAS(ctx, ptrAddr, w, 0)
			require.NoError(t, err)
			require.Equal(t, w, prev)
			p := ptrarray.Pointer(w)
			require.NoError(t, d.a.Free(p.Addr(), p.Size()))
		}
		b1 := ptr()
		done := make(chan error)
		go func() { done <- u.kv.Update(ctx, 0, val(99, 8)) }()
		<-stalled
		recurred := 0
		for i := range 40 {
			del()
			require.NoError(t, d.kv.Insert(ctx, 0, val(uint64(100+i), 8)))
			if ptr() == b1 {
				recurred++
			}
		}
		close(resume)
		require.NoError(t, <-done)
		if defect {
			require.Positive(t, recurred, "without epochs the stalled update's word never came back")
			continue
		}
		require.Zero(t, recurred, "the pointer held the stalled update's word again")
		require.Positive(t, statsOf(u.sync).FailedCAS, "the stalled update's CAS went through")
		v, err := d.kv.Search(ctx, 0)
		require.NoError(t, err)
		require.Equal(t, uint64(99), unval(v))
	}
}
