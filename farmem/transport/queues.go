package transport

import (
	"sync"
	"sync/atomic"

	"github.com/farmem/farmem/farmem"
)

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
