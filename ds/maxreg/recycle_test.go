package maxreg_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/farmem/farmem/ds/maxreg"
	"github.com/farmem/farmem/farmem"
	"github.com/farmem/farmem/farmem/farmemtest"
)

// recycleParams: two buffers per writer, so that every write reuses a buffer as soon as the
// recycling rule lets it.
var recycleParams = maxreg.Params{Words: 16, Slots: 2, ValueSize: 48, Writers: 128, Lease: 50 * time.Microsecond, Skew: 10 * time.Microsecond}

// TestRecycleHungNode: writers rewrite two buffers each as fast as the recycling rule allows
// while readers read (and write back what they read, into the writers' buffers on lagging
// replicas), and one replica hangs for ten times the reuse delay (Lease + Skew + the down
// timeout), then resumes. Operations go on throughout; the history meets the specification;
// writers did wait for buffers; and once quiet, on every replica the largest tag's buffer
// holds that tag's record whole, so no late write (the hung replica's dropped batches, a
// helper's write-back posted before the hang) overwrote a buffer after its reuse. Readers
// that reach the resumed replica never find a chased buffer reused.
func TestRecycleHungNode(t *testing.T) {
	for seed := uint64(1); seed <= 3; seed++ {
		t.Run(fmt.Sprint("seed=", seed), func(t *testing.T) { recycleRun(t, seed) })
	}
}

func recycleRun(t *testing.T, seed uint64) {
	s := newSimN(t, seed, 3)
	s.Run(func() {
		ctx := context.Background()
		addrs := createRep(t, s, recycleParams)
		const clients = 5
		hs := make([]*repHandle, clients)
		for i := range hs {
			hs[i] = openRep(t, s, i, addrs)
		}
		reuse := hs[0].r.ReuseDelay()
		mem := s.Topology().MemoryNodes()
		rng := s.Runtime().NewRand()
		hung := mem[rng.IntN(len(mem))]
		start := s.Now()
		hangAt := start.Add(100 * time.Microsecond)
		resumeAt := hangAt.Add(10 * reuse)
		s.At(hangAt, func() { require.NoError(t, s.Hang(hung)) })
		s.At(resumeAt, func() { require.NoError(t, s.Resume(hung)) })
		end := resumeAt.Add(3 * reuse)
		rec := newRecorder(s.Runtime())
		err := farmemtest.Parallel(s.Runtime(), clients, func(i int) error {
			h := hs[i]
			for k := 0; s.Now() < end; k++ {
				if _, err := repOp(ctx, h, rec, k, i < 3); err != nil {
					return fmt.Errorf("client %d: %w", i, err)
				}
			}
			return nil
		})
		require.NoError(t, err)
		require.NoError(t, checkWeak(rec.all()))
		var st maxreg.ReplicatedStats
		for _, h := range hs {
			x := h.r.Stats()
			st.Writes += x.Writes
			st.RecycleWaits += x.RecycleWaits
			st.RecycleWait += x.RecycleWait
			st.Retries += x.Retries
			st.WriteBacks += x.WriteBacks
			st.Chased += x.Chased
		}
		require.NotZero(t, st.RecycleWaits, "no write waited for a buffer")
		require.Zero(t, st.Retries, "a read found a chased buffer reused")
		// Quiet: let every straggler finish, then check each replica's largest tag's buffer.
		require.NoError(t, s.Runtime().Sleep(ctx, 2*reuse))
		m, err := s.Open(ctx, s.Topology().ComputeNodes()[0])
		require.NoError(t, err)
		defer m.Close()
		l := maxreg.Size(recycleParams)
		require.NotZero(t, l)
		for _, a := range addrs {
			words := make([]byte, 8*recycleParams.Words)
			require.NoError(t, m.Read(ctx, a+128, words))
			var top maxreg.Tag
			for w := range recycleParams.Words {
				top = max(top, maxreg.Tag(binary.LittleEndian.Uint64(words[8*w:])))
			}
			if top == 0 {
				continue
			}
			require.NoError(t, checkSlot(ctx, m, a, top), "replica %v", a.Node())
		}
		t.Logf("hung %v for %v (reuse delay %v); %d writes, %d recycle waits (%v), %d write-backs, %d chases",
			hung, 10*reuse, reuse, st.Writes, st.RecycleWaits, st.RecycleWait, st.WriteBacks, st.Chased)
	})
}

// checkSlot reads tag top's out-of-place buffer at register a and checks it names top. The
// buffer's place follows the layout in the package doc: lanes start at the first multiple of
// 64 after the metadata words and the in-place record.
func checkSlot(ctx context.Context, m farmem.Memory, a farmem.Addr, top maxreg.Tag) error {
	p := recycleParams
	recSize := uint64(32+p.ValueSize+7) &^ 7
	inOff := uint64(128 + 8*p.Words)
	laneOff := (inOff + recSize + 63) &^ 63
	off := laneOff + (uint64(top.Client()-1)*uint64(p.Slots)+top.TS()%uint64(p.Slots))*recSize
	id := make([]byte, 8)
	if err := m.Read(ctx, a+farmem.Addr(off+16), id); err != nil {
		return err
	}
	if got := binary.LittleEndian.Uint64(id); got != uint64(top&^maxreg.VerifiedBit) {
		return fmt.Errorf("largest tag %v's buffer names %v", top, maxreg.Tag(got))
	}
	return nil
}

// TestLeaseStopsLateWriteBack: the recycling rule's other half. A reader R reads tag t1 (on A;
// C lags) and is paused before writing it back, for ten times the reuse delay; meanwhile the
// writer supersedes t1 and reuses its buffer for t3 on A and C. When R resumes, its lease has
// run out, so it reads again instead of writing t1's record back into that buffer on C: C's
// largest tag t3 keeps its record.
func TestLeaseStopsLateWriteBack(t *testing.T) {
	s := newSimN(t, 7, 3)
	s.Run(func() {
		ctx := context.Background()
		addrs := createRep(t, s, recycleParams)
		w := openRep(t, s, 0, addrs)
		r := openRep(t, s, 1, addrs)
		mem := s.Topology().MemoryNodes()
		B, C := mem[1], mem[2]
		wid, rid := w.m.Info().ID, r.m.Info().ID
		reuse := w.r.ReuseDelay()
		require.NoError(t, s.Partition(wid, C))
		t1, err := w.r.Write(ctx, []byte("one"))
		require.NoError(t, err)
		require.NoError(t, s.Partition(rid, B))
		var got maxreg.Tag
		r0 := r.m.Stats().RoundTrips
		g := s.NewGroup()
		g.Go(func() {
			var err error
			got, _, err = r.r.Read(ctx)
			require.NoError(t, err)
		})
		// Pause R while it waits for its read's answers, then let the writer move on.
		require.NoError(t, s.Runtime().Sleep(ctx, time.Microsecond))
		require.Equal(t, uint64(1), r.m.Stats().RoundTrips-r0, "R has posted its read")
		require.NoError(t, s.PauseClient(rid))
		require.NoError(t, s.Heal(wid, C))
		require.NoError(t, s.Partition(wid, B))
		_, err = w.r.Write(ctx, []byte("two"))
		require.NoError(t, err)
		t3, err := w.r.Write(ctx, []byte("three"))
		require.NoError(t, err)
		require.Equal(t, t1.TS()%2, t3.TS()%2, "t3 reuses t1's buffer")
		require.NoError(t, s.Runtime().Sleep(ctx, 10*reuse))
		require.NoError(t, s.ResumeClient(rid))
		require.NoError(t, g.Wait())
		require.NoError(t, s.Runtime().Sleep(ctx, 2*reuse))
		m, err := s.Open(ctx, s.Topology().ComputeNodes()[0])
		require.NoError(t, err)
		defer m.Close()
		words := make([]byte, 8*recycleParams.Words)
		require.NoError(t, m.Read(ctx, addrs[2]+128, words))
		var top maxreg.Tag
		for i := range recycleParams.Words {
			top = max(top, maxreg.Tag(binary.LittleEndian.Uint64(words[8*i:])))
		}
		require.Equal(t, t3, top)
		require.NoError(t, checkSlot(ctx, m, addrs[2], top), "C's largest tag lost its record")
		require.Equal(t, t3, got, "the resumed read read again")
		require.NotZero(t, r.r.Stats().LeaseRestarts, "the lease ran out")
	})
}
