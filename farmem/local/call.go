package local

import (
	"context"
	"fmt"
	"time"

	"github.com/farmem/farmem/farmem"
	"github.com/farmem/farmem/farmem/transport"
)

type callResult struct {
	reply []byte
	err   error
}

// Call implements farmem.Memory. The handler runs on a handler client of the target node,
// at most MaxHandlers at once there; a crashed target fails the call at once, a silent one
// after the down timeout.
func (c *client) Call(ctx context.Context, id farmem.NodeID, method uint16, req []byte) ([]byte, error) {
	if err := c.Usable(); err != nil {
		return nil, err
	}
	if err := transport.CheckCall(id, req); err != nil {
		return nil, err
	}
	n := c.f.nodes[id]
	if n == nil {
		return nil, fmt.Errorf("local: call to %v: no such node: %w", id, farmem.ErrInvalid)
	}
	reply, err := c.call(ctx, n, method, req)
	c.Counters.CountCall(len(req), len(reply))
	return reply, err
}

func (c *client) call(ctx context.Context, n *node, method uint16, req []byte) ([]byte, error) {
	f := c.f
	req = append([]byte(nil), req...) // the handler must not alias the caller's buffer
	delay := f.delay()
	res := make(chan callResult, 1)
	posted := time.Now()
	go func() {
		res <- f.serve(ctx, c, n, method, req, delay, posted)
	}()
	// Wait for the answer, watching the target: crashed means down now; silent means down
	// unless it answers within the down timeout.
	var timer *time.Timer
	var timeout <-chan time.Time
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for {
		ch := f.changes.Chan()
		switch f.reach(c, n) {
		case transport.Down:
			return nil, fmt.Errorf("local: call %d to %v: crashed: %w", method, n.id, farmem.ErrNodeDown)
		case transport.Silent:
			if timer == nil {
				timer = time.NewTimer(f.opts.DownTimeout)
				timeout = timer.C
			}
		default:
			if timer != nil {
				timer.Stop()
				timer, timeout = nil, nil
			}
		}
		select {
		case r := <-res:
			return r.reply, r.err
		case <-ch:
		case <-timeout:
			return nil, fmt.Errorf("local: call %d to %v: silent for %v: %w", method, n.id, f.opts.DownTimeout, farmem.ErrNodeDown)
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-c.Done():
			return nil, c.Usable()
		}
	}
}

// serve delivers a call to n and runs its handler.
func (f *Fabric) serve(ctx context.Context, from *client, n *node, method uint16, req []byte, delay time.Duration, posted time.Time) callResult {
	if err := f.rt.Sleep(ctx, delay/2); err != nil {
		return callResult{err: err}
	}
	if err := f.awaitReach(ctx, from, n, posted.Add(f.opts.DownTimeout)); err != nil {
		return callResult{err: err}
	}
	reply, err := n.handlers.Serve(ctx, n.ctx, n.id, method, from.ClientInfo.ID, req)
	err = transport.CallerError(err)
	if e := f.rt.Sleep(ctx, delay-delay/2); e != nil {
		return callResult{err: e}
	}
	return callResult{reply: reply, err: err}
}
