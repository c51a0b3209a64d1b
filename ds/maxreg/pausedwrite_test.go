package maxreg_test

import (
	"context"
	"encoding/binary"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/farmem/farmem/ds/maxreg"
	"github.com/farmem/farmem/farmem"
	"github.com/farmem/farmem/internal/dstest"
)

// openStalled opens client i's handle on the register at addrs over a StallFirst.
func openStalled(t *testing.T, f farmem.Fabric, i int, addrs []farmem.Addr) (*dstest.StallFirst, farmem.Memory, *maxreg.Replicated) {
	t.Helper()
	var st *dstest.StallFirst
	_, m := dstest.OpenClient(t, f, i, func(m farmem.Memory) farmem.Memory {
		st = dstest.NewStallFirst(m)
		return st
	})
	r, err := maxreg.OpenReplicated(context.Background(), m, addrs, maxreg.ReplicatedOptions{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = r.Close() })
	return st, m, r
}

// pausedParams: every writer shares one metadata word; a lease of 2ms, which the tests' pauses
// outlast.
var pausedParams = maxreg.Params{Words: 1, Slots: 4, ValueSize: 16, Writers: 128, Lease: 2 * time.Millisecond, Skew: time.Millisecond}

// TestWritePausedAcrossRepopulation forces a write to pair a lost replica's answer with a
// later one. All writers share one metadata word. W1 writes "one" everywhere; W2, cut off from
// replica C, writes "two" above it on A and B. W1 writes "three" above that: its first round
// installs on C only (its CASes expect "one", which A and B no longer hold), and its client
// pauses with those answers in hand. C restarts empty, is adopted and repopulated from A and
// B (it gets "two"), and W1 is cut off from B. W1 resumes: without evidence bounded by the
// lease, its next round installs on A and it counts C's lost answer beside A's, returning
// with "three" on A alone; a read answered by B and C then returns "two", losing an
// acknowledged write. With it, C's answer no longer counts beside A's, W1 installs on the
// new C too, and the read returns "three".
func TestWritePausedAcrossRepopulation(t *testing.T) {
	t.Parallel()
	f := dstest.RestartFabric(t, time.Second)
	ctx := context.Background()
	addrs := createRep(t, f, pausedParams)
	st, w1m, w1 := openStalled(t, f, 0, addrs)
	w2 := openRep(t, f, 1, addrs)
	rd := openRep(t, f, 2, addrs)
	a, b, c := addrs[0].Node(), addrs[1].Node(), addrs[2].Node()
	word := func(i int) maxreg.Tag {
		buf := make([]byte, 8)
		require.NoError(t, rd.m.Read(ctx, addrs[i]+128, buf))
		return maxreg.Tag(binary.LittleEndian.Uint64(buf))
	}

	t1, err := w1.Write(ctx, []byte("one"))
	require.NoError(t, err)
	require.NoError(t, f.Partition(w2.m.Info().ID, c))
	t2, err := w2.r.WriteAbove(ctx, []byte("two"), true, t1.TS()+1)
	require.NoError(t, err)
	require.Equal(t, t2, word(0))
	require.Equal(t, t2, word(1))
	require.Equal(t, t1, word(2))

	type result struct {
		tag maxreg.Tag
		err error
	}
	done := make(chan result, 1)
	st.Arm()
	go func() {
		tag, err := w1.WriteAbove(ctx, []byte("three"), true, t2.TS()+1)
		done <- result{tag, err}
	}()
	<-st.Stalled
	t3 := word(2)
	require.Greater(t, t3, t2, "W1's first round installed on C")
	require.Equal(t, t2, word(0), "and not on A")

	require.NoError(t, f.Restart(c))
	require.NoError(t, f.Adopt(ctx, c))
	_, err = maxreg.RepopulateReplica(ctx, rd.m, addrs, 2)
	require.NoError(t, err)
	require.Equal(t, t2, word(2), "the copy holds the others' tag")
	require.NoError(t, f.Partition(w1m.Info().ID, b))
	time.Sleep(2 * pausedParams.Lease) // W1's pause outlasts the lease, whatever the machine's speed
	st.Release()
	res := <-done
	require.NoError(t, res.err)
	require.Equal(t, t3, res.tag)

	// A read answered by B and C only.
	require.NoError(t, f.Hang(a))
	defer func() { require.NoError(t, f.Resume(a)) }()
	got, val, err := rd.r.Read(ctx)
	require.NoError(t, err)
	require.Equal(t, "three", string(val), "an acknowledged write was lost (read %v, wrote %v)", got, t3)
}

// TestReadPausedAcrossRepopulation: a reader whose first round found a tag on replica C alone
// (a write that reached C only and failed), paused across C's restart and repopulation (the
// copy does not hold the tag), returns what the replicas hold now instead of chasing the lost
// tag forever (it used to start over without end: what its handle knew of C came from the
// lost memory).
func TestReadPausedAcrossRepopulation(t *testing.T) {
	t.Parallel()
	f := dstest.RestartFabric(t, 200*time.Millisecond)
	ctx := context.Background()
	addrs := createRep(t, f, pausedParams)
	w := openRep(t, f, 0, addrs)
	st, _, r := openStalled(t, f, 1, addrs)
	a, b, c := addrs[0].Node(), addrs[1].Node(), addrs[2].Node()

	_, err := w.r.Write(ctx, []byte("one"))
	require.NoError(t, err)
	wid := w.m.Info().ID
	require.NoError(t, f.Partition(wid, a))
	require.NoError(t, f.Partition(wid, b))
	lost, err := w.r.Write(ctx, []byte("lost"))
	require.ErrorIs(t, err, maxreg.ErrNoQuorum)
	require.NoError(t, f.Heal(wid, a))
	require.NoError(t, f.Heal(wid, b))

	type result struct {
		val []byte
		err error
	}
	done := make(chan result, 1)
	st.Arm()
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	go func() {
		_, val, err := r.Read(rctx)
		done <- result{val, err}
	}()
	<-st.Stalled
	require.NoError(t, f.Restart(c))
	require.NoError(t, f.Adopt(ctx, c))
	_, err = maxreg.RepopulateReplica(ctx, w.m, addrs, 2)
	require.NoError(t, err)
	time.Sleep(2 * pausedParams.Lease) // the reader's pause outlasts the lease
	st.Release()
	res := <-done
	require.NoError(t, res.err, "the read kept chasing %v, which only the lost memory held", lost)
	require.Equal(t, "one", string(res.val))
}
