package kvstore_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/farmem/farmem/farmem"
	"github.com/farmem/farmem/farmem/lincheck"
	"github.com/farmem/farmem/farmem/local"
	"github.com/farmem/farmem/kvstore"
)

// TestBlinkIndex runs the store over the B-link tree: answers with YCSB-style string keys,
// refused sizes, scans, and a linearizable history with scans of concurrent clients on two
// compute nodes over 512-byte lines (leaves split; readers move right).
func TestBlinkIndex(t *testing.T) {
	t.Parallel()
	f := newLocal(t, local.Options{Shape: local.Shape{ComputeNodes: 2}, Tearing: true, Jitter: 5 * time.Microsecond})
	kind := &kvstore.Blink{LineSize: 512, Frames: 32}
	s := openStore(t, f, kvstore.Options{Index: kind, Alloc: quietAlloc})
	ctx := context.Background()
	require.NoError(t, s.Insert(ctx, []byte("user5"), []byte("five")))
	require.ErrorIs(t, s.Insert(ctx, []byte("user5"), []byte("again")), kvstore.ErrExists)
	v, err := s.Get(ctx, []byte("user5"))
	require.NoError(t, err)
	require.Equal(t, "five", string(v))
	require.NoError(t, s.Update(ctx, []byte("user5"), []byte("FIVE, longer")))
	v, err = s.Get(ctx, []byte("user5"))
	require.NoError(t, err)
	require.Equal(t, "FIVE, longer", string(v))
	require.NoError(t, s.Delete(ctx, []byte("user5")))
	_, err = s.Get(ctx, []byte("user5"))
	require.ErrorIs(t, err, kvstore.ErrNotFound)
	require.ErrorIs(t, s.Update(ctx, []byte("user5"), []byte("x")), kvstore.ErrNotFound)
	lim := kind.Limits()
	require.ErrorIs(t, s.Insert(ctx, []byte("k"), make([]byte, lim.MaxKV)), kvstore.ErrTooLarge)
	require.NoError(t, s.Insert(ctx, []byte("k"), make([]byte, lim.MaxKV-1)))
	require.NoError(t, s.Delete(ctx, []byte("k")))
	for i := range 100 {
		require.NoError(t, s.Insert(ctx, fmt.Appendf(nil, "user%03d", i), fmt.Appendf(nil, "v%d", i)))
	}
	ps, err := s.Scan(ctx, []byte("user010"), []byte("user020"), 0)
	require.NoError(t, err)
	require.Len(t, ps, 10)
	require.Equal(t, "user010", string(ps[0].Key))
	require.Equal(t, "v19", string(ps[9].Value))
	ps, err = s.Scan(ctx, nil, nil, 0)
	require.NoError(t, err)
	require.Len(t, ps, 100)
	for i := range 100 {
		require.NoError(t, s.Delete(ctx, fmt.Appendf(nil, "user%03d", i)))
	}

	kv := lincheck.KV[string, uint64]()
	h := kv.NewHistory(f.Runtime())
	k := func(i int) string { return fmt.Sprintf("user%d", i*7919%10007) }
	var wg sync.WaitGroup
	for c := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := recorder[string]{s: s, kv: kv, rec: h.Client(c + 1),
				enc: func(k string) []byte { return []byte(k) }, dec: func(b []byte) string { return string(b) },
				val: func(v uint64) []byte { return binary.LittleEndian.AppendUint64(make([]byte, 0, 40), v)[:40] }}
			for n := range 300 {
				i := k((n*7 + c*13) % 151)
				v := uint64(c)<<32 | uint64(n+1)
				switch n % 5 {
				case 0:
					_ = r.get(ctx, i)
				case 1, 2:
					_ = r.insert(ctx, i, v)
				case 3:
					_ = r.delete(ctx, i)
				case 4:
					from, to := k(n%151), k((n+40)%151)
					if to < from {
						from, to = to, from
					}
					_ = r.scan(ctx, from, to)
				}
			}
		}()
	}
	wg.Wait()
	h.Check(t)
	require.NoError(t, s.Close())
	require.NoError(t, s.Close())

	// The kind reopens the store it made: the cluster wrote every line back at Close.
	s2 := openStore(t, f, kvstore.Options{Index: kind, Alloc: quietAlloc})
	_, err = s2.Scan(ctx, nil, nil, 0)
	require.NoError(t, err)
	require.ErrorIs(t, s2.Insert(ctx, make([]byte, lim.MaxKey+1), nil), farmem.ErrInvalid)
}
