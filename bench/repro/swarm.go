package repro

import (
	"context"
	"fmt"
	"io"
	"slices"
	"time"

	"github.com/farmem/farmem/alloc"
	"github.com/farmem/farmem/bench/baseline/abd"
	"github.com/farmem/farmem/bench/generator"
	"github.com/farmem/farmem/ds/maxreg"
	"github.com/farmem/farmem/ds/swarm"
	"github.com/farmem/farmem/farmem"
	"github.com/farmem/farmem/sim"
)

// The systems of the SWARM reproduction.
const (
	SysRAW   = "RAW"
	SysSWARM = "SWARM"
	SysDMABD = "DM-ABD"
)

// SwarmConfig is one run of the SWARM reproduction (`farmem repro swarm`): Table 2 and Fig. 5
// (4 clients, YCSB B), Fig. 11 (16 clients, YCSB B: a throughput and latency timeline across a
// memory node's failure, fail-stop and fail-silent), Fig. 12 (16 clients on one key, YCSB A)
// and Fig. 13 (64 clients, 1/4/16/64 metadata words, YCSB B and A), on SwarmModel. The objects are keyed directly: the
// paper's index caches hold every key's location in its steady state (§7, "index caches large
// enough"), so a get or update there goes to the object's replicas with no index access; the
// SWARM-KV index kind is not part of this run.
type SwarmConfig struct {
	// Keys is the number of objects of Fig. 5 and Table 2 (the paper: 100K keys of 24 B;
	// the key bytes never reach memory on the object path), Fig13Keys of Fig. 13.
	Keys, Fig13Keys int
	// Warmup and Ops are each client's operations before and in the window, for Fig. 5;
	// ContendedWarmup and ContendedOps for Figs. 12 and 13.
	Warmup, Ops, ContendedWarmup, ContendedOps int
	// Words are Fig. 13's metadata words per key (the paper: 1, 4, 16, 64), Fig13Clients its
	// clients (the paper: 64; at most 64).
	Words        []int
	Fig13Clients int
	// Fig11Clients run Fig. 11 (YCSB B over Keys keys, spread over the 4 client servers; at
	// most 64): Fig11Warmup of virtual time, then a window of Fig11Span binned by Fig11Bin, a
	// third of the way through which a memory node fails (once stopping, once silent).
	Fig11Clients                     int
	Fig11Warmup, Fig11Span, Fig11Bin time.Duration
	// Figures selects what runs, of "5" (with Table 2), "11", "12", "13" (default all).
	Figures []string
	// Seeds and Workers are as in CiderConfig; Band lists the unpinned costs Fig. 5's
	// ratios are rerun at (each variant sets one; see SwarmModel).
	Seeds   []uint64
	Workers int
	Band    []Variant
}

// SwarmFull is the full reproduction: 1,000 keys (Fig. 13: 500), 4,000 operations per client
// after 1,000 of warm-up (Figs. 12 and 13: 1,000 after 300), Fig. 11 with 16 clients over
// 6ms in bins of 500µs after 500µs of warm-up, three seeds, and the band of the CPU per verb
// (50ns and 200ns).
func SwarmFull() SwarmConfig {
	return SwarmConfig{Keys: 1000, Fig13Keys: 500, Warmup: 1000, Ops: 4000, ContendedWarmup: 300, ContendedOps: 1000,
		Words: []int{1, 4, 16, 64}, Fig13Clients: 64, Seeds: []uint64{1, 2, 3},
		Fig11Clients: 16, Fig11Warmup: 500 * time.Microsecond, Fig11Span: 6 * time.Millisecond, Fig11Bin: 500 * time.Microsecond,
		Band: []Variant{{OpCPU: 50 * time.Nanosecond}, {OpCPU: 200 * time.Nanosecond}}}
}

// SwarmQuick is a run of a few seconds with the full run's code paths: 100 keys, short
// windows, two seeds, one band variant. Its figures pin the code; they reproduce nothing.
func SwarmQuick() SwarmConfig {
	c := SwarmFull()
	c.Keys, c.Fig13Keys, c.Warmup, c.Ops, c.ContendedWarmup, c.ContendedOps = 100, 50, 100, 300, 50, 150
	c.Fig11Clients, c.Fig11Warmup, c.Fig11Span, c.Fig11Bin = 8, 100*time.Microsecond, 1500*time.Microsecond, 150*time.Microsecond
	c.Seeds, c.Band = []uint64{1, 2}, c.Band[1:]
	return c
}

func (c SwarmConfig) has(fig string) bool {
	return len(c.Figures) == 0 || slices.Contains(c.Figures, fig)
}

func (c SwarmConfig) check() error {
	bad := func(format string, a ...any) error { return fmt.Errorf("%w: %s", ErrConfig, fmt.Sprintf(format, a...)) }
	for _, f := range c.Figures {
		if !slices.Contains([]string{"5", "11", "12", "13"}, f) {
			return bad("figure %q (want 5, 11, 12 or 13)", f)
		}
	}
	switch {
	case len(c.Seeds) == 0:
		return bad("no seeds")
	case c.Keys < 3 || c.Fig13Keys < 3:
		return bad("%d and %d keys: want at least 3", c.Keys, c.Fig13Keys)
	case c.Warmup < 0 || c.Ops < 10 || c.ContendedWarmup < 0 || c.ContendedOps < 10:
		return bad("operations per client: warm-up %d/%d, window %d/%d", c.Warmup, c.ContendedWarmup, c.Ops, c.ContendedOps)
	case slices.ContainsFunc(c.Words, func(w int) bool { return w < 1 || w > 64 }):
		return bad("words %v: want 1 to 64", c.Words)
	case c.Fig13Clients < 1 || c.Fig13Clients > 64:
		return bad("Fig. 13 with %d clients: want 1 to 64", c.Fig13Clients)
	case c.has("11") && (c.Fig11Clients < 1 || c.Fig11Clients > 64):
		return bad("Fig. 11 with %d clients: want 1 to 64", c.Fig11Clients)
	case c.has("11") && (c.Fig11Bin <= 0 || c.Fig11Span < 3*c.Fig11Bin || c.Fig11Warmup < 0):
		return bad("Fig. 11's window %v in bins of %v after %v: want at least 3 bins", c.Fig11Span, c.Fig11Bin, c.Fig11Warmup)
	case slices.ContainsFunc(c.Band, func(v Variant) bool { return v.IsZero() || v.check() != nil }):
		return bad("band %v: each variant sets a positive cost", c.Band)
	}
	return nil
}

// The testbed's published figures (SWARM §7 Table 1 and §7.1-7.2) that SwarmModel is built from.
const (
	// swarmRawGet and swarmRawUpdate are the paper's RAW medians (§7.1): one READ and one
	// WRITE of a 64-byte value over one switch hop. The model's one-way latency is set so
	// that RAW's update takes swarmRawUpdate, and a READ's (and an atomic's) service at the
	// memory node so that RAW's get takes swarmRawGet: the difference is the responder's PCIe
	// read of host memory, which a WRITE's acknowledgement does not wait for and a READ's
	// reply and an atomic's read-modify-write do.
	swarmRawGet    = 1900 * time.Nanosecond
	swarmRawUpdate = 1600 * time.Nanosecond
	// swarmMemRate is the ConnectX-4's message rate, 150 million messages per second (Mellanox
	// ConnectX-4 VPI adapter product brief): the WRITE service time at the memory node. A
	// vendor peak, an upper bound.
	swarmMemRate = 150e6
	// swarmJitter is the spread of a one-way trip: uniform in [0, swarmJitter), so a round
	// trip spreads over up to twice that, the paper's P1-P99 spread of SWARM-KV's gets (2.2 to
	// 2.8µs, §7.1). The one-way latency is lowered by its mean so that RAW's medians stay
	// calibrated.
	swarmJitter = 300 * time.Nanosecond
	// swarmTick is the timestamp unit of Safe-Guess's guesses: the authors' artifact ticks
	// every MIN_RTT/3 = 1400ns/3 (swarm-kv's tspointers); ds/maxreg's default is 1µs. Under
	// contention a coarser tick makes concurrent writers' guesses collide more often.
	swarmTick = 466 * time.Nanosecond
	// swarmCores is a client server's cores on the NIC's socket (Table 1: two 8-core Xeon Gold
	// 6244, the runs on socket 0).
	swarmCores = 8
)

// SwarmModel is the SWARM testbed (§7, Table 1): four client servers with ConnectX-6 NICs
// (sim.ConnectX6's compute NIC) and four memory nodes with ConnectX-4 NICs, one EDR switch
// (100 Gb/s: 12.5 GB/s ports). Sourced: the ports' rate; the memory NIC's WRITE service from
// its message rate (swarmMemRate); 8 cores per client server; the one-way latency and the
// memory node's READ and atomic service from the paper's RAW medians (swarmRawGet,
// swarmRawUpdate: the model's RAW reproduces them by construction, so RAW's row is a
// calibration, not a result); the links' jitter from the paper's spread of gets
// (swarmJitter). Not pinned by any source, and swept: the client CPU per verb
// (OpCPU 100ns; the paper's §7.2 gives "200+ ns" per series of verbs to one node, an upper
// bound per verb; Band 50ns-200ns) and the memory NIC's parallel units (16: its READ and
// atomic service times are latency more than occupancy). perNode is the clients of each
// compute node (one slot more is reserved for a Call handler, unused), memSize each memory
// node's bytes.
func SwarmModel(perNode int, memSize uint64) sim.Model {
	m := sim.ConnectX6()
	m.Name = "ConnectX-6 clients, ConnectX-4 memory nodes, one switch hop (SWARM testbed)"
	m.MemoryNodes, m.ComputeNodes, m.ClientsPerNode, m.MemorySize = 4, 4, perNode+1, memSize
	m.MaxHandlers = 1 // no Call is made
	m.SliceSize = 64 << 10
	m.Cores = swarmCores
	m.OpCPU = 100 * time.Nanosecond
	m.DownTimeout = time.Millisecond
	rate := float64(swarmMemRate)
	w := time.Duration(1e9/rate + 0.5)
	rd := swarmRawGet - swarmRawUpdate + w
	m.MemoryNIC.Verb[farmem.OpWrite] = w
	for _, k := range []farmem.OpKind{farmem.OpRead, farmem.OpCAS, farmem.OpFAA, farmem.OpMaskedCAS} {
		m.MemoryNIC.Verb[k] = rd
	}
	m.MemoryNIC.Issue = w
	m.MemoryNIC.Units = 16
	// RAW's update: the client's CPU and its NIC's issue, the link twice, the WRITE's service
	// and 64 bytes at 12.5 GB/s (5ns) on each port.
	m.Jitter = swarmJitter
	m.MemoryLatency = (swarmRawUpdate-m.OpCPU-m.ComputeNIC.Issue-w-10*time.Nanosecond)/2 - swarmJitter/2
	m.ComputeLatency = m.MemoryLatency
	return m
}

// swarmPoint is one measured configuration.
type swarmPoint struct {
	fig     string
	sys     string
	clients int
	keys    int
	reads   int // percent
	words   int // SWARM's metadata words per key
	warmup  int
	ops     int
	// Fig. 11: fault ("crash" or "hang") fails a memory node a third of the way through a
	// window of span (virtual time) that follows warmupSpan of operations; bin is the
	// timeline's bin. Without a fault the point runs warmup and ops operations per client.
	fault                 string
	warmupSpan, span, bin time.Duration
}

// swarmRun is what one seed of a point measured in its window.
type swarmRun struct {
	getLat, updLat []time.Duration
	getRT, updRT   []uint64
	errors         int
	// halves are the window's two halves' median latencies (all operations), the warm-up's
	// convergence check.
	halves [2]time.Duration
	// timeline is Fig. 11's window, bin by bin (operations by the time they returned).
	timeline []swarmBin
}

// swarmObjects builds a point's objects: each key's replicas on 3 of the 4 memory nodes
// (key mod 4 and the next two), RAW's single copy on node key mod 4.
type swarmObjects struct {
	raw   []farmem.Addr
	reps  [][]farmem.Addr
	sp    maxreg.Params
	ap    abd.Params
	nodes []farmem.NodeID
}

func (pt swarmPoint) params(per int) (maxreg.Params, abd.Params) {
	writers := 4 * per
	words := pt.words
	if words == 0 {
		words = min(writers, maxreg.MaxWords) // one word per writer, the paper's recommendation
	}
	slots := 8
	if pt.keys == 1 {
		slots = maxreg.MaxSlots // one key: every update reuses its writer's buffers
	}
	sp := maxreg.Params{Words: words, Slots: slots, ValueSize: 64, Writers: writers, Tick: swarmTick,
		Lease: 100 * time.Microsecond, Skew: 10 * time.Microsecond}
	return sp, abd.Params{ValueSize: 64, Writers: writers, Slots: slots}
}

func runSwarmPoint(ctx context.Context, pt swarmPoint, seed uint64, v Variant) (swarmRun, error) {
	per := (pt.clients+3)/4 + 1 // the clients of a compute node, and the building client
	sp, ap := pt.params(per + 1)
	size := max(swarm.Size(sp), abd.Size(ap), abd.RawSize(ap))
	memSize := uint64(pt.keys)*size + 4<<20
	model := SwarmModel(per, memSize)
	v.apply(&model)
	s, err := sim.New(model, seed)
	if err != nil {
		return swarmRun{}, err
	}
	defer s.Close()
	var run swarmRun
	var runErr error
	s.Run(func() {
		if pt.fault != "" {
			run, runErr = swarmTimelineSim(ctx, s, pt, sp, ap)
			return
		}
		run, runErr = swarmSim(ctx, s, pt, sp, ap)
	})
	return run, runErr
}

// swarmClient is one client of a point: its Memory and its handles of the objects it used.
type swarmClient struct {
	m    farmem.Memory
	objs map[int]abd.Object
}

// swarmEnv is a point's objects, built and loaded (every key written once), and its clients.
type swarmEnv struct {
	cs     []*swarmClient
	object func(c *swarmClient, k int) (abd.Object, error)
	close  func()
}

// swarmSetup builds pt's objects and clients and writes every key once.
func swarmSetup(ctx context.Context, s *sim.Sim, pt swarmPoint, sp maxreg.Params, ap abd.Params) (*swarmEnv, error) {
	nodes := s.Topology().MemoryNodes()
	comp := s.Topology().ComputeNodes()
	m, a, closeBuild, err := func() (farmem.Memory, *alloc.Allocator, func(), error) {
		m, err := s.Open(ctx, comp[0])
		if err != nil {
			return nil, nil, nil, err
		}
		if err := alloc.FormatAll(ctx, m, alloc.FormatOptions{}); err != nil {
			_ = m.Close()
			return nil, nil, nil, err
		}
		a, err := alloc.New(ctx, m, alloc.Options{})
		if err != nil {
			_ = m.Close()
			return nil, nil, nil, err
		}
		return m, a, func() { _ = a.Close(); _ = m.Close() }, nil
	}()
	if err != nil {
		return nil, err
	}
	addrs := make([][]farmem.Addr, pt.keys)
	for k := range pt.keys {
		rn := []farmem.NodeID{nodes[k%4], nodes[(k+1)%4], nodes[(k+2)%4]}
		switch pt.sys {
		case SysRAW:
			var ad farmem.Addr
			ad, err = abd.CreateRaw(ctx, m, a, rn[0], ap)
			addrs[k] = []farmem.Addr{ad}
		case SysDMABD:
			addrs[k], err = abd.CreateDMABD(ctx, m, a, rn, ap)
		default:
			addrs[k], err = swarm.Create(ctx, m, a, rn, sp)
		}
		if err != nil {
			closeBuild()
			return nil, fmt.Errorf("creating key %d: %w", k, err)
		}
	}
	closeBuild()

	// Clients: pt.clients, spread over the 4 compute nodes, each with its own handles.
	env := &swarmEnv{close: func() {}}
	cs := make([]*swarmClient, pt.clients)
	for i := range cs {
		cm, err := s.Open(ctx, comp[i%len(comp)])
		if err != nil {
			env.close()
			return nil, err
		}
		prev := env.close
		env.close = func() { _ = cm.Close(); prev() }
		cs[i] = &swarmClient{m: cm, objs: map[int]abd.Object{}}
	}
	env.cs = cs
	object := func(c *swarmClient, k int) (abd.Object, error) {
		if o, ok := c.objs[k]; ok {
			return o, nil
		}
		var o abd.Object
		var err error
		switch pt.sys {
		case SysRAW:
			o, err = abd.OpenRaw(c.m, addrs[k][0], ap)
		case SysDMABD:
			o, err = abd.OpenDMABD(c.m, addrs[k], ap)
		default:
			var r *swarm.Register
			r, err = swarm.Open(ctx, c.m, addrs[k], swarm.Options{})
			o = swarmObject{r}
		}
		if err != nil {
			return nil, err
		}
		c.objs[k] = o
		return o, nil
	}
	value := make([]byte, 64)
	// Load: every key written once, by the clients in turn.
	if err := swarmParallel(ctx, s, len(cs), func(i int) error {
		for k := i; k < pt.keys; k += len(cs) {
			o, err := object(cs[i], k)
			if err != nil {
				return err
			}
			value[0] = byte(k)
			if err := o.Update(ctx, value); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		env.close()
		return nil, fmt.Errorf("load: %w", err)
	}
	env.object = object
	return env, nil
}

func swarmSim(ctx context.Context, s *sim.Sim, pt swarmPoint, sp maxreg.Params, ap abd.Params) (swarmRun, error) {
	env, err := swarmSetup(ctx, s, pt, sp, ap)
	if err != nil {
		return swarmRun{}, err
	}
	defer env.close()
	cs, object := env.cs, env.object
	type rec struct {
		get bool
		lat time.Duration
		rt  uint64
		at  farmem.Time
	}
	recs := make([][]rec, len(cs))
	var errs int
	err = swarmParallel(ctx, s, len(cs), func(i int) error {
		c := cs[i]
		rt := c.m.Runtime()
		rng := rt.NewRand()
		keys := generator.NewScrambledZipfian(0, int64(pt.keys-1))
		val := make([]byte, 64)
		for n := range pt.warmup + pt.ops {
			k := int(keys.Next(rng))
			get := rng.IntN(100) < pt.reads
			o, err := object(c, k)
			if err != nil {
				return err
			}
			before, t0 := c.m.Stats().RoundTrips, rt.Now()
			if get {
				_, err = o.Get(ctx)
			} else {
				val[0], val[1] = byte(i), byte(n)
				err = o.Update(ctx, val)
			}
			if err != nil {
				errs++
				continue
			}
			if n >= pt.warmup {
				recs[i] = append(recs[i], rec{get: get, lat: rt.Now().Sub(t0), rt: c.m.Stats().RoundTrips - before, at: t0})
			}
		}
		return nil
	})
	if err != nil {
		return swarmRun{}, err
	}
	var run swarmRun
	run.errors = errs
	var all []rec
	for i := range recs {
		all = append(all, recs[i]...)
	}
	slices.SortStableFunc(all, func(x, y rec) int { return int(x.at.Sub(y.at)) })
	var halves [2][]time.Duration
	for j, r := range all {
		halves[j*2/max(1, len(all))] = append(halves[j*2/max(1, len(all))], r.lat)
		if r.get {
			run.getLat, run.getRT = append(run.getLat, r.lat), append(run.getRT, r.rt)
		} else {
			run.updLat, run.updRT = append(run.updLat, r.lat), append(run.updRT, r.rt)
		}
	}
	run.halves = [2]time.Duration{swarmQuantile(halves[0], 0.5), swarmQuantile(halves[1], 0.5)}
	return run, nil
}

// swarmObject is ds/swarm's register as an abd.Object.
type swarmObject struct{ r *swarm.Register }

func (s swarmObject) Get(ctx context.Context) ([]byte, error)    { return s.r.Read(ctx) }
func (s swarmObject) Update(ctx context.Context, v []byte) error { return s.r.Write(ctx, v) }
func (s swarmObject) Close() error                               { return s.r.Close() }

// swarmParallel runs fn(0..n-1) as simulated goroutines and waits for all of them.
func swarmParallel(ctx context.Context, s *sim.Sim, n int, fn func(i int) error) error {
	rt := s.Runtime()
	errs := make([]error, n)
	left := n
	for i := range n {
		rt.Go(func() {
			errs[i] = fn(i)
			left--
		})
	}
	for left > 0 {
		if err := rt.Sleep(ctx, 10*time.Microsecond); err != nil {
			return err
		}
	}
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// swarmQuantile is the q-quantile of xs (nearest rank; 0 for none), xs left unsorted.
func swarmQuantile[T int64 | uint64 | time.Duration](xs []T, q float64) T {
	if len(xs) == 0 {
		return 0
	}
	ys := slices.Clone(xs)
	slices.Sort(ys)
	i := int(q*float64(len(ys)) + 0.5)
	return ys[min(max(i-1, 0), len(ys)-1)]
}

// swarmProgress writes a progress line if w is not nil.
func swarmProgress(w io.Writer, format string, a ...any) {
	if w != nil {
		fmt.Fprintf(w, format, a...)
	}
}
