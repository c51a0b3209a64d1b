package sim

import (
	"context"
	"fmt"
	"time"
	"unsafe"

	"github.com/HdrHistogram/hdrhistogram-go"

	"github.com/farmem/farmem/farmem"
)

// OpFunc is one operation of a load client: a structure's Get or Update, say. It runs inside
// the simulation and returns when the operation is done.
type OpFunc func(ctx context.Context) error

// StartFunc prepares load client i on its Memory m (open a structure handle, load keys) and
// returns its operation. It runs inside the simulation, once per client, before the clock of
// the experiment starts; m.Runtime().Rand() is the client's own seeded random source.
type StartFunc func(ctx context.Context, m farmem.Memory, i int) (OpFunc, error)

// ClosedLoop describes closed-loop clients: each issues an operation, waits for it to finish,
// thinks, and issues the next. With N clients, operation time T and think time Z the
// throughput is N/(T+Z) until a resource saturates.
type ClosedLoop struct {
	// Clients is the number of clients; client i runs on compute node Nodes[i%len(Nodes)]
	// (default: every compute node, round robin).
	Clients int
	Nodes   []farmem.NodeID
	Start   StartFunc
	// Think is the think time after each operation; ExpThink draws it from an exponential
	// distribution with that mean instead.
	Think    time.Duration
	ExpThink bool
	// Warmup is run before the measured window of Duration. If Duration is zero, each client
	// instead runs Ops measured operations after the warm-up.
	Warmup   time.Duration
	Duration time.Duration
	Ops      int
}

// OpenLoop describes an open-loop Poisson load: operations arrive at Rate per second of
// virtual time whatever the system's state, and each is run by an idle client (an arrival that
// finds every client busy waits for one, and its latency counts the wait).
type OpenLoop struct {
	Rate     float64
	Clients  int
	Nodes    []farmem.NodeID
	Start    StartFunc
	Warmup   time.Duration
	Duration time.Duration
}

// LoadResult is what a load run measured in its window.
type LoadResult struct {
	// Ops counts operations completed in the window, Errors those that failed; FirstErr is
	// the first failure.
	Ops      uint64
	Errors   uint64
	FirstErr error
	Window   time.Duration
	// Throughput is Ops per second of virtual time.
	Throughput float64
	// Latency is the distribution of operation latencies in nanoseconds (for an open loop,
	// from arrival, client queueing included); MeanLatency its mean.
	Latency     *hdrhistogram.Histogram
	MeanLatency time.Duration
	PerClient   []ClientLoad
	// Report holds the fabric's counters over the window (NICs, cores, clients).
	Report *Report
}

// ClientLoad is one load client's share of a run.
type ClientLoad struct {
	ID          farmem.ClientID
	Ops         uint64
	Errors      uint64
	MeanLatency time.Duration
}

// loadClient is one load client. It fits one cache line (a closed loop touches it on every
// operation); what only an open loop needs is apart.
type loadClient struct {
	m      farmem.Memory
	op     OpFunc
	ops    uint64
	errs   uint64
	latSum int64
	open   *openClient
}

// openClient is a load client's state in an open loop.
type openClient struct {
	arrival int64 // the arrival being served
	busy    bool
	waiter  *proc
	wseq    uint64
}

type loadRun struct {
	s        *Sim
	clients  []*loadClient
	hist     *histogram
	first    error
	from, to int64 // the window
	report   *Report
}

// record counts an operation that completed in the window.
func (l *loadRun) record(c *loadClient, start, end int64, err error) {
	if end < l.from || (l.to > 0 && end > l.to) {
		return
	}
	if err != nil {
		c.errs++
		if l.first == nil {
			l.first = err
		}
		return
	}
	c.ops++
	c.latSum += end - start
	l.hist.record(end - start)
}

// open opens n clients over nodes and runs start for each, in parallel.
func (s *Sim) openLoad(n int, nodes []farmem.NodeID, start StartFunc) (*loadRun, error) {
	if n <= 0 || start == nil {
		return nil, fmt.Errorf("sim: load of %d clients with start %v: %w", n, start != nil, farmem.ErrInvalid)
	}
	if len(nodes) == 0 {
		nodes = s.Hosted()
	}
	l := &loadRun{s: s, hist: newHistogram()}
	ctx := context.Background()
	for i := range n {
		m, err := s.Open(ctx, nodes[i%len(nodes)])
		if err != nil {
			return nil, err
		}
		l.clients = append(l.clients, &loadClient{m: m, open: &openClient{}})
	}
	var errs []error
	err := s.Parallel(n, func(i int) {
		op, err := start(ctx, l.clients[i].m, i)
		if err == nil && op == nil {
			err = fmt.Errorf("sim: load client %d: start returned no operation: %w", i, farmem.ErrInvalid)
		}
		if err != nil {
			errs = append(errs, err)
		}
		l.clients[i].op = op
	})
	if err != nil {
		return nil, err
	}
	if len(errs) > 0 {
		return nil, errs[0]
	}
	return l, nil
}

func (l *loadRun) result() *LoadResult {
	r := &LoadResult{Window: time.Duration(l.to - l.from), Latency: l.hist.export(), FirstErr: l.first, Report: l.report}
	var sum int64
	for _, c := range l.clients {
		r.Ops += c.ops
		r.Errors += c.errs
		sum += c.latSum
		cl := ClientLoad{ID: c.m.Info().ID, Ops: c.ops, Errors: c.errs}
		if c.ops > 0 {
			cl.MeanLatency = time.Duration(c.latSum / int64(c.ops))
		}
		r.PerClient = append(r.PerClient, cl)
	}
	if r.Ops > 0 {
		r.MeanLatency = time.Duration(sum / int64(r.Ops))
	}
	if r.Window > 0 {
		r.Throughput = float64(r.Ops) / r.Window.Seconds()
	}
	return r
}

// RunClosedLoop runs a closed-loop load and returns what it measured. It may be called from
// outside the simulation or from inside it; the statistics window of the simulation is reset
// at the start of the measured window. The clients stay open afterwards.
func (s *Sim) RunClosedLoop(cfg ClosedLoop) (*LoadResult, error) {
	if cfg.Duration < 0 || cfg.Warmup < 0 || cfg.Think < 0 || (cfg.Duration == 0 && cfg.Ops <= 0) {
		return nil, fmt.Errorf("sim: closed loop needs a duration or an op count: %w", farmem.ErrInvalid)
	}
	var res *LoadResult
	var err error
	s.Run(func() {
		var l *loadRun
		if l, err = s.openLoad(cfg.Clients, cfg.Nodes, cfg.Start); err != nil {
			return
		}
		l.from = s.nowNs + int64(cfg.Warmup)
		if cfg.Duration > 0 {
			l.to = l.from + int64(cfg.Duration)
		}
		s.At(farmem.Time(l.from), func() { s.resetStats() })
		g := s.NewGroup()
		for _, c := range l.clients {
			g.Go(func() { l.closedClient(c, &cfg) })
		}
		if l.to > 0 {
			s.At(farmem.Time(l.to), func() { l.report = s.report() })
		}
		if err = g.Wait(); err != nil {
			return
		}
		if l.to == 0 {
			l.to = s.nowNs
			l.report = s.report()
		}
		res = l.result()
	})
	return res, err
}

// closedClient runs closed-loop client c until its window or its op count is done. What an
// operation reads besides c is shared by every client or on c's stack: with hundreds of
// clients, each one's own lines are cold when its turn comes, and each costs a verb a miss
// (per-client closures holding the loop's parameters cost two).
func (l *loadRun) closedClient(c *loadClient, cfg *ClosedLoop) {
	s := l.s
	ctx := contextBackground
	ops, think, exp := uint64(cfg.Ops), cfg.Think, cfg.ExpThink
	// c is read right after each op returns: its line comes with the resume (see
	// prefetchResume).
	s.cur.Load().hint = unsafe.Pointer(c)
	for {
		if l.to > 0 && s.nowNs >= l.to {
			return
		}
		if l.to == 0 && c.ops+c.errs >= ops {
			return
		}
		start := s.nowNs
		err := c.op(ctx)
		l.record(c, start, s.nowNs, err)
		if z := think; z > 0 {
			rt := c.m.Runtime()
			if exp {
				z = time.Duration(rt.Rand().ExpFloat64() * float64(z))
			}
			_ = rt.Sleep(ctx, z)
		}
	}
}

// RunOpenLoop runs an open-loop Poisson load and returns what it measured (see RunClosedLoop).
func (s *Sim) RunOpenLoop(cfg OpenLoop) (*LoadResult, error) {
	if cfg.Rate <= 0 || cfg.Duration <= 0 || cfg.Warmup < 0 {
		return nil, fmt.Errorf("sim: open loop needs a positive rate and duration: %w", farmem.ErrInvalid)
	}
	var res *LoadResult
	var err error
	s.Run(func() {
		var l *loadRun
		if l, err = s.openLoad(cfg.Clients, cfg.Nodes, cfg.Start); err != nil {
			return
		}
		l.from = s.nowNs + int64(cfg.Warmup)
		l.to = l.from + int64(cfg.Duration)
		s.At(farmem.Time(l.from), func() { s.resetStats() })
		s.At(farmem.Time(l.to), func() { l.report = s.report() })
		ctx := context.Background()
		var idle []*loadClient
		var queue []int64 // arrival times waiting for a client
		closing := false
		g := s.NewGroup()
		for _, c := range l.clients {
			idle = append(idle, c)
			g.Go(func() {
				p := s.cur.Load()
				for {
					for !c.open.busy {
						if closing {
							return
						}
						c.open.waiter, c.open.wseq = p, s.prepark(p)
						p.client = nil
						s.await(p, nil)
					}
					err := c.op(ctx)
					l.record(c, c.open.arrival, s.nowNs, err)
					if len(queue) > 0 {
						c.open.arrival = queue[0]
						queue = queue[1:]
						continue
					}
					c.open.busy = false
					idle = append(idle, c)
				}
			})
		}
		wake := func(c *loadClient) {
			if c.open.waiter != nil {
				w := c.open.waiter
				c.open.waiter = nil
				s.wakeSeq(w, c.open.wseq, wakeEvent)
			}
		}
		rnd := s.newRand()
		gen := s.NewGroup()
		gen.Go(func() {
			for {
				d := time.Duration(rnd.ExpFloat64() / cfg.Rate * 1e9)
				_ = s.rt.Sleep(ctx, d)
				if s.nowNs >= l.to {
					break
				}
				if len(idle) == 0 {
					queue = append(queue, s.nowNs)
					continue
				}
				c := idle[len(idle)-1]
				idle = idle[:len(idle)-1]
				c.open.busy, c.open.arrival = true, s.nowNs
				wake(c)
			}
			closing = true
			for _, c := range l.clients {
				wake(c)
			}
		})
		if err = gen.Wait(); err != nil {
			return
		}
		if err = g.Wait(); err != nil {
			return
		}
		res = l.result()
	})
	return res, err
}
