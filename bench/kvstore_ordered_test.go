package bench

import (
	"bytes"
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/google/btree"
	"github.com/stretchr/testify/require"

	"github.com/farmem/farmem/farmem"
	"github.com/farmem/farmem/farmem/local"
	"github.com/farmem/farmem/kvstore"
)

// heapOrderedKind is an ordered index kind for tests of the harness's kvstore adapter: its
// pairs live in a B-tree on this process's heap (not in far memory), one tree per root it
// created. It stands in for the ordered kinds (Dolphin's tree) not built yet.
type heapOrderedKind struct {
	mu    sync.Mutex
	trees map[farmem.Addr]*heapTree
}

type heapTree struct {
	mu sync.Mutex
	t  *btree.BTreeG[kvstore.Pair]
}

func (k *heapOrderedKind) Name() string { return "heap-ordered" }
func (k *heapOrderedKind) Limits() kvstore.Limits {
	return kvstore.Limits{MaxKey: 1 << 10, MaxKV: 1 << 20}
}

func (k *heapOrderedKind) Create(ctx context.Context, c kvstore.IndexEnv) (farmem.Addr, error) {
	root, err := c.Alloc.Alloc(ctx, 8, 8)
	if err != nil {
		return 0, err
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.trees == nil {
		k.trees = map[farmem.Addr]*heapTree{}
	}
	k.trees[root] = &heapTree{t: btree.NewG(8, func(a, b kvstore.Pair) bool { return bytes.Compare(a.Key, b.Key) < 0 })}
	return root, nil
}

func (k *heapOrderedKind) Open(ctx context.Context, c kvstore.IndexEnv, root farmem.Addr) (kvstore.Index, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	t, ok := k.trees[root]
	if !ok {
		return nil, fmt.Errorf("heap-ordered: no tree at %v: %w", root, farmem.ErrInvalid)
	}
	return t, nil
}

func (t *heapTree) Get(ctx context.Context, key []byte) ([]byte, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	p, ok := t.t.Get(kvstore.Pair{Key: key})
	if !ok {
		return nil, kvstore.ErrNotFound
	}
	return bytes.Clone(p.Value), nil
}

func (t *heapTree) put(key, value []byte, update bool) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	p := kvstore.Pair{Key: bytes.Clone(key), Value: bytes.Clone(value)}
	switch has := t.t.Has(p); {
	case has && !update:
		return kvstore.ErrExists
	case !has && update:
		return kvstore.ErrNotFound
	}
	t.t.ReplaceOrInsert(p)
	return nil
}

func (t *heapTree) Insert(ctx context.Context, key, value []byte) error {
	return t.put(key, value, false)
}
func (t *heapTree) Update(ctx context.Context, key, value []byte) error {
	return t.put(key, value, true)
}
func (t *heapTree) Delete(ctx context.Context, key []byte) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if _, ok := t.t.Delete(kvstore.Pair{Key: key}); !ok {
		return kvstore.ErrNotFound
	}
	return nil
}
func (t *heapTree) Close() error { return nil }

func (t *heapTree) Scan(ctx context.Context, from, to []byte, limit int) ([]kvstore.Pair, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	var out []kvstore.Pair
	t.t.AscendGreaterOrEqual(kvstore.Pair{Key: from}, func(p kvstore.Pair) bool {
		if to != nil && bytes.Compare(p.Key, to) >= 0 {
			return false
		}
		out = append(out, kvstore.Pair{Key: bytes.Clone(p.Key), Value: bytes.Clone(p.Value)})
		return limit <= 0 || len(out) < limit
	})
	return out, nil
}

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
			s := open(t, kvstore.Options{Index: &heapOrderedKind{}})
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
