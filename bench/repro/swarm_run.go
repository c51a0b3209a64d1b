package repro

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/farmem/farmem/farmem"
)

// SwarmResult is a run of the SWARM reproduction.
type SwarmResult struct {
	Config SwarmConfig
	// Model names the testbed model; Latency is its one-way latency, Jitter its links' spread, MemRead its memory
	// node's READ and atomic service, MemWrite its WRITE service, OpCPU its client CPU per verb.
	Model                                     string
	Latency, Jitter, MemRead, MemWrite, OpCPU time.Duration
	// DownTimeout is the model's: when a silent node's verbs fail.
	DownTimeout time.Duration
	// Fig5 holds RAW, SWARM and DM-ABD at Fig. 5's point (Table 2 comes from the same runs);
	// Band the same three rerun at each variant of Config.Band.
	Fig5 []SwarmAgg
	Band [][]SwarmAgg
	// Fig12 is SWARM with 16 clients on one key, YCSB A; Fig13 SWARM with Fig13Clients at each
	// of Config.Words, on YCSB B then YCSB A.
	Fig12 *SwarmAgg
	Fig13 []SwarmAgg
	// Fig11 is SWARM's timeline across a memory node's failure: one point per fault
	// (FaultCrash, FaultHang).
	Fig11 []SwarmAgg
}

// SwarmAgg is one point over every seed.
type SwarmAgg struct {
	// System, Clients, Keys, Reads (percent) and Words (SWARM's metadata words per key, 0:
	// one per writer) describe the point.
	System                      string
	Clients, Keys, Reads, Words int
	// Fault is Fig. 11's fault (FaultCrash or FaultHang), "" elsewhere.
	Fault string
	// Runs is each seed's window.
	Runs []swarmRun
}

func (a SwarmAgg) point() string {
	return fmt.Sprintf("%s, %d clients, %d keys, %d%% gets", a.System, a.Clients, a.Keys, a.Reads)
}

// RunSwarm runs c (SwarmFull or SwarmQuick, adjusted), writing a line per point to progress
// (if not nil).
func RunSwarm(ctx context.Context, c SwarmConfig, progress io.Writer) (*SwarmResult, error) {
	if err := c.check(); err != nil {
		return nil, err
	}
	m := SwarmModel(2, 1<<20)
	res := &SwarmResult{Config: c, Model: m.Name, Latency: m.MemoryLatency, Jitter: m.Jitter, MemRead: m.MemoryNIC.Verb[farmem.OpRead],
		MemWrite: m.MemoryNIC.Verb[farmem.OpWrite], OpCPU: m.OpCPU, DownTimeout: m.DownTimeout}
	point := func(pt swarmPoint, v Variant) (SwarmAgg, error) {
		start := time.Now()
		runs, errs, err := runSeeds(ctx, c.Seeds, c.Workers, func(seed uint64) (swarmRun, error) {
			return runSwarmPoint(ctx, pt, seed, v)
		})
		if err != nil {
			return SwarmAgg{}, err
		}
		for i, e := range errs {
			if e != nil {
				return SwarmAgg{}, fmt.Errorf("repro: swarm: %s seed %d: %w", pt.sys, c.Seeds[i], e)
			}
		}
		a := SwarmAgg{System: pt.sys, Clients: pt.clients, Keys: pt.keys, Reads: pt.reads, Words: pt.words, Fault: pt.fault, Runs: runs}
		swarmProgress(progress, "swarm: fig %s %s, %d words (0: one per writer), %v: %v\n", pt.fig, a.point(), pt.words, v, time.Since(start).Round(time.Millisecond))
		return a, nil
	}
	systems := []string{SysRAW, SysSWARM, SysDMABD}
	if c.has("5") {
		for _, sys := range systems {
			a, err := point(swarmPoint{fig: "5", sys: sys, clients: 4, keys: c.Keys, reads: 95, warmup: c.Warmup, ops: c.Ops}, Variant{})
			if err != nil {
				return nil, err
			}
			res.Fig5 = append(res.Fig5, a)
		}
		for _, v := range c.Band {
			var row []SwarmAgg
			for _, sys := range systems {
				a, err := point(swarmPoint{fig: "5", sys: sys, clients: 4, keys: c.Keys, reads: 95, warmup: c.Warmup, ops: c.Ops}, v)
				if err != nil {
					return nil, err
				}
				row = append(row, a)
			}
			res.Band = append(res.Band, row)
		}
	}
	if c.has("11") {
		for _, f := range []string{FaultCrash, FaultHang} {
			a, err := point(swarmPoint{fig: "11", sys: SysSWARM, clients: c.Fig11Clients, keys: c.Keys, reads: 95,
				fault: f, warmupSpan: c.Fig11Warmup, span: c.Fig11Span, bin: c.Fig11Bin}, Variant{})
			if err != nil {
				return nil, err
			}
			res.Fig11 = append(res.Fig11, a)
		}
	}
	if c.has("12") {
		a, err := point(swarmPoint{fig: "12", sys: SysSWARM, clients: 16, keys: 1, reads: 50, warmup: c.ContendedWarmup, ops: c.ContendedOps}, Variant{})
		if err != nil {
			return nil, err
		}
		res.Fig12 = &a
	}
	if c.has("13") {
		for _, reads := range []int{95, 50} {
			for _, w := range c.Words {
				a, err := point(swarmPoint{fig: "13", sys: SysSWARM, clients: c.Fig13Clients, keys: c.Fig13Keys, reads: reads, words: w,
					warmup: c.ContendedWarmup, ops: c.ContendedOps}, Variant{})
				if err != nil {
					return nil, err
				}
				res.Fig13 = append(res.Fig13, a)
			}
		}
	}
	return res, nil
}
