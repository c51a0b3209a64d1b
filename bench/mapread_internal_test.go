package bench

import (
	"context"
	"fmt"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"
)

// The Go map peers hand a Read's (and a Scan's) values over in the session's buffer, as the
// far-memory stores do, never their own stored slices: a Read that aliased one would not read
// the value's bytes.
func TestLocalPeersReadCopies(t *testing.T) {
	ctx := context.Background()
	for _, st := range []interface {
		Store
		stored(key string) []byte
	}{NewMapStore(), NewBTreeStore()} {
		t.Run(st.Name(), func(t *testing.T) {
			s, err := st.Open(ctx)
			require.NoError(t, err)
			defer s.Close()
			require.NoError(t, s.Insert(ctx, []byte("k1"), []byte("value one")))
			require.NoError(t, s.Insert(ctx, []byte("k2"), []byte("value two")))
			v, err := s.Read(ctx, []byte("k1"))
			require.NoError(t, err)
			require.Equal(t, "value one", string(v))
			in := st.stored("k1")
			require.True(t, unsafe.SliceData(in) != unsafe.SliceData(v), "Read returned the stored slice")
			// The session's buffer is reused: a second Read allocates nothing.
			k2 := []byte("k2")
			allocs := testing.AllocsPerRun(100, func() {
				if _, err := s.Read(ctx, k2); err != nil {
					t.Fatal(err)
				}
			})
			require.Zero(t, allocs)
			if sc, ok := s.(Scanner); ok {
				var seen []*byte
				n, err := sc.Scan(ctx, []byte("k1"), 2, func(_, value []byte) { seen = append(seen, unsafe.SliceData(value)) })
				require.NoError(t, err)
				require.Equal(t, 2, n)
				for i, k := range []string{"k1", "k2"} {
					require.True(t, seen[i] != unsafe.SliceData(st.stored(k)), "Scan handed over the stored slice of %s", k)
				}
			}
		})
	}
}

func (s *MapStore) stored(key string) []byte {
	sh := s.shard([]byte(key))
	sh.mu.RLock()
	defer sh.mu.RUnlock()
	return sh.m[key]
}

func (s *BTreeStore) stored(key string) []byte {
	s.mu.RLock()
	defer s.mu.RUnlock()
	it, _ := s.t.Get(btreeItem{key: key})
	return it.val
}

// The Go map's keys spread over its shards, each shard's lock on a cache line of its own, and
// Len counts them all.
func TestMapStoreShards(t *testing.T) {
	require.Equal(t, uintptr(64), unsafe.Sizeof(mapShard{}))
	ctx := context.Background()
	st := NewMapStore()
	s, err := st.Open(ctx)
	require.NoError(t, err)
	const n = 4096
	for i := range n {
		require.NoError(t, s.Insert(ctx, fmt.Appendf(nil, "user%d", i), []byte("v")))
	}
	require.ErrorIs(t, s.Insert(ctx, []byte("user7"), []byte("w")), ErrExists)
	require.Equal(t, n, st.Len())
	used := 0
	for i := range st.shards {
		if len(st.shards[i].m) > 0 {
			used++
		}
	}
	require.Equal(t, MapShards, used, "every shard holds keys")
	require.NoError(t, st.Close())
	require.Zero(t, st.Len())
}
