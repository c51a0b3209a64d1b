package rdma

import (
	"context"
	"encoding/binary"
	"fmt"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/farmem/farmem/farmem"
	"github.com/farmem/farmem/internal/wire"
)

// TestPostAllocatesNothing: over the tcp provider, a batch posted again once its last post is
// done allocates nothing, whether its poster waits on each post or keeps several outstanding,
// and whether it goes to one node or to two; its Post hands out the same Pending again. So
// whether readers park at once or spin before they park (the in-process nodes' too).
func TestPostAllocatesNothing(t *testing.T) {
	for _, c := range []struct {
		name  string
		limit time.Duration
	}{{"parking", 0}, {"spinning", suggestedSpin}} {
		t.Run(c.name, func(t *testing.T) {
			defer SetSpin(SetSpin(c.limit))
			spins, _, _ := SpinCounts()
			postAllocatesNothing(t)
			if after, _, _ := SpinCounts(); c.limit == 0 {
				require.Equal(t, spins, after, "no reader spun")
			} else if spinSupported && runtime.GOMAXPROCS(0) > 1 {
				require.Greater(t, after, spins, "readers spun")
			}
		})
	}
}

func postAllocatesNothing(t *testing.T) {
	_, cl := startServers(t, 2, 1<<20)
	m := openOne(t, dialN(t, cl, 1, Options{})[0])
	ctx := context.Background()
	a := farmem.MakeAddr(1, 4096)

	var one farmem.Batch
	one.Read(a, make([]byte, 8))
	var two farmem.Batch // a write and a read to one node
	two.Write(a.Add(64), make([]byte, 8))
	two.Read(a.Add(128), make([]byte, 16))
	var both farmem.Batch // one read to each node
	both.Read(a, make([]byte, 8))
	both.Read(farmem.MakeAddr(2, 4096), make([]byte, 8))
	for _, tc := range []struct {
		name string
		b    *farmem.Batch
	}{{"one read", &one}, {"write and read", &two}, {"two nodes", &both}} {
		t.Run(tc.name, func(t *testing.T) {
			p := m.Post(ctx, tc.b)
			require.NoError(t, p.Wait(ctx, 0))
			require.Same(t, p, m.Post(ctx, tc.b), "the batch's next post hands out its Pending again")
			require.NoError(t, p.Wait(ctx, 0))
			allocs := testing.AllocsPerRun(500, func() {
				if err := m.Post(ctx, tc.b).Wait(ctx, 0); err != nil {
					t.Fatal(err)
				}
			})
			require.Zero(t, allocs, "allocations per post and wait")
		})
	}

	t.Run("8 outstanding", func(t *testing.T) {
		const k = 8
		bs := make([]farmem.Batch, k)
		ps := make([]*farmem.Pending, k)
		for i := range bs {
			bs[i].Read(a.Add(uint64(8*i)), make([]byte, 8))
			ps[i] = m.Post(ctx, &bs[i])
		}
		i := 0
		allocs := testing.AllocsPerRun(2000, func() {
			if err := ps[i].Wait(ctx, 0); err != nil {
				t.Fatal(err)
			}
			ps[i] = m.Post(ctx, &bs[i])
			i = (i + 1) % k
		})
		for _, p := range ps {
			require.NoError(t, p.Wait(ctx, 0))
		}
		require.Zero(t, allocs, "allocations per post with 8 outstanding")
	})
}

// TestRepostedBatchesUnderLoad: clients that post the same batches over and over, several
// outstanding each, each batch writing a value of its own post and reading it back, see every
// post's own results (a post's state set up again while the last post's completion still ran
// would show here, or to the race detector), on one node and across two.
func TestRepostedBatchesUnderLoad(t *testing.T) {
	_, cl := startServers(t, 2, 1<<20)
	f := dialN(t, cl, 1, Options{})[0]
	const clients, k = 3, 6
	rounds := 400
	if testing.Short() {
		rounds = 100
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	errs := make(chan error, clients)
	for c := range clients {
		m, err := f.Open(ctx, f.Hosted()[0])
		require.NoError(t, err)
		t.Cleanup(func() { _ = m.Close() })
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- repost(ctx, m, c, k, rounds)
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
}

// repost runs client c's part of TestRepostedBatchesUnderLoad.
func repost(ctx context.Context, m farmem.Memory, c, k, rounds int) error {
	bs := make([]farmem.Batch, k)
	ps := make([]*farmem.Pending, k)
	vals := make([]uint64, k)
	for i := range bs {
		// Batch i writes its word on node 1 (and, for odd i, node 2) and reads it back.
		off := uint64(8192 + 64*(c*k+i))
		bs[i].Write(farmem.MakeAddr(1, off), make([]byte, 8))
		bs[i].Read(farmem.MakeAddr(1, off), make([]byte, 8))
		if i%2 == 1 {
			bs[i].Write(farmem.MakeAddr(2, off), make([]byte, 8))
			bs[i].Read(farmem.MakeAddr(2, off), make([]byte, 8))
		}
	}
	check := func(i int) error {
		if err := ps[i].Wait(ctx, 0); err != nil {
			return err
		}
		for j := 1; j < len(bs[i].Ops); j += 2 {
			if _, err := bs[i].Result(j); err != nil {
				return err
			}
			if got := binary.LittleEndian.Uint64(bs[i].Ops[j].Buf); got != vals[i] {
				return fmt.Errorf("client %d batch %d op %d: read %#x, its post wrote %#x", c, i, j, got, vals[i])
			}
		}
		return nil
	}
	for r := range rounds {
		for i := range bs {
			if r > 0 {
				if err := check(i); err != nil {
					return err
				}
			}
			vals[i] = uint64(c)<<48 | uint64(r)<<16 | uint64(i)
			for j := 0; j < len(bs[i].Ops); j += 2 {
				binary.LittleEndian.PutUint64(bs[i].Ops[j].Buf, vals[i])
				clear(bs[i].Ops[j+1].Buf)
			}
			ps[i] = m.Post(ctx, &bs[i])
		}
	}
	for i := range bs {
		if err := check(i); err != nil {
			return err
		}
	}
	return nil
}

// TestRunOfAnswersCountsExactly: answers read together are counted once for the run, before
// any completes, and exactly once done: the bytes of the reads that succeeded, none for a read
// the node refused (a status), nor for those of the run the connection failed with after a
// malformed frame.
func TestRunOfAnswersCountsExactly(t *testing.T) {
	const n, refused, bad = 12, 3, 8
	pends, batches, q := pipelinedAnswers(t, n, func(i int, id uint64) []byte {
		switch i {
		case refused:
			f, start := wire.BeginFrame(nil, wire.TypeResult, 0, id)
			f = wire.AppendResultCount(f, 1)
			return wire.EndFrame(wire.AppendStatus(f, wire.StatusBadKey), start)
		case bad: // malformed: fails the connection, and the answers read with it
			f, start := wire.BeginFrame(nil, wire.TypeResult, 0, id)
			return wire.EndFrame(wire.AppendResultCount(f, 3), start)
		}
		return readAnswer(id, uint64(i))
	})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ok := 0
	for i := range n {
		require.NoError(t, pends[i].Wait(ctx, 0))
		_, err := batches[i].Result(0)
		if i < bad && i != refused {
			require.NoError(t, err, "batch %d", i)
			ok++
		} else {
			require.Error(t, err, "batch %d", i)
		}
	}
	st := q.c.Counters.Snapshot()
	require.Equal(t, uint64(8*ok), st.BytesIn, "bytes of the reads that succeeded")
}
