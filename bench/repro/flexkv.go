package repro

import (
	"context"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/farmem/farmem/alloc"
	"github.com/farmem/farmem/bench/generator"
	"github.com/farmem/farmem/ds/race"
	"github.com/farmem/farmem/farmem"
	"github.com/farmem/farmem/kvstore"
	"github.com/farmem/farmem/sim"
)

// The systems, ablation steps and figures of the FlexKV reproduction, by name.
const (
	// FlexSys is FlexKV as configured (proxying, rank-aware hotness, KV cache, adaptive split,
	// all run by kvstore's manager); AcesoSys the Aceso-like baseline (kvstore.FlexKV with
	// NoProxy: RACE on the memory nodes, one CAS per update, an address cache in the same
	// memory, each entry charged an address's size, flexAddrEntry);
	// RaceSys plain RACE (kvstore.Race, no cache).
	FlexSys  = "flexkv"
	AcesoSys = "aceso"
	RaceSys  = "race"
	// The ablation's steps (Fig. 16): Base is FlexKV with its address cache only (no proxy);
	// +Proxy statically offloads the first 20% of the partitions; +Rank Hotness offloads the
	// hottest 20% (Algorithm 1); +KV Cache caches pairs; +Adaptive Split tunes the ratio
	// (Algorithm 2), which is FlexSys.
	AblBase     = "base"
	AblProxy    = "+proxy"
	AblRank     = "+rank hotness"
	AblKVCache  = "+kv cache"
	AblAdaptive = "+adaptive split"

	figFlexYCSB     = "11"
	figFlexAblation = "16"
	figFlexSwitch   = "18"
)

// FlexConfig is one run of the FlexKV reproduction (§5.2-5.3): Fig. 11 (YCSB A-D throughput
// over the client count for FlexKV, the Aceso-like baseline and plain RACE), Fig. 16 (the
// ablation at the largest count), Fig. 18 (workload B switching to A: the offload ratio and
// throughput per period, with Fig. 24's fixed-ratio curve under A beside it) and Fig. 19 (the
// proxies' load balance, from the ablation's +Proxy and +Rank Hotness steps on YCSB A), in sim
// on FlexModel.
type FlexConfig struct {
	// Keys is the number of 128-byte pairs loaded (the paper: 10M); each compute node's memory
	// for index and cache is MemoryShare of the data (the paper: 64 MB, about 5%).
	Keys        int
	MemoryShare float64
	// Depth is the table's initial directory depth: 2^Depth partitions (the paper: 8192).
	Depth uint8
	// Clients are Fig. 11's client counts (spread over the 20 compute nodes, InFlight
	// operations each: the paper's coroutines); Fig. 16, 18 and 19 run at the largest.
	Clients  []int
	InFlight int
	// Workloads are the YCSB letters of Fig. 11 and 16 (A, B, C, D).
	Workloads []string
	// Period is the manager's Δ and Step its δ (the paper: 1 s and 0.1); SwitchAt and
	// SwitchEnd bound Fig. 18's run (B until SwitchAt, then A until SwitchEnd).
	Period              time.Duration
	Step                float64
	SwitchAt, SwitchEnd time.Duration
	// Figures selects what runs, of "11", "16", "18" (19 comes with 16, and 24, A's throughput
	// at fixed offload ratios, with 18; default all).
	Figures []string
	// Seeds, Workers, Measure, Costs and Band are as in CiderConfig; the Band reruns Fig. 11's
	// points at the largest client count for BandWorkloads (default all).
	Seeds         []uint64
	Workers       int
	Measure       Measure
	Costs         Variant
	Band          []Variant
	BandWorkloads []string
	// BalancePeriods is how many manager periods Fig. 19 reads under each assignment
	// (default 8); BalanceDepth is the directory depth of Fig. 19's table (default Depth):
	// an assignment balances the proxies' load only with many partitions per compute node
	// (the paper: 8192 over 20 nodes), and with the 1 or 2 proxied partitions per node of 64
	// partitions the node holding the hottest key's partition is the outlier whichever
	// assignment.
	BalancePeriods int
	BalanceDepth   uint8
	// Layouts and LayoutDraws size Fig. 19's computed check (FlexLayouts, with Fig. 19): that
	// many random layouts of the keys on the partitions, the partitions' hotness from that
	// many draws of the key distribution, at the run's scale and at the paper's (10M keys,
	// 8192 partitions); 0 computes none.
	Layouts, LayoutDraws int
	// SettleCap bounds, in manager periods, how much longer than Measure's warm-up a point of
	// FlexKV with its knob waits for the knob's round to settle (a round from 0.5 takes about
	// eight periods, those that move partitions several Δ each); 0 does not wait.
	SettleCap int
}

// Fig. 19's computed check at the paper's scale (§5.1: 10M pairs; §4.2: 8192 partitions).
const (
	paperFlexKeys       = 10_000_000
	paperFlexPartitions = 8192
)

func (c FlexConfig) balanceDepth() uint8 {
	if c.BalanceDepth == 0 {
		return c.Depth
	}
	return c.BalanceDepth
}

func (c FlexConfig) balancePeriods() int {
	if c.BalancePeriods <= 0 {
		return 8
	}
	return c.BalancePeriods
}

// FlexFull is the full reproduction, scaled to what the simulator runs in minutes on the
// project's 2-core machine: 8,000 keys (each node's 5% is 400 pairs' worth), 64 partitions
// (256 for Fig. 19, whose balance needs many partitions per compute node),
// 20 and 60 clients with 4 in flight each (the paper: up to 200 with 8), Δ = 2 ms of virtual
// time with a hotness window of 8 periods, Fig. 18 over 100 ms of virtual time (B for 40,
// then A: a period that moves partitions lasts several Δ, and a knob round from 0 takes about
// eight periods), five seeds (three left B's and D's Fig. 11 intervals wider than their margin over 1.1), warm-ups of at least 8 periods (the hotness window filled and a knob round begun) detected
// in 1 ms steps within 10%, windows of at least 5,000 operations and 2 ms, the atomic/WRITE
// cost ratio swept on workload A, and Fig. 19 computed over 20 layouts of the keys from 4
// million draws (FlexLayouts).
func FlexFull() FlexConfig {
	return FlexConfig{
		Keys: 8000, MemoryShare: 0.05, Depth: 6, BalanceDepth: 8,
		Clients: []int{20, 60}, InFlight: 4, Workloads: []string{"A", "B", "C", "D"},
		Period: 2 * time.Millisecond, Step: 0.1, SwitchAt: 40 * time.Millisecond, SwitchEnd: 100 * time.Millisecond,
		Seeds: []uint64{1, 2, 3, 4, 5},
		Measure: Measure{Step: time.Millisecond, MinWarmup: 16 * time.Millisecond, MaxWarmup: 30 * time.Millisecond,
			StepOps: 500, Tolerance: 0.1, MinWindow: 2 * time.Millisecond, MaxWindow: 10 * time.Millisecond, MinOps: 5000},
		Band: []Variant{{AtomicRatio: 5}, {AtomicRatio: 20}}, BandWorkloads: []string{"A"},
		Layouts: 20, LayoutDraws: 4_000_000, SettleCap: 30,
	}
}

// FlexQuick pins the code behind the figures in seconds: 2,000 keys, 32 partitions, 20
// clients with 2 in flight, workload A, a short Fig. 18, Fig. 19 over 3 periods of each
// assignment, two seeds, one band variant. It reproduces nothing.
func FlexQuick() FlexConfig {
	c := FlexFull()
	c.Keys, c.Depth, c.Clients, c.InFlight = 2000, 5, []int{20}, 2
	c.Workloads = []string{"A"}
	c.Period, c.SwitchAt, c.SwitchEnd = time.Millisecond, 4*time.Millisecond, 8*time.Millisecond
	c.Seeds = []uint64{1, 2}
	c.Measure = Measure{Step: 500 * time.Microsecond, MinWarmup: 4 * time.Millisecond, MaxWarmup: 6 * time.Millisecond,
		StepOps: 100, Tolerance: 0.3, MinWindow: 500 * time.Microsecond, MaxWindow: 2 * time.Millisecond, MinOps: 500}
	c.Band = []Variant{{AtomicRatio: 20}}
	c.BalancePeriods, c.BalanceDepth = 3, 0
	c.Layouts, c.LayoutDraws, c.SettleCap = 4, 200_000, 3
	return c
}

func (c FlexConfig) has(fig string) bool {
	return len(c.Figures) == 0 || slices.Contains(c.Figures, fig)
}

func (c FlexConfig) top() int { return c.Clients[len(c.Clients)-1] }

func (c FlexConfig) check() error {
	bad := func(format string, a ...any) error { return fmt.Errorf("%w: %s", ErrConfig, fmt.Sprintf(format, a...)) }
	for _, f := range c.Figures {
		if !slices.Contains([]string{figFlexYCSB, figFlexAblation, figFlexSwitch}, f) {
			return bad("figure %q (want 11, 16 or 18)", f)
		}
	}
	for _, w := range c.Workloads {
		if _, err := flexMix(w); err != nil {
			return err
		}
	}
	switch {
	case len(c.Seeds) == 0:
		return bad("no seeds")
	case len(c.Clients) == 0 || !slices.IsSorted(c.Clients) || c.Clients[0] < 1 || c.top() > 20*16:
		return bad("client counts %v: want ascending, 1 to 320", c.Clients)
	case c.InFlight < 1 || c.InFlight > 16:
		return bad("%d in flight per client", c.InFlight)
	case c.Keys < 100 || !(c.MemoryShare > 0 && c.MemoryShare < 1):
		return bad("%d keys, memory share %v", c.Keys, c.MemoryShare)
	case c.Depth < 1 || c.Depth > 12 || c.BalanceDepth > 12:
		return bad("depth %d, Fig. 19's %d", c.Depth, c.BalanceDepth)
	case c.Period <= 0 || !(c.Step > 0 && c.Step <= 0.5) || c.SwitchAt <= 0 || c.SwitchEnd <= c.SwitchAt:
		return bad("period %v, step %v, switch %v to %v", c.Period, c.Step, c.SwitchAt, c.SwitchEnd)
	case c.Layouts < 0 || c.Layouts > 1000 || c.LayoutDraws < 0 || c.LayoutDraws > 100_000_000 || c.SettleCap < 0 || c.SettleCap > 1000:
		return bad("%d layouts of %d draws, settle cap %d", c.Layouts, c.LayoutDraws, c.SettleCap)
	case c.Costs.check() != nil:
		return c.Costs.check()
	case slices.ContainsFunc(c.Band, func(v Variant) bool { return v.IsZero() || v.check() != nil }):
		return bad("band %v: each variant sets a positive cost", c.Band)
	case c.Measure.check() != nil:
		return c.Measure.check()
	}
	return nil
}

// flexWorkload is a YCSB core workload's mix: the percentages of updates and inserts (the
// rest searches).
type flexWorkload struct{ update, insert int }

func flexMix(w string) (flexWorkload, error) {
	switch w {
	case "A":
		return flexWorkload{update: 50}, nil
	case "B":
		return flexWorkload{update: 5}, nil
	case "C":
		return flexWorkload{}, nil
	case "D":
		return flexWorkload{insert: 5}, nil
	}
	return flexWorkload{}, fmt.Errorf("%w: workload %q (want A, B, C or D)", ErrConfig, w)
}

// flexPair is the pair size (the paper's 128 bytes: a 16-byte key slot and the value).
const (
	flexPair  = 128
	flexValue = flexPair - 24 // the key is YCSB's "user" and up to 19 digits
	flexNodes = 20
	flexMNs   = 3
)

// FlexModel is the simulated testbed: sim.ConnectX3 (the paper's 56 Gb/s ConnectX-3 NICs and
// 16-core E5-2650v2 machines; see its doc for what is sourced and what assumed) with 3 memory
// nodes and 20 compute nodes of perNode client slots, 4 Call handlers per compute node (the
// paper's 2 proxy threads, §5.4, and 2 for the control plane: with 2 in all, the coordinator's
// hand-over handler and its own pause, which waits for its clients' index RPCs to drain, hold
// both and the RPCs never run), compute-side memory accesses at DRAM's cost, and a shared
// area of shared bytes per compute node for the proxied partitions' copies.
func FlexModel(perNode int, memSize, shared uint64) sim.Model {
	m := sim.ConnectX3()
	m.MemoryNodes, m.MemorySize = flexMNs, memSize
	m.ComputeNodes, m.ClientsPerNode, m.MaxHandlers = flexNodes, perNode+8, 4
	m.SliceSize = 8 << 10
	m.SharedSize = shared
	m.LocalAccess, m.LocalBandwidth = sim.DRAMAccess, sim.DRAMBandwidth
	return m
}

// flexSpec is one point: a figure, a workload, a system or ablation step, a client count.
type flexSpec struct {
	fig, workload, system string
	clients               int
	variant               Variant
}

// FlexPoint is what one point measured in its windows, over every seed.
type FlexPoint struct {
	// Fig is "11" or "16", Workload the YCSB letter, System the system or ablation step,
	// Clients the client count (each with FlexConfig.InFlight operations in flight), Variant
	// the band's costs (empty: the model's).
	Fig, Workload, System string
	Clients               int
	Variant               string `json:",omitempty"`
	// Ops counts operations that ended in the windows, Errors failed ones.
	Ops, Errors uint64
	// Throughput is the mean over seeds of each window's operations per second of virtual
	// time, ThroughputCI its 95% half-width, PerSeed the seeds' values.
	Throughput, ThroughputCI float64
	PerSeed                  []float64
	// KVHits, AddrHits, Misses are the caches' counts over the windows; MemoryCAS the CASes
	// (and other atomics) that reached memory nodes, per operation.
	KVHits, AddrHits, Misses uint64
	AtomicsPerOp             float64
	// Ratio is the index-offload ratio in force at the window's end (FlexKV), per seed;
	// Settled how many seeds' knobs had settled by the window.
	Ratio   []float64
	Settled int
	// CV is the coefficient of variation of the proxies' load (index RPCs served per compute
	// node) over the manager's periods in the window, Proxied the share of accesses that fell
	// on proxied partitions (both means over seeds; FlexKV's variants only).
	CV, Proxied float64
	// Periods counts the manager periods CV and Proxied are read over (every seed's).
	Periods int
	// BusiestMN is the utilisation of the busiest memory node's NIC in the window (the one
	// holding the RACE index: every bucket read, slot CAS and write-through goes to it), and
	// BusiestPerOp its busy time per operation, both means over seeds: when that NIC is
	// saturated, throughput is the inverse of BusiestPerOp.
	BusiestMN      float64
	BusiestPerOp   time.Duration
	Warmup, Window time.Duration
	Converged      bool
}

// FlexSwitchSample is one manager period of Fig. 18.
type FlexSwitchSample struct {
	// At is the period's end since the start of the run, Workload the workload running,
	// Throughput the period's operations per second, Ratio the offload ratio in force during
	// it, Next the one the knob chose, Settled whether its round had ended.
	At         time.Duration
	Workload   string
	Throughput float64
	Ratio      float64
	Next       float64
	Settled    bool
	Reassigned bool
}

// FlexSwitch is Fig. 18 for one seed.
type FlexSwitch struct {
	Seed    uint64
	Samples []FlexSwitchSample
	// SettledBefore and SettledAfter are the ratios the knob settled at before and after the
	// switch (-1: it did not; after the switch, a round begun after it), AfterPeriods how many
	// periods after the switch that took.
	SettledBefore, SettledAfter float64
	AfterPeriods                int
	// Curve is the paper's Fig. 24 for workload A on this seed: the throughput (operations
	// per second) with the knob off and the ratio fixed at each of CurveRatios, so that the
	// ratio the knob settled at after the switch can be set beside the best fixed one.
	Curve []float64
	// Wall is how long the run took (progress only; it is not printed in the tables).
	Wall time.Duration `json:"-"`
}

// FlexResult is a run's points.
type FlexResult struct {
	Config  FlexConfig
	Model   string
	Points  []FlexPoint
	Band    []FlexPoint
	Switch  []FlexSwitch
	Balance []FlexBalance
	// Layouts is Fig. 19 computed from the key distribution, at the run's scale then the
	// paper's (empty without FlexConfig.Layouts).
	Layouts []FlexLayouts
	KeyNote string
}

// Point returns the point of fig, workload, system and clients (zero if absent).
func (r *FlexResult) Point(fig, workload, system string, clients int) FlexPoint {
	for _, p := range r.Points {
		if p.Fig == fig && p.Workload == workload && p.System == system && p.Clients == clients {
			return p
		}
	}
	return FlexPoint{}
}

// RunFlex runs the configured figures; progress (if not nil) gets a line per point.
func RunFlex(ctx context.Context, cfg FlexConfig, progress io.Writer) (*FlexResult, error) {
	if err := cfg.check(); err != nil {
		return nil, err
	}
	res := &FlexResult{Config: cfg, Model: FlexModel(1, 0, 0).Name}
	var specs []flexSpec
	if cfg.has(figFlexYCSB) {
		for _, w := range cfg.Workloads {
			for _, sys := range []string{FlexSys, AcesoSys, RaceSys} {
				for _, n := range cfg.Clients {
					specs = append(specs, flexSpec{fig: figFlexYCSB, workload: w, system: sys, clients: n})
				}
			}
		}
	}
	if cfg.has(figFlexAblation) {
		for _, w := range cfg.Workloads {
			for _, st := range []string{AblBase, AblProxy, AblRank, AblKVCache} {
				specs = append(specs, flexSpec{fig: figFlexAblation, workload: w, system: st, clients: cfg.top()})
			}
		}
	}
	for _, sp := range specs {
		p, err := runFlexPoint(ctx, cfg, sp, progress)
		if err != nil {
			return nil, err
		}
		res.Points = append(res.Points, p)
	}
	if cfg.has(figFlexYCSB) {
		bw := cfg.BandWorkloads
		if len(bw) == 0 {
			bw = cfg.Workloads
		}
		for _, v := range cfg.Band {
			for _, w := range bw {
				if !slices.Contains(cfg.Workloads, w) {
					continue
				}
				for _, sys := range []string{FlexSys, AcesoSys, RaceSys} {
					p, err := runFlexPoint(ctx, cfg, flexSpec{fig: figFlexYCSB, workload: w, system: sys, clients: cfg.top(), variant: v}, progress)
					if err != nil {
						return nil, err
					}
					res.Band = append(res.Band, p)
				}
			}
		}
	}
	if cfg.has(figFlexAblation) {
		runs, err := eachSeed(ctx, cfg.Seeds, cfg.Workers, "flexkv fig. 19", func(seed uint64) (FlexBalance, error) {
			return runFlexBalance(cfg, seed)
		}, func(r FlexBalance) {
			if progress != nil {
				fmt.Fprintf(progress, "flexkv fig 19 seed %d: CV %.3f before, %.3f after (%d and %d periods), %v wall\n",
					r.Seed, r.Before.CV, r.After.CV, r.Before.Periods, r.After.Periods, r.Wall.Round(time.Millisecond))
			}
		})
		if err != nil {
			return nil, err
		}
		res.Balance = append(res.Balance, runs...)
		if cfg.Layouts > 0 && cfg.LayoutDraws > 0 {
			for _, sc := range [][2]int{{cfg.Keys, 1 << cfg.balanceDepth()}, {paperFlexKeys, paperFlexPartitions}} {
				l, err := flexLayouts(sc[0], sc[1], cfg.Layouts, cfg.LayoutDraws)
				if err != nil {
					return nil, err
				}
				res.Layouts = append(res.Layouts, l)
			}
		}
	}
	if cfg.has(figFlexSwitch) {
		runs, err := eachSeed(ctx, cfg.Seeds, cfg.Workers, "flexkv fig. 18", func(seed uint64) (FlexSwitch, error) {
			sw, err := runFlexSwitch(cfg, seed)
			if err != nil {
				return sw, err
			}
			for _, r := range CurveRatios {
				t, err := runFlexFixed(cfg, seed, r)
				if err != nil {
					return sw, err
				}
				sw.Curve = append(sw.Curve, t)
			}
			return sw, nil
		}, func(r FlexSwitch) {
			if progress != nil {
				fmt.Fprintf(progress, "flexkv fig 18 seed %d: settled %.1f then %.1f (%d periods after the switch), %v wall\n",
					r.Seed, r.SettledBefore, r.SettledAfter, r.AfterPeriods, r.Wall.Round(time.Millisecond))
			}
		})
		if err != nil {
			return nil, err
		}
		res.Switch = append(res.Switch, runs...)
	}
	return res, nil
}

// flexRun is one seed's run of a point.
type flexRun struct {
	ops, errs              uint64
	tput                   float64
	kv, addr, miss         uint64
	atomics                uint64
	ratio                  float64
	settled                bool
	cv, proxied            float64
	warmup, window         time.Duration
	converged              bool
	periodsCV, periodsProx []float64
	busiest                float64       // the busiest memory node's NIC utilisation
	busiestBusy            time.Duration // its busy time in the window
}

func runFlexPoint(ctx context.Context, cfg FlexConfig, sp flexSpec, progress io.Writer) (FlexPoint, error) {
	start := time.Now()
	runs, errs, err := runSeeds(ctx, cfg.Seeds, cfg.Workers, func(seed uint64) (flexRun, error) { return runFlexSeed(cfg, sp, seed) })
	if err != nil {
		return FlexPoint{}, err
	}
	p := FlexPoint{Fig: sp.fig, Workload: sp.workload, System: sp.system, Clients: sp.clients, Converged: true}
	if !sp.variant.IsZero() {
		p.Variant = sp.variant.String()
	}
	var cvs, prox, busiest, perOp []float64
	for i, r := range runs {
		if errs[i] != nil {
			return p, fmt.Errorf("repro: flexkv %s %s %s at %d clients, seed %d: %w", sp.fig, sp.workload, sp.system, sp.clients, cfg.Seeds[i], errs[i])
		}
		p.Ops += r.ops
		p.Errors += r.errs
		p.PerSeed = append(p.PerSeed, r.tput)
		p.KVHits += r.kv
		p.AddrHits += r.addr
		p.Misses += r.miss
		p.AtomicsPerOp += float64(r.atomics)
		p.Warmup = max(p.Warmup, r.warmup)
		p.Window = max(p.Window, r.window)
		p.Converged = p.Converged && r.converged
		if sp.system == FlexSys || sp.system == AblAdaptive {
			p.Ratio = append(p.Ratio, r.ratio)
			if r.settled {
				p.Settled++
			}
		}
		busiest = append(busiest, r.busiest)
		perOp = append(perOp, float64(r.busiestBusy)/math.Max(1, float64(r.ops)))
		p.Periods += len(r.periodsCV)
		if len(r.periodsCV) > 0 {
			cvs = append(cvs, r.cv)
			prox = append(prox, r.proxied)
		}
	}
	p.AtomicsPerOp /= math.Max(1, float64(p.Ops))
	p.BusiestMN, _ = MeanCI(busiest)
	po, _ := MeanCI(perOp)
	p.BusiestPerOp = time.Duration(po)
	p.Throughput, p.ThroughputCI = MeanCI(p.PerSeed)
	if len(cvs) > 0 {
		p.CV, _ = MeanCI(cvs)
		p.Proxied, _ = MeanCI(prox)
	}
	if progress != nil {
		fmt.Fprintf(progress, "flexkv fig %s %s %-16s %3d clients %s: %.2f Mops/s ± %.2f (%v wall)\n", sp.fig, sp.workload, sp.system, sp.clients,
			sp.variant, p.Throughput/1e6, p.ThroughputCI/1e6, time.Since(start).Round(time.Millisecond))
	}
	return p, nil
}

// flexKind returns the index kind of a system or ablation step, and the manager's options
// (nil: no manager).
func (c FlexConfig) flexKind(system string, budget int64) (kvstore.IndexKind, *kvstore.ManagerOptions) {
	k := &kvstore.FlexKV{CacheEntries: int(max(1, budget/flexEntry))}
	k.Params = c.raceParams()
	// FlexKV's knob starts at 0.5 here (the paper's starts at 0; Fig. 18 does): a round from
	// the middle explores both directions within the warm-up.
	mo := &kvstore.ManagerOptions{Period: c.Period, Step: c.Step, NodeMemory: budget, EntryBytes: flexEntry, Window: flexWindow, Ratio: 0.5}
	switch system {
	case RaceSys:
		// Three copies of every pair, as every system of the paper's evaluation keeps; the
		// paper's RACE: no address cache (Aceso is the baseline with one).
		return kvstore.Race{Params: k.Params, Plain: true}, nil
	case AcesoSys:
		// Addresses only, so the node's memory holds budget/flexAddrEntry of them (the
		// paper's Aceso caches addresses in the same 64 MB).
		k.NoProxy = true
		k.CacheEntries = int(max(1, budget/flexAddrEntry))
		return k, nil
	case AblBase:
		k.NoProxy = true
		return k, nil
	case AblProxy:
		k.NoKVCache = true
		mo.Static, mo.Fixed, mo.Ratio = true, true, 0.2
	case AblRank:
		k.NoKVCache = true
		mo.Fixed, mo.Ratio = true, 0.2
	case AblKVCache:
		mo.Fixed, mo.Ratio = true, 0.2
	}
	return k, mo
}

// flexWindow is the manager's hotness window in periods (see kvstore.ManagerOptions.Window):
// a period of milliseconds samples a few thousand accesses, too few to rank 2^Depth
// partitions by themselves.
const flexWindow = 8

// raceParams lays the table out for the key count: 2^Depth subtables whose capacity is about
// 2.5 times the keys each holds at the load (a load factor of 40%, as an extendible table
// settles at between splits), and three copies of every pair.
func (c FlexConfig) raceParams() race.Params {
	perPart := float64(c.Keys) / float64(int(1)<<c.Depth)
	groups := 1
	for float64(groups*3*8) < 2.5*perPart {
		groups *= 2
	}
	return race.Params{InitialDepth: int(c.Depth), Groups: groups, Replicas: kvstore.DefaultReplicas}
}

// flexEntry is the bytes a cache entry is charged: the pair and its bookkeeping (key string,
// FIFO slot, slot address). FlexKV's cache (and every step of the ablation) is charged it for
// every entry, pair or address: FlexKV's count of cached addresses is understated, which
// only lowers its throughput.
const flexEntry = flexPair + 32

// flexAddrEntry is the bytes an address-only cache's entry is charged (the Aceso-like
// baseline's): the key (up to 24 bytes), the block's and the slot's addresses (8 each) and
// the entry's map and FIFO bookkeeping (24). Charged as a pair, the baseline's cache would
// hold 2.5 times fewer addresses than its memory holds (320 rather than 800 per node at
// 8,000 keys), which inflated FlexKV's ratio on the read-heavy workloads.
const flexAddrEntry = 64

// flexAlloc is every allocator's options, scaled to runs of tens to hundreds of milliseconds
// of virtual time as Δ is. A retired block (a pair replaced by an update) is reused once every
// announcement holds an epoch past its tag. An active client renews its announcement every
// Refresh, and the client Open keeps idle in the store's pool, whose announcement from the
// store's creation no pin renews, holds reuse back until its Lease runs out. With the 10 s
// lease and 1 s refresh this had before, no run reclaimed a block (measured: 16 clients
// updating 500 pairs on 128 MB memory nodes retired 64,883 blocks in 60 ms and reclaimed none,
// then filled the nodes and waited 10.7 s for the lease); with these, reuse starts after about
// one Lease (75,625 of 129,777 reclaimed by 120 ms). Cost: an announcement (an atomic on the
// allocator's home node) per client every Refresh, and a lapsed pin, retried, for an operation
// that stays pinned past the Lease.
var flexAlloc = alloc.Options{Lease: 50 * time.Millisecond, Refresh: 10 * time.Millisecond, ScanInterval: time.Millisecond}

// flexCluster is a loaded store on a fresh simulation, with the point's client memories.
type flexCluster struct {
	s     *sim.Sim
	store *kvstore.Store
	kind  kvstore.IndexKind
	keys  [][]byte
	mems  []farmem.Memory
	sess  []*kvstore.Session
	next  int64 // the next key number to insert (workload D)
	close func()
}

// openFlexCluster creates the simulation of a point, opens the store of system on it and
// loads cfg.Keys pairs with the point's clients (each inserting a share). It runs inside the
// simulation.
func openFlexCluster(ctx context.Context, s *sim.Sim, cfg FlexConfig, kind kvstore.IndexKind, clients int) (*flexCluster, error) {
	comp := s.Topology().ComputeNodes()
	// Small chunks and a large symmetric area: every client claims its own chunks of the
	// symmetric area (race's replicated blocks), and there are up to 1,600 clients.
	mem := s.Topology().MemoryNodes()
	info, _ := s.Topology().Node(mem[0])
	format := alloc.FormatOptions{ChunkSize: alloc.MinChunkSize, SymmetricSize: info.Size / 2}
	st, err := kvstore.Open(ctx, s, kvstore.Options{Index: kind, Alloc: flexAlloc, Format: format, Sync: kvstore.Optimistic, Nodes: comp[:1]})
	if err != nil {
		return nil, err
	}
	fc := &flexCluster{s: s, store: st, kind: kind, next: int64(cfg.Keys)}
	fc.keys = make([][]byte, cfg.Keys)
	for i := range fc.keys {
		fc.keys[i] = generator.AppendKey(nil, int64(i), 0, false)
	}
	n := clients * cfg.InFlight
	for i := range n {
		m, err := s.Open(ctx, comp[i%len(comp)])
		if err != nil {
			fc.shut()
			return nil, err
		}
		fc.mems = append(fc.mems, m)
		ss, err := st.SessionOn(ctx, m)
		if err != nil {
			fc.shut()
			return nil, err
		}
		fc.sess = append(fc.sess, ss)
	}
	val := make([]byte, flexValue)
	g := s.NewGroup()
	var loadErr error
	for i, ss := range fc.sess {
		g.Go(func() {
			for j := i; j < cfg.Keys; j += n {
				if err := ss.Insert(ctx, fc.keys[j], val); err != nil && loadErr == nil {
					loadErr = fmt.Errorf("repro: flexkv load of key %d: %w", j, err)
				}
			}
		})
	}
	if err := g.Wait(); err != nil {
		fc.shut()
		return nil, err
	}
	if loadErr != nil {
		fc.shut()
		return nil, loadErr
	}
	return fc, nil
}

func (fc *flexCluster) shut() {
	for _, ss := range fc.sess {
		_ = ss.Close()
	}
	for _, m := range fc.mems {
		_ = m.Close()
	}
	_ = fc.store.Close()
}

// flexMemory is a point's memory-node size: every pair kept three times (race's replicas) over
// three nodes, the index and slack for out-of-place updates.
func flexMemory(keys int) uint64 {
	need := uint64(keys) * 256 * 8
	return max(128<<20, (need+(1<<20)-1)/(1<<20)*(1<<20))
}

// flexShared is each compute node's shared area: room for every partition's copy (the ratio
// can reach 1) and the node area's own needs.
func flexShared(keys int) uint64 {
	return uint64(keys)*64/flexNodes + 4<<20
}

// runFlexSeed runs one point with one seed: a fresh cluster, the store loaded, the manager
// started (FlexKV's variants), closed-loop clients, a warm-up until throughput converges
// (and at least the configured minimum, which covers the knob's first round), then a window.
func runFlexSeed(cfg FlexConfig, sp flexSpec, seed uint64) (flexRun, error) {
	mix, err := flexMix(sp.workload)
	if err != nil {
		return flexRun{}, err
	}
	perNode := (sp.clients*cfg.InFlight + flexNodes - 1) / flexNodes
	model := FlexModel(perNode, flexMemory(cfg.Keys), flexShared(cfg.Keys))
	cfg.Costs.apply(&model)
	sp.variant.apply(&model)
	s, err := sim.New(model, seed)
	if err != nil {
		return flexRun{}, err
	}
	defer s.Close()
	budget := int64(cfg.MemoryShare * float64(cfg.Keys) * flexPair)
	kind, mo := cfg.flexKind(sp.system, budget)
	dist, err := newKeyDist(Scrambled, uint64(cfg.Keys), generator.ZipfianTheta)
	if err != nil {
		return flexRun{}, err
	}
	out := flexRun{}
	var runErr error
	s.Run(func() {
		ctx := context.Background()
		fc, err := openFlexCluster(ctx, s, cfg, kind, sp.clients)
		if err != nil {
			runErr = err
			return
		}
		defer fc.shut()
		rt := s.Runtime()
		var periods []kvstore.ManagerPeriod
		measuring, stop, knobQuiet := false, false, false
		mctx, stopManager := s.WithCancel(ctx)
		g := s.NewGroup()
		if mo != nil {
			from := rt.Now().Add(3 * cfg.Period)
			mo.Trace = func(p kvstore.ManagerPeriod) {
				// The load balance is read over every period after the first assignment
				// (a window of a few milliseconds holds too few periods).
				if p.At >= from && !stop {
					periods = append(periods, p)
				}
				out.ratio, out.settled = p.Next, p.Settled
				knobQuiet = p.Settled && p.Moved == 0 && !p.Reassigned
			}
			g.Go(func() { _ = fc.store.RunManager(mctx, *mo) })
		}
		var done, ops, errs uint64
		val := make([]byte, flexValue)
		for i, ss := range fc.sess {
			g.Go(func() {
				r := fc.mems[i].Runtime().Rand()
				for !stop {
					err := fc.op(ctx, ss, mix, dist, r, val)
					done++
					if !measuring {
						continue
					}
					if err != nil {
						errs++
						continue
					}
					ops++
				}
			})
		}
		var before kvstore.FlexStats
		g.Go(func() {
			defer stopManager()
			t0 := rt.Now()
			out.converged, _ = warmUp(ctx, rt, cfg.Measure, &done, nil, false)
			if mo != nil && !mo.Fixed {
				// A point's throughput is the settled knob's: the warm-up goes on until the
				// knob's round has ended and a period has run at the ratio it settled at with no
				// hand-over (a window taken among the probes measures the search). While the
				// round probes, the throughput moves with each probe by design, so the steps'
				// agreement is not asked of it: the settling is the warm-up's end.
				end := rt.Now().Add(time.Duration(cfg.SettleCap) * cfg.Period)
				for !knobQuiet && rt.Now() < end {
					_ = rt.Sleep(ctx, cfg.Measure.Step)
				}
				out.converged = knobQuiet
			}
			out.warmup = rt.Now().Sub(t0)
			s.ResetStats()
			before = fc.flexStats()
			from := rt.Now()
			measuring = true
			measureWindow(ctx, rt, cfg.Measure, from, &ops, nil)
			measuring, stop = false, true
			out.window = rt.Now().Sub(from)
			rep := s.Report()
			for _, nic := range rep.NICs {
				if slices.Contains(fc.s.Topology().MemoryNodes(), nic.Node) && nic.Utilisation > out.busiest {
					out.busiest, out.busiestBusy = nic.Utilisation, nic.Busy
				}
			}
			st := rep.Stats
			v := st.Verbs[farmem.TargetMemory]
			out.atomics = v[farmem.OpCAS] + v[farmem.OpFAA] + v[farmem.OpMaskedCAS]
			after := fc.flexStats()
			out.kv, out.addr, out.miss = after.KVHits-before.KVHits, after.AddrHits-before.AddrHits, after.Misses-before.Misses
		})
		if err := g.Wait(); err != nil {
			runErr = err
			return
		}
		out.ops, out.errs = ops, errs
		for _, p := range periods {
			if len(p.Served) > 0 {
				out.periodsCV = append(out.periodsCV, p.CV())
				out.periodsProx = append(out.periodsProx, p.Proxied)
			}
		}
		out.cv, _ = MeanCI(out.periodsCV)
		out.proxied, _ = MeanCI(out.periodsProx)
	})
	if runErr != nil {
		return out, runErr
	}
	out.tput = float64(out.ops) / out.window.Seconds()
	return out, nil
}

// op runs one operation of mix: an update, an insert of a new key (workload D) or a search
// of a key drawn from dist.
func (fc *flexCluster) op(ctx context.Context, ss *kvstore.Session, mix flexWorkload, dist keyDist, r *rand.Rand, val []byte) error {
	x := r.IntN(100)
	switch {
	case x < mix.update:
		return ss.Update(ctx, fc.keys[dist.Next(r)], val)
	case x < mix.update+mix.insert:
		k := generator.AppendKey(nil, fc.next, 0, false)
		fc.next++
		return ss.Insert(ctx, k, val)
	}
	_, err := ss.Get(ctx, fc.keys[dist.Next(r)])
	return err
}

// flexStats sums the FlexKV counters of every compute node (zero for other kinds).
func (fc *flexCluster) flexStats() kvstore.FlexStats {
	k, ok := fc.kind.(*kvstore.FlexKV)
	if !ok {
		return kvstore.FlexStats{}
	}
	var sum kvstore.FlexStats
	for _, n := range fc.s.Topology().ComputeNodes() {
		st, _ := k.Stats(n)
		sum.KVHits += st.KVHits
		sum.AddrHits += st.AddrHits
		sum.Misses += st.Misses
		sum.Served += st.Served
	}
	return sum
}

// runFlexManaged opens what Fig. 18 and 19 run on: a fresh simulation of seed with FlexKV
// at the largest client count on memory nodes of mem bytes, loaded, and the manager's options
// starting at ratio (fixed: the knob off); body runs inside the simulation and starts the
// manager itself.
func runFlexManaged(cfg FlexConfig, seed uint64, mem uint64, ratio float64, fixed bool, body func(ctx context.Context, s *sim.Sim, fc *flexCluster, mo kvstore.ManagerOptions, dist keyDist) error) error {
	n := cfg.top()
	perNode := (n*cfg.InFlight + flexNodes - 1) / flexNodes
	model := FlexModel(perNode, mem, flexShared(cfg.Keys))
	cfg.Costs.apply(&model)
	s, err := sim.New(model, seed)
	if err != nil {
		return err
	}
	defer s.Close()
	budget := int64(cfg.MemoryShare * float64(cfg.Keys) * flexPair)
	kind, mo := cfg.flexKind(FlexSys, budget)
	mo.Ratio, mo.Fixed = ratio, fixed
	dist, err := newKeyDist(Scrambled, uint64(cfg.Keys), generator.ZipfianTheta)
	if err != nil {
		return err
	}
	var runErr error
	s.Run(func() {
		ctx := context.Background()
		fc, err := openFlexCluster(ctx, s, cfg, kind, n)
		if err != nil {
			runErr = err
			return
		}
		defer fc.shut()
		runErr = body(ctx, s, fc, *mo, dist)
	})
	return runErr
}

// drive starts a closed-loop client per session in g, each running operations of *mix (read
// at every operation, so a change switches the workload) until *stop.
func (fc *flexCluster) drive(ctx context.Context, g *sim.Group, mix *flexWorkload, dist keyDist, stop *bool) {
	val := make([]byte, flexValue)
	for i, ss := range fc.sess {
		g.Go(func() {
			r := fc.mems[i].Runtime().Rand()
			for !*stop {
				_ = fc.op(ctx, ss, *mix, dist, r, val)
			}
		})
	}
}

// runFlexSwitch is Fig. 18 for one seed: FlexKV at the largest client count under workload B
// until SwitchAt, then A until SwitchEnd, the manager's periods recorded.
func runFlexSwitch(cfg FlexConfig, seed uint64) (FlexSwitch, error) {
	wall := time.Now()
	out := FlexSwitch{Seed: seed, SettledBefore: -1, SettledAfter: -1}
	// Algorithm 2 starts at 0, as in the paper's run.
	err := runFlexManaged(cfg, seed, flexMemory(cfg.Keys), 0, false, func(ctx context.Context, s *sim.Sim, fc *flexCluster, mo kvstore.ManagerOptions, dist keyDist) error {
		rt := s.Runtime()
		t0 := rt.Now()
		// A period is labelled by when it ended (its trace comes after the hand-overs it ran).
		// After the switch the knob must start a round (the read share changed) and settle it:
		// AfterPeriods counts the periods from the first that ended after the switch to the
		// one that settled the new round.
		first, restarted := -1, false
		mo.Trace = func(p kvstore.ManagerPeriod) {
			at := p.At.Sub(t0)
			smp := FlexSwitchSample{At: at, Workload: "B", Throughput: p.Throughput, Ratio: p.Ratio, Next: p.Next, Settled: p.Settled, Reassigned: p.Reassigned}
			if at >= cfg.SwitchAt {
				smp.Workload = "A"
				if first < 0 {
					first = len(out.Samples)
				}
			}
			out.Samples = append(out.Samples, smp)
			switch {
			case first < 0:
				if p.Settled && out.SettledBefore < 0 {
					out.SettledBefore = p.Next
				}
			case !p.Settled:
				restarted = true
			case restarted && out.SettledAfter < 0:
				out.SettledAfter = p.Next
				out.AfterPeriods = len(out.Samples) - first
			}
		}
		mctx, stopManager := s.WithCancel(ctx)
		g := s.NewGroup()
		g.Go(func() { _ = fc.store.RunManager(mctx, mo) })
		stop := false
		mix, _ := flexMix("B")
		fc.drive(ctx, g, &mix, dist, &stop)
		g.Go(func() {
			defer stopManager()
			_ = rt.Sleep(ctx, cfg.SwitchAt)
			mix, _ = flexMix("A")
			_ = rt.Sleep(ctx, cfg.SwitchEnd-cfg.SwitchAt)
			stop = true
		})
		return g.Wait()
	})
	out.Wall = time.Since(wall)
	return out, err
}

// CurveRatios are the fixed index-offload ratios of Fig. 24's curve under workload A.
var CurveRatios = []float64{0.2, 0.4, 0.6, 0.8, 1}

// curveCap bounds, in periods, how long runFlexFixed waits for the assignment to stop moving
// partitions.
const curveCap = 40

// runFlexFixed is one point of Fig. 24 for one seed: FlexKV at the largest client count under
// workload A with the knob off at ratio (the manager still assigns by Algorithm 1's ranks);
// once the first assignment's hand-overs are done, one more period is left for the caches to
// refill, and the throughput is the operations over the next FlexConfig.balancePeriods()
// periods that move no partition, per second of them.
func runFlexFixed(cfg FlexConfig, seed uint64, ratio float64) (float64, error) {
	var ops uint64
	var span time.Duration
	err := runFlexManaged(cfg, seed, flexMemory(cfg.Keys), ratio, true, func(ctx context.Context, s *sim.Sim, fc *flexCluster, mo kvstore.ManagerOptions, dist keyDist) error {
		stop := false
		mix, _ := flexMix("A")
		g := s.NewGroup()
		fc.drive(ctx, g, &mix, dist, &stop)
		mctx, cancel := s.WithCancel(ctx)
		quiet, read, seen := 0, 0, 0
		mo.Trace = func(p kvstore.ManagerPeriod) {
			seen++
			switch {
			case p.Moved > 0 || p.Reassigned:
				quiet, read, ops, span = 0, 0, 0, 0
			case quiet < 1:
				quiet++
			case read < cfg.balancePeriods():
				read++
				ops += p.Ops
				if p.Throughput > 0 {
					span += time.Duration(float64(p.Ops) / p.Throughput * float64(time.Second))
				}
			}
			if read >= cfg.balancePeriods() || seen >= curveCap {
				cancel()
			}
		}
		g.Go(func() {
			defer func() { stop = true; cancel() }()
			_ = fc.store.RunManager(mctx, mo)
		})
		return g.Wait()
	})
	if err != nil || span <= 0 {
		return 0, err
	}
	return float64(ops) / span.Seconds(), nil
}

// BalanceRatio is the offload ratio of Fig. 19's run: Table 1's ratio for YCSB A (60%).
const BalanceRatio = 0.6

// balanceMemory is the memory-node size of Fig. 19's run, four times flexMemory's. Fig. 19 runs
// YCSB A longest (two reassignments of about 150 partitions, each a sequence of hand-overs
// lasting tens of milliseconds of virtual time, and the periods read after each), and on
// flexMemory's 128 MB, while flexAlloc's lease was 10 s and no block was reclaimed, the memory
// nodes filled with the blocks updates write out of place during the second assignment's
// periods (at 8,000 keys, after about 180 ms of A at 60 clients): every client then sat in the
// allocator's wait for retired blocks to become reusable, and resumed only about 11.7 s of
// virtual time later, so the periods read held few or no operations and their load was noise.
// Blocks are now reclaimed within a run; the larger size is kept as a margin. The sim touches
// only the pages written, so it costs host memory only as a run fills it.
func balanceMemory(keys int) uint64 { return 4 * flexMemory(keys) }

// balanceSettleCap bounds, in periods, how long Fig. 19 waits for an assignment to stop
// moving partitions; past it the periods read since the last move are kept, however few.
const balanceSettleCap = 60

// FlexBalanceSide is the proxies' load over the periods of one assignment.
type FlexBalanceSide struct {
	// CV is the coefficient of variation over the compute nodes of the index RPCs each one's
	// proxy served in all the periods read (the paper's Fig. 19: the load distribution across
	// the compute nodes); Proxied the mean over the periods of the share of accesses on proxied
	// partitions; Periods how many periods were read, Ops the operations the clients ran in
	// them (a period of few operations, such as one in which the clients wait for memory, would
	// make its load noise).
	CV, Proxied float64
	Periods     int
	Ops         uint64
}

// FlexBalance is Fig. 19 for one seed: under YCSB A at the largest client count, the
// manager first assigns BalanceRatio of the partitions statically (by number, no hotness),
// then a manager running Algorithm 1 rebalances them by rank; the proxies' load is read over
// FlexConfig.BalancePeriods periods of each.
type FlexBalance struct {
	Seed          uint64
	Before, After FlexBalanceSide
	Wall          time.Duration `json:"-"`
}

// runFlexBalance runs Fig. 19 for one seed. The periods of each assignment are read once its
// hand-overs are done (the period after the one that moved partitions).
func runFlexBalance(cfg FlexConfig, seed uint64) (FlexBalance, error) {
	wall := time.Now()
	out := FlexBalance{Seed: seed}
	cfg.Depth = cfg.balanceDepth()
	err := runFlexManaged(cfg, seed, balanceMemory(cfg.Keys), BalanceRatio, true, func(ctx context.Context, s *sim.Sim, fc *flexCluster, mo kvstore.ManagerOptions, dist keyDist) error {
		stop := false
		mix, _ := flexMix("A")
		g := s.NewGroup()
		fc.drive(ctx, g, &mix, dist, &stop)
		g.Go(func() {
			defer func() { stop = true }()
			// side runs a manager until it has read cfg.balancePeriods() periods after its last
			// hand-overs, and records them.
			side := func(o kvstore.ManagerOptions, into *FlexBalanceSide) {
				var prox []float64
				var served []uint64 // per live node, summed over the periods read
				var ops uint64
				mctx, cancel := s.WithCancel(ctx)
				settled, seen := false, 0
				o.Trace = func(p kvstore.ManagerPeriod) {
					seen++
					switch {
					case p.Moved > 0 || p.Reassigned || !settled || len(p.Served) != len(served) && len(prox) > 0:
						settled = p.Moved == 0 && !p.Reassigned
						// The assignment's hand-overs ran in it (or the live nodes changed).
						prox, served, ops = nil, nil, 0
					case len(prox) < cfg.balancePeriods():
						if served == nil {
							served = make([]uint64, len(p.Served))
						}
						for i, v := range p.Served {
							served[i] += v
						}
						prox = append(prox, p.Proxied)
						ops += p.Ops
					}
					if len(prox) >= cfg.balancePeriods() || seen >= balanceSettleCap {
						cancel()
					}
				}
				mg := s.NewGroup()
				mg.Go(func() { _ = fc.store.RunManager(mctx, o) })
				_ = mg.Wait()
				cancel()
				into.CV = kvstore.CV(served)
				into.Proxied, _ = MeanCI(prox)
				into.Periods, into.Ops = len(prox), ops
			}
			st := mo
			st.Static = true
			side(st, &out.Before)
			side(mo, &out.After)
		})
		return g.Wait()
	})
	out.Wall = time.Since(wall)
	return out, err
}
