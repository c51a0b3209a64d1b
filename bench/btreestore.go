package bench

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/google/btree"

	"github.com/farmem/farmem/farmem"
)

// BTreeStore is the Go map's ordered twin, the local limit for workloads that scan: an
// in-memory B-tree (github.com/google/btree, degree BTreeDegree) of keys to values behind a
// sync.RWMutex in this process. Reads and scans share the lock, inserts and updates take it
// alone. Gets, inserts and updates cost O(log n) comparisons (a Go map's are O(1)); a scan of
// n records costs one descent plus n steps. Keys are ordered bytewise, as Scanner requires. It
// counts no costs.
type BTreeStore struct {
	mu     sync.RWMutex
	t      *btree.BTreeG[btreeItem]
	closed atomic.Bool
}

// BTreeDegree is the degree of BTreeStore's tree: nodes hold up to 2*BTreeDegree-1 keys.
const BTreeDegree = 32

type btreeItem struct {
	key string
	val []byte // never modified once in the tree: an update puts a fresh slice
}

func btreeLess(a, b btreeItem) bool { return a.key < b.key }

// NewBTreeStore returns an empty BTreeStore.
func NewBTreeStore() *BTreeStore {
	return &BTreeStore{t: btree.NewG(BTreeDegree, btreeLess)}
}

// Name returns "gomap/btree".
func (s *BTreeStore) Name() string { return "gomap/btree" }

// Open returns a session; sessions share the tree. Its sessions are Scanners.
func (s *BTreeStore) Open(ctx context.Context) (Session, error) {
	if s.closed.Load() {
		return nil, fmt.Errorf("bench: gomap/btree: %w", farmem.ErrClosed)
	}
	return &btreeSession{s: s}, nil
}

// Close drops the tree. It is idempotent.
func (s *BTreeStore) Close() error {
	if s.closed.CompareAndSwap(false, true) {
		s.mu.Lock()
		s.t = nil
		s.mu.Unlock()
	}
	return nil
}

// Len returns the number of keys.
func (s *BTreeStore) Len() int {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.t == nil {
		return 0
	}
	return s.t.Len()
}

type btreeSession struct {
	s      *BTreeStore
	closed bool
	buf    []byte // the last Read's value
}

var errBTreeClosed = fmt.Errorf("bench: gomap/btree: %w", farmem.ErrClosed)

func (b *btreeSession) Read(ctx context.Context, key []byte) ([]byte, error) {
	if b.closed {
		return nil, errBTreeClosed
	}
	b.s.mu.RLock()
	if b.s.t == nil {
		b.s.mu.RUnlock()
		return nil, errBTreeClosed
	}
	it, ok := b.s.t.Get(probe(key))
	b.s.mu.RUnlock()
	if !ok {
		return nil, fmt.Errorf("gomap/btree read %q: %w", key, ErrNotFound)
	}
	// In the session's buffer, as MapStore's Read (see there).
	b.buf = append(b.buf[:0], it.val...)
	return b.buf, nil
}

func (b *btreeSession) Insert(ctx context.Context, key, value []byte) error {
	return b.put(key, value, false)
}

func (b *btreeSession) Update(ctx context.Context, key, value []byte) error {
	return b.put(key, value, true)
}

// put inserts (update false) or updates (update true) under the write lock.
func (b *btreeSession) put(key, value []byte, update bool) error {
	if b.closed {
		return errBTreeClosed
	}
	it := btreeItem{key: string(key), val: append([]byte(nil), value...)}
	b.s.mu.Lock()
	defer b.s.mu.Unlock()
	if b.s.t == nil {
		return errBTreeClosed
	}
	switch has := b.s.t.Has(it); {
	case update && !has:
		return fmt.Errorf("gomap/btree update %q: %w", key, ErrNotFound)
	case !update && has:
		return fmt.Errorf("gomap/btree insert %q: %w", key, ErrExists)
	}
	b.s.t.ReplaceOrInsert(it)
	return nil
}

// Scan implements Scanner. It calls visit under the tree's read lock: visit must not call
// into the store.
func (b *btreeSession) Scan(ctx context.Context, start []byte, n int, visit func(key, value []byte)) (int, error) {
	if b.closed {
		return 0, errBTreeClosed
	}
	if n <= 0 {
		return 0, nil
	}
	got := 0
	var kb []byte // the key handed to visit, which may not keep it
	b.s.mu.RLock()
	defer b.s.mu.RUnlock()
	if b.s.t == nil {
		return 0, errBTreeClosed
	}
	b.s.t.AscendGreaterOrEqual(probe(start), func(it btreeItem) bool {
		// Each value is handed over in the session's buffer, as Read's (the other stores'
		// scans deliver every record's bytes too).
		b.buf = append(b.buf[:0], it.val...)
		if visit != nil {
			kb = append(kb[:0], it.key...)
			visit(kb, b.buf)
		}
		got++
		return got < n
	})
	return got, nil
}

func (b *btreeSession) Close() error { b.closed = true; return nil }

// probe is an item to look key up with: its key aliases key's bytes (no copy), which holds
// because the tree only compares it and never keeps it.
func probe(key []byte) btreeItem {
	return btreeItem{key: unsafe.String(unsafe.SliceData(key), len(key))}
}
