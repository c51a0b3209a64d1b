package kvstore_test

import (
	"context"
	"encoding/binary"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/farmem/farmem/ds/hybrid"
	"github.com/farmem/farmem/farmem"
	"github.com/farmem/farmem/farmem/lincheck"
	"github.com/farmem/farmem/farmem/local"
	"github.com/farmem/farmem/kvstore"
)

// TestHybridIndex runs the store over the hybrid tree: answers, refused keys, and a linearizable
// history of concurrent clients on two compute nodes (small leaves, so leaves split).
func TestHybridIndex(t *testing.T) {
	t.Parallel()
	f := newLocal(t, local.Options{Shape: local.Shape{ComputeNodes: 2}, Tearing: true, Jitter: 5 * time.Microsecond})
	s := openStore(t, f, kvstore.Options{Index: kvstore.Hybrid{LeafSlots: 8, CacheBytes: 1 << 16}, Alloc: quietAlloc})
	ctx := context.Background()
	k := func(i uint64) []byte { return binary.BigEndian.AppendUint64(nil, i) }
	require.NoError(t, s.Insert(ctx, k(5), []byte("five")))
	require.ErrorIs(t, s.Insert(ctx, k(5), []byte("again")), kvstore.ErrExists)
	v, err := s.Get(ctx, k(5))
	require.NoError(t, err)
	require.Equal(t, "five", string(v))
	require.NoError(t, s.Update(ctx, k(5), []byte("FIVE, longer than eight bytes")))
	v, err = s.Get(ctx, k(5))
	require.NoError(t, err)
	require.Equal(t, "FIVE, longer than eight bytes", string(v))
	require.NoError(t, s.Delete(ctx, k(5)))
	_, err = s.Get(ctx, k(5))
	require.ErrorIs(t, err, kvstore.ErrNotFound)
	require.ErrorIs(t, s.Update(ctx, k(5), []byte("x")), kvstore.ErrNotFound)
	for _, bad := range [][]byte{[]byte("short"), k(0), k(1 << 63)} {
		require.ErrorIs(t, s.Insert(ctx, bad, []byte("x")), farmem.ErrInvalid, "%x", bad)
	}
	for i := uint64(10); i < 20; i++ {
		require.NoError(t, s.Insert(ctx, k(i), k(i*100)))
	}
	ps, err := s.Scan(ctx, nil, nil, 3)
	require.NoError(t, err)
	require.Len(t, ps, 3)
	require.Equal(t, k(10), ps[0].Key)
	require.Equal(t, k(1000), ps[0].Value)
	ps, err = s.Scan(ctx, append(k(12), 0), k(15), 0) // a 9-byte bound starts past key 12
	require.NoError(t, err)
	require.Len(t, ps, 2)
	require.Equal(t, k(13), ps[0].Key)
	ps, err = s.Scan(ctx, k(12)[:7], k(12)[:7], 0)
	require.NoError(t, err)
	require.Empty(t, ps)
	for i := uint64(10); i < 20; i++ {
		require.NoError(t, s.Delete(ctx, k(i)))
	}
	require.ErrorIs(t, s.Insert(ctx, k(6), make([]byte, hybrid.MaxValue+1)), kvstore.ErrTooLarge)

	kv := lincheck.KV[uint64, uint64]()
	h := kv.NewHistory(f.Runtime())
	var wg sync.WaitGroup
	for c := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := recorder[uint64]{s: s, kv: kv, rec: h.Client(c + 1), enc: k, val: le8}
			for n := range 300 {
				i := 1 + uint64((n*7+c*13)%97)
				v := uint64(c)<<32 | uint64(n+1)
				switch n % 4 {
				case 0:
					_ = r.get(ctx, i)
				case 1, 2:
					_ = r.insert(ctx, i, v)
				case 3:
					_ = r.delete(ctx, i)
				}
			}
		}()
	}
	wg.Wait()
	h.Check(t)
}
