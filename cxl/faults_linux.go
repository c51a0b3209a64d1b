package cxl

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/farmem/farmem/farmem"
)

// faults is a mapping's process-local fault state: what this process's fabric handles see of
// nodes crashed, hung, partitioned or armed to crash mid-batch by the FaultInjector. Other
// processes see none of it, except a hosted compute node's crash (its lease is marked
// crashed) and its hang (it stops answering Calls and renewing its lease).
type faults struct {
	// active counts the fault entries; while it is zero, verbs take the fast path.
	active atomic.Int32

	mu    sync.Mutex
	ch    chan struct{} // closed and replaced at every change
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
	f.ch = make(chan struct{})
	f.down = make(map[farmem.NodeID]bool)
	f.hung = make(map[farmem.NodeID]bool)
	f.parts = make(map[partition]bool)
	f.after = make(map[farmem.NodeID]int)
}

// changedLocked recounts the entries and wakes everything waiting for a change. f.mu is held.
func (f *faults) changedLocked() {
	f.active.Store(int32(len(f.down) + len(f.hung) + len(f.parts) + len(f.after)))
	close(f.ch)
	f.ch = make(chan struct{})
}

func (f *faults) update(fn func()) {
	f.mu.Lock()
	fn()
	f.changedLocked()
	f.mu.Unlock()
}

type reach uint8

const (
	reachable reach = iota
	silent          // hung or partitioned: no answer
	down            // crashed: refused at once
)

func (f *faults) reachLocked(client farmem.ClientID, node farmem.NodeID) reach {
	switch {
	case f.down[node]:
		return down
	case f.hung[node], f.parts[partition{client, node}]:
		return silent
	}
	return reachable
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
func (f *faults) awaitReach(ctx context.Context, client farmem.ClientID, node farmem.NodeID, deadline time.Time, timeout time.Duration) error {
	if f.active.Load() == 0 {
		return nil
	}
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for {
		f.mu.Lock()
		ch, r := f.ch, f.reachLocked(client, node)
		f.mu.Unlock()
		switch r {
		case reachable:
			return nil
		case down:
			return fmt.Errorf("cxl: %v crashed: %w", node, farmem.ErrNodeDown)
		}
		wait := time.Until(deadline)
		if wait <= 0 {
			return fmt.Errorf("cxl: %v silent for %v: %w", node, timeout, farmem.ErrNodeDown)
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
