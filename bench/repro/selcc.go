package repro

import (
	"context"
	"fmt"
	"io"
	"math"
	"slices"
	"time"

	"github.com/farmem/farmem/farmem"
	"github.com/farmem/farmem/sim"
)

// The figures, access patterns and systems of the SELCC reproduction, by name.
const (
	// Locality is §7.1.2's pattern (Fig. 13): each access goes to the previous access's GCL
	// with probability 1/2, else to a uniformly drawn one. SelccZipf is §7.1.3's (Fig. 14): a
	// Zipfian of theta 0.99 over the GCLs' ranks (bench/generator.Permuted). SelccUniform draws
	// every record alike (Fig. 17a, 18); the B-tree's Zipf is YCSB's scrambled Zipfian (17b).
	Locality     = "locality"
	SelccZipf    = "zipf"
	SelccUniform = "uniform"

	// SELCC is ds/selcc's coherent cache (the paper's write-back mode); SEL the same latch
	// words with no cache (selcc.SEL); Sherman (in Fig. 17 only) the Sherman-like tree.
	SELCC = "selcc"
	SEL   = "sel"

	// The ablation's steps (Fig. 18): the three optimizations off, then forwarding, batched
	// eviction and dirty bounds turned on one at a time (the last is SELCC as configured).
	AblNone     = "none"
	AblForward  = "+forwarding"
	AblBatch    = "+batched eviction"
	AblDirty    = "+dirty bounds"
	figLocality = "13"
	figZipf     = "14"
	figScale    = "14-scale"
	figTree     = "17"
	figAblation = "18"
)

// SelccConfig is one run of the SELCC reproduction: the microbenchmarks of §7.1.2-7.1.3
// (Fig. 13, 14) over GCLs, the B-link tree of §7.2 under YCSB (Fig. 17) and the ablation
// (Fig. 18), all in sim on SelccModel (8 compute nodes, 8 memory nodes, 2 KB GCLs).
type SelccConfig struct {
	// Lines is the number of GCLs of the microbenchmarks; each compute node caches
	// Lines/CacheDiv of them (the paper: 24M GCLs, an 8 GB cache of 4M: CacheDiv 6).
	Lines, CacheDiv int
	// ScaleLines are the GCL counts of the hit-ratio check: Fig. 14's read-intensive point at
	// the largest client count, SELCC only, at each count with the same CacheDiv.
	ScaleLines []int
	// Records is the B-tree's records (YCSB keys, 8-byte values), bulk-loaded with leaves
	// TreeFill full; each compute node caches its lines / TreeCacheDiv (the paper: 2 billion
	// records, about 40 GB, an 8 GB cache: TreeCacheDiv 5).
	Records      int
	TreeFill     float64
	TreeCacheDiv int
	// Clients are the client counts of Fig. 13 and 14 (spread over the 8 compute nodes; the
	// paper's headline figures are at 64); Fig. 17 and 18 run at the largest.
	Clients []int
	// MicroReads are Fig. 13 and 14's read percentages (the paper: 95, 50, 0); TreeReads
	// Fig. 17 and 18's (four, order unstated in the paper: 100, 95, 50, 0 here).
	MicroReads, TreeReads []int
	// Access is the bytes one microbenchmark access reads or writes (at a random aligned
	// offset of the GCL; the paper does not say).
	Access int
	// EvictBatch is how many victims a miss on a full cache evicts in one batch (the paper's
	// L - l_f: not given).
	EvictBatch int
	// Figures selects what runs, of "13", "14", "14-scale", "17", "18" (default all).
	Figures []string
	// ShermanCache also runs, in Fig. 17, the Sherman-like tree with the cache Sherman's own
	// code gives it (ShermanDefault: leaves' parents only, its default size). A diagnostic:
	// the paper does not state the cache it gave Sherman, so the headline keeps the
	// Sherman-like tree with every internal node cached, the stronger baseline; this measures
	// how far Sherman's defaults move the ratio, and explains each uniform point's costs per
	// operation. Off in SelccFull and SelccQuick; the band never reruns it.
	ShermanCache bool
	// Seeds, Workers, Measure, Costs and Band are as in CiderConfig; the Band reruns the
	// headline points (Fig. 13 and 14 at 95% reads and the largest count, SELCC and SEL;
	// Fig. 17 uniform at 95% reads, SELCC, SEL and the Sherman-like tree).
	Seeds   []uint64
	Workers int
	Measure Measure
	Costs   Variant
	Band    []Variant
}

// SelccFull is the full reproduction: 6,144 GCLs (12 MiB, caches of 1,024 per node), the
// hit-ratio check at 1,536 to 24,576 GCLs, 200,000 records, 8, 32 and 64 clients, three seeds,
// warm-ups detected in 0.5 ms steps within 10% (at least 2 ms, at most 20 ms), windows of at
// least 10,000 operations and 1 ms (at most 10 ms), and the default band plus selccBand.
func SelccFull() SelccConfig {
	return SelccConfig{
		Lines: 6144, CacheDiv: 6, ScaleLines: []int{1536, 6144, 24576},
		Records: 200000, TreeFill: 0.7, TreeCacheDiv: 5,
		Clients: []int{8, 32, 64}, MicroReads: []int{95, 50, 0}, TreeReads: []int{100, 95, 50, 0},
		Access: 64, EvictBatch: 32,
		Seeds: []uint64{1, 2, 3},
		Measure: Measure{Step: 500 * time.Microsecond, MinWarmup: 2 * time.Millisecond, MaxWarmup: 20 * time.Millisecond,
			StepOps: 1000, Tolerance: 0.1, MinWindow: time.Millisecond, MaxWindow: 10 * time.Millisecond, MinOps: 10000},
		Band: append(DefaultBand(), selccBand...),
	}
}

// selccBand is what the SELCC band adds to DefaultBand.
//   - The atomic unit at 800ns: the paper's artifact plots its B-tree over SEL flat at about
//     0.6 Mops at every read ratio (github.com/ruihong123/SELCC, Figures/btree.png), and every
//     operation of that tree adds and removes a share on the root's latch word, so one word
//     served about 1.2 million atomics per second there: about 830ns each, where the model
//     assumes 400ns.
//   - The CPU a compute node spends on each invalidation message it receives (SELCC's
//     conflicts pay it, no baseline does): the model's 2µs (sim.ConnectX3) is an assumption
//     and no publication pins the handler cost of the artifact (a polling thread per peer,
//     storage/rdma.cc), so it is swept from 500ns to 4µs.
var selccBand = []Variant{{AtomicUnit: 800 * time.Nanosecond}, {CallCPU: 500 * time.Nanosecond}, {CallCPU: 4 * time.Microsecond}}

// SelccQuick is a run of about half a minute with the full run's code paths: 768 GCLs, 5,000
// records, 16 and 64 clients, two read ratios of the tree, two seeds, short warm-ups and
// windows, one band variant. Its figures pin the code, they reproduce nothing.
func SelccQuick() SelccConfig {
	c := SelccFull()
	c.Lines, c.ScaleLines, c.Records = 768, []int{384, 768}, 5000
	c.Clients, c.Seeds, c.TreeReads = []int{16, 64}, []uint64{1, 2}, []int{95, 0}
	c.Measure = Measure{Step: 250 * time.Microsecond, MinWarmup: 500 * time.Microsecond, MaxWarmup: 2 * time.Millisecond,
		StepOps: 400, Tolerance: 0.25, MinWindow: 250 * time.Microsecond, MaxWindow: time.Millisecond, MinOps: 1000}
	c.Band = []Variant{{AtomicUnit: 100 * time.Nanosecond}}
	return c
}

func (c SelccConfig) has(fig string) bool {
	return len(c.Figures) == 0 || slices.Contains(c.Figures, fig)
}

func (c SelccConfig) top() int { return c.Clients[len(c.Clients)-1] }

func (c SelccConfig) check() error {
	bad := func(format string, a ...any) error {
		return fmt.Errorf("%w: %s", ErrConfig, fmt.Sprintf(format, a...))
	}
	pct := func(xs []int) bool {
		return !slices.ContainsFunc(xs, func(x int) bool { return x < 0 || x > 100 })
	}
	for _, f := range c.Figures {
		if !slices.Contains([]string{figLocality, figZipf, figScale, figTree, figAblation}, f) {
			return bad("figure %q (want 13, 14, 14-scale, 17 or 18)", f)
		}
	}
	switch {
	case len(c.Seeds) == 0:
		return bad("no seeds")
	case len(c.Clients) == 0 || !slices.IsSorted(c.Clients) || c.Clients[0] < 1 || c.top() > 8*16:
		return bad("client counts %v: want ascending, 1 to 128", c.Clients)
	case c.Lines < 16 || c.CacheDiv < 1 || c.Lines/c.CacheDiv < 4:
		return bad("%d GCLs with caches of 1/%d", c.Lines, c.CacheDiv)
	case slices.ContainsFunc(c.ScaleLines, func(n int) bool { return n/max(1, c.CacheDiv) < 4 }):
		return bad("scale check %v: each needs caches of 4 GCLs or more", c.ScaleLines)
	case c.Records < 2 || c.TreeCacheDiv < 1 || !(c.TreeFill > 0 && c.TreeFill <= 1):
		return bad("B-tree of %d records, fill %v, caches of 1/%d", c.Records, c.TreeFill, c.TreeCacheDiv)
	case len(c.MicroReads) == 0 || len(c.TreeReads) == 0 || !pct(c.MicroReads) || !pct(c.TreeReads):
		return bad("read percentages %v, %v", c.MicroReads, c.TreeReads)
	case c.Access < 8 || c.Access > 2048 || c.Access%8 != 0:
		return bad("access of %d bytes: want 8 to 2048, a multiple of 8", c.Access)
	case c.EvictBatch < 1:
		return bad("eviction batch %d", c.EvictBatch)
	case c.Costs.check() != nil:
		return c.Costs.check()
	case slices.ContainsFunc(c.Band, func(v Variant) bool { return v.IsZero() || v.check() != nil }):
		return bad("band %v: each variant sets a positive cost", c.Band)
	case c.Measure.check() != nil:
		return c.Measure.check()
	}
	return nil
}

// SelccModel is the simulated testbed: sim.ConnectX3 (the SELCC testbed's 56 Gb/s ConnectX-3
// NICs and 16-core compute nodes; see its doc for what is sourced and what assumed) with 8
// memory nodes of memSize bytes and 8 compute nodes of up to 16 clients, and a shared area for
// frames cached GCLs of 2 KB. Each compute node runs selccHandlers invalidation handlers at once:
// one per peer compute node, as the paper's artifact starts one message-handling worker per
// peer (storage/rdma.cc, Cross_Computes_RPC_Threads_Creator, with NUM_QP_ACCROSS_COMPUTE = 1
// in port/port_posix.h); each runs on the node's cores beside its clients.
func SelccModel(perNode, frames int, memSize uint64) sim.Model {
	m := sim.ConnectX3()
	m.MemoryNodes, m.MemorySize = 8, memSize
	m.ComputeNodes, m.MaxHandlers = 8, selccHandlers
	m.ClientsPerNode = perNode + selccHandlers + 1 // and the cache's own client
	m.SliceSize = 4 << 10
	m.SharedSize = uint64(frames)*(selccLine+64) + 1<<20
	return m
}

// selccLine is the GCL size of every figure (the paper's default, §3 footnote 4).
const selccLine = 2048

// selccHandlers is the invalidation handlers per compute node: one per peer of 8 (see
// SelccModel).
const selccHandlers = 8 - 1

// SelccPoint is what one point measured in its windows, over every seed.
type SelccPoint struct {
	// Fig is the figure ("13", "14", "14-scale", "17", "18"), Dist the access pattern,
	// System the system or ablation step, Reads the read percentage, Clients the clients.
	Fig, Dist, System string
	Reads, Clients    int
	// Size is the GCLs (Fig. 13, 14) or records (17, 18); Lines the GCLs the data takes and
	// Frames each compute node's cache (0 for SEL).
	Size, Lines, Frames int
	// Ops counts operations that ended in the windows, Hits those that made no round trip
	// (served from the cache); Errors failed operations.
	Ops, Hits, Errors uint64
	// Throughput is the mean over seeds of each window's operations per second of virtual
	// time, ThroughputCI its 95% half-width, PerSeed the seeds' values.
	Throughput, ThroughputCI float64
	PerSeed                  []float64
	// Fabric is the fabric's counters over the windows (every seed's).
	Fabric farmem.Stats
	// Latency is the mean latency in the windows (every seed's) of reads that made no round
	// trip, reads that made some, and writes (0 for a class with no operation); LatencyOps
	// counts each class.
	Latency    [3]time.Duration
	LatencyOps [3]uint64
	// LatchWait is the time the SELCC compute nodes' clients waited for frames' local latches
	// in the windows, WriterWait the part behind a local writer's global acquisition
	// (selcc.NodeStats; 0 for SEL and the Sherman-like tree).
	LatchWait, WriterWait time.Duration
	Warmup, Window        time.Duration
	Converged             bool
	// ParentCover is, for the Sherman-like tree with Sherman's default cache, the share of
	// the leaves' parents its cache's budget holds, and Levels that tree's levels, leaves
	// included, and PaperLevels at the paper's 2 billion records (0 otherwise).
	ParentCover         float64
	Levels, PaperLevels int
	// MemNICBusy is the memory nodes' NICs' processing-unit time in the windows (every seed's)
	// and MemBytes the payload bytes through their ports.
	MemNICBusy time.Duration
	MemBytes   uint64
}

// MemNICPerOp is the memory nodes' NIC processing-unit time and port bytes per operation.
func (p SelccPoint) MemNICPerOp() (busy time.Duration, bytes float64) {
	n := max(1, p.Ops)
	return p.MemNICBusy / time.Duration(n), float64(p.MemBytes) / float64(n)
}

// HitRatio is the share of operations that made no round trip.
func (p SelccPoint) HitRatio() float64 { return float64(p.Hits) / math.Max(1, float64(p.Ops)) }

// RoundTripsPerOp is the fabric's round trips per operation (invalidation messages are not
// round trips; handlers' verbs are counted).
func (p SelccPoint) RoundTripsPerOp() float64 {
	return float64(p.Fabric.RoundTrips) / math.Max(1, float64(p.Ops))
}

// BytesPerOp is the bytes that crossed a link (reads, writes, atomics, messages) per operation.
func (p SelccPoint) BytesPerOp() float64 {
	f := p.Fabric
	return float64(f.BytesIn+f.BytesOut+f.MessageBytes) / math.Max(1, float64(p.Ops))
}

// WaitPerOp is the clients' time waiting for frame latches per operation, and the part behind a
// local writer's global acquisition.
func (p SelccPoint) WaitPerOp() (all, behindWriter time.Duration) {
	n := time.Duration(max(1, p.Ops))
	return p.LatchWait / n, p.WriterWait / n
}

// MessagesPerOp is the invalidation messages per operation.
func (p SelccPoint) MessagesPerOp() float64 {
	return float64(p.Fabric.Messages) / math.Max(1, float64(p.Ops))
}

// SelccResult is the run's points and its band reruns (each with Config.Costs set to its
// variant and only the headline points).
type SelccResult struct {
	Config SelccConfig
	Points []SelccPoint
	Band   []*SelccResult
}

// Point returns the point of the given coordinates (the zero point if there is none).
func (r *SelccResult) Point(fig, dist, system string, reads, clients, size int) SelccPoint {
	for _, p := range r.Points {
		if p.Fig == fig && p.Dist == dist && p.System == system && p.Reads == reads && p.Clients == clients && (size == 0 || p.Size == size) {
			return p
		}
	}
	return SelccPoint{}
}

// selccSpec is one point to run.
type selccSpec struct {
	fig, dist, system string
	reads, clients    int
	size              int
}

// specs returns the points of the configuration, in the order they run and print.
func (c SelccConfig) specs() []selccSpec {
	var out []selccSpec
	micro := func(fig, dist string) {
		for _, rd := range c.MicroReads {
			for _, n := range c.Clients {
				for _, s := range []string{SELCC, SEL} {
					out = append(out, selccSpec{fig, dist, s, rd, n, c.Lines})
				}
			}
		}
	}
	if c.has(figLocality) {
		micro(figLocality, Locality)
	}
	if c.has(figZipf) {
		if !slices.Contains(c.MicroReads, 100) {
			// A diagnostic the paper omits: read-only at the largest count, no invalidations.
			for _, sys := range []string{SELCC, SEL} {
				out = append(out, selccSpec{figZipf, SelccZipf, sys, 100, c.top(), c.Lines})
			}
		}
		micro(figZipf, SelccZipf)
	}
	if c.has(figScale) && slices.Contains(c.MicroReads, 95) {
		for _, n := range c.ScaleLines {
			for _, sys := range []string{SELCC, SEL} {
				out = append(out, selccSpec{figScale, SelccZipf, sys, 95, c.top(), n})
			}
		}
	}
	if c.has(figTree) {
		systems := []string{SELCC, SEL, Sherman}
		if c.ShermanCache {
			systems = append(systems, ShermanDefault)
		}
		for _, d := range []string{SelccUniform, SelccZipf} {
			for _, rd := range c.TreeReads {
				for _, s := range systems {
					out = append(out, selccSpec{figTree, d, s, rd, c.top(), c.Records})
				}
			}
		}
	}
	if c.has(figAblation) {
		for _, rd := range c.TreeReads {
			for _, s := range []string{AblNone, AblForward, AblBatch, AblDirty} {
				out = append(out, selccSpec{figAblation, SelccUniform, s, rd, c.top(), c.Records})
			}
		}
	}
	return out
}

// headlineSpecs are the points a band variant reruns: Fig. 13 and 14 at 95% reads and the
// largest count (SELCC and SEL), Fig. 17 uniform at 95% reads (SELCC, SEL and the Sherman-like
// tree with every internal node cached, whose cache lookups are charged at the same local costs
// as SELCC's frames; not the one with Sherman's cache, to keep the run's length).
func (c SelccConfig) headlineSpecs() []selccSpec {
	var out []selccSpec
	for _, s := range c.specs() {
		switch {
		case (s.fig == figLocality || s.fig == figZipf) && s.reads == 95 && s.clients == c.top(),
			s.fig == figTree && s.dist == SelccUniform && s.reads == 95 && s.system != ShermanDefault:
			out = append(out, s)
		}
	}
	return out
}

// RunSelcc runs every point of cfg, each once per seed, and its band reruns, writing a line
// per point to progress (if not nil) with the wall time it took.
func RunSelcc(ctx context.Context, cfg SelccConfig, progress io.Writer) (*SelccResult, error) {
	if err := cfg.check(); err != nil {
		return nil, err
	}
	res := &SelccResult{Config: cfg}
	for _, sp := range cfg.specs() {
		p, err := runSelccPoint(ctx, cfg, sp, progress)
		if err != nil {
			return nil, err
		}
		res.Points = append(res.Points, p)
	}
	for _, v := range cfg.Band {
		b := cfg
		b.Costs, b.Band = v, nil
		if progress != nil {
			fmt.Fprintf(progress, "band: %v\n", v)
		}
		br := &SelccResult{Config: b}
		for _, sp := range cfg.headlineSpecs() {
			p, err := runSelccPoint(ctx, b, sp, progress)
			if err != nil {
				return nil, err
			}
			br.Points = append(br.Points, p)
		}
		res.Band = append(res.Band, br)
	}
	return res, nil
}

// runSelccPoint runs one point over every seed, Workers seeds at once, folding them in seed order.
func runSelccPoint(ctx context.Context, cfg SelccConfig, sp selccSpec, progress io.Writer) (SelccPoint, error) {
	start := time.Now()
	p := SelccPoint{Fig: sp.fig, Dist: sp.dist, System: sp.system, Reads: sp.reads, Clients: sp.clients, Size: sp.size, Converged: true}
	runs, errs, err := runSeeds(ctx, cfg.Seeds, cfg.Workers, func(seed uint64) (selccRun, error) {
		return runSelccSeed(cfg, sp, seed)
	})
	if err != nil {
		return p, err
	}
	for i, r := range runs {
		if errs[i] != nil {
			return p, fmt.Errorf("repro: fig. %s, %s, %s, %d%% reads, %d clients, seed %d: %w", sp.fig, sp.dist, sp.system, sp.reads, sp.clients, cfg.Seeds[i], errs[i])
		}
		p.Ops += r.ops
		p.Hits += r.hits
		p.Errors += r.errs
		p.PerSeed = append(p.PerSeed, r.tput)
		p.Fabric = p.Fabric.Add(r.fabric)
		for k := range r.lat {
			p.Latency[k] += r.lat[k] // a sum until divided below
			p.LatencyOps[k] += r.n[k]
		}
		p.LatchWait += r.wait
		p.WriterWait += r.writerWait
		p.Warmup, p.Window = max(p.Warmup, r.warmup), max(p.Window, r.window)
		p.Converged = p.Converged && r.converged
		p.Lines, p.Frames = r.lines, r.frames
		p.ParentCover, p.Levels, p.PaperLevels = r.cover, r.levels, r.paperLevels
		p.MemNICBusy += r.memBusy
		p.MemBytes += r.memBytes
	}
	for k, n := range p.LatencyOps {
		if n > 0 {
			p.Latency[k] /= time.Duration(n)
		}
	}
	p.Throughput, p.ThroughputCI = MeanCI(p.PerSeed)
	if progress != nil {
		conv := ""
		if !p.Converged {
			conv = " (warm-up not converged)"
		}
		fmt.Fprintf(progress, "fig %-8s %-8s %-18s %3d%% reads %3d clients: %6.2f ± %.2f Mops/s, hits %.1f%%, warm-up %v%s (%v)\n",
			sp.fig, sp.dist, sp.system, sp.reads, sp.clients, p.Throughput/1e6, p.ThroughputCI/1e6, 100*p.HitRatio(), p.Warmup, conv,
			time.Since(start).Round(time.Millisecond))
	}
	return p, nil
}
