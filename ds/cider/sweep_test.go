package cider_test

import (
	"context"
	"flag"
	"fmt"
	"io"
	"math"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/farmem/farmem/alloc"
	"github.com/farmem/farmem/bench/generator"
	"github.com/farmem/farmem/bench/ptrarray"
	"github.com/farmem/farmem/ds/cider"
	"github.com/farmem/farmem/ds/race"
	"github.com/farmem/farmem/farmem"
	"github.com/farmem/farmem/sim"
)

var (
	sweepFlag    = flag.Bool("sweep", false, "run the full client sweep of TestSweep (minutes)")
	sweepSVG     = flag.String("sweep.svg", "", "with -sweep, write the throughput curves as an SVG file")
	sweepCounts  = flag.String("sweep.clients", "8,16,32,48,64,96,128,192,256,384,512", "with -sweep, the client counts")
	sweepStructs = flag.String("sweep.structs", "array,race", "with -sweep, the structures")
	sweepMixes   = flag.String("sweep.mixes", "write-intensive,write-only", "with -sweep, the workloads")
	sweepSyncs   = flag.String("sweep.syncs", "optimistic,spin,mcs,cider", "with -sweep, the synchronizers")
	sweepWarmup  = flag.Duration("sweep.warmup", 20*time.Millisecond, "with -sweep, the warm-up of each point (virtual time)")
	sweepWindow  = flag.Duration("sweep.window", 3*time.Millisecond, "with -sweep, the measured window of each point (virtual time)")
	sweepKeys    = flag.Uint64("sweep.keys", 1<<20, "with -sweep, the pointer array's keys (RACE holds an eighth of them)")
)

// sweepCfg is an experiment: the keys, the skew and the measured window.
type sweepCfg struct {
	arrayKeys, raceKeys uint64
	theta               float64
	warmup, window      time.Duration
	seed                uint64
	tracked             uint64 // keys of the lowest ranks whose requests are counted one by one
}

// The workloads of CIDER's Table 1 that the sweep runs.
type mix struct {
	name  string
	write int // percent of updates; the rest are searches
}

var (
	writeIntensive = mix{"write-intensive", 50}
	writeOnly      = mix{"write-only", 100}
)

// sweepModel is the simulated CIDER testbed: sim.ConnectX6 with 8 memory nodes and 4 clients
// per compute node (as many compute nodes as the client count needs), each on its own core.
func sweepModel(clients int, memSize uint64) sim.Model {
	m := sim.ConnectX6()
	m.MemoryNodes, m.MemorySize = 8, memSize
	m.ComputeNodes = max(1, (clients+3)/4)
	m.ClientsPerNode, m.MaxHandlers = 6, 1
	return m
}

// keyStat counts one tracked key's updates.
type keyStat struct {
	updates, pess, severe, combined uint64
}

// pointResult is what one run measured in its window.
type pointResult struct {
	st       structure
	sync     syncKind
	mix      mix
	clients  int
	ops      uint64
	errs     uint64
	tput     float64 // ops per second of virtual time
	fabric   farmem.Stats
	stats    cider.Stats // synchronizer counters in the window
	updates  uint64
	keys     []keyStat // per tracked rank
	p50, p99 time.Duration
}

func (r pointResult) perOp(v uint64) float64 { return float64(v) / math.Max(1, float64(r.ops)) }

// mnVerbs is memory-node verbs per operation.
func (r pointResult) mnVerbs() float64 { return r.perOp(r.fabric.VerbsTo(farmem.TargetMemory)) }

// wcRate is the share of updates another client's write carried (coordinators and
// participants of combined batches): CIDER's WC rate.
func (r pointResult) wcRate() float64 {
	return float64(r.stats.Coordinator+r.stats.Participant) / math.Max(1, float64(r.updates))
}

func (r pointResult) batch() float64 {
	return float64(r.stats.Batched) / math.Max(1, float64(r.stats.Batches))
}

var (
	genMu   sync.Mutex
	genByNT = map[[2]uint64]*generator.Permuted{}
)

// keyGen returns the (cached) key generator over n keys: YCSB's Zipfian ranks (Gray's law, see
// bench/generator) mapped one to one onto the keys by generator.Permuted, so the hot keys are
// spread over the nodes. It is not YCSB's ScrambledZipfian (which folds 10^10 ranks onto the
// keys by a hash). Clients share it: Next does not change it.
func keyGen(t testing.TB, n uint64, theta float64) *generator.Permuted {
	genMu.Lock()
	defer genMu.Unlock()
	k := [2]uint64{n, math.Float64bits(theta)}
	if g := genByNT[k]; g != nil {
		return g
	}
	g, err := generator.NewPermuted(n, theta)
	require.NoError(t, err)
	genByNT[k] = g
	return g
}

// runPoint runs one point of the sweep: clients closed-loop clients on structure st with
// synchronizer k, the mix's updates and searches over keys drawn by keyGen (theta).
func runPoint(t testing.TB, cfg sweepCfg, st structure, k syncKind, mx mix, clients int) pointResult {
	t.Helper()
	keys := cfg.arrayKeys
	rp := race.Params{}
	if st == raceKV {
		keys = cfg.raceKeys
		rp = race.Params{MetaSize: 16, InitialDepth: 3}
	}
	memSize := uint64(64 << 20)
	s, err := sim.New(sweepModel(clients, memSize), cfg.seed)
	require.NoError(t, err)
	defer s.Close()
	e := &env{f: s, s: s, comp: s.Topology().ComputeNodes(), ao: aopts, lease: 10 * time.Millisecond}
	gen := keyGen(t, keys, cfg.theta)
	value := func(k uint64) []byte { return val(k, 8) }
	e.do(func() {
		ctx := context.Background()
		m, err := s.Open(ctx, e.comp[0])
		require.NoError(t, err)
		defer m.Close()
		require.NoError(t, alloc.FormatAll(ctx, m, alloc.FormatOptions{SymmetricSize: alloc.DefaultChunkSize}))
		a, err := alloc.New(ctx, m, e.ao)
		require.NoError(t, err)
		defer a.Close()
		if st == arrayKV {
			e.arrayRoot, err = ptrarray.Create(ctx, m, a, ptrarray.Params{Keys: keys})
			require.NoError(t, err)
			arr, err := ptrarray.Open(ctx, m, a, e.arrayRoot, ptrarray.Options{})
			require.NoError(t, err)
			require.NoError(t, arr.Load(ctx, 0, keys, value))
			return
		}
		e.raceRoot, err = race.Create(ctx, m, a, rp)
		require.NoError(t, err)
		// Load with a client per free slot (at most 32), each inserting its stripe of keys.
		loaders := min(32, len(e.comp)*4)
		tabs := make([]*race.Table, loaders)
		for i := range tabs {
			m, err := s.Open(ctx, e.comp[i%len(e.comp)])
			require.NoError(t, err)
			defer m.Close()
			a, err := alloc.New(ctx, m, e.ao)
			require.NoError(t, err)
			defer a.Close()
			tabs[i], err = race.Open(ctx, m, a, e.raceRoot, race.Options{})
			require.NoError(t, err)
		}
		require.NoError(t, s.Parallel(loaders, func(i int) {
			for k := uint64(i); k < keys; k += uint64(loaders) {
				require.NoError(t, tabs[i].Insert(ctx, rkey(k), value(k)))
			}
		}))
	})

	// Tracked keys: the lowest ranks.
	tracked := map[uint64]int{}
	for r := range min(cfg.tracked, keys) {
		tracked[gen.Key(r)] = int(r)
	}
	type loadClient struct {
		c         *client
		base, end cider.Stats
		updates   uint64
		keys      []keyStat
	}
	lcs := make([]*loadClient, clients)
	// The window: the clients all start their first operation at the same instant t0, the
	// window starts Warmup later and lasts Duration. The synchronizers' counters are read at
	// its two ends (by events of the simulation), and operations are counted when they end
	// inside it.
	var from, to farmem.Time
	var once sync.Once
	window := func(now farmem.Time) {
		once.Do(func() {
			from, to = now.Add(cfg.warmup), now.Add(cfg.warmup+cfg.window)
			s.At(from, func() {
				for _, lc := range lcs {
					if lc != nil {
						lc.base = statsOf(lc.c.sync)
					}
				}
			})
			s.At(to, func() {
				for _, lc := range lcs {
					if lc != nil {
						lc.end = statsOf(lc.c.sync)
					}
				}
			})
		})
	}
	res, err := s.RunClosedLoop(sim.ClosedLoop{
		Clients:  clients,
		Nodes:    e.comp,
		Warmup:   cfg.warmup,
		Duration: cfg.window,
		Start: func(ctx context.Context, m farmem.Memory, i int) (sim.OpFunc, error) {
			c := &client{m: m}
			a, err := alloc.New(ctx, m, e.ao)
			if err != nil {
				return nil, err
			}
			c.a = a
			c.sync = e.newSync(t, m, k)
			if st == arrayKV {
				c.arr, err = ptrarray.Open(ctx, m, a, e.arrayRoot, ptrarray.Options{Sync: c.sync})
				c.kv = c.arr
			} else {
				c.tab, err = race.Open(ctx, m, a, e.raceRoot, race.Options{Sync: c.sync})
				c.kv = raceKVs{c.tab}
			}
			if err != nil {
				return nil, err
			}
			lc := &loadClient{c: c, keys: make([]keyStat, len(tracked))}
			lcs[i] = lc
			rnd := m.Runtime().Rand()
			rt := m.Runtime()
			body := val(uint64(i), 8)
			return func(ctx context.Context) error {
				window(rt.Now())
				key := gen.Next(rnd)
				if rnd.IntN(100) >= mx.write {
					_, err := c.kv.Search(ctx, key)
					return err
				}
				err := c.kv.Update(ctx, key, body)
				if now := rt.Now(); err == nil && now >= from && now < to {
					lc.updates++
					if r, ok := tracked[key]; ok {
						info := lastOf(c.sync)
						ks := &lc.keys[r]
						ks.updates++
						if info.Pessimistic {
							ks.pess++
						} else if info.Retries >= cider.HotnessThreshold {
							ks.severe++
						}
						if info.Role == cider.Coordinator || info.Role == cider.Participant || info.Role == cider.Executor {
							ks.combined++
						}
					}
				}
				return err
			}, nil
		},
	})
	require.NoError(t, err)
	out := pointResult{st: st, sync: k, mix: mx, clients: clients, ops: res.Ops, errs: res.Errors,
		tput: res.Throughput, fabric: res.Report.Stats, keys: make([]keyStat, len(tracked))}
	if res.Latency != nil && res.Latency.TotalCount() > 0 {
		out.p50 = time.Duration(res.Latency.ValueAtQuantile(50))
		out.p99 = time.Duration(res.Latency.ValueAtQuantile(99))
	}
	for _, lc := range lcs {
		if lc == nil {
			continue
		}
		out.stats = out.stats.Add(lc.end.Sub(lc.base))
		out.updates += lc.updates
		for r, ks := range lc.keys {
			o := &out.keys[r]
			o.updates += ks.updates
			o.pess += ks.pess
			o.severe += ks.severe
			o.combined += ks.combined
		}
	}
	if res.FirstErr != nil {
		t.Logf("%v/%v/%d: %d errors, first %v", st, k, clients, res.Errors, res.FirstErr)
	}
	return out
}

// routing compares CIDER's routing at a point with the optimistic run at the same point:
// ideal is the share of updates that needed HotnessThreshold failed CASes or more under O-SYNC
// (the paper's ideal pessimistic ratio), recall the share of those CIDER routes pessimistic
// (estimated per tracked key: its severe O-SYNC updates times CIDER's pessimistic share of
// its updates), combined the share of CIDER's pessimistic updates that were batch members.
func routing(opt, cd pointResult) (ideal, recall, combined float64) {
	ideal = float64(opt.stats.Severe) / math.Max(1, float64(opt.updates))
	var sev, hit float64
	for r, ks := range opt.keys {
		if ks.severe == 0 {
			continue
		}
		c := cd.keys[r]
		sev += float64(ks.severe)
		if c.updates > 0 {
			hit += float64(ks.severe) * float64(c.pess) / float64(c.updates)
		}
	}
	recall = hit / math.Max(1, sev)
	combined = float64(cd.stats.Coordinator+cd.stats.Participant+cd.stats.Executor) / math.Max(1, float64(cd.stats.Pessimistic))
	return ideal, recall, combined
}

// sweep runs every synchronizer at every client count and returns the results by key.
type sweepKey struct {
	st      structure
	mix     string
	sync    syncKind
	clients int
}

func runSweep(t testing.TB, cfg sweepCfg, sts []structure, mixes []mix, syncs []syncKind, counts []int, progress io.Writer) map[sweepKey]pointResult {
	out := map[sweepKey]pointResult{}
	for _, st := range sts {
		for _, mx := range mixes {
			for _, n := range counts {
				for _, k := range syncs {
					start := time.Now()
					r := runPoint(t, cfg, st, k, mx, n)
					out[sweepKey{st, mx.name, k, n}] = r
					if progress != nil {
						fmt.Fprintf(progress, "%-5s %-15s %-8s %4d clients: %6.2f Mops/s  (%v)\n", st, mx.name, k, n, r.tput/1e6, time.Since(start).Round(time.Millisecond))
					}
				}
			}
		}
	}
	return out
}

// table renders a sweep as text.
func table(res map[sweepKey]pointResult, sts []structure, mixes []mix, syncs []syncKind, counts []int) string {
	var b strings.Builder
	for _, st := range sts {
		for _, mx := range mixes {
			fmt.Fprintf(&b, "\n%s, %s (zipf, sim.ConnectX6 with 8 memory nodes, 4 clients per compute node)\n", st, mx.name)
			fmt.Fprintf(&b, "%8s", "clients")
			for _, k := range syncs {
				fmt.Fprintf(&b, " %13s", string(k)+" Mops")
			}
			fmt.Fprintf(&b, " %9s %9s %9s |", "cider/opt", "cider/spn", "cider/mcs")
			for _, k := range syncs {
				fmt.Fprintf(&b, " %14s", string(k)+" mnv/op")
			}
			for _, k := range syncs {
				fmt.Fprintf(&b, " %14s", string(k)+" fcas/op")
			}
			fmt.Fprintf(&b, " | %7s %6s %6s %6s %6s %6s %6s\n", "wc-rate", "batch", "ideal", "routed", "comb", "cP50", "cP99")
			for _, n := range counts {
				fmt.Fprintf(&b, "%8d", n)
				for _, k := range syncs {
					fmt.Fprintf(&b, " %13.2f", res[sweepKey{st, mx.name, k, n}].tput/1e6)
				}
				c := res[sweepKey{st, mx.name, ciderAuto, n}]
				ratio := func(k syncKind) float64 { return c.tput / math.Max(1, res[sweepKey{st, mx.name, k, n}].tput) }
				fmt.Fprintf(&b, " %9.2f %9.2f %9.2f |", ratio(optimistic), ratio(spin), ratio(mcs))
				for _, k := range syncs {
					fmt.Fprintf(&b, " %14.2f", res[sweepKey{st, mx.name, k, n}].mnVerbs())
				}
				for _, k := range syncs {
					r := res[sweepKey{st, mx.name, k, n}]
					fmt.Fprintf(&b, " %14.3f", r.perOp(r.fabric.FailedCAS))
				}
				ideal, recall, comb := routing(res[sweepKey{st, mx.name, optimistic, n}], c)
				fmt.Fprintf(&b, " | %7.3f %6.2f %6.3f %6.3f %6.3f %6v %6v\n", c.wcRate(), c.batch(), ideal, recall, comb,
					c.p50.Round(100*time.Nanosecond), c.p99.Round(time.Microsecond))
			}
		}
	}
	return b.String()
}

// TestSweep is the experiment of CIDER §5.2-5.3 in the simulator: behind -sweep the full client
// sweep up to 512 on both structures and both write mixes; otherwise nothing (TestShape is the
// short version in the suite). Run it with
//
//	GOMAXPROCS=1 go test -run TestSweep -timeout 2h ./ds/cider -args -sweep [-sweep.svg=out.svg]
func TestSweep(t *testing.T) {
	if !*sweepFlag {
		t.Skip("the full sweep runs with -args -sweep")
	}
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	cfg := sweepCfg{arrayKeys: *sweepKeys, raceKeys: *sweepKeys / 8, theta: 0.99, warmup: *sweepWarmup,
		window: *sweepWindow, seed: 1, tracked: 4096}
	var sts []structure
	for _, s := range strings.Split(*sweepStructs, ",") {
		sts = append(sts, structure(s))
	}
	var mixes []mix
	for _, s := range strings.Split(*sweepMixes, ",") {
		for _, mx := range []mix{writeIntensive, writeOnly} {
			if mx.name == s {
				mixes = append(mixes, mx)
			}
		}
	}
	var syncs []syncKind
	for _, s := range strings.Split(*sweepSyncs, ",") {
		syncs = append(syncs, syncKind(s))
	}
	var counts []int
	for _, s := range strings.Split(*sweepCounts, ",") {
		n, err := strconv.Atoi(s)
		require.NoError(t, err)
		counts = append(counts, n)
	}
	res := runSweep(t, cfg, sts, mixes, syncs, counts, testWriter{t})
	out := table(res, sts, mixes, syncs, counts)
	t.Log(out)
	fmt.Println(out)
	if *sweepSVG != "" {
		require.NoError(t, writeSVG(*sweepSVG, res, sts, mixes, syncs, counts))
	}
}

type testWriter struct{ t testing.TB }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// TestShape is the short version of TestSweep in the suite: the pointer array, write-intensive,
// at 16, 32 and 192 clients (64Ki keys, a 2ms warm-up and a 1ms window of virtual time). It
// asserts the shape CIDER §5.2.1 reports: optimistic synchronization scales to tens of clients
// and then collapses, the CAS spinlock overtakes it at high counts, and CIDER matches it at
// low counts and stays on top as they grow.
func TestShape(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	cfg := sweepCfg{arrayKeys: 1 << 16, theta: 0.99, warmup: 2 * time.Millisecond, window: time.Millisecond, seed: 1, tracked: 256}
	// The points the assertions need: the lock baselines only at the high count.
	res := runSweep(t, cfg, []structure{arrayKV}, []mix{writeIntensive}, []syncKind{optimistic, ciderAuto}, []int{16, 32, 192}, testWriter{t})
	for k, r := range runSweep(t, cfg, []structure{arrayKV}, []mix{writeIntensive}, []syncKind{spin, mcs}, []int{192}, testWriter{t}) {
		res[k] = r
	}
	at := func(k syncKind, n int) float64 { return res[sweepKey{arrayKV, writeIntensive.name, k, n}].tput }
	for k := range res {
		require.Zero(t, res[k].errs, "%+v", k)
	}
	require.Greater(t, at(optimistic, 32), 1.8*at(optimistic, 16), "optimistic scales up to tens of clients")
	require.Less(t, at(optimistic, 192), at(optimistic, 32)/4, "optimistic collapses at high counts")
	require.Greater(t, at(spin, 192), at(optimistic, 192), "the spinlock overtakes optimistic")
	require.InDelta(t, 1, at(ciderAuto, 16)/at(optimistic, 16), 0.1, "CIDER matches optimistic at low contention")
	for _, k := range []syncKind{optimistic, spin, mcs} {
		require.Greater(t, at(ciderAuto, 192), at(k, 192), "CIDER on top of %v at 192 clients", k)
	}
	require.GreaterOrEqual(t, at(ciderAuto, 192), at(ciderAuto, 32), "CIDER stays flat")
	c := res[sweepKey{arrayKV, writeIntensive.name, ciderAuto, 192}]
	require.Positive(t, c.stats.Batches, "no batch was combined")
	require.Less(t, c.mnVerbs(), res[sweepKey{arrayKV, writeIntensive.name, mcs, 192}].mnVerbs(), "CIDER spends fewer memory-node verbs per op than MCS")

	// RACE (8Ki keys) at 192 clients: the same order at the top and at the bottom.
	cfg.raceKeys = 1 << 13
	rres := runSweep(t, cfg, []structure{raceKV}, []mix{writeIntensive}, []syncKind{optimistic, ciderAuto}, []int{192}, testWriter{t})
	ro, rc := rres[sweepKey{raceKV, writeIntensive.name, optimistic, 192}], rres[sweepKey{raceKV, writeIntensive.name, ciderAuto, 192}]
	require.Zero(t, ro.errs+rc.errs)
	require.Greater(t, rc.tput, 4*ro.tput, "CIDER on RACE at 192 clients")
}
