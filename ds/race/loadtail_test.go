package race_test

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/farmem/farmem/alloc"
	"github.com/farmem/farmem/bench/generator"
	"github.com/farmem/farmem/ds/race"
	"github.com/farmem/farmem/farmem"
	"github.com/farmem/farmem/farmem/farmemtest"
	"github.com/farmem/farmem/internal/dstest"
)

// loadOp is what one insert of BenchmarkLoadTail cost and met on its way.
type loadOp struct {
	wall, cpu time.Duration // cpu < 0: the thread's CPU time was not readable
	race      race.Stats    // the handle's counters' change over the insert
	alloc     alloc.Stats   // the allocator's
	verbs     farmem.Stats  // the client's
	gcs       uint64        // GC cycles that ended during the insert
}

// slowCause names what an insert above the threshold is attributed to, first match in this
// order: it split a subtable (or finished another's), began a split or moved regions of one
// (several, or one: a table split region by region, the default), waited for another
// client's split,
// refilled its allocator (claimed a chunk, scanned or advanced the epoch, waited for
// reclamation), overlapped the end of a GC cycle, spent most of its wall time off its thread's
// CPU (descheduled: the OS ran something else, or the Go scheduler another goroutine), or none
// of these (its own CPU work: GC assists, cache misses, the transport).
func slowCause(o *loadOp) string {
	switch {
	case o.race.Splits > 0 || o.race.Recoveries > 0:
		return "split"
	case o.race.Begins > 0:
		return "split-begin"
	case o.race.Moves > 1:
		return "split-steps"
	case o.race.Moves > 0:
		return "split-step"
	case o.race.SplitWaits > 0:
		return "split-wait"
	case o.alloc.Chunks > 0 || o.alloc.Scans > 0 || o.alloc.Advances > 0 || o.alloc.ReclaimWaits > 0 || o.alloc.Unpooled > 0 || o.alloc.Coalesced > 0:
		return "alloc-refill"
	case o.gcs > 0:
		return "gc-cycle-end"
	case o.cpu >= 0 && o.cpu < o.wall/2:
		return "descheduled"
	default:
		return "on-cpu-other"
	}
}

// BenchmarkLoadTail is a measurement tool: it runs a YCSB-like load phase (100,000 inserts of
// "user"-named keys with 1,000-byte values, as `farmem bench --workload a` loads; kvstore's
// default race parameters) on a cxl region with 1 and 4 clients, each on its own locked OS
// thread, and attributes every insert slower than 50µs to a cause (slowCause), logging per
// cause the count, median and largest wall time and median CPU time, the splits' own
// durations, and the percentiles with the inserts that split or waited for a split counted as
// taking no time (the floor a cheaper split could reach). The table splits region by region
// (the default) unless LOADTAIL_WHOLE=1 asks for the whole split. It also logs the machine's own
// floor: how often a busy loop on a locked thread loses its CPU for over 5µs
// (machineInterruptions) and how many such interruptions the inserts' total wall time
// therefore meets; about one insert in a thousand meeting one puts the p999 at their size.
// With LOADTAIL_GCOFF=1 in the environment the collector is off during the load, which tells
// GC's share from the rest. Each of the b.N loads makes, and removes, a region of its own
// (-benchtime 1x: one load).
func BenchmarkLoadTail(b *testing.B) {
	for _, clients := range []int{1, 4} {
		b.Run(fmt.Sprintf("clients=%d", clients), func(b *testing.B) {
			b.StopTimer() // each load times its inserts alone (loadTail)
			for range b.N {
				loadTail(b, clients, 100_000, 1000, 50*time.Microsecond)
			}
		})
	}
}

func loadTail(b *testing.B, clients, records, vlen int, threshold time.Duration) {
	f, release := tempSplitRegion(b, "race-loadtail-*.region") // 1 GiB: one load's region at a time
	defer release()
	// Split region by region unless LOADTAIL_WHOLE=1 asks for the whole split (layout version 3).
	p := race.Params{MetaSize: 16, WholeSplit: os.Getenv("LOADTAIL_WHOLE") == "1"}
	root := dstest.Build(b, f, alloc.Options{}, func(ctx context.Context, m farmem.Memory, a *alloc.Allocator) (farmem.Addr, error) {
		return race.Create(ctx, m, a, p)
	})
	ctx := context.Background()
	type cl struct {
		m   farmem.Memory
		a   *alloc.Allocator
		tab *race.Table
		ops []loadOp
	}
	cs := make([]*cl, clients)
	for i := range cs {
		m, err := f.Open(ctx, f.ID())
		require.NoError(b, err)
		a, err := alloc.New(ctx, m, alloc.Options{})
		require.NoError(b, err)
		tab, err := race.Open(ctx, m, a, root, race.Options{})
		require.NoError(b, err)
		cs[i] = &cl{m: m, a: a, tab: tab, ops: make([]loadOp, 0, records/clients+records/10)}
	}
	defer func() {
		for _, c := range cs {
			_ = c.tab.Close()
			_ = c.a.Close()
			_ = c.m.Close()
		}
	}()
	quiet := machineInterruptions(200 * time.Millisecond)
	gcoff := os.Getenv("LOADTAIL_GCOFF") == "1"
	if gcoff {
		defer debug.SetGCPercent(debug.SetGCPercent(-1))
	}
	runtime.GC()
	// gcCount reads the number of GC cycles ended so far, from a goroutine's own sample.
	gcCount := func(s []metrics.Sample) uint64 {
		metrics.Read(s)
		return s[0].Value.Uint64()
	}
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make([]error, clients)
	b.StartTimer()
	start := time.Now()
	for ci, c := range cs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			value := make([]byte, vlen)
			var kb []byte
			gs := []metrics.Sample{{Name: "/gc/cycles/total:gc-cycles"}}
			for {
				n := next.Add(1) - 1
				if n >= int64(records) {
					return
				}
				kb = generator.AppendKey(kb[:0], n, 0, false)
				copy(value, kb)
				rs0, as0, vs0 := c.tab.Stats(), c.a.Stats(), c.m.Stats()
				g0 := gcCount(gs)
				cpu0 := threadCPU()
				t0 := time.Now()
				err := c.tab.Insert(ctx, kb, value)
				wall := time.Since(t0)
				cpu1 := threadCPU()
				g1 := gcCount(gs)
				if err != nil {
					errs[ci] = fmt.Errorf("insert %d: %w", n, err)
					return
				}
				o := loadOp{wall: wall, cpu: -1, gcs: g1 - g0}
				if cpu0 >= 0 && cpu1 >= 0 {
					o.cpu = cpu1 - cpu0
				}
				o.race = subRace(c.tab.Stats(), rs0)
				o.alloc = subAlloc(c.a.Stats(), as0)
				o.verbs = c.m.Stats().Sub(vs0)
				c.ops = append(c.ops, o)
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	for _, err := range errs {
		require.NoError(b, err)
	}
	var all []loadOp
	for _, c := range cs {
		all = append(all, c.ops...)
	}
	b.Logf("%s", loadTailReport(all, clients, elapsed, threshold, gcoff, quiet))
	walls := make([]float64, len(all))
	for i, o := range all {
		walls[i] = float64(o.wall.Nanoseconds())
	}
	slices.Sort(walls)
	b.ReportMetric(walls[len(walls)/2]/1e3, "p50-µs")
	b.ReportMetric(walls[len(walls)*999/1000]/1e3, "p999-µs")
}

func subRace(a, b race.Stats) race.Stats {
	return race.Stats{Splits: a.Splits - b.Splits, Recoveries: a.Recoveries - b.Recoveries,
		SplitWaits: a.SplitWaits - b.SplitWaits, Doublings: a.Doublings - b.Doublings,
		Conflicts: a.Conflicts - b.Conflicts, Refreshes: a.Refreshes - b.Refreshes, Walks: a.Walks - b.Walks,
		Repins: a.Repins - b.Repins, Moves: a.Moves - b.Moves, Begins: a.Begins - b.Begins}
}

func subAlloc(a, b alloc.Stats) alloc.Stats {
	return alloc.Stats{Chunks: a.Chunks - b.Chunks, Scans: a.Scans - b.Scans, Advances: a.Advances - b.Advances,
		ReclaimWaits: a.ReclaimWaits - b.ReclaimWaits, Unpooled: a.Unpooled - b.Unpooled, Coalesced: a.Coalesced - b.Coalesced,
		Refreshes: a.Refreshes - b.Refreshes}
}

// interruptions is what machineInterruptions measured.
type interruptions struct {
	perSecond float64
	p50, p90  time.Duration
}

// machineInterruptions spins for d on a locked thread reading the clock, and reports how often
// the loop lost its CPU for over 5µs (interrupts, the kernel's tick, a hypervisor's exits, other
// threads): the floor under any operation's tail on this machine, whatever the operation.
func machineInterruptions(d time.Duration) interruptions {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	var gaps []time.Duration
	start := time.Now()
	last := start
	for last.Sub(start) < d {
		now := time.Now()
		if g := now.Sub(last); g > 5*time.Microsecond {
			gaps = append(gaps, g)
		}
		last = now
	}
	q := interruptions{perSecond: float64(len(gaps)) / last.Sub(start).Seconds()}
	if len(gaps) > 0 {
		slices.Sort(gaps)
		q.p50, q.p90 = gaps[len(gaps)/2], gaps[len(gaps)*9/10]
	}
	return q
}

// loadTailReport formats the attribution of the slow inserts among all.
func loadTailReport(all []loadOp, clients int, elapsed, threshold time.Duration, gcoff bool, quiet interruptions) string {
	var sb strings.Builder
	pct := func(ds []time.Duration, q float64) time.Duration {
		if len(ds) == 0 {
			return 0
		}
		slices.Sort(ds)
		return ds[min(len(ds)-1, int(q*float64(len(ds))))]
	}
	walls := make([]time.Duration, len(all))
	var splits, waits, chunks, gcs, doublings uint64
	var splitWalls, splitCPU, splitRTT, stepWalls []time.Duration
	var steps uint64
	for i, o := range all {
		if o.race.Moves > 0 && o.race.Splits == 0 {
			steps++
			stepWalls = append(stepWalls, o.wall)
		}
		walls[i] = o.wall
		splits += o.race.Splits
		waits += o.race.SplitWaits
		doublings += o.race.Doublings
		chunks += o.alloc.Chunks
		gcs += o.gcs
		if o.race.Splits > 0 {
			splitWalls = append(splitWalls, o.wall)
			splitCPU = append(splitCPU, o.cpu)
			splitRTT = append(splitRTT, time.Duration(o.verbs.TotalVerbs()))
		}
	}
	fmt.Fprintf(&sb, "\nload: %d inserts, %d clients, %v (%.0f/s), GC off %v\n", len(all), clients, elapsed.Round(time.Millisecond), float64(len(all))/elapsed.Seconds(), gcoff)
	fmt.Fprintf(&sb, "  wall p50 %v p99 %v p999 %v p9999 %v max %v\n", pct(walls, .5), pct(walls, .99), pct(walls, .999), pct(walls, .9999), pct(walls, 1))
	var inserting time.Duration
	for _, w := range walls {
		inserting += w
	}
	fmt.Fprintf(&sb, "  the machine: a busy loop on one locked thread, before the load, lost its CPU %.0f times a second for over 5µs (median %v, p90 %v): the inserts' %v of wall time in all expect about %.0f such interruptions\n",
		quiet.perSecond, quiet.p50, quiet.p90, inserting.Round(time.Millisecond), quiet.perSecond*inserting.Seconds())
	// The floor a cheaper split could reach: the same percentiles with every insert that split
	// or waited for a split counted as taking no time, so only the other causes remain.
	floor := make([]time.Duration, len(all))
	for i, o := range all {
		if o.race.Splits == 0 && o.race.Recoveries == 0 && o.race.SplitWaits == 0 && o.race.Moves == 0 && o.race.Begins == 0 {
			floor[i] = o.wall
		}
	}
	fmt.Fprintf(&sb, "  without splits, split begins and steps and split waits (counted as 0): p99 %v p999 %v p9999 %v\n", pct(floor, .99), pct(floor, .999), pct(floor, .9999))
	if steps > 0 {
		fmt.Fprintf(&sb, "  inserts that moved a region (not ending a split) %d: wall p50 %v p90 %v p99 %v max %v\n", steps, pct(stepWalls, .5), pct(stepWalls, .9), pct(stepWalls, .99), pct(stepWalls, 1))
	}
	fmt.Fprintf(&sb, "  splits %d (doublings %d): wall p50 %v max %v, cpu p50 %v, verbs p50 %d; split waits %d; chunk claims %d; GC cycles ended %d\n",
		splits, doublings, pct(splitWalls, .5), pct(splitWalls, 1), pct(splitCPU, .5), int64(pct(splitRTT, .5)), waits, chunks, gcs)
	p999 := pct(walls, .999)
	type agg struct {
		n, above     int
		walls, cpus  []time.Duration
		verbs        []time.Duration
		sumWallAbove time.Duration
	}
	by := map[string]*agg{}
	for _, o := range all {
		if o.wall < threshold {
			continue
		}
		c := slowCause(&o)
		a := by[c]
		if a == nil {
			a = &agg{}
			by[c] = a
		}
		a.n++
		if o.wall >= p999 {
			a.above++
		}
		a.walls = append(a.walls, o.wall)
		a.cpus = append(a.cpus, o.cpu)
		a.verbs = append(a.verbs, time.Duration(o.verbs.TotalVerbs()))
	}
	names := make([]string, 0, len(by))
	for k := range by {
		names = append(names, k)
	}
	sort.Strings(names)
	fmt.Fprintf(&sb, "  inserts over %v by cause (at/above p999 %v):\n", threshold, p999)
	fmt.Fprintf(&sb, "  %-14s %6s %8s %10s %10s %10s %8s\n", "cause", "count", ">=p999", "wall p50", "wall max", "cpu p50", "verbs p50")
	for _, k := range names {
		a := by[k]
		fmt.Fprintf(&sb, "  %-14s %6d %8d %10v %10v %10v %8d\n", k, a.n, a.above, pct(a.walls, .5), pct(a.walls, 1), pct(a.cpus, .5), int64(pct(a.verbs, .5)))
	}
	return sb.String()
}

// BenchmarkSplitStages is a measurement tool: it inserts 1,000-byte values into a table of
// kvstore's default parameters on a cxl region (one client) until b.N subtables have split,
// and logs, for the inserts that did a split's work (began a split, moved regions of one or
// ended one: such a table splits region by region over many inserts), the time spent inside
// each kind of verb (by its first op's kind and its size) and between verbs (the split's own
// CPU work, and the inserts' own), per split. The splits are made in loads of at most
// splitsPerRegion, each on a new table on a region of its own (splitLoads).
func BenchmarkSplitStages(b *testing.B) {
	type stage struct {
		n      int
		in     time.Duration
		before time.Duration // gap since the previous verb ended (or the insert began)
	}
	var (
		cur      map[string]*stage
		last, t0 time.Time
	)
	label := func(v farmemtest.Verb) string {
		op := v.Batch.Ops[0]
		n := len(v.Batch.Ops)
		size := "1"
		switch {
		case n >= 256:
			size = "bulk"
		case n > 1:
			size = "few"
		}
		kinds := map[farmem.OpKind]string{farmem.OpRead: "read", farmem.OpWrite: "write", farmem.OpCAS: "cas", farmem.OpMaskedCAS: "mcas", farmem.OpFAA: "faa"}
		k, ok := kinds[op.Kind]
		if !ok {
			k = fmt.Sprint(op.Kind)
		}
		if op.Kind == farmem.OpRead && n == 2 && len(op.Buf) == 8*40 {
			k = "read-sub"
		}
		return k + "×" + size
	}
	var started time.Time
	total := map[string]*stage{}
	var tail time.Duration // from the last verb to the insert's return
	var took time.Duration
	working := 0 // inserts that did a split's work
	value := make([]byte, 1000)
	create := func(ctx context.Context, m farmem.Memory, a *alloc.Allocator) (farmem.Addr, error) {
		return race.Create(ctx, m, a, race.Params{MetaSize: 16})
	}
	splits := splitLoads(b, "race-stages-*.region", alloc.Options{}, create, func(m farmem.Memory, a *alloc.Allocator, root farmem.Addr, want int) int {
		ctx := context.Background()
		tm := &farmemtest.Interposer{Memory: m,
			Before: func(_ context.Context, v farmemtest.Verb) {
				started = time.Now()
				if cur != nil {
					s := cur[label(v)]
					if s == nil {
						s = &stage{}
						cur[label(v)] = s
					}
					s.before += started.Sub(last)
				}
			},
			After: func(_ context.Context, v farmemtest.Verb, _ uint64, _ error) {
				last = time.Now()
				if cur != nil {
					s := cur[label(v)]
					s.n++
					s.in += last.Sub(started)
				}
			}}
		tab, err := race.Open(ctx, tm, a, root, race.Options{})
		require.NoError(b, err)
		defer tab.Close()
		defer func() { cur = nil }()
		made := 0
		for i := int64(0); made < want; i++ {
			kb := generator.AppendKey(nil, i, 0, false)
			cur = map[string]*stage{}
			s0 := tab.Stats()
			t0 = time.Now()
			last = t0
			require.NoError(b, tab.Insert(ctx, kb, value))
			end := time.Now()
			s1 := tab.Stats()
			if s1.Splits == s0.Splits && s1.Begins == s0.Begins && s1.Moves == s0.Moves {
				continue
			}
			made += int(s1.Splits - s0.Splits)
			working++
			took += end.Sub(t0)
			tail += end.Sub(last)
			for k, s := range cur {
				t := total[k]
				if t == nil {
					t = &stage{}
					total[k] = t
				}
				t.n += s.n
				t.in += s.in
				t.before += s.before
			}
		}
		return made
	})
	var sb strings.Builder
	n := time.Duration(splits)
	fmt.Fprintf(&sb, "\n%d splits, %d inserts doing their work: %v of those inserts per split; per split, by verb (first op × size):\n", splits, working, took/n)
	keys := make([]string, 0, len(total))
	for k := range total {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var sumIn, sumGap time.Duration
	for _, k := range keys {
		s := total[k]
		fmt.Fprintf(&sb, "  %-12s %6.1f verbs %10v inside %10v before\n", k, float64(s.n)/float64(splits), s.in/n, s.before/n)
		sumIn += s.in
		sumGap += s.before
	}
	fmt.Fprintf(&sb, "  total inside verbs %v, between verbs %v, after the last %v\n", sumIn/n, sumGap/n, tail/n)
	b.Logf("%s", sb.String())
	b.ReportMetric(float64(took.Nanoseconds())/float64(splits), "split-ns")
}
