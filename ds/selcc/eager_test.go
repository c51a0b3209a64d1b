package selcc_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/farmem/farmem/ds/selcc"
	"github.com/farmem/farmem/farmem"
)

// TestEagerForwardCoherence: the coherence workload (SWMR, exact counters, register histories,
// quiescent latch words) with the hand-over FAA and the forward posted together, so new holders
// use, release and hand lines on while the word still names the old holder.
func TestEagerForwardCoherence(t *testing.T) {
	for seed := uint64(1); seed <= 3; seed++ {
		t.Run(fmt.Sprintf("seed%d", seed), func(t *testing.T) {
			coherenceSim(t, 4, 2, 6, 100, seed, selcc.Options{LineSize: 128, Frames: 4, EvictBatch: 2, EagerForward: true})
		})
	}
}

// caseOneLatency returns, in virtual time on sim, how long a writer on node 1 takes to get a
// line that node 0 holds M (case 1), and the value it read.
func caseOneLatency(t *testing.T, eager bool) (time.Duration, uint64) {
	m := simModel(2, 1)
	m.Jitter = 0
	r := simRig(t, m, 1, selcc.Options{LineSize: 2048, Frames: 4, EagerForward: eager})
	gs := r.lines(t, 1)
	_, a := r.client(t, 0)
	mb, b := r.client(t, 1)
	var d time.Duration
	var v uint64
	r.do(func() {
		ctx := context.Background()
		gd, err := a.Lock(ctx, gs[0])
		require.NoError(t, err)
		require.NoError(t, gd.WriteUint64(ctx, 64, 7))
		require.NoError(t, gd.Unlock(ctx))
		t0 := mb.Runtime().Now()
		gd, err = b.Lock(ctx, gs[0])
		require.NoError(t, err)
		d = mb.Runtime().Now().Sub(t0)
		v, err = gd.ReadUint64(ctx, 64)
		require.NoError(t, err)
		require.NoError(t, gd.Unlock(ctx))
	})
	r.quiescentAgreement(t, gs)
	return d, v
}

// TestEagerForwardSavesRoundTrip: a case-1 writer gets the line and its data either way, at
// least one one-way latency sooner when the holder forwards with its hand-over in flight.
func TestEagerForwardSavesRoundTrip(t *testing.T) {
	slow, v := caseOneLatency(t, false)
	require.Equal(t, uint64(7), v)
	fast, v := caseOneLatency(t, true)
	require.Equal(t, uint64(7), v)
	oneWay := simModel(2, 1).MemoryLatency
	t.Logf("case 1: %v ordered, %v eager", slow, fast)
	require.Less(t, fast+oneWay, slow, "eager %v, ordered %v", fast, slow)
}

// TestEagerForwardRefusesRepair: Repair cannot be exact when words may lag behind holds.
func TestEagerForwardRefusesRepair(t *testing.T) {
	r := simRig(t, simModel(2, 1), 1, selcc.Options{LineSize: 128, Frames: 4, EagerForward: true})
	gs := r.lines(t, 1)
	_, a := r.client(t, 0)
	r.do(func() {
		_, err := a.Repair(context.Background(), farmem.ComputeID(2), gs)
		require.True(t, errors.Is(err, farmem.ErrInvalid), "%v", err)
	})
}
