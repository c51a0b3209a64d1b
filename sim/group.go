package sim

// Group waits, in virtual time, for the simulated goroutines it started: the simulator's
// sync.WaitGroup. Inside the simulation (in Run, in a proc), wait for procs with a Group, never
// with a sync.WaitGroup or a channel, which would block the simulator itself.
type Group struct {
	s      *Sim
	n      int
	waiter *proc
	wseq   uint64
}

// NewGroup returns an empty Group.
func (s *Sim) NewGroup() *Group { return &Group{s: s} }

// Go starts f in a new simulated goroutine counted by the group.
func (g *Group) Go(f func()) {
	s := g.s
	p, adopted := s.enter()
	defer s.exit(p, adopted)
	g.n++
	s.spawn(func() {
		defer g.done()
		f()
	}, startsForeign(p))
}

func (g *Group) done() {
	g.n--
	if g.n == 0 && g.waiter != nil {
		w := g.waiter
		g.waiter = nil
		g.s.wakeSeq(w, g.wseq, wakeEvent)
	}
}

// Wait blocks until every goroutine the group started has returned. It fails with
// ErrDeadlock if they never can.
func (g *Group) Wait() error {
	s := g.s
	p, adopted := s.enter()
	defer s.exit(p, adopted)
	for g.n > 0 {
		p.client = nil
		g.waiter, g.wseq = p, s.prepark(p)
		if s.await(p, nil) == wakeDeadlock {
			g.waiter = nil
			return ErrDeadlock
		}
	}
	return nil
}

// Parallel runs fn(0..n-1) in n simulated goroutines and waits for them.
func (s *Sim) Parallel(n int, fn func(i int)) error {
	g := s.NewGroup()
	for i := range n {
		g.Go(func() { fn(i) })
	}
	return g.Wait()
}
