package cxl

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/farmem/farmem/farmem"
	"github.com/farmem/farmem/farmem/transport"
)

// faults is a mapping's process-local fault state: what this process's fabric handles see of
// nodes crashed, hung, partitioned or armed to crash mid-batch by the FaultInjector. Other
// processes see none of it, except a hosted compute node's crash (its lease is marked
// crashed) and its hang (it stops answering Calls and renewing its lease).
type faults struct {
	// active counts the fault entries; while it is zero, verbs take the fast path.
	active atomic.Int32

	changes transport.Changes // notified at every change

	mu    sync.Mutex
	down  map[farmem.NodeID]bool
	hung  map[farmem.NodeID]bool
	parts map[partition]bool
	after map[farmem.NodeID]int
}

type partition struct {
	client farmem.ClientID
	node   farmem.NodeID
}

func (f *faults) init() {
	f.down = make(map[farmem.NodeID]bool)
	f.hung = make(map[farmem.NodeID]bool)
	f.parts = make(map[partition]bool)
	f.after = make(map[farmem.NodeID]int)
}

// changedLocked recounts the entries and wakes everything waiting for a change. f.mu is held.
func (f *faults) changedLocked() {
	f.active.Store(int32(len(f.down) + len(f.hung) + len(f.parts) + len(f.after)))
	f.changes.Notify()
}

func (f *faults) update(fn func()) {
	f.mu.Lock()
	fn()
	f.changedLocked()
	f.mu.Unlock()
}

func (f *faults) reachLocked(client farmem.ClientID, node farmem.NodeID) transport.Reach {
	switch {
	case f.down[node]:
		return transport.Down
	case f.hung[node], f.parts[partition{client, node}]:
		return transport.Silent
	}
	return transport.Reachable
}

// isDown reports whether node is crashed in this process's view.
func (f *faults) isDown(node farmem.NodeID) bool {
	if f.active.Load() == 0 {
		return false
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.down[node]
}

// awaitReach blocks while client cannot reach node: it fails with ErrNodeDown at once if node
// is crashed, or at deadline if it stays silent, or with ctx's error.
func (f *faults) awaitReach(ctx context.Context, client farmem.ClientID, node farmem.NodeID, deadline time.Time) error {
	if f.active.Load() == 0 {
		return nil
	}
	return transport.AwaitReach(ctx, node, deadline, func() (transport.Reach, <-chan struct{}) {
		ch := f.changes.Chan()
		f.mu.Lock()
		defer f.mu.Unlock()
		return f.reachLocked(client, node), ch
	})
}

// takeCrashAfter disarms node's CrashAfter and returns its count, if it was armed.
func (f *faults) takeCrashAfter(node farmem.NodeID) (int, bool) {
	if f.active.Load() == 0 {
		return 0, false
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	n, ok := f.after[node]
	if ok {
		delete(f.after, node)
		f.changedLocked()
	}
	return n, ok
}
