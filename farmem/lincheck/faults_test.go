package lincheck_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/farmem/farmem/farmem"
	"github.com/farmem/farmem/farmem/lincheck"
	"github.com/farmem/farmem/farmem/local"
)

// Registers on two memory nodes under real faults: node 1 hangs and resumes, one client
// crashes, node 2 crashes. Operations that fail with ErrNodeDown have unknown outcomes; the
// history, recorded with End, is linearizable, and the faults did produce unknown outcomes.
func TestFaultsGiveUnknownOutcomes(t *testing.T) {
	f := fabric(t, local.Options{Shape: local.Shape{MemoryNodes: 2}, Jitter: 3 * time.Microsecond, Strict: true, DownTimeout: 20 * time.Millisecond})
	reg := lincheck.Register[uint64]()
	h := reg.NewHistory(f.Runtime())
	// Keys 0..3 live on node 1, keys 4..7 on node 2.
	addr := func(k uint64) farmem.Addr { return farmem.MakeAddr(farmem.NodeID(1+k/4), 1<<16+8*(k%4)) }
	var (
		ops     atomic.Int64
		ids     = make(chan farmem.ClientID, 4)
		crashed atomic.Int32
		sawDown atomic.Int32
	)
	faults := make(chan struct{})
	running := make(chan struct{})
	var injected atomic.Int32
	go func() {
		defer close(faults)
		victim := <-ids
		// wait waits until the clients have done n ops, or stopped.
		wait := func(n int64) {
			for ops.Load() < n {
				select {
				case <-running:
					return
				case <-time.After(100 * time.Microsecond):
				}
			}
			injected.Add(1)
		}
		wait(300)
		require.NoError(t, f.Hang(1))
		time.Sleep(30 * time.Millisecond)
		require.NoError(t, f.Resume(1))
		wait(600)
		require.NoError(t, f.CrashClient(victim))
		crashed.Store(int32(victim))
		wait(900)
		require.NoError(t, f.Crash(2))
	}()
	clients(t, f, 4, func(m farmem.Memory, rng *rand.Rand) {
		ids <- m.Info().ID
		ctx := context.Background()
		c := h.Client(int(m.Info().ID))
		unknown := 0
		// Each client stops after a few unknown outcomes, as a real client would give up on a
		// node it believes down: every open write widens the checker's search.
		for i := 0; i < 1000 && unknown < 6; i++ {
			k := rng.Uint64N(8)
			var oc lincheck.Outcome
			if rng.IntN(2) == 0 {
				op := c.Call(reg.Read(k))
				v, err := load(ctx, m, addr(k))
				oc = op.End(reg.Value(v), err, lincheck.Rejections...)
			} else {
				v := uint64(m.Info().ID)<<32 | uint64(i+1)
				op := c.Call(reg.Write(k, v))
				err := store(ctx, m, addr(k), v)
				oc = op.End(reg.Ack(), err, lincheck.Rejections...)
				if errors.Is(err, farmem.ErrNodeDown) {
					sawDown.Add(1)
				}
			}
			if oc == lincheck.Unknown {
				unknown++
			}
			ops.Add(1)
			if oc == lincheck.Failed {
				t.Errorf("an op was rejected")
			}
		}
	})
	close(running)
	<-faults
	require.Equal(t, int32(3), injected.Load(), "every fault was injected while the clients ran")
	s := h.Check(t)
	t.Logf("%v; writes that saw ErrNodeDown: %d", s, sawDown.Load())
	require.NotZero(t, s.Unknown)
	require.NotZero(t, sawDown.Load())
	// The crashed client's operations after its crash all had unknown outcomes.
	victim := int(crashed.Load())
	var victimUnknown int
	for _, r := range h.Records() {
		if r.Client == victim && r.Outcome == lincheck.Unknown {
			victimUnknown++
		}
	}
	require.NotZero(t, victimUnknown)
}

// A write whose answer is lost: the context ends after the write was applied, so the verb
// returns the context's error although the write took effect. Recorded open-ended (what End
// does with a context error) the history is linearizable; recorded as a definite failure it
// is not, because a later read sees the write.
func TestLostAnswerIsUnknownNotFailed(t *testing.T) {
	reg := lincheck.Register[uint64]()
	const latency = 40 * time.Millisecond
	for try := range 10 {
		f := fabric(t, local.Options{Latency: latency})
		node := f.Hosted()[0]
		w, err := f.Open(context.Background(), node)
		require.NoError(t, err)
		r, err := f.Open(context.Background(), node)
		require.NoError(t, err)
		h := reg.NewHistory(f.Runtime())
		// The write is applied halfway through its latency; the context ends at 3/4 of it.
		ctx, cancel := f.Runtime().WithTimeout(context.Background(), latency*3/4)
		op := h.Client(int(w.Info().ID)).Call(reg.Write(0, 7))
		werr := store(ctx, w, dataBase, 7)
		oc := op.End(reg.Ack(), werr)
		cancel()
		// Let the write finish in the background, then read.
		time.Sleep(latency)
		rop := h.Client(int(r.Info().ID)).Call(reg.Read(0))
		v, err := load(context.Background(), r, dataBase)
		rop.End(reg.Value(v), err)
		require.NoError(t, err)
		if !errors.Is(werr, context.DeadlineExceeded) || v != 7 {
			t.Logf("try %d: timing missed (write error %v, read %d)", try, werr, v)
			continue
		}
		require.Equal(t, lincheck.Unknown, oc)
		h.Check(t)

		// The same history with the write recorded as failed.
		wrong := reg.NewHistory(nil)
		for _, rec := range h.Records() {
			if rec.In.Op == lincheck.RegWrite {
				rec.Outcome = lincheck.Failed
			}
			wrong.Add(rec)
		}
		_, err = wrong.Verify()
		require.ErrorIs(t, err, lincheck.ErrNotLinearizable)
		require.Contains(t, err.Error(), "read(0) -> 7   <-- the model returns 0")
		return
	}
	t.Fatal("never saw a write applied whose answer was lost")
}

// A client that crashes in the middle of an operation never records its end: the operation
// stays pending, which counts as unknown.
func TestCrashedClientMidOperation(t *testing.T) {
	f := fabric(t, local.Options{Latency: 2 * time.Millisecond})
	reg := lincheck.Register[uint64]()
	h := reg.NewHistory(f.Runtime())
	node := f.Hosted()[0]
	w, err := f.Open(context.Background(), node)
	require.NoError(t, err)
	r, err := f.Open(context.Background(), node)
	require.NoError(t, err)
	// The writer posts its write and dies before seeing the answer.
	_ = h.Client(int(w.Info().ID)).Call(reg.Write(0, 9))
	var b farmem.Batch
	b.Ops = append(b.Ops, farmem.Op{Kind: farmem.OpMaskedCAS, Addr: dataBase, Swap: 9, SwapMask: ^uint64(0)})
	p := w.Post(context.Background(), &b)
	require.NoError(t, f.CrashClient(w.Info().ID))
	_ = p.Wait(context.Background(), 0)
	// Whatever the write did, a reader's history is linearizable.
	c := h.Client(int(r.Info().ID))
	for range 3 {
		op := c.Call(reg.Read(0))
		v, err := load(context.Background(), r, dataBase)
		op.End(reg.Value(v), err)
	}
	s := h.Check(t)
	require.Equal(t, 1, s.Unknown)
}
