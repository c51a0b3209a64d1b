package transport

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/farmem/farmem/farmem"
)

// Changes broadcasts that something changed (a fault set or cleared) to everyone waiting: Chan
// returns a channel that Notify closes, and a new one serves the next change. The zero value
// is ready to use.
type Changes struct {
	mu sync.Mutex
	ch chan struct{}
}

// Chan returns the channel the next Notify closes.
func (c *Changes) Chan() <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ch == nil {
		c.ch = make(chan struct{})
	}
	return c.ch
}

// Notify wakes everyone waiting on a channel Chan returned.
func (c *Changes) Notify() {
	c.mu.Lock()
	if c.ch != nil {
		close(c.ch)
		c.ch = nil
	}
	c.mu.Unlock()
}

// Reach is how a client currently sees a node.
type Reach uint8

const (
	// Reachable: the node answers.
	Reachable Reach = iota
	// Silent: hung or partitioned away; no answer comes.
	Silent
	// Down: crashed; ops fail at once.
	Down
	// Lost: restarted with new memory and fenced until adopted (farmem.Restarts); ops fail at
	// once with farmem.ErrNodeLost.
	Lost
)

// AwaitReach blocks until reach reports node reachable, failing with ErrNodeLost if it reports
// it lost, with ErrNodeDown if it reports it down or it stays silent until deadline (posted plus the down timeout), or with ctx's
// error. reach returns the node's state and the channel that is closed when it may change
// (read together, so no change is missed).
func AwaitReach(ctx context.Context, node farmem.NodeID, deadline time.Time, reach func() (Reach, <-chan struct{})) error {
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for {
		r, ch := reach()
		switch r {
		case Reachable:
			return nil
		case Down:
			return fmt.Errorf("farmem: %v crashed: %w", node, farmem.ErrNodeDown)
		case Lost:
			return fmt.Errorf("farmem: %v restarted with new memory, fenced until adopted: %w", node, farmem.ErrNodeLost)
		}
		wait := time.Until(deadline)
		if wait <= 0 {
			return fmt.Errorf("farmem: %v silent past its down timeout: %w", node, farmem.ErrNodeDown)
		}
		if timer == nil {
			timer = time.NewTimer(wait)
		} else {
			timer.Reset(wait)
		}
		select {
		case <-ch:
		case <-timer.C:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// FailFrom completes the ops of b at idx[from:] with err: the rest of a job that cannot run.
func FailFrom(comp Completer, idx []int, from int, err error) {
	for _, i := range idx[from:] {
		comp.Complete(i, 0, err)
	}
}

// LostError returns the error of a verb to a node fenced as lost (farmem.Restarts): it wraps
// farmem.ErrNodeLost (and so farmem.ErrNodeDown) and names the node and both incarnations,
// the one this fabric adopted and the one the node answered with.
func LostError(node farmem.NodeID, adopted, seen uint64) error {
	return fmt.Errorf("%v restarted (incarnation %#x, this fabric holds %#x) and is fenced until adopted: %w", node, seen, adopted, farmem.ErrNodeLost)
}
