package bench

import (
	"context"
	"fmt"
	"hash/maphash"
	"sync"
	"sync/atomic"

	"github.com/farmem/farmem/farmem"
)

// MapShards is how many shards MapStore splits its keys over.
const MapShards = 64

// MapStore is the local limit: Go maps in this process, MapShards of them, each behind its own
// sync.RWMutex (a key's shard by its hash), run through the same harness as the far-memory
// stores. Sharding keeps writers of different keys from queueing on one lock and readers from
// sharing one lock word's cache line, as a tuned in-process store would. A Read copies the value
// into the session's buffer, as the other stores' sessions deliver theirs, so that it reads the
// record's bytes and not only finds them. It has no ordered index (BTreeStore is its ordered
// twin) and counts no costs.
type MapStore struct {
	seed   maphash.Seed
	shards [MapShards]mapShard
	closed atomic.Bool
}

// mapShard is one lock and its map, padded to a cache line of its own.
type mapShard struct {
	mu sync.RWMutex
	m  map[string][]byte
	_  [64 - 24 - 8]byte
}

// NewMapStore returns an empty MapStore.
func NewMapStore() *MapStore {
	s := &MapStore{seed: maphash.MakeSeed()}
	for i := range s.shards {
		s.shards[i].m = make(map[string][]byte)
	}
	return s
}

// shard returns key's shard.
func (s *MapStore) shard(key []byte) *mapShard {
	return &s.shards[maphash.Bytes(s.seed, key)%MapShards]
}

// Name returns "gomap".
func (s *MapStore) Name() string { return "gomap" }

// Open returns a session; sessions share the maps.
func (s *MapStore) Open(ctx context.Context) (Session, error) {
	if s.closed.Load() {
		return nil, fmt.Errorf("bench: gomap: %w", farmem.ErrClosed)
	}
	return &mapSession{s: s}, nil
}

// Close drops the maps. It is idempotent.
func (s *MapStore) Close() error {
	if s.closed.CompareAndSwap(false, true) {
		for i := range s.shards {
			sh := &s.shards[i]
			sh.mu.Lock()
			sh.m = nil
			sh.mu.Unlock()
		}
	}
	return nil
}

// Len returns the number of keys.
func (s *MapStore) Len() int {
	n := 0
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.RLock()
		n += len(sh.m)
		sh.mu.RUnlock()
	}
	return n
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
	sh := m.s.shard(key)
	sh.mu.RLock()
	v, ok := sh.m[string(key)]
	sh.mu.RUnlock()
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
	sh := m.s.shard(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if sh.m == nil {
		return fmt.Errorf("bench: gomap: %w", farmem.ErrClosed)
	}
	if _, ok := sh.m[string(key)]; ok {
		return fmt.Errorf("gomap insert %q: %w", key, ErrExists)
	}
	sh.m[string(key)] = v
	return nil
}

func (m *mapSession) Update(ctx context.Context, key, value []byte) error {
	if m.closed {
		return fmt.Errorf("bench: gomap session: %w", farmem.ErrClosed)
	}
	v := append([]byte(nil), value...)
	sh := m.s.shard(key)
	sh.mu.Lock()
	_, ok := sh.m[string(key)]
	if ok {
		sh.m[string(key)] = v // a fresh slice: readers keep the old one intact
	}
	sh.mu.Unlock()
	if !ok {
		return fmt.Errorf("gomap update %q: %w", key, ErrNotFound)
	}
	return nil
}

func (m *mapSession) Close() error { m.closed = true; return nil }
