package main

import (
	"bytes"
	"context"
	"fmt"
	"strconv"
	"sync"
	"testing"

	"github.com/google/btree"
	"github.com/stretchr/testify/require"

	"github.com/farmem/farmem/farmem"
	"github.com/farmem/farmem/kvstore"
)

// heapOrdered is an ordered index kind whose pairs live in a B-tree on this process's heap,
// one per root it created: a stand-in for the ordered kinds (Dolphin's tree) not built yet,
// to check that one plugged into the --index table runs workload E on the store. Each
// operation reads the root's word in far memory (one round trip), so that it takes time on
// the simulator too.
type heapOrdered struct {
	mu    sync.Mutex
	trees map[farmem.Addr]*heapOrderedTree
}

type heapOrderedTree struct {
	mu sync.Mutex
	t  *btree.BTreeG[kvstore.Pair]
}

// heapOrderedHandle is one client's handle: the shared tree, and the client's Memory.
type heapOrderedHandle struct {
	*heapOrderedTree
	m    farmem.Memory
	root farmem.Addr
	word [8]byte
}

// touch is the handle's far-memory round trip; no lock is held across it.
func (h *heapOrderedHandle) touch(ctx context.Context) error { return h.m.Read(ctx, h.root, h.word[:]) }

func (h *heapOrderedHandle) Get(ctx context.Context, key []byte) ([]byte, error) {
	if err := h.touch(ctx); err != nil {
		return nil, err
	}
	return h.heapOrderedTree.Get(ctx, key)
}

func (h *heapOrderedHandle) Insert(ctx context.Context, k, v []byte) error {
	if err := h.touch(ctx); err != nil {
		return err
	}
	return h.put(k, v, false)
}

func (h *heapOrderedHandle) Update(ctx context.Context, k, v []byte) error {
	if err := h.touch(ctx); err != nil {
		return err
	}
	return h.put(k, v, true)
}

func (h *heapOrderedHandle) Scan(ctx context.Context, from, to []byte, limit int) ([]kvstore.Pair, error) {
	if err := h.touch(ctx); err != nil {
		return nil, err
	}
	return h.heapOrderedTree.Scan(ctx, from, to, limit)
}

func (k *heapOrdered) Name() string           { return "heap-ordered" }
func (k *heapOrdered) Limits() kvstore.Limits { return kvstore.Limits{MaxKey: 1 << 10, MaxKV: 1 << 20} }

func (k *heapOrdered) Create(ctx context.Context, c kvstore.IndexEnv) (farmem.Addr, error) {
	root, err := c.Alloc.Alloc(ctx, 8, 8)
	if err != nil {
		return 0, err
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	k.trees[root] = &heapOrderedTree{t: btree.NewG(8, func(a, b kvstore.Pair) bool { return bytes.Compare(a.Key, b.Key) < 0 })}
	return root, nil
}

func (k *heapOrdered) Open(ctx context.Context, c kvstore.IndexEnv, root farmem.Addr) (kvstore.Index, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if t, ok := k.trees[root]; ok {
		return &heapOrderedHandle{heapOrderedTree: t, m: c.Memory, root: root}, nil
	}
	return nil, fmt.Errorf("heap-ordered: no tree at %v: %w", root, farmem.ErrInvalid)
}

func (t *heapOrderedTree) Get(ctx context.Context, key []byte) ([]byte, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if p, ok := t.t.Get(kvstore.Pair{Key: key}); ok {
		return bytes.Clone(p.Value), nil
	}
	return nil, kvstore.ErrNotFound
}

func (t *heapOrderedTree) put(key, value []byte, update bool) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	p := kvstore.Pair{Key: bytes.Clone(key), Value: bytes.Clone(value)}
	if has := t.t.Has(p); has != update {
		if has {
			return kvstore.ErrExists
		}
		return kvstore.ErrNotFound
	}
	t.t.ReplaceOrInsert(p)
	return nil
}

func (t *heapOrderedTree) Close() error { return nil }
func (t *heapOrderedTree) Delete(ctx context.Context, key []byte) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if _, ok := t.t.Delete(kvstore.Pair{Key: key}); !ok {
		return kvstore.ErrNotFound
	}
	return nil
}

func (t *heapOrderedTree) Scan(ctx context.Context, from, to []byte, limit int) ([]kvstore.Pair, error) {
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

// An ordered kind added to the --index table runs workload E on the store, on a real fabric
// and on the simulator, under both key formats, and the run names the index.
func TestBenchOrderedIndexPlugsIn(t *testing.T) {
	saved := indexKinds
	t.Cleanup(func() { indexKinds = saved })
	indexKinds = append(indexKinds[:len(indexKinds):len(indexKinds)], indexKind{name: "heap-ordered", ordered: true,
		about: "a test's ordered index on the heap",
		kind:  func() kvstore.IndexKind { return &heapOrdered{trees: map[farmem.Addr]*heapOrderedTree{}} }})

	for _, format := range []string{"string", "binary64"} {
		out, errOut, code := cli(t, "bench", "--transport", "local", "--mem-size", "32MiB", "--records", "400",
			"--workload", "e", "--index", "heap-ordered", "--set", "keyformat="+format, "--peers", "none",
			"--clients", "2", "--duration", "150ms", "--warmup", "0s")
		require.Equal(t, 0, code, "%s\n%s", out, errOut)
		require.Contains(t, out, "index heap-ordered")
		require.Equal(t, []string{"400", "0"}, benchRow(out, "kvstore/local", "load")[4:6])
		run := benchRow(out, "kvstore/local", "run")
		require.NotNil(t, run, out)
		ops, err := strconv.Atoi(run[4])
		require.NoError(t, err, "%v", run)
		require.Positive(t, ops)
		require.Equal(t, "0", run[5], "no failed scans or inserts")
		require.NotContains(t, errOut, "needs an ordered index")
	}

	out, errOut, code := cli(t, "bench", "--transport", "sim", "--mem-size", "32MiB", "--records", "300",
		"--workload", "e", "--index", "heap-ordered", "--clients", "2", "--duration", "100us", "--warmup", "0s")
	require.Equal(t, 0, code, "%s\n%s", out, errOut)
	run := benchRow(out, "kvstore/sim", "run")
	require.NotNil(t, run, out)
	require.NotEqual(t, "unsupported", run[4])
	require.Equal(t, "0", run[5])

	// The hash store's note names the ordered kinds there are.
	_, errOut, code = cli(t, "bench", "--transport", "local", "--mem-size", "32MiB", "--records", "300",
		"--workload", "e", "--peers", "none", "--clients", "1", "--duration", "50ms", "--warmup", "0s")
	require.Equal(t, 1, code)
	require.Contains(t, errOut, "choose one with --index: hybrid, heap-ordered")
}
