package repro

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"

	"github.com/farmem/farmem/alloc"
	"github.com/farmem/farmem/bench/ptrarray"
	"github.com/farmem/farmem/ds/cider"
	"github.com/farmem/farmem/ds/ptrsync"
	"github.com/farmem/farmem/ds/qlock"
	"github.com/farmem/farmem/ds/race"
	"github.com/farmem/farmem/farmem"
	"github.com/farmem/farmem/sim"
)

// The structures, mixes and synchronizers of the CIDER sweep, by name.
const (
	// Array is bench/ptrarray's pointer array; RACE a ds/race table with 8-byte keys.
	Array = "array"
	RACE  = "race"

	// WriteIntensive is 50% updates and 50% searches; WriteOnly 100% updates (CIDER's Table 1).
	WriteIntensive = "write-intensive"
	WriteOnly      = "write-only"

	// The synchronizers: ptrsync's optimistic CAS, ds/cider's CAS spinlock, far MCS lock and
	// CIDER.
	Optimistic = "optimistic"
	Spin       = "spin"
	MCS        = "mcs"
	CIDER      = "cider"
	// CIDERPessimistic is CIDER without contention-aware routing (every update through the
	// lock and global WC: the paper's "w/o C.A.S."), run only in the factor analysis.
	CIDERPessimistic = "cider-pessimistic"
)

// ErrConfig is wrapped by the errors of a configuration RunCider cannot run.
var ErrConfig = errors.New("repro: bad configuration")

// CiderConfig is one CIDER sweep: the points (structure x mix x client count x synchronizer)
// and how each is run.
type CiderConfig struct {
	Structs []string // Array, RACE
	Mixes   []string // WriteIntensive, WriteOnly
	Syncs   []string // Optimistic, Spin, MCS, CIDER
	Clients []int    // ascending
	// ArrayKeys and RaceKeys are the keys preloaded into each structure.
	ArrayKeys, RaceKeys uint64
	// Dist is the key distribution: Scrambled (YCSB's; Theta must be 0.99) or Permuted.
	Dist string
	// Theta is the Zipfian skew.
	Theta float64
	// SeparateNICs gives each compute node its own NIC instead of co-locating the compute
	// nodes on the memory nodes' NICs as the paper's testbed does (see CiderModel).
	SeparateNICs bool
	// Costs replaces model costs no publication pins (zero fields keep the model's).
	Costs Variant
	// Band lists further settings of those costs. At each, the sweep reruns only the points
	// its headline ratios are taken at (the largest CIDER / O-SYNC: that point's O-SYNC and
	// CIDER; CIDER / ShiftLock at the largest count: that point's MCS and CIDER), and the
	// comparison with the paper reports each ratio as the band over the run and its reruns.
	Band []Variant
	// Workers is how many of a point's seeds run at once (each its own simulation, on its own
	// core; default 1). The results do not depend on it.
	Workers int
	// Measure is how each point's warm-up and window are chosen.
	Measure Measure
	// LocalWC runs every synchronizer under local write combining (cider.LocalWC), as CIDER's
	// §5.1 runs its baselines; Factor adds the factor analysis of §5.4.1: every synchronizer
	// again at the largest client count on the write-intensive mix (if the sweep has it)
	// with local write combining the other way, and CIDER without contention-aware routing.
	LocalWC, Factor bool
	// EarlyCredit runs CIDER with cider.Options.EarlyCredit: failed CASes credited as soon as
	// they reach the threshold instead of at completion (Algorithm 1, the default). Under
	// Algorithm 1 CIDER can stay in the start-up collapse of hundreds of clients for long,
	// depending on the seed; early crediting leaves it at once.
	EarlyCredit bool
	// Tracked is how many of the hottest keys have their updates counted one by one (for the
	// routing columns).
	Tracked uint64
	// Seeds are the simulation seeds: every point runs once per seed, and its throughput is
	// the mean over them with a 95% confidence interval (Student's t).
	Seeds []uint64
}

// Measure is how a point's warm-up and measured window are chosen, all in virtual time.
//
// Warm-up: the load runs in steps of Step; once three successive steps each completed at least
// StepOps operations and their throughputs lie within Tolerance of each other (largest over
// smallest at most 1+Tolerance), and at least MinWarmup has passed, the warm-up has converged.
// A step with fewer than StepOps operations doubles the step (up to 16 Step) and restarts the
// comparison. MaxWarmup caps the warm-up; a point that reaches it is reported as not converged.
//
// Window: it lasts until it holds MinOps operations and MinWindow has passed, or MaxWindow has.
type Measure struct {
	Step, MinWarmup, MaxWarmup time.Duration
	StepOps                    uint64
	Tolerance                  float64
	MinWindow, MaxWindow       time.Duration
	MinOps                     uint64
}

// CiderFull is the full sweep: both structures and mixes, the four synchronizers, 8 to 512
// clients, 1Mi keys on the array and 128Ki on RACE, three seeds; warm-ups detected in 1 ms
// steps within 10% (capped at 100 ms) and windows of at least 5,000 operations and 3 ms
// (capped at 60 ms).
func CiderFull() CiderConfig {
	return CiderConfig{
		Structs: []string{Array, RACE}, Mixes: []string{WriteIntensive, WriteOnly},
		Syncs:     []string{Optimistic, Spin, MCS, CIDER},
		Clients:   []int{8, 16, 32, 48, 64, 96, 128, 192, 256, 384, 512},
		ArrayKeys: 1 << 20, RaceKeys: 1 << 17, Dist: Scrambled, Theta: 0.99,
		Measure: Measure{Step: time.Millisecond, MinWarmup: 2 * time.Millisecond, MaxWarmup: 100 * time.Millisecond,
			StepOps: 800, Tolerance: 0.1, MinWindow: 3 * time.Millisecond, MaxWindow: 60 * time.Millisecond, MinOps: 5000},
		LocalWC: true, Factor: true, Tracked: 4096, Seeds: []uint64{1, 2, 3},
		Band: DefaultBand(),
	}
}

// CiderQuick is a seconds-long sweep with the full sweep's code paths: both structures, the
// write-intensive mix, 16 and 128 clients, 16Ki and 2Ki keys, two seeds, warm-ups detected in
// 0.5 ms steps within 20% (capped at 10 ms) and windows of at least 1,000 operations and 1 ms.
// Its figures pin the code, they reproduce nothing.
func CiderQuick() CiderConfig {
	return CiderConfig{
		Structs: []string{Array, RACE}, Mixes: []string{WriteIntensive},
		Syncs:     []string{Optimistic, Spin, MCS, CIDER},
		Clients:   []int{16, 128},
		ArrayKeys: 1 << 14, RaceKeys: 1 << 11, Dist: Scrambled, Theta: 0.99,
		Measure: Measure{Step: 500 * time.Microsecond, MinWarmup: time.Millisecond, MaxWarmup: 10 * time.Millisecond,
			StepOps: 200, Tolerance: 0.2, MinWindow: time.Millisecond, MaxWindow: 10 * time.Millisecond, MinOps: 1000},
		LocalWC: true, Factor: true, Tracked: 256, Seeds: []uint64{1, 2},
		Band: DefaultBand(),
	}
}

func (c CiderConfig) check() error {
	bad := func(format string, a ...any) error {
		return fmt.Errorf("%w: %s", ErrConfig, fmt.Sprintf(format, a...))
	}
	for _, s := range c.Structs {
		if s != Array && s != RACE {
			return bad("structure %q (want %s or %s)", s, Array, RACE)
		}
	}
	for _, m := range c.Mixes {
		if _, err := writePercent(m); err != nil {
			return err
		}
	}
	for _, s := range c.Syncs {
		if !slices.Contains([]string{Optimistic, Spin, MCS, CIDER}, s) {
			return bad("synchronizer %q (want %s, %s, %s or %s)", s, Optimistic, Spin, MCS, CIDER)
		}
	}
	switch {
	case len(c.Structs) == 0 || len(c.Mixes) == 0 || len(c.Syncs) == 0 || len(c.Clients) == 0:
		return bad("nothing to run")
	case len(c.Seeds) == 0:
		return bad("no seeds")
	case !slices.IsSorted(c.Clients) || c.Clients[0] < 1 || c.Clients[len(c.Clients)-1] > 4096:
		return bad("client counts %v: want ascending, 1 to 4096", c.Clients)
	case c.ArrayKeys < 2 && slices.Contains(c.Structs, Array), c.RaceKeys < 2 && slices.Contains(c.Structs, RACE):
		return bad("fewer than two keys")
	case c.Costs.check() != nil:
		return c.Costs.check()
	case slices.ContainsFunc(c.Band, func(v Variant) bool { return v.IsZero() || v.check() != nil }):
		return bad("band %v: each variant sets a positive cost", c.Band)
	case c.Theta <= 0 || c.Theta >= 1:
		return bad("theta %v: want (0, 1)", c.Theta)
	case c.Measure.check() != nil:
		return c.Measure.check()
	}
	return nil
}

func writePercent(mix string) (int, error) {
	switch mix {
	case WriteIntensive:
		return 50, nil
	case WriteOnly:
		return 100, nil
	}
	return 0, fmt.Errorf("%w: mix %q (want %s or %s)", ErrConfig, mix, WriteIntensive, WriteOnly)
}

// CiderModel is the simulated testbed of the sweep at a client count: sim.ConnectX6 with 8
// memory nodes of memSize bytes and 4 clients per compute node (as many compute nodes as the
// count needs), each with a core per client; co-located, the compute nodes share the memory
// nodes' NICs (sim.Model.CoLocated: 16 compute nodes per NIC at 512 clients, the paper's
// testbed), else each compute node has its own NIC.
func CiderModel(clients int, memSize uint64, colocated bool) sim.Model {
	m := sim.ConnectX6()
	m.MemoryNodes, m.MemorySize = 8, memSize
	m.ComputeNodes = max(1, (clients+3)/4)
	m.ClientsPerNode, m.MaxHandlers = 6, 1
	m.CoLocated = colocated
	return m
}

// memorySize is each memory node's size for a structure of keys: 64 MiB, or more for over a
// million keys (about 64 bytes a key over the 8 nodes, twice over for the allocators' slack).
func memorySize(keys uint64) uint64 {
	const mib = 1 << 20
	return max(64*mib, (keys*64/8*2+mib-1)/mib*mib)
}

// KeyStat counts one tracked key's updates in a point's window.
type KeyStat struct {
	// Local counts the updates combined on their compute node (by local write combining),
	// which never reached the synchronizer.
	Updates, Pessimistic, Severe, Combined, Local uint64
}

// CiderPoint is what one point of the sweep measured in its windows, over every seed.
type CiderPoint struct {
	Struct, Mix, Sync string
	Clients           int
	// Ops and Errors count operations that ended in the windows (every seed's);
	// Throughput is the mean over seeds of each window's Ops per second of virtual time,
	// ThroughputCI the half-width of its 95% confidence interval (Student's t over the seeds;
	// zero with one seed), PerSeed the seeds' throughputs in the order of Config.Seeds.
	Ops, Errors  uint64
	Throughput   float64
	ThroughputCI float64
	PerSeed      []float64
	// Warmup is the longest warm-up over the seeds, Window the longest window; Converged
	// is false if a seed's warm-up reached Measure.MaxWarmup without converging.
	Warmup, Window time.Duration
	Converged      bool
	// Fabric is the fabric's counters over the windows; Counters the synchronizers' (summed
	// over clients and seeds); Updates the updates that succeeded in the windows.
	Fabric   farmem.Stats
	Counters cider.Stats
	Updates  uint64
	// LocalWC tells whether the synchronizer ran under local write combining, and
	// LocalCombined counts the updates in the windows it combined on their compute node.
	LocalWC       bool
	LocalCombined uint64
	// Keys are the tracked keys' counts, by rank (0 the hottest).
	Keys     []KeyStat
	P50, P99 time.Duration
}

// LocalRate is the share of updates combined on their compute node.
func (p CiderPoint) LocalRate() float64 {
	return float64(p.LocalCombined) / math.Max(1, float64(p.Updates))
}

func (p CiderPoint) perOp(v uint64) float64 { return float64(v) / math.Max(1, float64(p.Ops)) }

// MemoryVerbsPerOp is memory-node verbs per operation.
func (p CiderPoint) MemoryVerbsPerOp() float64 {
	return p.perOp(p.Fabric.VerbsTo(farmem.TargetMemory))
}

// FailedCASPerOp is failed CASes (every CAS, the locks' included) per operation.
func (p CiderPoint) FailedCASPerOp() float64 { return p.perOp(p.Fabric.FailedCAS) }

// WCRate is the share of updates another client's write carried (coordinators and
// participants of combined batches): CIDER's write-combining rate.
func (p CiderPoint) WCRate() float64 {
	return float64(p.Counters.Coordinator+p.Counters.Participant) / math.Max(1, float64(p.Updates))
}

// MeanBatch is the mean size of the combined batches executed.
func (p CiderPoint) MeanBatch() float64 {
	return float64(p.Counters.Batched) / math.Max(1, float64(p.Counters.Batches))
}

// CiderResult is a sweep's points, those of its factor analysis (see CiderConfig.Factor) and
// its reruns of the headline points at the Band's variants (each with Config.Costs set to its
// variant and only the points it reran).
type CiderResult struct {
	Config CiderConfig
	Points []CiderPoint
	Factor []CiderPoint
	Band   []*CiderResult
}

// Point returns the point of the given coordinates (the zero point if the sweep has none).
func (r *CiderResult) Point(st, mix, syncName string, clients int) CiderPoint {
	for _, p := range r.Points {
		if p.Struct == st && p.Mix == mix && p.Sync == syncName && p.Clients == clients {
			return p
		}
	}
	return CiderPoint{}
}

// Routing compares CIDER's routing at a point with the optimistic run at the same point: ideal
// is the share of updates that needed ptrsync.SevereFailures failed CASes or more under
// optimistic synchronization (the paper's ideal pessimistic share); recall the share of those
// CIDER routes through the lock (estimated per tracked key: its severe optimistic updates
// times CIDER's pessimistic share of its updates); combined the share of CIDER's pessimistic
// updates that were members of combined batches.
func Routing(opt, cd CiderPoint) (ideal, recall, combined float64) {
	ideal = float64(opt.Counters.Severe) / math.Max(1, float64(opt.Updates))
	var sev, hit float64
	for r, ks := range opt.Keys {
		if ks.Severe == 0 || r >= len(cd.Keys) {
			continue
		}
		c := cd.Keys[r]
		sev += float64(ks.Severe)
		if c.Updates > 0 {
			hit += float64(ks.Severe) * float64(c.Pessimistic) / float64(c.Updates)
		}
	}
	recall = hit / math.Max(1, sev)
	combined = float64(cd.Counters.Coordinator+cd.Counters.Participant+cd.Counters.Executor) / math.Max(1, float64(cd.Counters.Pessimistic))
	return ideal, recall, combined
}

// RunCider runs every point of cfg, in order (structure, mix, client count, synchronizer), each
// once per seed, and writes a line per point to progress (if not nil), with the wall time it
// took.
func RunCider(ctx context.Context, cfg CiderConfig, progress io.Writer) (*CiderResult, error) {
	if err := cfg.check(); err != nil {
		return nil, err
	}
	res := &CiderResult{Config: cfg}
	gens := map[uint64]keyDist{}
	for _, st := range cfg.Structs {
		keys := cfg.ArrayKeys
		if st == RACE {
			keys = cfg.RaceKeys
		}
		gen := gens[keys]
		if gen == nil {
			var err error
			if gen, err = newKeyDist(cfg.Dist, keys, cfg.Theta); err != nil {
				return nil, err
			}
			gens[keys] = gen
		}
		for _, mx := range cfg.Mixes {
			for _, n := range cfg.Clients {
				for _, k := range cfg.Syncs {
					p, err := runCiderPoint(ctx, cfg, gen, keys, st, mx, k, n, cfg.LocalWC, progress)
					if err != nil {
						return nil, err
					}
					res.Points = append(res.Points, p)
				}
			}
		}
		if cfg.Factor && slices.Contains(cfg.Mixes, WriteIntensive) {
			n := cfg.Clients[len(cfg.Clients)-1]
			names := slices.Clone(cfg.Syncs)
			if slices.Contains(names, CIDER) {
				names = append(names, CIDERPessimistic)
			}
			for _, k := range names {
				lwc := !cfg.LocalWC
				if k == CIDERPessimistic {
					lwc = cfg.LocalWC
				}
				p, err := runCiderPoint(ctx, cfg, gen, keys, st, WriteIntensive, k, n, lwc, progress)
				if err != nil {
					return nil, err
				}
				res.Factor = append(res.Factor, p)
			}
		}
	}
	heads := res.headlinePoints()
	for _, v := range cfg.Band {
		b := cfg
		b.Costs, b.Band, b.Factor = v, nil, false
		if progress != nil {
			fmt.Fprintf(progress, "band: %v\n", v)
		}
		r := &CiderResult{Config: b}
		for _, h := range heads {
			keys := cfg.ArrayKeys
			if h.Struct == RACE {
				keys = cfg.RaceKeys
			}
			p, err := runCiderPoint(ctx, b, gens[keys], keys, h.Struct, h.Mix, h.Sync, h.Clients, cfg.LocalWC, progress)
			if err != nil {
				return nil, err
			}
			r.Points = append(r.Points, p)
		}
		res.Band = append(res.Band, r)
	}
	return res, nil
}

// headlinePoints returns the points (structure, mix, synchronizer, clients) the comparison with
// the paper takes its ratios at, which a band variant reruns: the largest CIDER / O-SYNC's
// O-SYNC and CIDER, and MCS and CIDER at the largest client count on the structure and mix of
// the paper's figures (see WritePaper). Each point appears once.
func (r *CiderResult) headlinePoints() []CiderPoint {
	c := r.Config
	var out []CiderPoint
	add := func(st, mx, k string, n int) {
		if !slices.Contains(c.Syncs, k) {
			return
		}
		for _, p := range out {
			if p.Struct == st && p.Mix == mx && p.Sync == k && p.Clients == n {
				return
			}
		}
		out = append(out, CiderPoint{Struct: st, Mix: mx, Sync: k, Clients: n})
	}
	if _, _, at := r.Headline(); at.Sync != "" {
		add(at.Struct, at.Mix, Optimistic, at.Clients)
		add(at.Struct, at.Mix, CIDER, at.Clients)
	}
	st, mx := r.paperStructMix()
	top := c.Clients[len(c.Clients)-1]
	if slices.Contains(c.Syncs, MCS) && slices.Contains(c.Syncs, CIDER) {
		add(st, mx, MCS, top)
		add(st, mx, CIDER, top)
	}
	return out
}

// runCiderPoint runs one point over every seed.
func runCiderPoint(ctx context.Context, cfg CiderConfig, gen keyDist, keys uint64, st, mx, k string, n int, localWC bool, progress io.Writer) (CiderPoint, error) {
	start := time.Now()
	p := CiderPoint{Struct: st, Mix: mx, Sync: k, Clients: n, Converged: true, LocalWC: localWC}
	// The seeds' runs are independent simulations: Workers of them run at once, and their
	// results are folded in seed order, so the output does not depend on Workers.
	runs, errs, err := runSeeds(ctx, cfg.Seeds, cfg.Workers, func(seed uint64) (seedRun, error) {
		return runCiderSeed(cfg, seed, gen, keys, st, k, mx, n, localWC)
	})
	if err != nil {
		return p, err
	}
	var hist *hdrhistogram.Histogram
	for i, r := range runs {
		if err := errs[i]; err != nil {
			return p, fmt.Errorf("repro: %s, %s, %s, %d clients, seed %d: %w", st, mx, k, n, cfg.Seeds[i], err)
		}
		p.add(r)
		if hist == nil {
			hist = r.hist
		} else {
			hist.Merge(r.hist)
		}
	}
	p.Throughput, p.ThroughputCI = MeanCI(p.PerSeed)
	if hist != nil && hist.TotalCount() > 0 {
		p.P50 = time.Duration(hist.ValueAtQuantile(50))
		p.P99 = time.Duration(hist.ValueAtQuantile(99))
	}
	if progress != nil {
		conv := ""
		if !p.Converged {
			conv = " (warm-up not converged)"
		}
		lwc := ""
		if !localWC {
			lwc = " (no local WC)"
		}
		fmt.Fprintf(progress, "%-5s %-15s %-10s %4d clients%s: %6.2f ± %.2f Mops/s, warm-up %v%s (%v)\n", st, mx, k, n, lwc,
			p.Throughput/1e6, p.ThroughputCI/1e6, p.Warmup, conv, time.Since(start).Round(time.Millisecond))
	}
	return p, nil
}

// MeanCI returns the mean of xs and the half-width of its 95% confidence interval by Student's
// t with len(xs)-1 degrees of freedom (zero for fewer than two values).
func MeanCI(xs []float64) (mean, half float64) {
	if len(xs) == 0 {
		return 0, 0
	}
	for _, x := range xs {
		mean += x
	}
	mean /= float64(len(xs))
	if len(xs) < 2 {
		return mean, 0
	}
	var ss float64
	for _, x := range xs {
		ss += (x - mean) * (x - mean)
	}
	sd := math.Sqrt(ss / float64(len(xs)-1))
	return mean, tQuantile975(len(xs)-1) * sd / math.Sqrt(float64(len(xs)))
}

// tQuantile975 is Student's t distribution's 97.5th percentile with df degrees of freedom
// (tabulated to 30, then the normal's 1.96).
func tQuantile975(df int) float64 {
	t := [...]float64{12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228,
		2.201, 2.179, 2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086,
		2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042}
	if df >= 1 && df <= len(t) {
		return t[df-1]
	}
	return 1.96
}

// seedRun is one seed's run of a point.
type seedRun struct {
	ops, errs      uint64
	local          uint64 // updates combined locally in the window
	tput           float64
	warmup, window time.Duration
	converged      bool
	fabric         farmem.Stats
	counters       cider.Stats
	updates        uint64
	keys           []KeyStat
	hist           *hdrhistogram.Histogram
}

// add folds one seed's run into the point.
func (p *CiderPoint) add(r seedRun) {
	p.Ops += r.ops
	p.Errors += r.errs
	p.LocalCombined += r.local
	p.PerSeed = append(p.PerSeed, r.tput)
	p.Warmup, p.Window = max(p.Warmup, r.warmup), max(p.Window, r.window)
	p.Converged = p.Converged && r.converged
	p.Fabric = p.Fabric.Add(r.fabric)
	p.Counters = p.Counters.Add(r.counters)
	p.Updates += r.updates
	if p.Keys == nil {
		p.Keys = make([]KeyStat, len(r.keys))
	}
	for i, ks := range r.keys {
		o := &p.Keys[i]
		o.Updates += ks.Updates
		o.Pessimistic += ks.Pessimistic
		o.Severe += ks.Severe
		o.Combined += ks.Combined
		o.Local += ks.Local
	}
}

// The locks' lease and the allocators' options of every point.
const ciderLease = 10 * time.Millisecond

var ciderAlloc = alloc.Options{Lease: 10 * time.Second, Refresh: time.Second, ScanInterval: time.Millisecond}

// value is the 8-byte value the sweep writes for key (or client) k.
func value(k uint64) []byte { return binary.LittleEndian.AppendUint64(nil, k) }

func raceKey(k uint64) []byte { return binary.BigEndian.AppendUint64(nil, k) }

// kvOps is the two operations the sweep runs, on either structure.
type kvOps interface {
	Search(ctx context.Context, k uint64) ([]byte, error)
	Update(ctx context.Context, k uint64, v []byte) error
}

type raceOps struct{ t *race.Table }

func (r raceOps) Search(ctx context.Context, k uint64) ([]byte, error) {
	return r.t.Search(ctx, raceKey(k))
}
func (r raceOps) Update(ctx context.Context, k uint64, v []byte) error {
	return r.t.Update(ctx, raceKey(k), v)
}

// newSync returns client m's synchronizer of the given name; credits is its compute node's
// CIDER contention state.
func newSync(m farmem.Memory, name string, early bool, credits func(farmem.NodeID) *cider.Credits, table func(farmem.NodeID) *cider.LocalTable) (ptrsync.Synchronizer, error) {
	s, err := newBareSync(m, name, early, credits)
	if err != nil || table == nil {
		return s, err
	}
	return cider.NewLocalWC(m, table(m.Info().Node), s, cider.LocalOptions{Patience: ciderLease})
}

func newBareSync(m farmem.Memory, name string, early bool, credits func(farmem.NodeID) *cider.Credits) (ptrsync.Synchronizer, error) {
	lo := qlock.Options{Lease: ciderLease}
	switch name {
	case Optimistic:
		return ptrsync.NewOptimistic(), nil
	case Spin:
		return cider.NewSpin(m, cider.SpinOptions{Lease: ciderLease})
	case MCS:
		return cider.NewMCS(m, lo)
	case CIDER:
		return cider.NewCIDER(m, credits(m.Info().Node), cider.Options{Lock: lo, EarlyCredit: early})
	case CIDERPessimistic:
		return cider.NewCIDER(m, credits(m.Info().Node), cider.Options{Lock: lo, Mode: cider.AlwaysPessimistic})
	}
	return nil, fmt.Errorf("%w: synchronizer %q", ErrConfig, name)
}

// syncStats returns a synchronizer's counters and its last operation (of the synchronizer a
// LocalWC wraps).
func syncStats(s ptrsync.Synchronizer) (cider.Stats, cider.OpInfo) {
	switch x := s.(type) {
	case *cider.LocalWC:
		return syncStats(x.Inner())
	case *ptrsync.Optimistic:
		return cider.Stats{Stats: x.Stats()}, cider.OpInfo{Op: x.Last()}
	case interface {
		Stats() cider.Stats
		Last() cider.OpInfo
	}:
		return x.Stats(), x.Last()
	}
	return cider.Stats{}, cider.OpInfo{}
}

// runCiderSeed runs one point with one seed: clients closed-loop clients on structure st with
// synchronizer syncName, the mix's updates and searches over keys drawn by gen, a warm-up until
// throughput converges (see Measure) and a window of enough operations.
func runCiderSeed(cfg CiderConfig, seed uint64, gen keyDist, keys uint64, st, syncName, mix string, clients int, localWC bool) (seedRun, error) {
	writes, err := writePercent(mix)
	if err != nil {
		return seedRun{}, err
	}
	model := CiderModel(clients, memorySize(keys), !cfg.SeparateNICs)
	cfg.Costs.apply(&model)
	s, err := sim.New(model, seed)
	if err != nil {
		return seedRun{}, err
	}
	defer s.Close()
	comp := s.Topology().ComputeNodes()
	var root farmem.Addr
	var setupErr error
	s.Run(func() { root, setupErr = ciderSetup(s, comp, st, keys) })
	if setupErr != nil {
		return seedRun{}, setupErr
	}

	credits := map[farmem.NodeID]*cider.Credits{}
	creditsOf := func(n farmem.NodeID) *cider.Credits {
		if credits[n] == nil {
			credits[n] = cider.NewCredits(0)
		}
		return credits[n]
	}
	var tableOf func(farmem.NodeID) *cider.LocalTable
	if localWC {
		tables := map[farmem.NodeID]*cider.LocalTable{}
		tableOf = func(n farmem.NodeID) *cider.LocalTable {
			if tables[n] == nil {
				tables[n] = cider.NewLocalTable()
			}
			return tables[n]
		}
	}
	tracked := map[uint64]int{}
	for r, k := range gen.hottest(cfg.Tracked) {
		tracked[k] = r
	}
	type loadClient struct {
		m         farmem.Memory
		sync      ptrsync.Synchronizer
		op        func(ctx context.Context) error
		base, end cider.Stats
		localBase uint64
		localEnd  uint64
		updates   uint64
		keys      []KeyStat
	}
	lcs := make([]*loadClient, clients)
	out := seedRun{keys: make([]KeyStat, len(tracked)), hist: hdrhistogram.New(1, int64(10*time.Second), 3)}
	var runErr error
	s.Run(func() {
		ctx := context.Background()
		for i := range lcs {
			m, err := s.Open(ctx, comp[i%len(comp)])
			if err != nil {
				runErr = err
				return
			}
			defer m.Close()
			lcs[i] = &loadClient{m: m, keys: make([]KeyStat, len(tracked))}
		}
		// measuring is true while the window is open; stop ends the clients' loops.
		measuring, stop := false, false
		var errs []error
		if err := s.Parallel(clients, func(i int) {
			lc := lcs[i]
			m := lc.m
			a, err := alloc.New(ctx, m, ciderAlloc)
			if err == nil {
				lc.sync, err = newSync(m, syncName, cfg.EarlyCredit, creditsOf, tableOf)
			}
			var ops kvOps
			if err == nil && st == Array {
				ops, err = ptrarray.Open(ctx, m, a, root, ptrarray.Options{Sync: lc.sync})
			} else if err == nil {
				var t *race.Table
				t, err = race.Open(ctx, m, a, root, race.Options{Sync: lc.sync})
				ops = raceOps{t}
			}
			if err != nil {
				errs = append(errs, err)
				return
			}
			rnd := m.Runtime().Rand()
			body := value(uint64(i))
			lc.op = func(ctx context.Context) error {
				key := gen.Next(rnd)
				if rnd.IntN(100) >= writes {
					_, err := ops.Search(ctx, key)
					return err
				}
				err := ops.Update(ctx, key, body)
				if err == nil && measuring {
					lc.updates++
					if r, ok := tracked[key]; ok {
						_, info := syncStats(lc.sync)
						ks := &lc.keys[r]
						ks.Updates++
						if l, ok := lc.sync.(*cider.LocalWC); ok && l.LastCombined() {
							ks.Local++
						} else if info.Pessimistic {
							ks.Pessimistic++
						} else if info.Retries >= ptrsync.SevereFailures {
							ks.Severe++
						}
						if info.Role == cider.Coordinator || info.Role == cider.Participant || info.Role == cider.Executor {
							ks.Combined++
						}
					}
				}
				return err
			}
		}); err != nil {
			runErr = err
			return
		}
		if len(errs) > 0 {
			runErr = errs[0]
			return
		}

		// The clients loop until stop; the controller below watches their completions in
		// virtual time, decides when the warm-up has converged, and opens and closes the
		// window. Operations count when they end while the window is open.
		var done uint64 // operations completed since the start, in or out of the window
		rt := s.Runtime()
		g := s.NewGroup()
		for _, lc := range lcs {
			g.Go(func() {
				for !stop {
					start := rt.Now()
					err := lc.op(ctx)
					done++
					if !measuring {
						continue
					}
					if err != nil {
						out.errs++
						continue
					}
					out.ops++
					_ = out.hist.RecordValue(int64(rt.Now().Sub(start)))
				}
			})
		}
		g.Go(func() {
			ms := cfg.Measure
			out.converged, out.warmup = warmUp(ctx, rt, ms, &done, nil, true)
			s.ResetStats()
			for _, lc := range lcs {
				lc.base, _ = syncStats(lc.sync)
				if l, ok := lc.sync.(*cider.LocalWC); ok {
					lc.localBase = l.LocalStats().Combined
				}
			}
			from := rt.Now()
			measuring = true
			measureWindow(ctx, rt, ms, from, &out.ops, nil)
			measuring, stop = false, true
			out.window = rt.Now().Sub(from)
			out.fabric = s.Report().Stats
			for _, lc := range lcs {
				lc.end, _ = syncStats(lc.sync)
				if l, ok := lc.sync.(*cider.LocalWC); ok {
					lc.localEnd = l.LocalStats().Combined
				}
			}
		})
		runErr = g.Wait()
	})
	if runErr != nil {
		return seedRun{}, runErr
	}
	out.tput = float64(out.ops) / out.window.Seconds()
	for _, lc := range lcs {
		out.counters = out.counters.Add(lc.end.Sub(lc.base))
		out.updates += lc.updates
		for r, ks := range lc.keys {
			o := &out.keys[r]
			o.Updates += ks.Updates
			o.Pessimistic += ks.Pessimistic
			o.Severe += ks.Severe
			o.Combined += ks.Combined
			o.Local += ks.Local
		}
		out.local += lc.localEnd - lc.localBase
	}
	return out, nil
}

// ciderSetup formats the cluster and creates and loads the structure; it runs inside the
// simulation.
func ciderSetup(s *sim.Sim, comp []farmem.NodeID, st string, keys uint64) (farmem.Addr, error) {
	ctx := context.Background()
	m, err := s.Open(ctx, comp[0])
	if err != nil {
		return 0, err
	}
	defer m.Close()
	if err := alloc.FormatAll(ctx, m, alloc.FormatOptions{SymmetricSize: alloc.DefaultChunkSize}); err != nil {
		return 0, err
	}
	a, err := alloc.New(ctx, m, ciderAlloc)
	if err != nil {
		return 0, err
	}
	defer a.Close()
	if st == Array {
		root, err := ptrarray.Create(ctx, m, a, ptrarray.Params{Keys: keys})
		if err != nil {
			return 0, err
		}
		arr, err := ptrarray.Open(ctx, m, a, root, ptrarray.Options{})
		if err != nil {
			return 0, err
		}
		return root, arr.Load(ctx, 0, keys, value)
	}
	root, err := race.Create(ctx, m, a, race.Params{MetaSize: 16, InitialDepth: 3})
	if err != nil {
		return 0, err
	}
	// Load with a client per free slot (at most 32), each inserting its stripe of keys.
	loaders := min(32, len(comp)*4)
	tabs := make([]*race.Table, loaders)
	for i := range tabs {
		m, a, done, err := openClient(ctx, s, comp[i%len(comp)], ciderAlloc)
		if err != nil {
			return 0, err
		}
		defer done()
		if tabs[i], err = race.Open(ctx, m, a, root, race.Options{}); err != nil {
			return 0, err
		}
	}
	errs := make([]error, loaders)
	if err := s.Parallel(loaders, func(i int) {
		for k := uint64(i); k < keys && errs[i] == nil; k += uint64(loaders) {
			errs[i] = tabs[i].Insert(ctx, raceKey(k), value(k))
		}
	}); err != nil {
		return 0, err
	}
	return root, errors.Join(errs...)
}
