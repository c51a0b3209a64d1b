package kvstore

import (
	"context"
	"errors"

	"github.com/farmem/farmem/farmem"
)

// Session is one goroutine's hold on one of the store's clients, for hot loops: its operations
// skip the pool, and its Stats count its client's work alone. It is not safe for concurrent
// use. Close gives the client back.
type Session struct {
	s      *Store
	c      *conn
	pooled bool // the client goes back to the pool (else it is closed: SessionOn)
	done   bool
	err    error // the last operation's error, for release
}

// Session takes a client from the pool (opening one, or waiting for one, as an operation
// does) and holds it until the session's Close.
func (s *Store) Session(ctx context.Context) (*Session, error) {
	c, err := s.acquire(ctx)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	s.sessions[c] = true
	s.mu.Unlock()
	return &Session{s: s, c: c, pooled: true}, nil
}

// SessionOn opens a session on a client the caller opened on the store's fabric (as
// sim.RunClosedLoop does for each of its clients): the session opens an allocator and index
// handles on m, and its Close closes them but not m, which stays the caller's. Only one session
// may use m at a time, and the session's synchronizer may keep state in m's slice of its
// compute node's region (CIDER's and MCS's lock nodes, at its start). Cost: the allocator's
// New (1 round trip; 2 or 3 when it adopts what the client id's last allocator handed over)
// and the index's Open (race: 2).
func (s *Store) SessionOn(ctx context.Context, m farmem.Memory) (*Session, error) {
	if s.closed.Load() {
		return nil, errClosed
	}
	c, err := s.attach(ctx, m, nil, false)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	if s.finished {
		s.drop(c)
		s.mu.Unlock()
		_ = s.closeConn(c, false)
		return nil, errClosed
	}
	s.live[c] = struct{}{}
	s.sessions[c] = true
	s.mu.Unlock()
	return &Session{s: s, c: c}, nil
}

// usable reports an error if the session or its store is closed.
func (ss *Session) usable() error {
	if ss.done || ss.s.closed.Load() {
		return errClosed
	}
	return nil
}

// note remembers an operation's error (a client whose Memory is closed is not pooled again).
func (ss *Session) note(err error) error {
	if err != nil {
		ss.err = err
	}
	return err
}

// Get is Store.Get on the session's client.
func (ss *Session) Get(ctx context.Context, key []byte) ([]byte, error) {
	if err := ss.usable(); err != nil {
		return nil, err
	}
	if err := ss.s.check(key, nil); err != nil {
		return nil, err
	}
	v, err := ss.c.idx.Get(ctx, key)
	return v, ss.note(err)
}

// AppendGet is Store.AppendGet on the session's client.
func (ss *Session) AppendGet(ctx context.Context, dst, key []byte) ([]byte, error) {
	if err := ss.usable(); err != nil {
		return dst, err
	}
	// check's tests written inline (check, not inlined, builds the error).
	if l := len(key); l == 0 || l > ss.s.limits.MaxKey || l > ss.s.limits.MaxKV {
		return dst, ss.s.check(key, nil)
	}
	// appendGetConn, written inline: the index's AppendGet is called from here.
	if ag := ss.c.ag; ag != nil {
		v, err := ag.AppendGet(ctx, dst, key)
		return v, ss.note(err)
	}
	v, err := appendViaGet(ctx, ss.c.idx, dst, key)
	return v, ss.note(err)
}

// Insert is Store.Insert on the session's client.
func (ss *Session) Insert(ctx context.Context, key, value []byte) error {
	if err := ss.usable(); err != nil {
		return err
	}
	if err := ss.s.check(key, value); err != nil {
		return err
	}
	return ss.note(ss.s.run(ctx, ss.c, func(idx Index) error { return idx.Insert(ctx, key, value) }))
}

// Update is Store.Update on the session's client.
func (ss *Session) Update(ctx context.Context, key, value []byte) error {
	if err := ss.usable(); err != nil {
		return err
	}
	if err := ss.s.check(key, value); err != nil {
		return err
	}
	return ss.note(ss.s.run(ctx, ss.c, func(idx Index) error { return idx.Update(ctx, key, value) }))
}

// Put is Store.Put on the session's client.
func (ss *Session) Put(ctx context.Context, key, value []byte) error {
	if err := ss.usable(); err != nil {
		return err
	}
	if err := ss.s.check(key, value); err != nil {
		return err
	}
	// Store.run's retry after gathering memory, spelled out: no closure on the path of
	// every Put.
	err := put(ctx, ss.c.idx, key, value)
	if err != nil && errors.Is(err, farmem.ErrNoSpace) {
		ss.s.gather(ctx, ss.c)
		err = put(ctx, ss.c.idx, key, value)
	}
	return ss.note(err)
}

// Delete is Store.Delete on the session's client.
func (ss *Session) Delete(ctx context.Context, key []byte) error {
	if err := ss.usable(); err != nil {
		return err
	}
	if err := ss.s.check(key, nil); err != nil {
		return err
	}
	return ss.note(ss.s.run(ctx, ss.c, func(idx Index) error { return idx.Delete(ctx, key) }))
}

// Scan is Store.Scan on the session's client.
func (ss *Session) Scan(ctx context.Context, from, to []byte, limit int) ([]Pair, error) {
	if err := ss.usable(); err != nil {
		return nil, err
	}
	ps, err := scan(ctx, ss.c.idx, from, to, limit)
	return ps, ss.note(err)
}

// Stats returns the counted costs of the session's client since the store took it (a pooled
// client's counters include the work of earlier holders: take deltas).
func (ss *Session) Stats() farmem.Stats { return ss.c.m.Stats().Sub(ss.c.base) }

// Memory returns the session's client, for its Info (the client id), Runtime and Stats. The
// session owns it: do not close it or run verbs on it.
func (ss *Session) Memory() farmem.Memory { return ss.c.m }

// Close ends the session: a pooled client goes back to the pool (to a goroutine waiting for
// one, if any; or is released, if the store is closed), SessionOn's handles are closed. It is
// idempotent.
func (ss *Session) Close() error {
	if ss.done {
		return nil
	}
	ss.done = true
	ss.s.mu.Lock()
	delete(ss.s.sessions, ss.c)
	if ss.pooled {
		ss.s.mu.Unlock()
		ss.s.release(ss.c, ss.err)
		return nil
	}
	ss.s.drop(ss.c)
	ss.s.mu.Unlock()
	return ss.s.closeConn(ss.c, false)
}
