package bench

import (
	"context"
	"errors"
	"fmt"

	"github.com/farmem/farmem/farmem"
	"github.com/farmem/farmem/kvstore"
)

// KVStore runs a workload on a kvstore.Store: each worker holds one kvstore.Session (one far
// client) and reports that client's counted costs. Close does not close the Store, which the
// caller owns.
func KVStore(s *kvstore.Store, name string) Store { return &kvStore{s: s, name: name} }

type kvStore struct {
	s    *kvstore.Store
	name string
}

func (k *kvStore) Name() string { return k.name }
func (k *kvStore) Close() error { return nil }

func (k *kvStore) Open(ctx context.Context) (Session, error) {
	ss, err := k.s.Session(ctx)
	if err != nil {
		return nil, err
	}
	return KVSession(ss, k.s.Ordered()), nil
}

// KVSession wraps one kvstore.Session (for example one opened on a simulator client with
// Store.SessionOn) as a Session. ordered says whether the store has an ordered index, so Scan
// works; otherwise the session has no Scanner and workload E says so.
func KVSession(ss *kvstore.Session, ordered bool) Session {
	base := &kvSession{ss: ss}
	if ordered {
		return &kvScanSession{base}
	}
	return base
}

type kvSession struct {
	ss  *kvstore.Session
	buf []byte // Read's value, reused (Session.Read's value lives until the next call)
}

// Read reads the value into the session's buffer with AppendGet: no allocation once the
// buffer has grown to the largest value.
func (k *kvSession) Read(ctx context.Context, key []byte) ([]byte, error) {
	v, err := k.ss.AppendGet(ctx, k.buf[:0], key)
	if errors.Is(err, kvstore.ErrNotFound) {
		return nil, fmt.Errorf("%w: %w", ErrNotFound, err)
	}
	if err != nil {
		return nil, err
	}
	k.buf = v
	return v, nil
}

// Insert and Update report the store's ErrExists and ErrNotFound as the harness's too, as Read
// does, so that a caller checks one sentinel whatever the store.
func (k *kvSession) Insert(ctx context.Context, key, value []byte) error {
	err := k.ss.Insert(ctx, key, value)
	if errors.Is(err, kvstore.ErrExists) {
		return fmt.Errorf("%w: %w", ErrExists, err)
	}
	return err
}

func (k *kvSession) Update(ctx context.Context, key, value []byte) error {
	err := k.ss.Update(ctx, key, value)
	if errors.Is(err, kvstore.ErrNotFound) {
		return fmt.Errorf("%w: %w", ErrNotFound, err)
	}
	return err
}

// Costs returns the session's client's counters as they stand (kvstore.Session.Memory's
// Stats), not kvstore.Session.Stats, which subtracts what the client counted before the
// session took it: the harness only takes differences, and this is one copy of the counters
// fewer per reading.
func (k *kvSession) Costs() farmem.Stats { return k.ss.Memory().Stats() }
func (k *kvSession) Close() error        { return k.ss.Close() }

type kvScanSession struct{ *kvSession }

func (k *kvScanSession) Scan(ctx context.Context, start []byte, n int, visit func(key, value []byte)) (int, error) {
	if n <= 0 {
		return 0, nil // kvstore's limit <= 0 would mean no limit
	}
	ps, err := k.ss.Scan(ctx, start, nil, n)
	if err != nil {
		return 0, err
	}
	if visit != nil {
		for _, p := range ps {
			visit(p.Key, p.Value)
		}
	}
	return len(ps), nil
}
