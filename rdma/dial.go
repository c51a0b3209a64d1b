package rdma

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/farmem/farmem/farmem"
	"github.com/farmem/farmem/internal/wire"
)

// Errors of the rdma package, beside farmem's sentinels.
var (
	// ErrAuth: a node refused this process's proof of the cluster secret, or a node failed to
	// prove it holds the secret. The secret files differ.
	ErrAuth = errors.New("rdma: authentication failed (is the cluster secret the same on both sides?)")
	// ErrRefused: a node turned the connection away for another reason (wrong node at the
	// address, connection limit, shutting down, protocol error); the message says which.
	ErrRefused = errors.New("rdma: connection refused by the node")
	// ErrBadKey: an op named a region key the node does not hold: the node restarted since this
	// fabric learned its key (its memory is new), or the key was forged. It wraps
	// farmem.ErrOutOfRange.
	ErrBadKey = wire.ErrBadKey
)

// dialNode connects to addr and runs the client side of the handshake: it proves the secret,
// checks the node proves it too and is the node expected (0: any), and returns the connection,
// its buffered reader and the node's Welcome. It gives up at deadline or when ctx ends.
func dialNode(ctx context.Context, addr string, expect farmem.NodeID, client farmem.ClientID, purpose wire.Purpose, secret []byte, deadline time.Time) (net.Conn, *bufio.Reader, wire.Welcome, error) {
	var d net.Dialer
	dctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	nc, err := d.DialContext(dctx, "tcp", addr)
	if err != nil {
		return nil, nil, wire.Welcome{}, fmt.Errorf("rdma: connect to %v at %s: %w: %w", expect, addr, farmem.ErrNodeDown, err)
	}
	// Closing the connection when ctx ends unblocks the handshake's reads and writes.
	stop := context.AfterFunc(dctx, func() { _ = nc.Close() })
	defer stop()
	_ = nc.SetDeadline(deadline)
	br := bufio.NewReaderSize(nc, 32<<10)
	w, err := handshake(nc, br, expect, client, purpose, secret)
	if err == nil && !stop() {
		err = fmt.Errorf("rdma: handshake with %v at %s: %w: %w", expect, addr, farmem.ErrNodeDown, dctx.Err())
	}
	if err != nil {
		_ = nc.Close()
		if !errors.Is(err, ErrAuth) && !errors.Is(err, ErrRefused) && !errors.Is(err, farmem.ErrNodeDown) {
			err = fmt.Errorf("rdma: handshake with %v at %s: %w: %w", expect, addr, farmem.ErrNodeDown, err)
		}
		return nil, nil, wire.Welcome{}, err
	}
	_ = nc.SetDeadline(time.Time{})
	if tc, ok := nc.(*net.TCPConn); ok {
		_ = tc.SetNoDelay(true)
	}
	return nc, br, w, nil
}

func handshake(nc net.Conn, br *bufio.Reader, expect farmem.NodeID, client farmem.ClientID, purpose wire.Purpose, secret []byte) (wire.Welcome, error) {
	w, err := wire.ClientHandshake(nc, br, expect, client, purpose, secret)
	var re *wire.RefusedError
	switch {
	case errors.As(err, &re) && re.Reason == wire.ReasonAuth:
		return w, fmt.Errorf("%w: the node says: %s", ErrAuth, re.Msg)
	case errors.As(err, &re):
		return w, fmt.Errorf("%w (%v): %s", ErrRefused, re.Reason, re.Msg)
	case errors.Is(err, wire.ErrPeerAuth):
		return w, fmt.Errorf("%w: %w", ErrAuth, err)
	case errors.Is(err, wire.ErrWrongNode):
		return w, fmt.Errorf("%w: %w", ErrRefused, err)
	}
	return w, err
}

// ctlConn is an authenticated control connection to one node: synchronous requests for info,
// membership and provider setup. It reconnects on the next request after a failure.
type ctlConn struct {
	p      *peer
	f      *Fabric // nil outside a fabric (status queries): no re-dialing in the background
	secret []byte
	down   time.Duration

	mu  sync.Mutex
	inc uint64 // the incarnation of the process nc reaches
	nc  net.Conn
	br  *bufio.Reader
	hdr [wire.HeaderSize]byte
	id  uint64
}

// rpc sends control op with req (marshalled as JSON) and decodes the reply into resp (if not
// nil). It gives up after the down timeout or when ctx ends, with ErrNodeDown. A read-only
// request (CtlInfo, CtlList) that fails on a connection an earlier request opened is sent once
// more on a new one: the node may have restarted since, and the old connection then ends at
// the first use (no reply, so nothing was applied twice).
func (c *ctlConn) rpc(ctx context.Context, op wire.CtlOp, req, resp any) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	reused := c.nc != nil
	err := c.rpcLocked(ctx, op, req, resp)
	var se *staleConnError
	if errors.As(err, &se) && reused && (op == wire.CtlInfo || op == wire.CtlList) && ctx.Err() == nil {
		err = c.rpcLocked(ctx, op, req, resp)
	}
	if errors.As(err, &se) {
		return se.err
	}
	return err
}

// staleConnError is a request that failed on its connection before any reply came back.
type staleConnError struct{ err error }

func (e *staleConnError) Error() string { return e.err.Error() }
func (e *staleConnError) Unwrap() error { return e.err }

func (c *ctlConn) rpcLocked(ctx context.Context, op wire.CtlOp, req, resp any) error {
	deadline := time.Now().Add(c.down)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	if c.nc != nil && c.f != nil && c.retired() {
		_ = c.nc.Close()
		c.nc, c.br = nil, nil
	}
	if c.nc == nil {
		nc, br, w, err := dialNode(ctx, c.p.addr, c.p.id, 0, wire.PurposeControl, c.secret, deadline)
		if err != nil {
			if c.f != nil {
				c.f.noteDown(c.p, err)
			}
			return err
		}
		if c.f != nil {
			c.f.learned(c.p, w)
		} else {
			c.p.learn(w)
		}
		c.nc, c.br, c.inc = nc, br, w.Incarnation
	}
	c.id++
	b, start := wire.BeginFrame(nil, wire.TypeCtl, 0, c.id)
	b, err := wire.AppendCtl(b, op, req)
	if err != nil {
		return err
	}
	b = wire.EndFrame(b, start)
	fail := func(err error) error {
		_ = c.nc.Close()
		c.nc, c.br = nil, nil
		return fmt.Errorf("rdma: control request to %v: %w: %w", c.p.id, farmem.ErrNodeDown, err)
	}
	// The connection is captured: fail may clear c.nc while this runs.
	nc := c.nc
	stop := context.AfterFunc(ctx, func() { _ = nc.SetDeadline(time.Now()) })
	defer stop()
	_ = c.nc.SetDeadline(deadline)
	if _, err := c.nc.Write(b); err != nil {
		return &staleConnError{fail(err)}
	}
	for {
		h, p, err := wire.ReadFrame(c.br, &c.hdr, nil, wire.DefaultMaxFrame)
		if err != nil {
			return &staleConnError{fail(err)}
		}
		if h.Type == wire.TypeError {
			_, msg, _ := wire.DecodeMessage(p)
			return fail(fmt.Errorf("the node closed the connection: %s", msg))
		}
		if h.Type != wire.TypeCtlReply || h.ID != c.id {
			continue
		}
		_ = c.nc.SetDeadline(time.Time{})
		s, body, msg, err := wire.DecodeReply(p)
		if err != nil {
			return fail(err)
		}
		if s != wire.StatusOK {
			return fmt.Errorf("rdma: control request to %v: %s: %w", c.p.id, msg, s.Err())
		}
		if resp == nil {
			return nil
		}
		if err := json.Unmarshal(body, resp); err != nil {
			return fail(err)
		}
		return nil
	}
}

func (c *ctlConn) close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.nc != nil {
		_ = c.nc.Close()
		c.nc, c.br = nil, nil
	}
}

// QueryStatus asks the node at addr for its health and counters, proving secret. It is what
// `farmemd status` runs.
func QueryStatus(ctx context.Context, addr string, secret []byte, timeout time.Duration) (NodeStatus, error) {
	c := &ctlConn{p: &peer{addr: addr, ready: make(chan struct{})}, secret: secret, down: timeout}
	defer c.close()
	var st NodeStatus
	err := c.rpc(ctx, wire.CtlInfo, struct{}{}, &st)
	return st, err
}
