package repro

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"

	"github.com/farmem/farmem/alloc"
	"github.com/farmem/farmem/bench/baseline/sherman"
	"github.com/farmem/farmem/bench/baseline/smart"
	"github.com/farmem/farmem/bench/generator"
	"github.com/farmem/farmem/ds/hybrid"
	"github.com/farmem/farmem/farmem"
	"github.com/farmem/farmem/sim"
)

// The indexes of the Dolphin comparison, by name.
const (
	// Dolphin is ds/hybrid with its default 64-slot (1,104-byte) leaves.
	Dolphin = "dolphin"
	// ShermanLike is bench/baseline/sherman: 1 KB nodes, 8-byte keys, its hierarchical lock.
	ShermanLike = "sherman-like"
	// SMARTLike is bench/baseline/smart.
	SMARTLike = "smart-like"
)

// The workloads of the Dolphin comparison (the paper's §IV-A).
const (
	YCSBA      = "ycsb-a"      // 50% get, 50% update
	YCSBC      = "ycsb-c"      // 100% get
	LoadMix    = "load"        // 100% insert of absent keys
	RangeOnly  = "range-only"  // 100% scans of about 100 keys
	RangeWrite = "range-write" // 50% scans, 50% inserts
)

// The request distributions of the Dolphin comparison.
const (
	Zipf    = "zipf-0.99" // YCSB's scrambled Zipfian, theta 0.99
	Uniform = "uniform"
)

// DolphinConfig is one run of the Dolphin comparison.
type DolphinConfig struct {
	// Keys is N, the keys loaded before each throughput point: dense keys at 50% fill, one of
	// each pair {2i+1, 2i+2} for i < N (chosen by the seed), so keys lie in [1, 2N].
	Keys uint64
	// TableKeys are the key counts Table II is measured at (one load each, seed 1), in
	// ascending order. Its ratios are of the means over the counts in the last doubling,
	// [largest/2, largest) (the largest alone if none): a B+ tree's per-key cache varies
	// along each doubling of N (its leaves' parents fill up, then split in a wave), so one
	// count would stand for a phase of that wave, not the tree.
	TableKeys []uint64
	// MemoryNodes, ComputeNodes and ClientsPerNode shape the cluster (the paper: 4, 4, 18).
	MemoryNodes, ComputeNodes, ClientsPerNode int
	// Budgets are Fig. 6's cache budgets per compute node, in bytes per million keys.
	Budgets []float64
	// FullBudget is Fig. 7's and Fig. 8's budget per compute node in bytes per million keys
	// (the paper's 2,000 MB over 512M keys).
	FullBudget float64
	// ScanSpan is a scan's key range (the paper's scans of 100 items at 50% fill: 200).
	ScanSpan uint64
	// Seeds: every point runs once per seed; throughput is the mean with a 95% interval.
	Seeds []uint64
	// Measure chooses each point's warm-up and window.
	Measure Measure
	// Band lists settings of the model's unpinned costs at which the YCSB A full-cache points
	// of Dolphin and the Sherman-like tree are rerun (the headline ratio's band).
	Band []Variant
	// Workers is how many seeds run at once (the output does not depend on it).
	Workers int
	// Workloads limits the figures' points to these workloads (nil: all five; Fig. 6 runs
	// with YCSBA).
	Workloads []string
}

// PaperBudget is the byte budget per million keys equivalent to mb megabytes for the paper's
// 512 million keys.
func PaperBudget(mb float64) float64 { return mb * 1e6 / 512 }

// DolphinFull is the full comparison: N = 2^15 keys for the throughput figures, Table II at
// 2^15 keys and at four counts along the doubling from 2^17 to 2^18 (2^17 times 2^(j/4)) and
// 2^18, the paper's cluster (4 memory nodes, 4 compute nodes of 18 clients), Fig. 6 at the
// paper's 50, 200 and 800 MB scaled to N, three seeds, and the band. Budgeted at about 20
// minutes of one core (each point's seed loads its own cluster).
func DolphinFull() DolphinConfig {
	return DolphinConfig{
		Keys: 1 << 15, TableKeys: doubling(1<<15, 1<<17, 4),
		MemoryNodes: 4, ComputeNodes: 4, ClientsPerNode: 18,
		Budgets:    []float64{PaperBudget(50), PaperBudget(200), PaperBudget(800)},
		FullBudget: PaperBudget(2000), ScanSpan: 200,
		Seeds: []uint64{1, 2, 3},
		Measure: Measure{Step: 200 * time.Microsecond, MinWarmup: time.Millisecond, MaxWarmup: 20 * time.Millisecond,
			StepOps: 2000, Tolerance: 0.1, MinWindow: time.Millisecond, MaxWindow: 10 * time.Millisecond, MinOps: 20000},
		Band: DefaultBand(),
	}
}

// DolphinQuick is a run of a few tens of seconds with the full run's code paths: 2^13 keys,
// Table II at 2^12 and 2^13, Fig. 6 at two budgets, two seeds, short warm-ups and windows, the
// band at two variants. Its figures pin the code; they reproduce nothing.
func DolphinQuick() DolphinConfig {
	c := DolphinFull()
	c.Keys, c.TableKeys = 1<<13, doubling(0, 1<<12, 2)
	c.ComputeNodes, c.ClientsPerNode = 2, 8
	c.Budgets = []float64{PaperBudget(100), PaperBudget(800)}
	c.Seeds = []uint64{1, 2}
	c.Measure = Measure{Step: 100 * time.Microsecond, MinWarmup: 300 * time.Microsecond, MaxWarmup: 2 * time.Millisecond,
		StepOps: 200, Tolerance: 0.25, MinWindow: 300 * time.Microsecond, MaxWindow: 2 * time.Millisecond, MinOps: 1000}
	c.Band = []Variant{{AtomicUnit: 500 * time.Nanosecond}, {OpCPU: time.Microsecond}}
	return c
}

// doubling returns first (if nonzero), then steps counts spread evenly in log scale from
// from (inclusive) to 2*from (exclusive), then 2*from.
func doubling(first, from uint64, steps int) []uint64 {
	var out []uint64
	if first != 0 {
		out = append(out, first)
	}
	for j := range steps {
		out = append(out, uint64(math.Round(float64(from)*math.Exp2(float64(j)/float64(steps)))))
	}
	return append(out, 2*from)
}

// DolphinIndexes lists the indexes, Dolphin first.
func DolphinIndexes() []string { return []string{Dolphin, ShermanLike, SMARTLike} }

func (c DolphinConfig) check() error {
	switch {
	case c.Keys < 256 || len(c.TableKeys) == 0 || !slices.IsSorted(c.TableKeys) || c.MemoryNodes < 1 || c.ComputeNodes < 1 || c.ClientsPerNode < 1:
		return fmt.Errorf("%w: keys %d, table keys %v, shape %d/%d/%d", ErrConfig, c.Keys, c.TableKeys, c.MemoryNodes, c.ComputeNodes, c.ClientsPerNode)
	case len(c.Seeds) == 0 || len(c.Budgets) == 0 || c.FullBudget <= 0 || c.ScanSpan == 0:
		return fmt.Errorf("%w: seeds %v, budgets %v, full budget %v, scan span %d", ErrConfig, c.Seeds, c.Budgets, c.FullBudget, c.ScanSpan)
	}
	for _, v := range c.Band {
		if v.IsZero() {
			return fmt.Errorf("%w: a band variant changes no cost", ErrConfig)
		}
		if err := v.check(); err != nil {
			return err
		}
	}
	return nil
}

// DolphinModel is the simulated testbed: sim.ConnectX6 (100 Gb/s, the paper's ConnectX-5
// port rate) with the configured memory and compute nodes, a core per client.
func DolphinModel(c DolphinConfig, keys uint64) sim.Model {
	m := sim.ConnectX6()
	m.MemoryNodes, m.ComputeNodes = c.MemoryNodes, c.ComputeNodes
	m.ClientsPerNode, m.MaxHandlers = c.ClientsPerNode+2, 1
	m.Cores = c.ClientsPerNode
	// About 2 KB a key over the nodes covers SMART-like's nodes and every allocator's slack.
	m.MemorySize = max(64<<20, (keys*2048/uint64(c.MemoryNodes)+(1<<20)-1)&^(1<<20-1))
	return m
}

// DolphinPoint is one (index, workload, distribution, budget) point over the seeds.
type DolphinPoint struct {
	Index, Workload, Dist string
	// Budget is the cache budget per compute node in bytes per million keys.
	Budget float64
	// Throughput is the mean over seeds (ops/s of virtual time), ThroughputCI its 95%
	// half-width, PerSeed each seed's.
	Throughput, ThroughputCI float64
	PerSeed                  []float64
	P50, P99                 time.Duration
	// Ops counted in the windows (all seeds); Fabric the verbs they cost.
	Ops    uint64
	Fabric farmem.Stats
	// CacheBytes is the mean over seeds of the compute nodes' cache bytes at the window's end.
	CacheBytes float64
	// Converged is false if a seed's warm-up hit its cap.
	Converged bool
	Costs     Variant
}

// RoundTripsPerOp is the window's critical-path round trips per operation.
func (p DolphinPoint) RoundTripsPerOp() float64 {
	return float64(p.Fabric.RoundTrips) / float64(max(1, p.Ops))
}

// MemoryVerbsPerOp is the window's verbs to memory nodes per operation.
func (p DolphinPoint) MemoryVerbsPerOp() float64 {
	return float64(p.Fabric.VerbsTo(farmem.TargetMemory)) / float64(max(1, p.Ops))
}

// CacheRow is Table II's row for one index: cache bytes per million keys at each key count.
type CacheRow struct {
	Index string
	// Bytes at each of TableKeys; Entries the cached nodes; InUse (sherman-like only) the
	// bytes of its pages' fences, separators and pointers in use.
	Bytes, Entries, InUse []int64
	// Superseded (sherman-like only) counts the cached copies of a node taken before its
	// split, kept beside its halves' as Sherman's cache keeps them.
	Superseded []int64
	// Shape (sherman-like only) is the tree's levels after the load, at each of TableKeys.
	Shape [][]sherman.LevelShape
}

// tableCell is one index's Table II measurement at one key count.
type tableCell struct {
	bytes, entries, inUse, superseded int64
	shape                             []sherman.LevelShape
}

// DolphinResult is a run's figures.
type DolphinResult struct {
	Config DolphinConfig
	Table  []CacheRow
	Points []DolphinPoint
	// Band holds the YCSB A full-cache points rerun at each variant.
	Band []DolphinPoint
}

// Point returns the point of an index, workload, distribution and budget (zero if absent).
func (r *DolphinResult) Point(index, workload, dist string, budget float64) DolphinPoint {
	for _, p := range r.Points {
		if p.Index == index && p.Workload == workload && p.Dist == dist && p.Budget == budget {
			return p
		}
	}
	return DolphinPoint{}
}

// pointSpec is one point to run.
type pointSpec struct {
	index, workload, dist string
	budget                float64
	costs                 Variant
}

// specs lists the figures' points in order.
func (c DolphinConfig) specs() []pointSpec {
	var out []pointSpec
	for _, d := range []string{Zipf, Uniform} { // Fig. 6
		for _, b := range c.Budgets {
			for _, ix := range DolphinIndexes() {
				out = append(out, pointSpec{ix, YCSBA, d, b, Variant{}})
			}
			// Dolphin with a quarter of the others' budget.
			out = append(out, pointSpec{Dolphin, YCSBA, d, b / 4, Variant{}})
		}
	}
	for _, w := range []string{YCSBA, YCSBC, LoadMix} { // Fig. 7
		for _, ix := range DolphinIndexes() {
			out = append(out, pointSpec{ix, w, Zipf, c.FullBudget, Variant{}})
		}
	}
	for _, w := range []string{RangeOnly, RangeWrite} { // Fig. 8
		for _, ix := range DolphinIndexes() {
			out = append(out, pointSpec{ix, w, Uniform, c.FullBudget, Variant{}})
		}
	}
	// Deduplicate (a budget's quarter may equal another budget).
	seen := map[pointSpec]bool{}
	dedup := out[:0]
	for _, s := range out {
		if c.Workloads != nil && !slices.Contains(c.Workloads, s.workload) {
			continue
		}
		if !seen[s] {
			seen[s] = true
			dedup = append(dedup, s)
		}
	}
	return dedup
}

// RunDolphin runs the comparison: Table II, then every point of Figs. 6-8 once per seed, then
// the band. Progress lines go to progress (nil: none).
func RunDolphin(ctx context.Context, cfg DolphinConfig, progress io.Writer) (*DolphinResult, error) {
	if err := cfg.check(); err != nil {
		return nil, err
	}
	res := &DolphinResult{Config: cfg}
	for _, ix := range DolphinIndexes() {
		row := CacheRow{Index: ix}
		for _, n := range cfg.TableKeys {
			start := time.Now()
			tc, err := cacheBytes(cfg, ix, n)
			if err != nil {
				return nil, fmt.Errorf("repro: table II, %s, %d keys: %w", ix, n, err)
			}
			row.Bytes, row.Entries = append(row.Bytes, tc.bytes), append(row.Entries, tc.entries)
			if ix == ShermanLike {
				row.InUse, row.Superseded = append(row.InUse, tc.inUse), append(row.Superseded, tc.superseded)
				row.Shape = append(row.Shape, tc.shape)
			}
			if progress != nil {
				fmt.Fprintf(progress, "table II %-12s %8d keys: %d bytes (%v)\n", ix, n, tc.bytes, time.Since(start).Round(time.Millisecond))
			}
		}
		res.Table = append(res.Table, row)
	}
	for _, s := range cfg.specs() {
		p, err := runDolphinPoint(ctx, cfg, s, progress)
		if err != nil {
			return nil, err
		}
		res.Points = append(res.Points, p)
	}
	for _, v := range cfg.Band {
		if cfg.Workloads != nil && !slices.Contains(cfg.Workloads, YCSBA) {
			break
		}
		for _, ix := range []string{Dolphin, ShermanLike} {
			p, err := runDolphinPoint(ctx, cfg, pointSpec{ix, YCSBA, Zipf, cfg.FullBudget, v}, progress)
			if err != nil {
				return nil, err
			}
			res.Band = append(res.Band, p)
		}
	}
	return res, nil
}

func runDolphinPoint(ctx context.Context, cfg DolphinConfig, s pointSpec, progress io.Writer) (DolphinPoint, error) {
	start := time.Now()
	p := DolphinPoint{Index: s.index, Workload: s.workload, Dist: s.dist, Budget: s.budget, Converged: true, Costs: s.costs}
	runs, errs, err := runSeeds(ctx, cfg.Seeds, cfg.Workers, func(seed uint64) (dolphinSeedRun, error) {
		return runDolphinSeed(cfg, s, seed)
	})
	if err != nil {
		return p, err
	}
	var hist *hdrhistogram.Histogram
	var cache float64
	for i, r := range runs {
		if err := errs[i]; err != nil {
			return p, fmt.Errorf("repro: %s, %s, %s, budget %.0f B/Mkey, seed %d: %w", s.index, s.workload, s.dist, s.budget, cfg.Seeds[i], err)
		}
		p.PerSeed = append(p.PerSeed, r.tput)
		p.Ops += r.ops
		p.Fabric = p.Fabric.Add(r.fabric)
		p.Converged = p.Converged && r.converged
		cache += float64(r.cache)
		if hist == nil {
			hist = r.hist
		} else {
			hist.Merge(r.hist)
		}
	}
	p.CacheBytes = cache / float64(len(runs))
	p.Throughput, p.ThroughputCI = MeanCI(p.PerSeed)
	if hist != nil && hist.TotalCount() > 0 {
		p.P50 = time.Duration(hist.ValueAtQuantile(50))
		p.P99 = time.Duration(hist.ValueAtQuantile(99))
	}
	if progress != nil {
		fmt.Fprintf(progress, "%-12s %-11s %-9s budget %9.0f B/Mkey %s: %6.2f ± %.2f Mops/s (%v)\n", s.index, s.workload, s.dist, s.budget,
			s.costs, p.Throughput/1e6, p.ThroughputCI/1e6, time.Since(start).Round(time.Millisecond))
	}
	return p, nil
}

type dolphinSeedRun struct {
	ops       uint64
	tput      float64
	converged bool
	fabric    farmem.Stats
	cache     int64
	hist      *hdrhistogram.Histogram
}

// denseKey is key i's loaded key: one of {2i+1, 2i+2}, chosen by a hash of i and the seed;
// complement is the other one (absent until a LOAD inserts it).
func denseKey(i, seed uint64) uint64 { return 2*i + 1 + mix64(i^seed*0x9e3779b97f4a7c15)&1 }

func complementKey(i, seed uint64) uint64 { return 2*i + 2 - mix64(i^seed*0x9e3779b97f4a7c15)&1 }

func mix64(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	return x ^ x>>31
}

// dindex is one client's handle on an index.
type dindex interface {
	get(ctx context.Context, k uint64) error
	update(ctx context.Context, k, v uint64) error
	insert(ctx context.Context, k, v uint64) error
	scan(ctx context.Context, from, to uint64) (int, error)
}

type dolphinIx struct{ t *hybrid.Tree }

func (d dolphinIx) get(ctx context.Context, k uint64) error {
	_, err := d.t.Get(ctx, hybrid.Key(k))
	return err
}
func (d dolphinIx) update(ctx context.Context, k, v uint64) error {
	return d.t.Update(ctx, hybrid.Key(k), v)
}
func (d dolphinIx) insert(ctx context.Context, k, v uint64) error {
	return d.t.Insert(ctx, hybrid.Key(k), v)
}
func (d dolphinIx) scan(ctx context.Context, from, to uint64) (int, error) {
	ps, err := d.t.Scan(ctx, from, to, 0)
	return len(ps), err
}

type shermanIx struct{ t *sherman.Tree }

func k8(k uint64) []byte { return binary.BigEndian.AppendUint64(nil, k) }

func (s shermanIx) get(ctx context.Context, k uint64) error {
	_, err := s.t.Get(ctx, k8(k))
	return err
}
func (s shermanIx) update(ctx context.Context, k, v uint64) error { return s.t.Update(ctx, k8(k), v) }
func (s shermanIx) insert(ctx context.Context, k, v uint64) error { return s.t.Insert(ctx, k8(k), v) }
func (s shermanIx) scan(ctx context.Context, from, to uint64) (int, error) {
	ps, err := s.t.Scan(ctx, k8(from), k8(to), 0)
	return len(ps), err
}

type smartIx struct{ t *smart.Tree }

func (s smartIx) get(ctx context.Context, k uint64) error {
	_, err := s.t.Get(ctx, k)
	return err
}
func (s smartIx) update(ctx context.Context, k, v uint64) error { return s.t.Update(ctx, k, v) }
func (s smartIx) insert(ctx context.Context, k, v uint64) error { return s.t.Insert(ctx, k, v) }
func (s smartIx) scan(ctx context.Context, from, to uint64) (int, error) {
	ps, err := s.t.Scan(ctx, from, to, 0)
	return len(ps), err
}

// nodeCaches are one index's per-compute-node state.
type nodeCaches struct {
	dolphin map[farmem.NodeID]*hybrid.Cache
	sherman map[farmem.NodeID]*sherman.Cache
	locks   map[farmem.NodeID]*sherman.LockTable
	smart   map[farmem.NodeID]*smart.Cache
}

func newNodeCaches(comp []farmem.NodeID, index string, budget int64) *nodeCaches {
	nc := &nodeCaches{dolphin: map[farmem.NodeID]*hybrid.Cache{}, sherman: map[farmem.NodeID]*sherman.Cache{},
		locks: map[farmem.NodeID]*sherman.LockTable{}, smart: map[farmem.NodeID]*smart.Cache{}}
	for _, n := range comp {
		switch index {
		case Dolphin:
			nc.dolphin[n] = hybrid.NewCache(budget)
		case ShermanLike:
			nc.sherman[n], nc.locks[n] = sherman.NewShermanCache(budget), sherman.NewLockTable()
		case SMARTLike:
			nc.smart[n] = smart.NewCache(budget)
		}
	}
	return nc
}

// bytes returns the compute nodes' mean cache bytes and the first node's entries and bytes in
// use (sherman-like's; the others' bytes).
func (nc *nodeCaches) bytes(comp []farmem.NodeID) (mean, entries, inUse int64) {
	tc := nc.table(comp)
	return tc.bytes, tc.entries, tc.inUse
}

// table returns the compute nodes' mean cache bytes and the first node's entries, and for
// sherman-like its bytes in use and superseded copies.
func (nc *nodeCaches) table(comp []farmem.NodeID) tableCell {
	var sum, entries, inUse, superseded int64
	for i, n := range comp {
		var b, e int64
		switch {
		case nc.dolphin[n] != nil:
			st := nc.dolphin[n].Stats()
			b, e = st.Bytes, int64(st.Entries)
		case nc.sherman[n] != nil:
			st := nc.sherman[n].Stats()
			b, e = st.Bytes, int64(st.Entries)
			if i == 0 {
				inUse, superseded = st.InUse, int64(st.Superseded)
			}
		case nc.smart[n] != nil:
			st := nc.smart[n].Stats()
			b, e = st.Bytes, int64(st.Entries)
		}
		sum += b
		if i == 0 {
			entries = e
		}
	}
	return tableCell{bytes: sum / int64(len(comp)), entries: entries, inUse: inUse, superseded: superseded}
}

func createIndex(ctx context.Context, m farmem.Memory, a *alloc.Allocator, index string) (farmem.Addr, error) {
	switch index {
	case Dolphin:
		return hybrid.Create(ctx, m, a, hybrid.Params{})
	case ShermanLike:
		return sherman.Create(ctx, m, a, sherman.Params{Codec: sherman.Fixed8(), EntryVersions: true})
	case SMARTLike:
		return smart.Create(ctx, m, a)
	}
	return 0, fmt.Errorf("%w: index %q", ErrConfig, index)
}

func openIndex(ctx context.Context, m farmem.Memory, a *alloc.Allocator, root farmem.Addr, index string, nc *nodeCaches) (dindex, error) {
	n := m.Info().Node
	switch index {
	case Dolphin:
		t, err := hybrid.Open(ctx, m, a, root, hybrid.Options{Cache: nc.dolphin[n]})
		return dolphinIx{t}, err
	case ShermanLike:
		t, err := sherman.Open(ctx, m, a, root, sherman.Options{Cache: nc.sherman[n], Locks: nc.locks[n]})
		return shermanIx{t}, err
	case SMARTLike:
		t, err := smart.Open(ctx, m, a, root, smart.Options{Cache: nc.smart[n]})
		return smartIx{t}, err
	}
	return nil, fmt.Errorf("%w: index %q", ErrConfig, index)
}

var dolphinAlloc = alloc.Options{Lease: time.Second, Refresh: 100 * time.Millisecond, ScanInterval: time.Millisecond}

// loadIndex formats the cluster, creates the index and inserts the N dense keys, every client
// of the cluster loading its share in parallel (in a seeded order), through the nodes' caches.
func loadIndex(s *sim.Sim, comp []farmem.NodeID, index string, keys, seed uint64, clients int, nc *nodeCaches) (farmem.Addr, error) {
	ctx := context.Background()
	m, err := s.Open(ctx, comp[0])
	if err != nil {
		return 0, err
	}
	defer m.Close()
	if err := alloc.FormatAll(ctx, m, alloc.FormatOptions{}); err != nil {
		return 0, err
	}
	a, err := alloc.New(ctx, m, dolphinAlloc)
	if err != nil {
		return 0, err
	}
	defer a.Close()
	root, err := createIndex(ctx, m, a, index)
	if err != nil {
		return 0, err
	}
	perm := rand.New(rand.NewPCG(seed, 0x10ad)).Perm(int(keys))
	errs := make([]error, clients)
	if err := s.Parallel(clients, func(c int) {
		m, a, done, err := openClient(ctx, s, comp[c%len(comp)], dolphinAlloc)
		if err != nil {
			errs[c] = err
			return
		}
		defer done()
		ix, err := openIndex(ctx, m, a, root, index, nc)
		if err != nil {
			errs[c] = err
			return
		}
		for j := c; j < len(perm); j += clients {
			i := uint64(perm[j])
			if err := ix.insert(ctx, denseKey(i, seed), i); err != nil {
				errs[c] = fmt.Errorf("load key %d: %w", i, err)
				return
			}
		}
	}); err != nil {
		return 0, err
	}
	return root, errors.Join(errs...)
}

// cacheBytes loads keys into index on one seed with unbounded caches, reads every key from
// one client of the first compute node (so its cache holds every internal node it can), and
// returns that node's cache bytes and entries (and sherman-like's tree shape, walked after).
func cacheBytes(cfg DolphinConfig, index string, keys uint64) (tableCell, error) {
	model := DolphinModel(cfg, keys)
	s, err := sim.New(model, 1)
	if err != nil {
		return tableCell{}, err
	}
	defer s.Close()
	comp := s.Topology().ComputeNodes()
	nc := newNodeCaches(comp, index, 1<<40)
	var tc tableCell
	var runErr error
	s.Run(func() {
		root, err := loadIndex(s, comp, index, keys, 1, len(comp)*cfg.ClientsPerNode, nc)
		if err != nil {
			runErr = err
			return
		}
		ctx := context.Background()
		m, a, done, err := openClient(ctx, s, comp[0], dolphinAlloc)
		if err != nil {
			runErr = err
			return
		}
		defer done()
		ix, err := openIndex(ctx, m, a, root, index, nc)
		if err != nil {
			runErr = err
			return
		}
		for i := range keys {
			if err := ix.get(ctx, denseKey(i, 1)); err != nil {
				runErr = fmt.Errorf("get key %d: %w", i, err)
				return
			}
		}
		tc = nc.table(comp[:1])
		if sh, ok := ix.(shermanIx); ok {
			tc.shape, runErr = sh.t.Shape(ctx)
		}
	})
	return tc, runErr
}

// runDolphinSeed runs one point on one seed: a fresh cluster, the load, then the workload
// until the warm-up converges and the window fills.
func runDolphinSeed(cfg DolphinConfig, ps pointSpec, seed uint64) (dolphinSeedRun, error) {
	model := DolphinModel(cfg, cfg.Keys)
	ps.costs.apply(&model)
	s, err := sim.New(model, seed)
	if err != nil {
		return dolphinSeedRun{}, err
	}
	defer s.Close()
	comp := s.Topology().ComputeNodes()
	clients := len(comp) * cfg.ClientsPerNode
	budget := int64(ps.budget * float64(cfg.Keys) / 1e6)
	nc := newNodeCaches(comp, ps.index, budget)
	var zipf *generator.ScrambledZipfian
	if ps.dist == Zipf {
		zipf = generator.NewScrambledZipfian(0, int64(cfg.Keys)-1)
	}
	out := dolphinSeedRun{hist: hdrhistogram.New(1, int64(10*time.Second), 3)}
	var runErr error
	s.Run(func() {
		root, err := loadIndex(s, comp, ps.index, cfg.Keys, seed, clients, nc)
		if err != nil {
			runErr = err
			return
		}
		ctx := context.Background()
		ops := make([]func(context.Context) error, clients)
		var errs []error
		if err := s.Parallel(clients, func(c int) {
			m, err := s.Open(ctx, comp[c%len(comp)])
			if err == nil {
				var a *alloc.Allocator
				if a, err = alloc.New(ctx, m, dolphinAlloc); err == nil {
					var ix dindex
					if ix, err = openIndex(ctx, m, a, root, ps.index, nc); err == nil {
						ops[c] = clientOps(cfg, ps, ix, m.Runtime().Rand(), zipf, c, clients, seed)
						return
					}
				}
			}
			errs = append(errs, err)
		}); err != nil {
			runErr = err
			return
		}
		if len(errs) > 0 {
			runErr = errs[0]
			return
		}
		ms := cfg.Measure
		if ps.workload == LoadMix || ps.workload == RangeWrite {
			// Inserts draw from the N absent keys: keep the window within a quarter of them.
			ms.MinOps = min(ms.MinOps, cfg.Keys/4)
		}
		r, err := measure(s, ms, ops, out.hist)
		if err != nil {
			runErr = err
			return
		}
		out.ops, out.tput, out.converged, out.fabric = r.ops, r.tput, r.converged, r.fabric
		out.cache, _, _ = nc.bytes(comp)
	})
	return out, runErr
}

// errExhausted ends a client whose LOAD keys are all inserted.
var errExhausted = errors.New("repro: keys exhausted")

// clientOps returns client c's operation generator for the point's workload.
func clientOps(cfg DolphinConfig, ps pointSpec, ix dindex, rnd *rand.Rand, zipf *generator.ScrambledZipfian, c, clients int, seed uint64) func(context.Context) error {
	n := cfg.Keys
	pick := func() uint64 {
		if zipf != nil {
			return uint64(zipf.Next(rnd))
		}
		return rnd.Uint64N(n)
	}
	// Inserts take the complements of this client's share of the pairs, in a seeded order.
	share := (n - uint64(c) + uint64(clients) - 1) / uint64(clients)
	mult := uint64(0x9e3779b1) | 1
	for gcd(mult, share) != 1 {
		mult += 2
	}
	var next uint64
	insertOne := func(ctx context.Context) error {
		if next >= share {
			return errExhausted
		}
		j := (mult*next + uint64(seed)) % share
		next++
		i := uint64(c) + j*uint64(clients)
		return ix.insert(ctx, complementKey(i, seed), i)
	}
	scanOne := func(ctx context.Context) error {
		from := 1 + rnd.Uint64N(2*n)
		_, err := ix.scan(ctx, from, from+cfg.ScanSpan)
		return err
	}
	val := uint64(c) << 40
	switch ps.workload {
	case YCSBA:
		return func(ctx context.Context) error {
			i := pick()
			if rnd.IntN(2) == 0 {
				return ix.get(ctx, denseKey(i, seed))
			}
			val++
			return ix.update(ctx, denseKey(i, seed), val)
		}
	case YCSBC:
		return func(ctx context.Context) error { return ix.get(ctx, denseKey(pick(), seed)) }
	case LoadMix:
		return insertOne
	case RangeOnly:
		return scanOne
	default: // RangeWrite
		return func(ctx context.Context) error {
			if rnd.IntN(2) == 0 {
				return scanOne(ctx)
			}
			return insertOne(ctx)
		}
	}
}

func gcd(a, b uint64) uint64 {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}

type measured struct {
	ops       uint64
	tput      float64
	converged bool
	fabric    farmem.Stats
}

// measure runs the clients' operations until stop: the warm-up until cfg's convergence (or
// its cap), then the window; it runs inside the simulation. A client that runs out of keys to
// insert ends the window (or the warm-up) at once, so no window counts idle clients.
func measure(s *sim.Sim, ms Measure, ops []func(context.Context) error, hist *hdrhistogram.Histogram) (measured, error) {
	ctx := context.Background()
	rt := s.Runtime()
	var out measured
	var done, errCount uint64
	var firstErr error
	measuring, stop, exhausted := false, false, false
	g := s.NewGroup()
	for _, op := range ops {
		g.Go(func() {
			for !stop {
				start := rt.Now()
				err := op(ctx)
				if errors.Is(err, errExhausted) {
					exhausted = true
					return
				}
				done++
				if err != nil && firstErr == nil {
					firstErr = err
				}
				if !measuring {
					continue
				}
				if err != nil {
					errCount++
					continue
				}
				out.ops++
				_ = hist.RecordValue(int64(rt.Now().Sub(start)))
			}
		})
	}
	var window time.Duration
	g.Go(func() {
		out.converged, _ = warmUp(ctx, rt, ms, &done, &exhausted, false)
		s.ResetStats()
		from := rt.Now()
		measuring = true
		measureWindow(ctx, rt, ms, from, &out.ops, &exhausted)
		measuring, stop = false, true
		window = rt.Now().Sub(from)
		out.fabric = s.Report().Stats
	})
	if err := g.Wait(); err != nil {
		return out, err
	}
	if errCount > 0 || (firstErr != nil && !errors.Is(firstErr, context.Canceled)) {
		return out, fmt.Errorf("%d operations failed: %w", errCount, firstErr)
	}
	out.tput = float64(out.ops) / window.Seconds()
	return out, nil
}
