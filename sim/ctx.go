package sim

import (
	"context"
	"sync/atomic"
	"time"
)

// ctxKey finds the nearest simulator context among a context's ancestors.
type ctxKey struct{}

// simCtx is a context whose deadline is in virtual time. Its Done channel closes inside the
// simulation, at the virtual deadline or when it is canceled, and the procs parked on it are
// woken in the same event, so a run stays deterministic.
type simCtx struct {
	s        *Sim
	parent   context.Context
	deadline int64 // true virtual time; 0: none
	clk      clock // the clock Deadline reads on: its maker's
	done     chan struct{}
	err      atomic.Pointer[error]
	timer    *timer
	waiters  *proc
	funcs    []*ctxFunc
	// stops undoes the registrations with parents.
	stops []func() bool
}

type ctxFunc struct{ f func() }

var _ context.Context = (*simCtx)(nil)

// Deadline implements context.Context: the virtual deadline as a time.Time (virtual time is
// nanoseconds since the Unix epoch), read on the clock of the runtime that made the context.
func (c *simCtx) Deadline() (time.Time, bool) {
	if c.deadline == 0 {
		return time.Time{}, false
	}
	return time.Unix(0, c.clk.local(c.deadline)), true
}

// Done implements context.Context.
func (c *simCtx) Done() <-chan struct{} { return c.done }

// Err implements context.Context.
func (c *simCtx) Err() error {
	if e := c.err.Load(); e != nil {
		return *e
	}
	return nil
}

// Value implements context.Context.
func (c *simCtx) Value(key any) any {
	if key == (ctxKey{}) {
		return c
	}
	return c.parent.Value(key)
}

// AfterFunc arranges for f to run, inside the simulation, when c ends; the context package
// uses it to cancel standard contexts derived from c in the same event. The returned function
// stops it.
func (c *simCtx) AfterFunc(f func()) func() bool {
	s := c.s
	p, adopted := s.enter()
	defer s.exit(p, adopted)
	if c.Err() != nil {
		go f()
		return func() bool { return false }
	}
	cf := &ctxFunc{f: f}
	c.funcs = append(c.funcs, cf)
	return func() bool {
		p, adopted := s.enter()
		defer s.exit(p, adopted)
		for i, x := range c.funcs {
			if x == cf {
				c.funcs = append(c.funcs[:i], c.funcs[i+1:]...)
				return true
			}
		}
		return false
	}
}

// cancel ends c with err; the token must be held.
func (c *simCtx) cancel(err error) {
	if c.err.Load() != nil {
		return
	}
	c.err.Store(&err)
	close(c.done)
	if c.timer != nil {
		c.timer.cancel()
	}
	for c.waiters != nil {
		c.s.wakeProc(c.waiters, wakeCtx)
	}
	funcs := c.funcs
	c.funcs = nil
	for _, f := range funcs {
		f.f()
	}
	for _, stop := range c.stops {
		stop()
	}
	c.stops = nil
}

// simAncestor returns the nearest simulator context of this simulation among ctx and its
// ancestors, and whether ctx is only a view of it (same Done channel).
func (s *Sim) simAncestor(ctx context.Context) (sc *simCtx, same bool) {
	if c, ok := ctx.(*simCtx); ok && c.s == s {
		return c, true
	}
	if c, ok := ctx.Value(ctxKey{}).(*simCtx); ok && c.s == s {
		return c, ctx.Done() == (<-chan struct{})(c.done)
	}
	return nil, false
}

// linked reports whether ctx, which finds simulator context sc among its values but is not a
// view of it, still ends when sc does. context.WithoutCancel keeps a context's values but cuts
// its cancellation and deadline, so a context below it finds sc by value without being bound
// to it; a context derived from sc with the chain intact reports a deadline no later than sc's.
// Without a deadline on sc there is nothing to tell them apart by, and ctx counts as linked.
func linked(ctx context.Context, sc *simCtx) bool {
	if sc.deadline == 0 {
		return true
	}
	d, ok := ctx.Deadline()
	scd, _ := sc.Deadline()
	return ok && !d.After(scd)
}

// WithCancel returns a context derived from parent that ends when parent does or when the
// returned function is called. Inside the simulation use it, not context.WithCancel, for a
// context that the simulation itself cancels: the cancel function wakes the simulated
// goroutines parked on the context in the same event, so the run stays deterministic. A
// standard context canceled from inside reaches the simulator only through a goroutine of the
// context package, at a virtual time that depends on the host's scheduling. The cancel
// function may also be called from outside the simulation (it then waits for the token).
func (s *Sim) WithCancel(parent context.Context) (context.Context, context.CancelFunc) {
	if parent == nil {
		parent = context.Background()
	}
	p, adopted := s.enter()
	defer s.exit(p, adopted)
	clk := clock{}
	if anc, _ := s.simAncestor(parent); anc != nil {
		clk = anc.clk // an inherited deadline reads on the clock of the context that set it
	}
	return s.derive(parent, 0, clk)
}

// withTimeout implements Runtime.WithTimeout; the token must be held.
func (s *Sim) withTimeout(parent context.Context, d time.Duration, clk clock) (context.Context, context.CancelFunc) {
	dl := s.nowNs + clk.span(d)
	if d < 0 {
		dl = s.nowNs + int64(d)
	}
	return s.derive(parent, dl, clk)
}

// derive makes a simulator context below parent that ends at true virtual time dl (0: no
// deadline of its own), when parent ends, or when canceled; the token must be held.
func (s *Sim) derive(parent context.Context, dl int64, clk clock) (context.Context, context.CancelFunc) {
	if parent == nil {
		parent = context.Background()
	}
	c := &simCtx{s: s, parent: parent, done: make(chan struct{}), clk: clk}
	anc, same := s.simAncestor(parent)
	if anc != nil && !same && !linked(parent, anc) {
		anc = nil // a simulator context above a cut (context.WithoutCancel): not a parent
	}
	if anc != nil && anc.deadline != 0 && (dl == 0 || anc.deadline < dl) {
		dl = anc.deadline
	}
	c.deadline = dl
	cancelFunc := func() {
		p, adopted := s.enter()
		c.cancel(context.Canceled)
		s.exit(p, adopted)
	}
	if parent.Done() != nil {
		if anc != nil {
			if err := anc.Err(); err != nil {
				c.cancel(err)
				return c, cancelFunc
			}
			cf := &ctxFunc{f: func() { c.cancel(parentErr(parent, anc)) }}
			anc.funcs = append(anc.funcs, cf)
			c.stops = append(c.stops, func() bool {
				for i, x := range anc.funcs {
					if x == cf {
						anc.funcs = append(anc.funcs[:i], anc.funcs[i+1:]...)
						return true
					}
				}
				return false
			})
		}
		if !same {
			// Cancellations that start outside the simulator (a standard context's cancel
			// or wall-clock timer) arrive asynchronously.
			if err := parent.Err(); err != nil {
				c.cancel(err)
				return c, cancelFunc
			}
			c.stops = append(c.stops, context.AfterFunc(parent, func() {
				p, adopted := s.enter()
				c.cancel(parent.Err())
				s.exit(p, adopted)
			}))
		}
	}
	if dl == 0 {
		return c, cancelFunc
	}
	if dl <= s.nowNs {
		c.cancel(context.DeadlineExceeded)
		return c, cancelFunc
	}
	c.timer = s.newTimer(dl, false, func() { c.cancel(context.DeadlineExceeded) })
	return c, cancelFunc
}

func parentErr(parent context.Context, anc *simCtx) error {
	if err := parent.Err(); err != nil {
		return err
	}
	return anc.Err()
}

// watchCtx arranges for parked p to be woken when ctx ends.
func (s *Sim) watchCtx(p *proc, ctx context.Context) {
	done := ctx.Done()
	if done == nil {
		return
	}
	sc, same := s.simAncestor(ctx)
	if sc != nil && !same && !linked(ctx, sc) {
		sc = nil
	}
	if sc != nil {
		if sc.Err() != nil {
			s.wakeProc(p, wakeCtx)
			return
		}
		p.ctx = sc
		p.cprev = nil
		p.cnext = sc.waiters
		if sc.waiters != nil {
			sc.waiters.cprev = p
		}
		sc.waiters = p
	}
	if !same {
		if ctx.Err() != nil {
			s.wakeProc(p, wakeCtx)
			return
		}
		seq := p.seq
		p.stop = context.AfterFunc(ctx, func() {
			q, adopted := s.enter()
			s.wakeSeq(p, seq, wakeCtx)
			s.exit(q, adopted)
		})
	}
}
