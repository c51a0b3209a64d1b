package transport

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/farmem/farmem/farmem"
)

// Handlers is a compute node's Call handlers by method, and the pool of handler clients that
// run them: the pool's size bounds how many handlers run at once. C is the transport's client.
type Handlers[C farmem.Memory] struct {
	mu   sync.RWMutex
	m    map[uint16]farmem.Handler
	pool chan C
}

// NewHandlers returns a handler table whose node runs at most max handlers at once.
func NewHandlers[C farmem.Memory](max int) *Handlers[C] {
	return &Handlers[C]{m: make(map[uint16]farmem.Handler), pool: make(chan C, max)}
}

// Set registers fn for method, or removes method's handler if fn is nil: farmem.Fabric's
// Handle, with [SetHandler]'s rule (a method already registered is refused).
func (h *Handlers[C]) Set(method uint16, fn farmem.Handler) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	return SetHandler(h.m, method, fn)
}

// AddClient puts a handler client into the pool; the fabric adds max of them at start, and a
// transport that takes one itself ([Handlers.Take]) gives it back here.
func (h *Handlers[C]) AddClient(c C) { h.pool <- c }

// Get returns method's handler, or nil.
func (h *Handlers[C]) Get(method uint16) farmem.Handler {
	h.mu.RLock()
	defer h.mu.RUnlock()
	return h.m[method]
}

// Take waits for a free handler client, for a transport that dispatches Calls itself; it
// returns false if stop is closed first. Give the client back with AddClient.
func (h *Handlers[C]) Take(stop <-chan struct{}) (C, bool) {
	select {
	case c := <-h.pool:
		return c, true
	case <-stop:
		var zero C
		return zero, false
	}
}

// HandlerError is a Call handler's own failure, as [Handlers.Serve] returns it: the transport
// carries its code and text to the caller, who sees [RemoteError].
type HandlerError struct{ Err error }

// Error is the handler's error's text.
func (e *HandlerError) Error() string { return e.Err.Error() }

// Unwrap returns the handler's error.
func (e *HandlerError) Unwrap() error { return e.Err }

// Serve runs method's handler for a Call from client from with req, on a handler client of the
// node: it waits for a free one, or until ctx or the node's context nodeCtx ends. The handler
// runs under nodeCtx, which ends when the node crashes or closes; a panic in it becomes its
// error. A handler's own error comes back as *HandlerError; the other errors are the
// transport's (no handler, node down, a reply over farmem.MaxCallBytes, ctx's).
func (h *Handlers[C]) Serve(ctx, nodeCtx context.Context, node farmem.NodeID, method uint16, from farmem.ClientID, req []byte) ([]byte, error) {
	fn := h.Get(method)
	if fn == nil {
		return nil, fmt.Errorf("farmem: method %d on %v: %w", method, node, farmem.ErrNoHandler)
	}
	var hc C
	select {
	case hc = <-h.pool:
	case <-nodeCtx.Done():
		return nil, fmt.Errorf("farmem: %v is down: %w", node, farmem.ErrNodeDown)
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	reply, err := RunHandler(nodeCtx, fn, hc, from, req)
	h.pool <- hc
	if err != nil {
		return nil, &HandlerError{err}
	}
	if len(reply) > farmem.MaxCallBytes {
		return nil, fmt.Errorf("farmem: reply of %d bytes exceeds %d: %w", len(reply), farmem.MaxCallBytes, farmem.ErrInvalid)
	}
	return reply, nil
}

// RunHandler runs fn, turning a panic into an error so one bad handler cannot take the node
// down.
func RunHandler(ctx context.Context, fn farmem.Handler, m farmem.Memory, from farmem.ClientID, req []byte) (reply []byte, err error) {
	defer func() {
		if r := recover(); r != nil {
			reply, err = nil, fmt.Errorf("farmem: handler panicked: %v", r)
		}
	}()
	return fn(ctx, m, from, req)
}

// CallerError turns Serve's error into what the caller of a Call sees when the handler ran in
// its own process: a *HandlerError becomes [RemoteError], anything else stays as it is.
func CallerError(err error) error {
	var he *HandlerError
	if errors.As(err, &he) {
		return RemoteError(CodeOf(he.Err), he.Err.Error())
	}
	return err
}
