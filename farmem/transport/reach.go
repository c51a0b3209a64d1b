package transport

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
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
)

// AwaitReach blocks until reach reports node reachable, failing with ErrNodeDown if it reports
// it down or it stays silent until deadline (posted plus the down timeout), or with ctx's
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

// Queues keep one client's batches to each node in posting order, as an RC queue pair does,
// for a transport that runs a batch's part for a node (a job) in a goroutine: jobs to one node
// run one after another, in the order pushed, on a goroutine that lives while the node's queue
// is not empty. The zero value is ready to use.
type Queues struct {
	mu      sync.Mutex
	qs      map[farmem.NodeID]*queue
	running atomic.Int32 // queues with a goroutine
}

type queue struct {
	jobs    []func()
	running bool
}

// Push queues job for node, starting the node's goroutine if it is idle.
func (q *Queues) Push(node farmem.NodeID, job func()) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.qs == nil {
		q.qs = make(map[farmem.NodeID]*queue)
	}
	w := q.qs[node]
	if w == nil {
		w = &queue{}
		q.qs[node] = w
	}
	w.jobs = append(w.jobs, job)
	if !w.running {
		w.running = true
		q.running.Add(1)
		go q.drain(w)
	}
}

func (q *Queues) drain(w *queue) {
	for {
		q.mu.Lock()
		if len(w.jobs) == 0 {
			w.running = false
			q.running.Add(-1)
			q.mu.Unlock()
			return
		}
		job := w.jobs[0]
		w.jobs[0] = nil
		w.jobs = w.jobs[1:]
		q.mu.Unlock()
		job()
	}
}

// Idle reports whether nothing is queued or running for node: a batch to it may then run in
// the caller without overtaking an earlier one.
func (q *Queues) Idle(node farmem.NodeID) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	w := q.qs[node]
	return w == nil || !w.running
}

// Busy reports whether any node's queue is running. It takes no lock.
func (q *Queues) Busy() bool { return q.running.Load() > 0 }

// FailFrom completes the ops of b at idx[from:] with err: the rest of a job that cannot run.
func FailFrom(comp Completer, idx []int, from int, err error) {
	for _, i := range idx[from:] {
		comp.Complete(i, 0, err)
	}
}
