package maxreg_test

import (
	"context"
	"encoding/binary"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/farmem/farmem/ds/maxreg"
	"github.com/farmem/farmem/farmem"
	"github.com/farmem/farmem/farmem/local"
	"github.com/farmem/farmem/internal/dstest"
)

// stallFirst is a client's memory whose first Post after arm, once every op of that batch is
// done, blocks until release is closed: the client is paused with its first round's answers
// in hand, before it looks at them.
type stallFirst struct {
	farmem.Memory
	armed   atomic.Bool
	posts   atomic.Int32
	stalled chan struct{}
	release chan struct{}
}

func (s *stallFirst) Post(ctx context.Context, b *farmem.Batch) *farmem.Pending {
	p := s.Memory.Post(ctx, b)
	if s.armed.Load() && s.posts.Add(1) == 1 {
		_ = p.Wait(ctx, 0)
		close(s.stalled)
		<-s.release
	}
	return p
}

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
	f, err := local.New(local.Options{Shape: local.Shape{MemoryNodes: 3, ComputeNodes: 2, MemorySize: 4 << 20},
		DownTimeout: time.Second})
	require.NoError(t, err)
	t.Cleanup(func() { _ = f.Close() })
	ctx := context.Background()
	const lease = 2 * time.Millisecond
	p := maxreg.Params{Words: 1, Slots: 4, ValueSize: 16, Writers: 128, Lease: lease, Skew: time.Millisecond}
	addrs := createRep(t, f, p)
	var st *stallFirst
	_, w1m := dstest.OpenClient(t, f, 0, func(m farmem.Memory) farmem.Memory {
		st = &stallFirst{Memory: m, stalled: make(chan struct{}), release: make(chan struct{})}
		return st
	})
	w1, err := maxreg.OpenReplicated(ctx, w1m, addrs, maxreg.ReplicatedOptions{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = w1.Close() })
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
	st.armed.Store(true)
	go func() {
		tag, err := w1.WriteAbove(ctx, []byte("three"), true, t2.TS()+1)
		done <- result{tag, err}
	}()
	<-st.stalled
	t3 := word(2)
	require.Greater(t, t3, t2, "W1's first round installed on C")
	require.Equal(t, t2, word(0), "and not on A")

	require.NoError(t, f.Restart(c))
	require.NoError(t, f.Adopt(ctx, c))
	_, err = maxreg.RepopulateReplica(ctx, rd.m, addrs, 2)
	require.NoError(t, err)
	require.Equal(t, t2, word(2), "the copy holds the others' tag")
	require.NoError(t, f.Partition(w1m.Info().ID, b))
	time.Sleep(2 * lease) // W1's pause outlasts the lease, whatever the machine's speed
	close(st.release)
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
	f, err := local.New(local.Options{Shape: local.Shape{MemoryNodes: 3, ComputeNodes: 2, MemorySize: 4 << 20},
		DownTimeout: 200 * time.Millisecond})
	require.NoError(t, err)
	t.Cleanup(func() { _ = f.Close() })
	ctx := context.Background()
	const lease = 2 * time.Millisecond
	p := maxreg.Params{Words: 1, Slots: 4, ValueSize: 16, Writers: 128, Lease: lease, Skew: time.Millisecond}
	addrs := createRep(t, f, p)
	w := openRep(t, f, 0, addrs)
	var st *stallFirst
	_, rm := dstest.OpenClient(t, f, 1, func(m farmem.Memory) farmem.Memory {
		st = &stallFirst{Memory: m, stalled: make(chan struct{}), release: make(chan struct{})}
		return st
	})
	r, err := maxreg.OpenReplicated(ctx, rm, addrs, maxreg.ReplicatedOptions{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = r.Close() })
	a, b, c := addrs[0].Node(), addrs[1].Node(), addrs[2].Node()

	_, err = w.r.Write(ctx, []byte("one"))
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
	st.armed.Store(true)
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	go func() {
		_, val, err := r.Read(rctx)
		done <- result{val, err}
	}()
	<-st.stalled
	require.NoError(t, f.Restart(c))
	require.NoError(t, f.Adopt(ctx, c))
	_, err = maxreg.RepopulateReplica(ctx, w.m, addrs, 2)
	require.NoError(t, err)
	time.Sleep(2 * lease) // the reader's pause outlasts the lease
	close(st.release)
	res := <-done
	require.NoError(t, res.err, "the read kept chasing %v, which only the lost memory held", lost)
	require.Equal(t, "one", string(res.val))
}
