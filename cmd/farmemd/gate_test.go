package main

import (
	"sync"
	"testing"
	"time"
)

// The package's parallel tests each drive their own farmemd processes and spend much of their
// time waiting (for down timeouts to expire, fault windows to pass, processes to start), so
// they overlap; a few instead keep the processors busy throughout (writers running through a
// kill scenario, 16 MiB copies), and too many of those at once on a loaded two-core machine
// starve healthy nodes past their 1 s down timeout. The gate admits them:
//
//   - at most gateAll at once, of which at most gateHeavy busy ones;
//   - longest first (each test states about how long it takes alone), so that the package
//     takes about its longest tests' time, not that plus whatever was left to start last.
//
// The order holds because every test reserves its ticket before t.Parallel, while the
// package's serial tests run, and admission starts only once they are done, when every ticket
// is in. Go's own limit (-parallel) is raised out of the way (TestMain); an explicit -parallel
// wins: the gate then admits tests in arrival order, at most that many and gateHeavy busy
// ones at once.
const (
	gateAll   = 6
	gateHeavy = 2
)

type gate struct {
	mu      sync.Mutex
	ordered bool // admit longest first, from every ticket reserved (else: arrived ones, in order)
	all     int
	running int
	heavy   int // busy tests running
	seq     int
	queue   []*ticket
}

// ticket is a test's (or a subtest's) place in the gate.
type ticket struct {
	g       *gate
	est     time.Duration
	busy    bool
	seq     int
	arrived bool
	state   int // 0 queued, 1 admitted, 2 released
	ch      chan struct{}
}

var testGate = &gate{all: gateAll}

// parallel is t.Parallel through the gate: est is about how long the test takes alone, busy
// whether it keeps a processor busy throughout.
func parallel(t *testing.T, est time.Duration, busy bool) {
	tk := testGate.reserve(t, est, busy)
	t.Parallel()
	tk.wait()
}

// reserve queues a ticket, released when t ends (admitted or not); a ticket a test reserves
// for a subtest is released by the subtest as it ends (release is idempotent), so that its
// place does not wait for the test's other subtests.
func (g *gate) reserve(t *testing.T, est time.Duration, busy bool) *ticket {
	g.mu.Lock()
	g.seq++
	tk := &ticket{g: g, est: est, busy: busy, seq: g.seq, ch: make(chan struct{})}
	g.queue = append(g.queue, tk)
	g.mu.Unlock()
	t.Cleanup(tk.release)
	return tk
}

// wait blocks until the ticket is admitted.
func (tk *ticket) wait() {
	g := tk.g
	g.mu.Lock()
	tk.arrived = true
	g.admitLocked()
	g.mu.Unlock()
	<-tk.ch
}

// release frees the ticket's place; it is idempotent.
func (tk *ticket) release() {
	g := tk.g
	g.mu.Lock()
	defer g.mu.Unlock()
	switch tk.state {
	case 0:
		for i, q := range g.queue {
			if q == tk {
				g.queue = append(g.queue[:i], g.queue[i+1:]...)
				break
			}
		}
	case 1:
		g.running--
		if tk.busy {
			g.heavy--
		}
	default:
		return
	}
	tk.state = 2
	g.admitLocked()
}

// admitLocked admits queued tickets while there is room: the longest first (ordered) or the
// first to arrive (g.mu held).
func (g *gate) admitLocked() {
	for g.running < g.all {
		best := -1
		for i, tk := range g.queue {
			if (!g.ordered && !tk.arrived) || (tk.busy && g.heavy >= gateHeavy) {
				continue
			}
			if b := best; b < 0 || (g.ordered && tk.est > g.queue[b].est) {
				best = i
			}
		}
		if best < 0 {
			return
		}
		tk := g.queue[best]
		g.queue = append(g.queue[:best], g.queue[best+1:]...)
		tk.state = 1
		g.running++
		if tk.busy {
			g.heavy++
		}
		close(tk.ch)
	}
}
