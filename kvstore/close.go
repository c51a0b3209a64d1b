package kvstore

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/farmem/farmem/farmem"
)

// DefaultCloseWait is how long, in fabric time, Close waits for the clients in use (open
// sessions, operations in flight) to come back before it reports them.
const DefaultCloseWait = 10 * time.Second

// recheck is how long a goroutine waiting for the pool (an acquire, or Close) sleeps between
// looks at it if nothing wakes it: a safety net, since every event that can end a wait wakes
// the waiters it concerns.
const recheck = time.Second

// ErrCloseIncomplete is wrapped by the error of a Store's Close (a *CloseError) that could not
// release everything: some client failed to release (its allocator could not hand over what it
// held, its Memory did not close), or some clients were still in use when Close's context
// ended.
var ErrCloseIncomplete = errors.New("kvstore: close incomplete")

// ClientError is a client whose release failed, and why.
type ClientError struct {
	ID  farmem.ClientID
	Err error
}

// OpenClient is a client still in use when Close gave up waiting: held by a Session, or by an
// operation in flight.
type OpenClient struct {
	ID      farmem.ClientID
	Session bool
}

// CloseError is what Close returns when it could not release everything. It wraps
// ErrCloseIncomplete and every release error (so errors.Is(err, farmem.ErrNodeDown) tells a
// release that failed on a node that was down).
type CloseError struct {
	// Unreleased are the clients whose release failed. Their Memory was closed all the same;
	// what their allocators held and could not hand over is lost, as when a client crashes.
	Unreleased []ClientError
	// Open are the clients still in use when Close's context ended, by client id. Each is
	// released when its session or operation ends.
	Open []OpenClient
}

// Error lists the clients not released and those still open.
func (e *CloseError) Error() string {
	var b strings.Builder
	b.WriteString(ErrCloseIncomplete.Error())
	for _, u := range e.Unreleased {
		fmt.Fprintf(&b, "; client %d not released: %v", u.ID, u.Err)
	}
	if len(e.Open) > 0 {
		b.WriteString("; still open:")
		for _, o := range e.Open {
			kind := "operation"
			if o.Session {
				kind = "session"
			}
			fmt.Fprintf(&b, " client %d (%s)", o.ID, kind)
		}
	}
	return b.String()
}

// Unwrap returns ErrCloseIncomplete and the release errors.
func (e *CloseError) Unwrap() []error {
	errs := []error{ErrCloseIncomplete}
	for _, u := range e.Unreleased {
		errs = append(errs, u.Err)
	}
	return errs
}

// Close is CloseContext with a bound of DefaultCloseWait of fabric time.
func (s *Store) Close() error {
	ctx, cancel := s.rt.WithTimeout(context.Background(), DefaultCloseWait)
	defer cancel()
	return s.CloseContext(ctx)
}

// CloseContext closes the store: operations and sessions started after it fail with an error
// wrapping farmem.ErrClosed, goroutines waiting for a client are woken with that error, the free
// clients are released at once (the first of them taking over what the others' allocators hold,
// see alloc.Allocator.Absorb, so that one handover record carries it), and the clients in use
// (open sessions, operations in flight) as they come back, which CloseContext waits for until
// ctx ends. Releasing a client closes its
// index handles, closes its allocator (handing what it holds over to its client id's next
// allocator, see alloc.Allocator.Close) and closes its Memory; each step runs even if an
// earlier one failed, and none waits past the fabric's down timeout, so a node that is down
// (or a client that saw it crash) makes a release fail, never hang.
//
// It returns nil once every client is released, else a *CloseError wrapping
// ErrCloseIncomplete that lists the clients whose release failed and the clients still in use.
// The store's far memory is left as it is, for the next Open; the fabric stays open (it is the
// caller's). Once no client is left in use, the per-node state of a NodeKind index is closed
// (see NodeKind). CloseContext is idempotent: a later call releases nothing more, waits again
// for the clients still in use, and reports what is still open (release errors are reported
// once).
func (s *Store) CloseContext(ctx context.Context) error {
	s.mu.Lock()
	s.finished = true
	s.closed.Store(true)
	idle := s.idle
	s.idle = nil
	for _, c := range idle {
		s.drop(c)
	}
	ws := s.takeWaiters(len(s.waiters))
	s.mu.Unlock()
	wake(ws)
	// One allocator holds all the free clients' memory: the others hand nothing over, and its
	// record has the most room to be stored in (a full store's clients may each hold only blocks
	// too small for theirs). The index handles close first (they may give blocks back), and
	// that allocator closes last, once the others' epoch announcements are withdrawn, so that it
	// can reclaim what they retired if it needs room for its record.
	for _, c := range idle {
		if err := c.idx.Close(); err != nil {
			s.mu.Lock()
			s.failed = append(s.failed, ClientError{ID: c.id, Err: err})
			s.mu.Unlock()
		}
	}
	for _, c := range idle[min(1, len(idle)):] {
		_ = idle[0].a.Absorb(c.a)
	}
	for i := len(idle) - 1; i >= 0; i-- {
		s.closeConn(idle[i], true)
	}
	for {
		s.mu.Lock()
		if len(s.live)+s.closing == 0 || s.expired(ctx) != nil {
			break
		}
		w := s.newWaiter(ctx)
		s.closers = append(s.closers, w)
		s.mu.Unlock()
		w.sleep(s.rt)
		s.mu.Lock()
		s.closers = slices.DeleteFunc(s.closers, func(x *waiter) bool { return x == w })
		s.mu.Unlock()
	}
	ce := &CloseError{Unreleased: s.failed}
	s.failed = nil
	for c := range s.live {
		ce.Open = append(ce.Open, OpenClient{ID: c.id, Session: s.sessions[c]})
	}
	s.mu.Unlock()
	var nodeErr error
	if len(ce.Open) == 0 {
		// Every handle is closed: a NodeKind's per-node state goes now (once).
		nodeErr = s.closeNodes()
	}
	if len(ce.Unreleased) == 0 && len(ce.Open) == 0 {
		return nodeErr
	}
	slices.SortFunc(ce.Unreleased, func(a, b ClientError) int { return int(a.ID) - int(b.ID) })
	slices.SortFunc(ce.Open, func(a, b OpenClient) int { return int(a.ID) - int(b.ID) })
	if nodeErr != nil {
		return errors.Join(ce, nodeErr)
	}
	return ce
}

// drop takes c out of the live clients to be released by closeConn (s.mu held).
func (s *Store) drop(c *conn) {
	delete(s.live, c)
	s.closing++
}

// closeConn releases a client that drop took out of s.live, counts its costs, records a failed
// release for Close's report if record is set and the store is closing, and wakes the Closes
// waiting for clients. It returns the release's error.
func (s *Store) closeConn(c *conn, record bool) error {
	st, err := c.close()
	s.mu.Lock()
	s.closing--
	s.retired = s.retired.Add(st)
	if err != nil && record && s.finished {
		s.failed = append(s.failed, ClientError{ID: c.id, Err: err})
	}
	ws := s.closers
	s.closers = nil
	s.mu.Unlock()
	wake(ws)
	return err
}

// waiter is a goroutine waiting for the pool: an acquire waiting to be handed a client (c), or a
// Close waiting for clients to come back. It sleeps in fabric time on a context that the waker
// cancels, so the wait is event-driven on every transport and deterministic on the simulator,
// and no Go lock is held while it sleeps.
type waiter struct {
	c    *conn // the client handed to a waiting acquire
	ctx  context.Context
	wake context.CancelFunc
}

// newWaiter returns a waiter whose sleep ends when it is woken, when parent ends, or after
// recheck.
func (s *Store) newWaiter(parent context.Context) *waiter {
	ctx, cancel := s.rt.WithTimeout(parent, recheck)
	return &waiter{ctx: ctx, wake: cancel}
}

func (w *waiter) sleep(rt farmem.Runtime) {
	_ = rt.Sleep(w.ctx, recheck)
	w.wake()
}

// expired returns ctx's error, or context.DeadlineExceeded once the fabric's clock has passed
// ctx's deadline: a context of simulated time whose timer has not fired yet (its owner waits
// outside the simulation) has ended all the same.
func (s *Store) expired(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if d, ok := ctx.Deadline(); ok && s.rt.Now() >= farmem.Time(d.UnixNano()) {
		return context.DeadlineExceeded
	}
	return nil
}

// takeWaiters removes up to n waiting acquires, oldest first (s.mu held).
func (s *Store) takeWaiters(n int) []*waiter {
	n = min(n, len(s.waiters))
	ws := slices.Clone(s.waiters[:n])
	s.waiters = slices.Delete(s.waiters, 0, n)
	return ws
}

// wake wakes waiters taken from a queue (s.mu not held).
func wake(ws []*waiter) {
	for _, w := range ws {
		w.wake()
	}
}

// waitForClient, called with s.mu held (it releases it), waits until a client is handed over
// by release, the pool may have room for a new client, the store is closed, or ctx ends. It
// returns the client handed over, or nil (look at the pool again), or ctx's error. A client
// handed over after ctx ended is passed on to the next waiter.
func (s *Store) waitForClient(ctx context.Context) (*conn, error) {
	w := s.newWaiter(ctx)
	s.waiters = append(s.waiters, w)
	s.mu.Unlock()
	w.sleep(s.rt)
	s.mu.Lock()
	c := w.c
	if c == nil {
		s.waiters = slices.DeleteFunc(s.waiters, func(x *waiter) bool { return x == w })
	}
	s.mu.Unlock()
	err := s.expired(ctx)
	switch {
	case c != nil && err != nil:
		s.release(c, nil)
		return nil, err
	case c != nil:
		return c, nil
	}
	return nil, err
}
