package lincheck_test

import (
	"math/rand/v2"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/farmem/farmem/farmem/lincheck"
	"github.com/farmem/farmem/farmem/transport"
)

// recordSpan is how many operations a recording benchmark's client records into one history
// before it starts recording into a new one (a large test's history, 8 MiB): a history keeps
// every operation (128 bytes), so one history for all of b.N would grow with b.N (860 MB at
// -benchtime 3s), and the collector's marking of it would be timed too.
const recordSpan = 1 << 16

// BenchmarkRecord measures recording one operation (Call and Return) on the wall clock, into
// histories of recordSpan operations.
func BenchmarkRecord(b *testing.B) {
	kv := lincheck.KV[uint64, uint64]()
	rt := transport.NewWallRuntime(1)
	c := kv.NewHistory(rt).Client(1)
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		if i%recordSpan == recordSpan-1 {
			c = kv.NewHistory(rt).Client(1)
		}
		c.Call(kv.Put(uint64(i&63), uint64(i))).Return(kv.OK())
	}
}

// BenchmarkRecordParallel records from many goroutines, each with its own client (of one
// history, then, every recordSpan operations, of a new history of its own).
func BenchmarkRecordParallel(b *testing.B) {
	kv := lincheck.KV[uint64, uint64]()
	rt := transport.NewWallRuntime(1)
	h := kv.NewHistory(rt)
	var mu sync.Mutex
	next := 0
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		mu.Lock()
		next++
		id := next
		mu.Unlock()
		c := h.Client(id)
		for i := 0; pb.Next(); i++ {
			if i%recordSpan == recordSpan-1 {
				c = kv.NewHistory(rt).Client(id)
			}
			c.Call(kv.Get(uint64(i & 63))).Return(kv.Missing())
		}
	})
}

// atomicMap is a reference linearizable map: a Go map under a mutex.
type atomicMap struct {
	mu sync.Mutex
	m  map[uint64]uint64
}

// bigHistory records clients x ops operations on keys keys against atomicMap.
func bigHistory(clients, ops int, keys uint64) *kvHistory {
	kv := lincheck.KV[uint64, uint64]()
	h := kv.NewHistory(transport.NewWallRuntime(1))
	am := &atomicMap{m: make(map[uint64]uint64)}
	var wg sync.WaitGroup
	for c := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rec := h.Client(c)
			rng := rand.New(rand.NewPCG(uint64(c), 1))
			for i := range ops {
				k := rng.Uint64N(keys)
				v := uint64(c)<<32 | uint64(i)
				switch rng.IntN(4) {
				case 0, 1:
					op := rec.Call(kv.Get(k))
					am.mu.Lock()
					got, ok := am.m[k]
					am.mu.Unlock()
					if ok {
						op.Return(kv.Found(got))
					} else {
						op.Return(kv.Missing())
					}
				case 2:
					op := rec.Call(kv.Put(k, v))
					am.mu.Lock()
					am.m[k] = v
					am.mu.Unlock()
					op.Return(kv.OK())
				default:
					op := rec.Call(kv.Delete(k))
					am.mu.Lock()
					_, ok := am.m[k]
					delete(am.m, k)
					am.mu.Unlock()
					if ok {
						op.Return(kv.OK())
					} else {
						op.Return(kv.Missing())
					}
				}
			}
		}()
	}
	wg.Wait()
	return h
}

// A large history partitioned per key checks in well under a second per ten thousand ops.
// FARMEM_LINCHECK_BIG=N checks N ops instead of 40,000.
func TestBigHistoryChecksFast(t *testing.T) {
	n := 40000
	if s := os.Getenv("FARMEM_LINCHECK_BIG"); s != "" {
		var err error
		n, err = strconv.Atoi(s)
		require.NoError(t, err)
	}
	h := bigHistory(8, n/8, 256)
	start := time.Now()
	s := h.Check(t)
	t.Logf("checked %d ops in %v", s.Ops, time.Since(start))
	require.Equal(t, n/8*8, s.OK)
	require.Equal(t, 256, s.Partitions)
}

// BenchmarkCheck40k checks one history of 40,000 operations (bigHistory: 8 clients of 5,000
// Gets, Puts and Deletes on 256 keys): ns/op is one Verify of the whole history.
func BenchmarkCheck40k(b *testing.B) {
	h := bigHistory(8, 5000, 256)
	for b.Loop() {
		_, err := h.Verify()
		require.NoError(b, err)
	}
}
