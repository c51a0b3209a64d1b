package bench

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/farmem/farmem/farmem/local"
	"github.com/farmem/farmem/kvstore"
	"github.com/farmem/farmem/kvstore/kvstoretest"
)

// The kvstore adapter (KVStore) passes the Scanner conformance when the store's index is
// ordered, under every key format, and has no Scanner when it is not.
func TestKVStoreScanner(t *testing.T) {
	open := func(t *testing.T, o kvstore.Options) *kvstore.Store {
		f, err := local.New(local.Options{Shape: local.Shape{MemoryNodes: 2, ComputeNodes: 1, MemorySize: 16 << 20}})
		require.NoError(t, err)
		t.Cleanup(func() { _ = f.Close() })
		s, err := kvstore.Open(t.Context(), f, o)
		require.NoError(t, err)
		t.Cleanup(func() { _ = s.Close() })
		return s
	}
	for format, w := range keyFormats(t) {
		t.Run(format, func(t *testing.T) {
			s := open(t, kvstore.Options{Index: kvstoretest.HeapOrdered()})
			require.True(t, s.Ordered())
			scannerConformance(t, KVStore(s, "kvstore/ordered"), w, 300)
		})
	}
	hash := KVStore(open(t, kvstore.Options{}), "kvstore/hash")
	sess, err := hash.Open(t.Context())
	require.NoError(t, err)
	defer sess.Close()
	_, ok := sess.(Scanner)
	require.False(t, ok, "a hash store's sessions do not scan")
	d, err := NewDriver(smallWorkload(t, "e", nil))
	require.NoError(t, err)
	require.ErrorIs(t, d.Check(sess), ErrNeedsOrderedIndex)
}
