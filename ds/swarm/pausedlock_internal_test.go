package swarm

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/farmem/farmem/alloc"
	"github.com/farmem/farmem/ds/maxreg"
	"github.com/farmem/farmem/farmem"
	"github.com/farmem/farmem/internal/dstest"
)

// TestTryLockPausedAcrossAdoption forces the interleaving that pairs a lost replica's answer
// with a later one. Writer c's lock words: replicas A and B hold (50, READ), C holds 0. A
// reader's TRYLOCK(100, READ) installs (100, READ) on C in its first round (its CASes expect
// 0, so A and B refuse) and its client pauses with those answers in hand. C restarts (its
// memory lost), is adopted and repopulated from A and B ((50, READ)); the writer's
// TRYLOCK(100, WRITE) wins on B and the new C (it knows their words; its CAS on A expects 0
// and fails, leaving A untouched); then B hangs. The reader resumes: without the lease, its
// second round wins A and it counts the lost C's old answer with A's, a majority of (100,
// READ) beside the writer's majority of (100, WRITE). With it, the round falls due past the
// lease, the attempt starts over, reads the new C's (100, WRITE) and fails.
func TestTryLockPausedAcrossAdoption(t *testing.T) {
	t.Parallel()
	f := dstest.RestartFabric(t, 10*time.Second)
	ctx := context.Background()
	const lease = 2 * time.Millisecond
	p := maxreg.Params{Words: 4, Slots: 4, ValueSize: 16, Writers: 4, Lease: lease, Skew: time.Millisecond}
	addrs := dstest.Build(t, f, alloc.Options{}, func(ctx context.Context, m farmem.Memory, a *alloc.Allocator) ([]farmem.Addr, error) {
		return Create(ctx, m, a, f.Topology().MemoryNodes(), p)
	})
	_, wm := dstest.OpenClient(t, f, 0, nil)
	w, err := Open(ctx, wm, addrs, Options{})
	require.NoError(t, err)
	var st *dstest.StallFirst
	_, rm := dstest.OpenClient(t, f, 1, func(m farmem.Memory) farmem.Memory {
		st = dstest.NewStallFirst(m)
		return st
	})
	r, err := Open(ctx, rm, addrs, Options{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = w.Close(); _ = r.Close() })

	c := w.id
	const ts = 100
	const a, b, lost = 0, 1, 2
	low := lockWord(50, modeRead)
	for _, i := range []int{a, b} {
		_, err := wm.MaskedCAS(ctx, w.lockAddr(i, c), 0, 0, low, ^uint64(0))
		require.NoError(t, err)
	}

	type result struct {
		ok  bool
		err error
	}
	done := make(chan result, 1)
	st.Arm()
	go func() {
		ok, err := r.tryLock(ctx, c, ts, modeRead, nil)
		done <- result{ok, err}
	}()
	<-st.Stalled
	require.Equal(t, lockWord(ts, modeRead), word(t, wm, w.lockAddr(lost, c)), "the reader's first round won the replica about to be lost")
	require.Equal(t, low, word(t, wm, w.lockAddr(a, c)))

	node := addrs[lost].Node()
	require.NoError(t, f.Restart(node))
	require.NoError(t, f.Adopt(ctx, node))
	_, err = Repopulate(ctx, wm, addrs, lost)
	require.NoError(t, err)
	require.Equal(t, low, word(t, wm, w.lockAddr(lost, c)), "the copy holds the others' word")

	w.Forget(lost)
	w.raiseLock(c, b, low)
	w.raiseLock(c, lost, low)
	wok, err := w.tryLock(ctx, c, ts, modeWrite, nil)
	require.NoError(t, err)
	require.True(t, wok, "the writer's lock wins on B and the repopulated replica")
	require.Equal(t, low, word(t, wm, w.lockAddr(a, c)), "the writer left A untouched")

	require.NoError(t, f.Hang(addrs[b].Node()))
	time.Sleep(2 * lease) // the reader's pause outlasts its lease, whatever the machine's speed
	st.Release()
	res := <-done
	require.NoError(t, f.Resume(addrs[b].Node()))
	require.NoError(t, res.err)
	require.False(t, res.ok, "TRYLOCK(%d, READ) and TRYLOCK(%d, WRITE) both won", ts, ts)
	require.Equal(t, uint64(1), r.Stats().LockRestarts, "the reader's attempt restarted once")
}

func word(t *testing.T, m farmem.Memory, a farmem.Addr) uint64 {
	t.Helper()
	v, err := m.FAA(context.Background(), a, 0)
	require.NoError(t, err)
	return v
}
