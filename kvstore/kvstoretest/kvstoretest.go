// Package kvstoretest holds helpers for tests of code built on kvstore. Its one kind,
// [HeapOrdered], is an ordered index whose pairs live in a B-tree on the test process's heap,
// not in far memory: it lets a test of an ordered-index user (the bench harness's scans, the
// CLI's --index table) run before, or beside, a real ordered kind.
//
// Limits: the pairs are lost with the process and shared only by the clients of one process;
// each operation reads the root's word in far memory (one round trip, so it takes time on the
// simulator too) and then takes a Go mutex around the B-tree (never across a verb).
//
// It also holds what the store's test packages share (kvstore's own and those split off from
// it by subject, kvstore/replcheck and kvstore/spacecheck): a random operation mix recorded
// for the linearizability checker ([Workload], [Mix]), a run on the simulator with memory
// nodes crashing ([CrashedSim]), a test replicator ([Mirror]), and fixtures that register
// their cleanup with the test ([NewLocal], [OpenStore], [StartSim], [Semantics]).
package kvstoretest

import (
	"bytes"
	"context"
	"fmt"
	"sync"

	"github.com/google/btree"

	"github.com/farmem/farmem/farmem"
	"github.com/farmem/farmem/kvstore"
)

// HeapOrdered returns a new ordered index kind named "heap-ordered": one B-tree per root it
// creates, keys up to 1 KiB and pairs up to 1 MiB.
func HeapOrdered() kvstore.IndexKind { return &heapKind{trees: map[farmem.Addr]*heapTree{}} }

type heapKind struct {
	mu    sync.Mutex
	trees map[farmem.Addr]*heapTree
}

type heapTree struct {
	mu sync.Mutex
	t  *btree.BTreeG[kvstore.Pair]
}

// heapHandle is one client's handle: the shared tree, and the client's Memory.
type heapHandle struct {
	t    *heapTree
	m    farmem.Memory
	root farmem.Addr
	word [8]byte
}

func (k *heapKind) Name() string           { return "heap-ordered" }
func (k *heapKind) Limits() kvstore.Limits { return kvstore.Limits{MaxKey: 1 << 10, MaxKV: 1 << 20} }

func (k *heapKind) Create(ctx context.Context, c kvstore.IndexEnv) (farmem.Addr, error) {
	root, err := c.Alloc.Alloc(ctx, 8, 8)
	if err != nil {
		return 0, err
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	k.trees[root] = &heapTree{t: btree.NewG(8, func(a, b kvstore.Pair) bool { return bytes.Compare(a.Key, b.Key) < 0 })}
	return root, nil
}

func (k *heapKind) Open(ctx context.Context, c kvstore.IndexEnv, root farmem.Addr) (kvstore.Index, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if t, ok := k.trees[root]; ok {
		return &heapHandle{t: t, m: c.Memory, root: root}, nil
	}
	return nil, fmt.Errorf("heap-ordered: no tree at %v: %w", root, farmem.ErrInvalid)
}

// touch is the handle's far-memory round trip; no lock is held across it.
func (h *heapHandle) touch(ctx context.Context) error { return h.m.Read(ctx, h.root, h.word[:]) }

func (h *heapHandle) Get(ctx context.Context, key []byte) ([]byte, error) {
	if err := h.touch(ctx); err != nil {
		return nil, err
	}
	h.t.mu.Lock()
	defer h.t.mu.Unlock()
	if p, ok := h.t.t.Get(kvstore.Pair{Key: key}); ok {
		return bytes.Clone(p.Value), nil
	}
	return nil, kvstore.ErrNotFound
}

func (h *heapHandle) put(ctx context.Context, key, value []byte, update bool) error {
	if err := h.touch(ctx); err != nil {
		return err
	}
	h.t.mu.Lock()
	defer h.t.mu.Unlock()
	p := kvstore.Pair{Key: bytes.Clone(key), Value: bytes.Clone(value)}
	if has := h.t.t.Has(p); has != update {
		if has {
			return kvstore.ErrExists
		}
		return kvstore.ErrNotFound
	}
	h.t.t.ReplaceOrInsert(p)
	return nil
}

func (h *heapHandle) Insert(ctx context.Context, k, v []byte) error { return h.put(ctx, k, v, false) }
func (h *heapHandle) Update(ctx context.Context, k, v []byte) error { return h.put(ctx, k, v, true) }

func (h *heapHandle) Delete(ctx context.Context, key []byte) error {
	if err := h.touch(ctx); err != nil {
		return err
	}
	h.t.mu.Lock()
	defer h.t.mu.Unlock()
	if _, ok := h.t.t.Delete(kvstore.Pair{Key: key}); !ok {
		return kvstore.ErrNotFound
	}
	return nil
}

func (h *heapHandle) Scan(ctx context.Context, from, to []byte, limit int) ([]kvstore.Pair, error) {
	if err := h.touch(ctx); err != nil {
		return nil, err
	}
	h.t.mu.Lock()
	defer h.t.mu.Unlock()
	var out []kvstore.Pair
	h.t.t.AscendGreaterOrEqual(kvstore.Pair{Key: from}, func(p kvstore.Pair) bool {
		if to != nil && bytes.Compare(p.Key, to) >= 0 {
			return false
		}
		out = append(out, kvstore.Pair{Key: bytes.Clone(p.Key), Value: bytes.Clone(p.Value)})
		return limit <= 0 || len(out) < limit
	})
	return out, nil
}

func (h *heapHandle) Close() error { return nil }
