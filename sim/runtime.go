package sim

import (
	"context"
	"errors"
	"math/rand/v2"
	"time"

	"github.com/farmem/farmem/farmem"
)

// ErrDeadlock is returned by a blocking call of Run's goroutine when every simulated goroutine
// is blocked and no event is pending, so nothing could ever wake it.
var ErrDeadlock = errors.New("sim: deadlock: every simulated goroutine is blocked and no event is pending")

var contextBackground = context.Background()

var _ farmem.Runtime = (*rtime)(nil)

// Now implements farmem.Runtime: virtual time, read on the runtime's clock (a client's clock
// may be offset and drift: see Model.ClockOffset).
func (r *rtime) Now() farmem.Time { return farmem.Time(r.clk.local(int64(r.s.Now()))) }

// Sleep implements farmem.Runtime: it parks the caller for d of virtual time, measured on the
// runtime's clock.
func (r *rtime) Sleep(ctx context.Context, d time.Duration) error {
	s := r.s
	p, adopted := s.enter()
	defer s.exit(p, adopted)
	if err := ctx.Err(); err != nil {
		return err
	}
	if d <= 0 {
		return nil
	}
	if r.c != nil {
		r.c.gate(p)
	}
	p.client = r.c
	seq := s.prepark(p)
	s.pushProc(s.nowNs+r.clk.span(d), p, seq)
	switch s.await(p, ctx) {
	case wakeEvent:
		return nil
	case wakeDeadlock:
		return ErrDeadlock
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	return context.Canceled
}

// AfterFunc implements farmem.Runtime: f runs in a new simulated goroutine after d of virtual
// time, measured on the runtime's clock.
func (r *rtime) AfterFunc(d time.Duration, f func()) farmem.Timer {
	s := r.s
	p, adopted := s.enter()
	defer s.exit(p, adopted)
	foreign := startsForeign(p)
	return s.newTimer(s.nowNs+r.clk.span(max(d, 0)), foreign, func() { s.spawn(f, foreign) })
}

// Go implements farmem.Runtime: f runs in a new simulated goroutine, ready at the current
// virtual time, after the ones already ready. From outside the simulation, wait for it in
// virtual time (Group, or a Sleep loop): see the package doc.
func (r *rtime) Go(f func()) {
	s := r.s
	p, adopted := s.enter()
	defer s.exit(p, adopted)
	s.spawn(f, startsForeign(p))
}

// WithTimeout implements farmem.Runtime: the context ends at a virtual deadline, inside the
// simulation, d later on the runtime's clock; its Deadline reads on that clock too.
func (r *rtime) WithTimeout(parent context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	s := r.s
	p, adopted := s.enter()
	defer s.exit(p, adopted)
	return s.withTimeout(parent, d, r.clk)
}

// Rand implements farmem.Runtime: the runtime's own source, seeded from the simulation's seed.
func (r *rtime) Rand() *rand.Rand { return &r.rnd }

// NewRand implements farmem.Runtime: a new source seeded from the seed and a counter.
func (r *rtime) NewRand() *rand.Rand { return r.s.newRand() }

// Compute implements farmem.Runtime: d of CPU work, queued on the client's compute node's
// cores (the fabric's runtime charges no node and only takes the time).
func (r *rtime) Compute(d time.Duration) {
	if d <= 0 {
		return
	}
	s := r.s
	p, adopted := s.enter()
	defer s.exit(p, adopted)
	end := s.nowNs + int64(d)
	if r.c != nil {
		r.c.gate(p)
		end = r.c.n.c.cpu.run(s.nowNs, d)
	}
	s.sleepUntil(p, end, r.c)
}
