package repro

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"sync"
	"time"

	"github.com/farmem/farmem/alloc"
	"github.com/farmem/farmem/bench/generator"
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
	// Theta is the Zipfian skew.
	Theta float64
	// Warmup and Window are each point's virtual warm-up and measured window.
	Warmup, Window time.Duration
	// Tracked is how many of the hottest keys have their updates counted one by one (for the
	// routing columns).
	Tracked uint64
	Seed    uint64
}

// CiderFull is the full sweep: both structures and mixes, the four synchronizers, 8 to 512
// clients, 1Mi keys on the array and 128Ki on RACE, a 20 ms warm-up and a 3 ms window. About
// four minutes of one core.
func CiderFull() CiderConfig {
	return CiderConfig{
		Structs: []string{Array, RACE}, Mixes: []string{WriteIntensive, WriteOnly},
		Syncs:     []string{Optimistic, Spin, MCS, CIDER},
		Clients:   []int{8, 16, 32, 48, 64, 96, 128, 192, 256, 384, 512},
		ArrayKeys: 1 << 20, RaceKeys: 1 << 17, Theta: 0.99,
		Warmup: 20 * time.Millisecond, Window: 3 * time.Millisecond, Tracked: 4096, Seed: 1,
	}
}

// CiderQuick is a few seconds' sweep with the full sweep's code paths: both structures, the
// write-intensive mix, 16 and 128 clients, 16Ki and 2Ki keys, a 2 ms warm-up and a 1 ms window.
// Its figures pin the code, they reproduce nothing.
func CiderQuick() CiderConfig {
	return CiderConfig{
		Structs: []string{Array, RACE}, Mixes: []string{WriteIntensive},
		Syncs:     []string{Optimistic, Spin, MCS, CIDER},
		Clients:   []int{16, 128},
		ArrayKeys: 1 << 14, RaceKeys: 1 << 11, Theta: 0.99,
		Warmup: 2 * time.Millisecond, Window: time.Millisecond, Tracked: 256, Seed: 1,
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
	case !slices.IsSorted(c.Clients) || c.Clients[0] < 1 || c.Clients[len(c.Clients)-1] > 4096:
		return bad("client counts %v: want ascending, 1 to 4096", c.Clients)
	case c.ArrayKeys < 1 && slices.Contains(c.Structs, Array), c.RaceKeys < 1 && slices.Contains(c.Structs, RACE):
		return bad("no keys")
	case c.Theta <= 0 || c.Theta >= 1:
		return bad("theta %v: want (0, 1)", c.Theta)
	case c.Warmup < 0 || c.Window <= 0:
		return bad("warm-up %v, window %v", c.Warmup, c.Window)
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
// count needs), each compute node with its own NIC and a core per client.
func CiderModel(clients int, memSize uint64) sim.Model {
	m := sim.ConnectX6()
	m.MemoryNodes, m.MemorySize = 8, memSize
	m.ComputeNodes = max(1, (clients+3)/4)
	m.ClientsPerNode, m.MaxHandlers = 6, 1
	return m
}

// KeyStat counts one tracked key's updates in a point's window.
type KeyStat struct {
	Updates, Pessimistic, Severe, Combined uint64
}

// CiderPoint is what one point of the sweep measured in its window.
type CiderPoint struct {
	Struct, Mix, Sync string
	Clients           int
	// Ops and Errors count operations that ended in the window; Throughput is Ops per second
	// of virtual time.
	Ops, Errors uint64
	Throughput  float64
	// Fabric is the fabric's counters over the window; Counters the synchronizers' (summed
	// over clients); Updates the updates that succeeded in the window.
	Fabric   farmem.Stats
	Counters cider.Stats
	Updates  uint64
	// Keys are the tracked keys' counts, by rank (0 the hottest).
	Keys     []KeyStat
	P50, P99 time.Duration
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

// CiderResult is a sweep's points.
type CiderResult struct {
	Config CiderConfig
	Points []CiderPoint
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

// RunCider runs every point of cfg, in order (structure, mix, client count, synchronizer), and
// writes a line per point to progress (if not nil), with the wall time it took.
func RunCider(ctx context.Context, cfg CiderConfig, progress io.Writer) (*CiderResult, error) {
	if err := cfg.check(); err != nil {
		return nil, err
	}
	res := &CiderResult{Config: cfg}
	gens := map[uint64]*generator.Permuted{}
	for _, st := range cfg.Structs {
		keys := cfg.ArrayKeys
		if st == RACE {
			keys = cfg.RaceKeys
		}
		gen := gens[keys]
		if gen == nil {
			var err error
			if gen, err = generator.NewPermuted(keys, cfg.Theta); err != nil {
				return nil, err
			}
			gens[keys] = gen
		}
		for _, mx := range cfg.Mixes {
			for _, n := range cfg.Clients {
				for _, k := range cfg.Syncs {
					if err := ctx.Err(); err != nil {
						return nil, err
					}
					start := time.Now()
					p, err := runCiderPoint(cfg, gen, keys, st, k, mx, n)
					if err != nil {
						return nil, fmt.Errorf("repro: %s, %s, %s, %d clients: %w", st, mx, k, n, err)
					}
					res.Points = append(res.Points, p)
					if progress != nil {
						fmt.Fprintf(progress, "%-5s %-15s %-10s %4d clients: %6.2f Mops/s (%v)\n", st, mx, k, n,
							p.Throughput/1e6, time.Since(start).Round(time.Millisecond))
					}
				}
			}
		}
	}
	return res, nil
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
func newSync(m farmem.Memory, name string, credits func(farmem.NodeID) *cider.Credits) (ptrsync.Synchronizer, error) {
	lo := qlock.Options{Lease: ciderLease}
	switch name {
	case Optimistic:
		return ptrsync.NewOptimistic(), nil
	case Spin:
		return cider.NewSpin(m, cider.SpinOptions{Lease: ciderLease})
	case MCS:
		return cider.NewMCS(m, lo)
	case CIDER:
		return cider.NewCIDER(m, credits(m.Info().Node), cider.Options{Lock: lo})
	}
	return nil, fmt.Errorf("%w: synchronizer %q", ErrConfig, name)
}

// syncStats returns a synchronizer's counters and its last operation.
func syncStats(s ptrsync.Synchronizer) (cider.Stats, cider.OpInfo) {
	switch x := s.(type) {
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

// runCiderPoint runs one point: clients closed-loop clients on structure st with synchronizer
// syncName, the mix's updates and searches over keys drawn by gen.
func runCiderPoint(cfg CiderConfig, gen *generator.Permuted, keys uint64, st, syncName, mix string, clients int) (CiderPoint, error) {
	writes, err := writePercent(mix)
	if err != nil {
		return CiderPoint{}, err
	}
	s, err := sim.New(CiderModel(clients, 64<<20), cfg.Seed)
	if err != nil {
		return CiderPoint{}, err
	}
	defer s.Close()
	comp := s.Topology().ComputeNodes()
	var root farmem.Addr
	var setupErr error
	s.Run(func() { root, setupErr = ciderSetup(s, comp, st, keys) })
	if setupErr != nil {
		return CiderPoint{}, setupErr
	}

	credits := map[farmem.NodeID]*cider.Credits{}
	var credMu sync.Mutex // Start runs in simulated goroutines, one at a time; kept for clarity
	creditsOf := func(n farmem.NodeID) *cider.Credits {
		credMu.Lock()
		defer credMu.Unlock()
		if credits[n] == nil {
			credits[n] = cider.NewCredits(0)
		}
		return credits[n]
	}
	tracked := map[uint64]int{}
	for r := range min(cfg.Tracked, keys) {
		tracked[gen.Key(r)] = int(r)
	}
	type loadClient struct {
		sync      ptrsync.Synchronizer
		base, end cider.Stats
		updates   uint64
		keys      []KeyStat
	}
	lcs := make([]*loadClient, clients)
	// The window: the clients all start their first operation at the same instant t0; the
	// window starts Warmup later and lasts Window. The synchronizers' counters are read at its
	// two ends (by events of the simulation); operations count when they end inside it.
	var from, to farmem.Time
	var once sync.Once
	window := func(now farmem.Time) {
		once.Do(func() {
			from, to = now.Add(cfg.Warmup), now.Add(cfg.Warmup+cfg.Window)
			read := func(set func(lc *loadClient, st cider.Stats)) func() {
				return func() {
					for _, lc := range lcs {
						if lc != nil {
							st, _ := syncStats(lc.sync)
							set(lc, st)
						}
					}
				}
			}
			s.At(from, read(func(lc *loadClient, st cider.Stats) { lc.base = st }))
			s.At(to, read(func(lc *loadClient, st cider.Stats) { lc.end = st }))
		})
	}
	res, err := s.RunClosedLoop(sim.ClosedLoop{
		Clients: clients, Nodes: comp, Warmup: cfg.Warmup, Duration: cfg.Window,
		Start: func(ctx context.Context, m farmem.Memory, i int) (sim.OpFunc, error) {
			a, err := alloc.New(ctx, m, ciderAlloc)
			if err != nil {
				return nil, err
			}
			sy, err := newSync(m, syncName, creditsOf)
			if err != nil {
				return nil, err
			}
			var ops kvOps
			if st == Array {
				ops, err = ptrarray.Open(ctx, m, a, root, ptrarray.Options{Sync: sy})
			} else {
				var t *race.Table
				t, err = race.Open(ctx, m, a, root, race.Options{Sync: sy})
				ops = raceOps{t}
			}
			if err != nil {
				return nil, err
			}
			lc := &loadClient{sync: sy, keys: make([]KeyStat, len(tracked))}
			lcs[i] = lc
			rt := m.Runtime()
			rnd := rt.Rand()
			body := value(uint64(i))
			return func(ctx context.Context) error {
				window(rt.Now())
				key := gen.Next(rnd)
				if rnd.IntN(100) >= writes {
					_, err := ops.Search(ctx, key)
					return err
				}
				err := ops.Update(ctx, key, body)
				if now := rt.Now(); err == nil && now >= from && now < to {
					lc.updates++
					if r, ok := tracked[key]; ok {
						_, info := syncStats(sy)
						ks := &lc.keys[r]
						ks.Updates++
						if info.Pessimistic {
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
			}, nil
		},
	})
	if err != nil {
		return CiderPoint{}, err
	}
	out := CiderPoint{Struct: st, Mix: mix, Sync: syncName, Clients: clients, Ops: res.Ops, Errors: res.Errors,
		Throughput: res.Throughput, Fabric: res.Report.Stats, Keys: make([]KeyStat, len(tracked))}
	if res.Latency != nil && res.Latency.TotalCount() > 0 {
		out.P50 = time.Duration(res.Latency.ValueAtQuantile(50))
		out.P99 = time.Duration(res.Latency.ValueAtQuantile(99))
	}
	for _, lc := range lcs {
		if lc == nil {
			continue
		}
		out.Counters = out.Counters.Add(lc.end.Sub(lc.base))
		out.Updates += lc.updates
		for r, ks := range lc.keys {
			o := &out.Keys[r]
			o.Updates += ks.Updates
			o.Pessimistic += ks.Pessimistic
			o.Severe += ks.Severe
			o.Combined += ks.Combined
		}
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
		m, err := s.Open(ctx, comp[i%len(comp)])
		if err != nil {
			return 0, err
		}
		defer m.Close()
		a, err := alloc.New(ctx, m, ciderAlloc)
		if err != nil {
			return 0, err
		}
		defer a.Close()
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
