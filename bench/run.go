package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/farmem/farmem/farmem"
)

// Config describes a benchmark: one workload over several stores, in one run, at one or more
// points of a sweep.
type Config struct {
	Workload *Workload
	// Stores are run side by side: all are loaded first, then at each point of the sweep each
	// store runs in turn, so that drift over time affects them alike.
	Stores []Store
	// Clients is the number of workers (one Session each) per store (default 1).
	Clients int
	// LoadClients is the number of workers of the load phase (default: Clients, or the
	// largest client count of a sweep over clients).
	LoadClients int
	// Duration is the measured length of each run phase. Zero runs Operations operations in
	// total instead.
	Duration time.Duration
	// Warmup is run before each measured window and not recorded.
	Warmup time.Duration
	// Operations is the number of operations of a run phase when Duration is zero (default:
	// the workload's operationcount).
	Operations int64
	// Sweep, if set, runs the run phase once per value of a parameter.
	Sweep Sweep
	// SkipLoad skips the load phase (the stores hold the workload's records already).
	SkipLoad bool
	// Seed seeds the workers' random sources (worker i of store s at point p has its own
	// stream derived from Seed, s, p and i).
	Seed uint64
	// Progress, if set, receives a progress line rewritten in place (use it only for a
	// terminal: see IsTerminal).
	Progress io.Writer
}

// Sweep is a parameter and the values it takes, one run phase per value. The parameter is
// "clients" or a workload property that does not change the loaded data (a proportion,
// requestdistribution, the hotspot fractions, scan lengths, operationcount).
type Sweep struct {
	Param  string
	Values []string
}

// ParseSweep parses "param=v1,v2,...", as in --sweep clients=1,2,4,8.
func ParseSweep(s string) (Sweep, error) {
	param, list, ok := strings.Cut(s, "=")
	param = strings.TrimSpace(param)
	if !ok || param == "" || strings.TrimSpace(list) == "" {
		return Sweep{}, fmt.Errorf("bench: sweep %q: want param=v1,v2,... (e.g. clients=1,2,4,8): %w", s, farmem.ErrInvalid)
	}
	var sw Sweep
	sw.Param = param
	for _, v := range strings.Split(list, ",") {
		v = strings.TrimSpace(v)
		if v == "" {
			return Sweep{}, fmt.Errorf("bench: sweep %q: an empty value: %w", s, farmem.ErrInvalid)
		}
		sw.Values = append(sw.Values, v)
	}
	return sw, nil
}

// String formats the sweep as ParseSweep reads it.
func (s Sweep) String() string {
	if s.Param == "" {
		return ""
	}
	return s.Param + "=" + strings.Join(s.Values, ",")
}

type point struct {
	clients int
	value   string
	w       *Workload
}

func (cfg *Config) points() ([]point, error) {
	w := cfg.Workload
	if cfg.Sweep.Param == "" {
		return []point{{clients: cfg.Clients, w: w}}, nil
	}
	if len(cfg.Sweep.Values) == 0 {
		return nil, fmt.Errorf("bench: sweep over %s has no values: %w", cfg.Sweep.Param, farmem.ErrInvalid)
	}
	var pts []point
	for _, v := range cfg.Sweep.Values {
		p := point{clients: cfg.Clients, value: v, w: w}
		switch param := cfg.Sweep.Param; {
		case param == "clients":
			n, err := strconv.Atoi(v)
			if err != nil || n < 1 || n > maxClients {
				return nil, fmt.Errorf("bench: sweep clients=%s: want a count in [1, %d]: %w", v, maxClients, farmem.ErrInvalid)
			}
			p.clients = n
		case !KnownProperty(param):
			return nil, fmt.Errorf("bench: sweep over %q: not clients nor a workload property: %w", param, farmem.ErrInvalid)
		case LoadTimeProperty(param):
			return nil, fmt.Errorf("bench: sweep over %s: it changes the loaded data, so each point needs a fresh store; run one benchmark per value: %w", param, farmem.ErrInvalid)
		default:
			nw, err := w.With(map[string]string{param: v})
			if err != nil {
				return nil, fmt.Errorf("bench: sweep %s=%s: %w", param, v, err)
			}
			p.w = nw
		}
		pts = append(pts, p)
	}
	return pts, nil
}

const maxClients = 1 << 16

// Run runs the benchmark cfg describes and reports every store's load phase and its run phase
// at each point. A store that cannot run the workload (E without an ordered index) gets a row
// saying so; a store that fails gets a row with the error; neither stops the others. Run
// returns an error for a bad Config, or the context's error (with the rows so far).
func Run(ctx context.Context, cfg Config) (*Report, error) {
	if cfg.Workload == nil {
		return nil, fmt.Errorf("bench: no workload: %w", farmem.ErrInvalid)
	}
	if len(cfg.Stores) == 0 {
		return nil, fmt.Errorf("bench: no stores: %w", farmem.ErrInvalid)
	}
	if cfg.Clients == 0 {
		cfg.Clients = 1
	}
	if cfg.Clients < 0 || cfg.Clients > maxClients || cfg.LoadClients < 0 || cfg.LoadClients > maxClients ||
		cfg.Duration < 0 || cfg.Warmup < 0 || cfg.Operations < 0 {
		return nil, fmt.Errorf("bench: config out of range (clients %d, load clients %d, duration %v, warmup %v, operations %d): %w",
			cfg.Clients, cfg.LoadClients, cfg.Duration, cfg.Warmup, cfg.Operations, farmem.ErrInvalid)
	}
	pts, err := cfg.points()
	if err != nil {
		return nil, err
	}
	if cfg.LoadClients == 0 {
		for _, p := range pts {
			cfg.LoadClients = max(cfg.LoadClients, p.clients)
		}
	}
	rep := &Report{Workload: cfg.Workload.Name, Properties: cfg.Workload.Effective(), Sweep: cfg.Sweep.Param}

	type state struct {
		st          Store
		d           *Driver
		unsupported string
		failed      bool
	}
	states := make([]*state, len(cfg.Stores))
	for si, st := range cfg.Stores {
		s := &state{st: st}
		states[si] = s
		d, err := NewDriver(pts[0].w)
		if err != nil {
			return nil, err
		}
		s.d = d
		sess, err := st.Open(ctx)
		if err != nil {
			s.failed = true
			rep.Rows = append(rep.Rows, Row{Store: st.Name(), Workload: cfg.Workload.Name, Phase: PhaseLoad,
				Clients: cfg.LoadClients, Error: err.Error()})
			continue
		}
		err = d.Check(sess)
		_ = sess.Close()
		if err != nil {
			s.unsupported = fmt.Sprintf("%s: %v", st.Name(), err)
			continue
		}
		if cfg.SkipLoad {
			continue
		}
		row := runLoad(ctx, &cfg, st, d, uint64(si))
		rep.Rows = append(rep.Rows, row)
		if err := ctx.Err(); err != nil {
			return rep, err
		}
		if row.Unsupported != "" {
			s.unsupported = row.Unsupported
			rep.Rows = rep.Rows[:len(rep.Rows)-1]
		} else if row.Error != "" {
			s.failed = true
		}
	}
	for pi, p := range pts {
		for si, s := range states {
			if s.failed {
				continue
			}
			row := Row{Store: s.st.Name(), Workload: cfg.Workload.Name, Phase: PhaseRun, Clients: p.clients,
				Unsupported: s.unsupported}
			if s.unsupported == "" {
				d := s.d
				if p.w != pts[0].w {
					var err error
					if d, err = s.d.With(p.w); err != nil {
						return rep, err
					}
				}
				row = runPhase(ctx, &cfg, s.st, d, p.clients, uint64(si), uint64(pi+1), p.value)
				if row.Unsupported != "" {
					s.unsupported = row.Unsupported
				}
			}
			row.Point = p.value
			rep.Rows = append(rep.Rows, row)
			if err := ctx.Err(); err != nil {
				return rep, err
			}
		}
	}
	return rep, nil
}

// openWorkers opens n sessions of st with a worker each.
func openWorkers(ctx context.Context, cfg *Config, st Store, d *Driver, n int, seed2 uint64,
	now func() time.Duration) ([]*Worker, func(), error) {
	var workers []*Worker
	closeAll := func() {
		for _, wk := range workers {
			_ = wk.sess.Close()
		}
	}
	for i := range n {
		sess, err := st.Open(ctx)
		if err != nil {
			closeAll()
			return nil, nil, fmt.Errorf("opening session %d: %w", i, err)
		}
		r := rand.New(rand.NewPCG(cfg.Seed, seed2<<20|uint64(i)))
		wk, err := d.NewWorker(sess, WorkerOptions{Rand: r, Now: now, Warmup: cfg.Warmup, Duration: cfg.Duration})
		if err != nil {
			_ = sess.Close()
			closeAll()
			return nil, nil, err
		}
		workers = append(workers, wk)
	}
	return workers, closeAll, nil
}

func runLoad(ctx context.Context, cfg *Config, st Store, d *Driver, si uint64) Row {
	n := int(min(int64(cfg.LoadClients), d.w.InsertCount))
	t0 := time.Now()
	now := func() time.Duration { return time.Since(t0) }
	workers, closeAll, err := openWorkers(ctx, cfg, st, d, n, si<<24, now)
	if err != nil {
		return Row{Store: st.Name(), Workload: d.w.Name, Phase: PhaseLoad, Clients: n, Error: err.Error()}
	}
	defer closeAll()
	lctx, cancel := context.WithCancel(ctx)
	defer cancel()
	prog := startProgress(cfg.Progress, fmt.Sprintf("%s load %s", st.Name(), d.w.Name), workers, uint64(d.w.InsertCount), 0, now)
	var wg sync.WaitGroup
	errs := make([]error, n)
	start := now()
	for i, wk := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if errs[i] = wk.Load(lctx, i, n); errs[i] != nil {
				cancel()
			}
		}()
	}
	wg.Wait()
	elapsed := now() - start
	prog.stop()
	row := Summarize(st.Name(), PhaseLoad, elapsed, workers)
	row.Workload = d.w.Name
	// The first error that is not another worker's cancellation.
	var first error
	for _, e := range errs {
		if e != nil && (first == nil || errors.Is(first, context.Canceled)) {
			first = e
		}
	}
	switch {
	case first != nil && isUnsupported(first):
		row.Unsupported = fmt.Sprintf("%s: %v", st.Name(), first)
	case first != nil:
		row.Error = first.Error()
	}
	return row
}

func runPhase(ctx context.Context, cfg *Config, st Store, d *Driver, clients int, si, pi uint64, value string) Row {
	t0 := time.Now()
	now := func() time.Duration { return time.Since(t0) }
	fail := func(err error) Row {
		return Row{Store: st.Name(), Workload: d.w.Name, Phase: PhaseRun, Clients: clients, Error: err.Error()}
	}
	workers, closeAll, err := openWorkers(ctx, cfg, st, d, clients, si<<24|pi, now)
	if err != nil {
		return fail(err)
	}
	defer closeAll()
	total := uint64(0)
	if cfg.Duration == 0 {
		total = uint64(cfg.Operations)
		if total == 0 {
			total = uint64(d.w.OperationCount)
		}
	}
	label := fmt.Sprintf("%s run %s clients=%d", st.Name(), d.w.Name, clients)
	if cfg.Sweep.Param != "" && cfg.Sweep.Param != "clients" {
		label += fmt.Sprintf(" %s=%s", cfg.Sweep.Param, value)
	}
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var mu sync.Mutex
	var unsupported error
	start := now()
	for _, wk := range workers {
		wk.startAt(start)
	}
	deadline := start + cfg.Warmup + cfg.Duration
	prog := startProgress(cfg.Progress, label, workers, total, cfg.Warmup+cfg.Duration, now)
	var wg sync.WaitGroup
	for i, wk := range workers {
		share := total / uint64(clients)
		if uint64(i) < total%uint64(clients) {
			share++
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := uint64(0); rctx.Err() == nil; n++ {
				if cfg.Duration > 0 && wk.lastEnd >= deadline || cfg.Duration == 0 && n >= share {
					return
				}
				if err := wk.Step(rctx); err != nil && isUnsupported(err) {
					mu.Lock()
					if unsupported == nil {
						unsupported = err
					}
					mu.Unlock()
					cancel()
					return
				}
			}
		}()
	}
	wg.Wait()
	end := now()
	prog.stop()
	elapsed := cfg.Duration
	if elapsed == 0 {
		elapsed = max(end-start-cfg.Warmup, 0)
	}
	row := Summarize(st.Name(), PhaseRun, elapsed, workers)
	row.Workload, row.Clients = d.w.Name, clients
	if unsupported != nil {
		return Row{Store: st.Name(), Workload: d.w.Name, Phase: PhaseRun, Clients: clients,
			Unsupported: fmt.Sprintf("%s: %v", st.Name(), unsupported)}
	}
	return row
}

// progress rewrites one line on a terminal while a phase runs.
type progress struct {
	w    io.Writer
	done chan struct{}
	wg   sync.WaitGroup
}

func startProgress(w io.Writer, label string, workers []*Worker, total uint64, dur time.Duration,
	now func() time.Duration) *progress {
	p := &progress{w: w, done: make(chan struct{})}
	if w == nil {
		return p
	}
	start := now()
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		t := time.NewTicker(200 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-p.done:
				fmt.Fprint(w, "\r\x1b[K")
				return
			case <-t.C:
			}
			var ops uint64
			for _, wk := range workers {
				ops += wk.Steps()
			}
			el := now() - start
			line := fmt.Sprintf("%s: %.1fs", label, el.Seconds())
			if dur > 0 {
				line += fmt.Sprintf("/%.0fs", dur.Seconds())
			}
			line += fmt.Sprintf(", %d", ops)
			if total > 0 {
				line += fmt.Sprintf("/%d", total)
			}
			line += fmt.Sprintf(" ops, %s ops/s", fmtRate(float64(ops)/el.Seconds()))
			fmt.Fprintf(w, "\r\x1b[K%s", line)
		}
	}()
	return p
}

func (p *progress) stop() {
	close(p.done)
	p.wg.Wait()
}

// Peers returns the stores every benchmark compares with: the Go map (always) and a
// redis-server started on loopback (when installed; otherwise a line saying it was skipped
// goes to log). Close them after the run. Neither scans: for a workload that does, use
// OrderedPeers.
func Peers(ctx context.Context, log io.Writer) []Store { return peers(ctx, log, false) }

// OrderedPeers returns the peers' ordered twins, for workloads that scan: the B-tree map
// (BTreeStore, always) and a redis-server with its sorted-set index (RedisOptions.Index; when
// installed, as in Peers). Their sessions are Scanners. Close them after the run.
func OrderedPeers(ctx context.Context, log io.Writer) []Store { return peers(ctx, log, true) }

func peers(ctx context.Context, log io.Writer, ordered bool) []Store {
	stores := []Store{NewMapStore()}
	if ordered {
		stores = []Store{NewBTreeStore()}
	}
	r, err := StartRedis(ctx, RedisOptions{Index: ordered})
	if err != nil {
		if log != nil {
			fmt.Fprintf(log, "skipping the redis peer: %v\n", err)
		}
		return stores
	}
	return append(stores, r)
}
