package bench

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/farmem/farmem/farmem"
)

// MapStore is the local limit: a Go map behind a sync.RWMutex in this process, run through the
// same harness as the far-memory stores. A Read copies the value into the session's buffer, as
// the other stores' sessions deliver theirs, so that it reads the record's bytes and not only
// finds them. It has no ordered index (BTreeStore is its ordered twin) and counts no costs.
type MapStore struct {
	mu     sync.RWMutex
	m      map[string][]byte
	closed atomic.Bool
}

// NewMapStore returns an empty MapStore.
func NewMapStore() *MapStore { return &MapStore{m: make(map[string][]byte)} }

// Name returns "gomap".
func (s *MapStore) Name() string { return "gomap" }

// Open returns a session; sessions share the map.
func (s *MapStore) Open(ctx context.Context) (Session, error) {
	if s.closed.Load() {
		return nil, fmt.Errorf("bench: gomap: %w", farmem.ErrClosed)
	}
	return &mapSession{s: s}, nil
}

// Close drops the map. It is idempotent.
func (s *MapStore) Close() error {
	if s.closed.CompareAndSwap(false, true) {
		s.mu.Lock()
		s.m = nil
		s.mu.Unlock()
	}
	return nil
}

// Len returns the number of keys.
func (s *MapStore) Len() int {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return len(s.m)
}

type mapSession struct {
	s      *MapStore
	closed bool
	buf    []byte // the last Read's value
}

func (m *mapSession) Read(ctx context.Context, key []byte) ([]byte, error) {
	if m.closed {
		return nil, fmt.Errorf("bench: gomap session: %w", farmem.ErrClosed)
	}
	m.s.mu.RLock()
	v, ok := m.s.m[string(key)]
	m.s.mu.RUnlock()
	if !ok {
		return nil, fmt.Errorf("gomap read %q: %w", key, ErrNotFound)
	}
	// The value is handed over in the session's buffer, as kvstore's and redis's sessions hand
	// theirs: a Read that returned the map's own slice would never touch the value's bytes,
	// and its cost would be the index lookup's alone. (The stored slice is never changed in
	// place, so reading it outside the lock is safe.)
	m.buf = append(m.buf[:0], v...)
	return m.buf, nil
}

func (m *mapSession) Insert(ctx context.Context, key, value []byte) error {
	if m.closed {
		return fmt.Errorf("bench: gomap session: %w", farmem.ErrClosed)
	}
	v := append([]byte(nil), value...)
	m.s.mu.Lock()
	if m.s.m == nil {
		m.s.mu.Unlock()
		return fmt.Errorf("bench: gomap: %w", farmem.ErrClosed)
	}
	if _, ok := m.s.m[string(key)]; ok {
		m.s.mu.Unlock()
		return fmt.Errorf("gomap insert %q: %w", key, ErrExists)
	}
	m.s.m[string(key)] = v
	m.s.mu.Unlock()
	return nil
}

func (m *mapSession) Update(ctx context.Context, key, value []byte) error {
	if m.closed {
		return fmt.Errorf("bench: gomap session: %w", farmem.ErrClosed)
	}
	v := append([]byte(nil), value...)
	m.s.mu.Lock()
	_, ok := m.s.m[string(key)]
	if ok {
		m.s.m[string(key)] = v // a fresh slice: readers keep the old one intact
	}
	m.s.mu.Unlock()
	if !ok {
		return fmt.Errorf("gomap update %q: %w", key, ErrNotFound)
	}
	return nil
}

func (m *mapSession) Close() error { m.closed = true; return nil }
