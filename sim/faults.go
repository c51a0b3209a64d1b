package sim

import (
	"fmt"
	"slices"
	"time"

	"github.com/farmem/farmem/farmem"
)

// Faults. Every method may be called from inside the simulation (a proc, or a function
// scheduled with At) or from outside it; from inside, the fault happens at the current virtual
// time, which is how a fault schedule replays exactly.

type linkKey struct{ a, b farmem.NodeID }

func mkLinkKey(a, b farmem.NodeID) linkKey {
	if a > b {
		a, b = b, a
	}
	return linkKey{a, b}
}

type linkState struct {
	delay time.Duration
	cut   bool
}

type partKey struct {
	c farmem.ClientID
	n farmem.NodeID
}

// inside runs f holding the token, entering the simulation first when called from outside
// it: the one way in of every fault method.
func (s *Sim) inside(f func() error) error {
	p, adopted := s.enter()
	defer s.exit(p, adopted)
	return f()
}

// onNode runs f inside the simulation on node id, which must exist.
func (s *Sim) onNode(id farmem.NodeID, f func(n *node) error) error {
	return s.inside(func() error {
		n := s.node(id)
		if n == nil {
			return fmt.Errorf("sim: no node %v: %w", id, farmem.ErrInvalid)
		}
		return f(n)
	})
}

// onClient runs f inside the simulation on open client id.
func (s *Sim) onClient(id farmem.ClientID, f func(c *client) error) error {
	return s.inside(func() error {
		c, ok := s.clients.Get(id)
		if !ok {
			return fmt.Errorf("sim: no open client %d: %w", id, farmem.ErrInvalid)
		}
		return f(c)
	})
}

// Crash implements transport.FaultInjector: node fails-stop. Ops to it fail with ErrNodeDown at
// once; on a compute node its clients, Waits, Calls and handlers end with ErrNodeDown.
func (s *Sim) Crash(id farmem.NodeID) error {
	return s.onNode(id, func(n *node) error {
		s.crashNode(n)
		return nil
	})
}

// crashNode crashes n; the token must be held.
func (s *Sim) crashNode(n *node) {
	if n.state == stateCrashed {
		return
	}
	n.state = stateCrashed
	c := n.c
	if c == nil {
		return
	}
	c.paused = false
	c.ctx.cancel(fmt.Errorf("sim: %v crashed: %w", n.id, farmem.ErrNodeDown))
	for _, cl := range s.clientsOf(n) {
		cl.crash()
		s.thaw(cl)
	}
	for _, h := range c.hidle {
		h.crash()
	}
	for _, cl := range slices.Clone(c.calls) {
		cl.finish(nil, cl.downErr("crashed"))
	}
	for _, cl := range c.callQ {
		cl.finish(nil, cl.downErr("crashed"))
	}
	c.callQ = nil
}

// crashTarget crashes a target node in the middle of a batch (CrashAfter).
func (s *Sim) crashTarget(n *node) { s.crashNode(n) }

// Hang implements transport.FaultInjector: node fails silent. Ops and Calls to it get no answer
// and fail with ErrNodeDown after the down timeout, unapplied. A hung compute node is paused
// as a whole, like a stopped process: its clients and handlers make no progress until Resume.
func (s *Sim) Hang(id farmem.NodeID) error { return s.setHung(id, true) }

// Resume implements transport.FaultInjector: it ends a Hang.
func (s *Sim) Resume(id farmem.NodeID) error { return s.setHung(id, false) }

// setHung hangs node id or resumes it; a crashed node can do neither.
func (s *Sim) setHung(id farmem.NodeID, hung bool) error {
	verb, to := "resume", stateUp
	if hung {
		verb, to = "hang", stateHung
	}
	return s.onNode(id, func(n *node) error {
		switch n.state {
		case stateCrashed:
			return fmt.Errorf("sim: %s %v: crashed: %w", verb, id, farmem.ErrNodeDown)
		case to:
			return nil
		}
		n.state = to
		c := n.c
		if c == nil {
			return nil
		}
		c.paused = hung
		if hung {
			for _, cl := range c.calls {
				s.pushCall(max(cl.posted+int64(s.m.DownTimeout), s.nowNs), cl, callDown)
			}
			return nil
		}
		for _, cl := range s.clientsOf(n) {
			s.thaw(cl)
		}
		return nil
	})
}

// Partition implements transport.FaultInjector: client is cut from node (fail-silent for that
// client only).
func (s *Sim) Partition(client farmem.ClientID, id farmem.NodeID) error {
	return s.onNode(id, func(*node) error {
		s.partitions[partKey{client, id}] = true
		return nil
	})
}

// Heal implements transport.FaultInjector: it ends a Partition.
func (s *Sim) Heal(client farmem.ClientID, id farmem.NodeID) error {
	return s.inside(func() error {
		delete(s.partitions, partKey{client, id})
		return nil
	})
}

// CrashAfter implements transport.FaultInjector: the next batch reaching node applies only its
// first n ops there; then the node crashes and the rest fail with ErrNodeDown.
func (s *Sim) CrashAfter(id farmem.NodeID, n int) error {
	return s.onNode(id, func(nd *node) error {
		if n < 0 {
			return fmt.Errorf("sim: crash after %d ops: %w", n, farmem.ErrInvalid)
		}
		nd.crashAfter = n
		return nil
	})
}

// CrashClient implements transport.FaultInjector: one client fails-stop. Its ops in flight have
// unknown outcomes (those not yet applied never will be) and its waiters and later ops fail
// with ErrNodeDown; other clients of its node are unaffected.
func (s *Sim) CrashClient(id farmem.ClientID) error {
	return s.onClient(id, func(c *client) error {
		c.crash()
		s.thaw(c)
		return nil
	})
}

// PauseClient freezes one client, like a goroutine descheduled for a long time: the
// goroutines using it make no progress from their next interaction with the simulator until
// ResumeClient; its ops in flight complete, but it does not see them until then.
func (s *Sim) PauseClient(id farmem.ClientID) error {
	return s.onClient(id, func(c *client) error {
		c.paused = true
		return nil
	})
}

// ResumeClient ends a PauseClient.
func (s *Sim) ResumeClient(id farmem.ClientID) error {
	return s.onClient(id, func(c *client) error {
		c.paused = false
		s.thaw(c)
		return nil
	})
}

// thaw makes ready the procs frozen on c, unless c is still paused.
func (s *Sim) thaw(c *client) {
	if c.isPaused() && !c.crashed {
		return
	}
	for _, p := range c.frozen {
		s.ready.push(p)
	}
	clear(c.frozen)
	c.frozen = c.frozen[:0]
	for p := c.parked; p != nil; {
		nx := p.lnext
		if p.kind == parkOther { // gated by the pause
			s.wakeProc(p, wakeEvent)
		}
		p = nx
	}
}

// DelayLink adds d to every one-way trip between nodes a and b (0 removes the delay).
func (s *Sim) DelayLink(a, b farmem.NodeID, d time.Duration) error {
	if d < 0 {
		return fmt.Errorf("sim: link delay %v: %w", d, farmem.ErrInvalid)
	}
	return s.inside(func() error {
		s.link(a, b).delay = d
		s.tidyLink(a, b)
		return nil
	})
}

// CutLink partitions nodes a and b: messages between them are lost (fail-silent), for every
// client of a compute node among them.
func (s *Sim) CutLink(a, b farmem.NodeID) error {
	return s.inside(func() error {
		s.link(a, b).cut = true
		return nil
	})
}

// HealLink ends a CutLink.
func (s *Sim) HealLink(a, b farmem.NodeID) error {
	return s.inside(func() error {
		s.link(a, b).cut = false
		s.tidyLink(a, b)
		return nil
	})
}

func (s *Sim) link(a, b farmem.NodeID) *linkState {
	k := mkLinkKey(a, b)
	l := s.links[k]
	if l == nil {
		l = &linkState{}
		s.links[k] = l
	}
	return l
}

func (s *Sim) tidyLink(a, b farmem.NodeID) {
	k := mkLinkKey(a, b)
	if l := s.links[k]; l != nil && l.delay == 0 && !l.cut {
		delete(s.links, k)
	}
}

// SetTearing switches torn long accesses on or off at node (see Model.Tearing): with it on,
// a long read concurrent with a write to the same bytes sees the write word-chunk by
// word-chunk.
func (s *Sim) SetTearing(id farmem.NodeID, on bool) error {
	return s.onNode(id, func(n *node) error {
		n.tearing = on
		return nil
	})
}

// clientsOf returns the open clients of compute node n, by ascending id.
func (s *Sim) clientsOf(n *node) []*client {
	var cs []*client
	for _, c := range s.clients.Clients() {
		if c.n == n {
			cs = append(cs, c)
		}
	}
	return cs
}
