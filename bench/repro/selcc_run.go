package repro

import (
	"bytes"
	"context"
	"encoding/binary"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/farmem/farmem/alloc"
	"github.com/farmem/farmem/bench/generator"
	"github.com/farmem/farmem/ds/blink"
	"github.com/farmem/farmem/ds/selcc"
	"github.com/farmem/farmem/farmem"
	"github.com/farmem/farmem/sim"
)

// selccRun is one seed's run of a point.
type selccRun struct {
	ops, hits, errs uint64
	// lat sums the window's operation latencies by class (latHitRead, latMissRead,
	// latWrite), n counts them; wait and writerWait are the SELCC nodes' latch waits over
	// the window (selcc.NodeStats).
	lat              [3]time.Duration
	n                [3]uint64
	wait, writerWait time.Duration
	tput             float64
	fabric           farmem.Stats
	warmup, window   time.Duration
	converged        bool
	lines, frames    int
	cover            float64       // ShermanDefault: the share of the leaves' parents its cache holds
	levels           int           // ShermanDefault: the tree's levels, leaves included
	paperLevels      int           // and at the paper's 2 billion records (shermanPaperLevels)
	memBusy          time.Duration // the memory nodes' NICs' processing-unit time in the window
	memBytes         uint64        // and the bytes through their ports
}

// Latency classes of selccRun.lat.
const (
	latHitRead  = iota // a read that made no round trip
	latMissRead        // a read that made one or more
	latWrite
)

// selccAlloc is every allocator's options (leases long enough never to expire in a run).
var selccAlloc = alloc.Options{Lease: 10 * time.Second, Refresh: time.Second, ScanInterval: time.Millisecond}

// treeKeys returns the B-tree's keys by record number (YCSB's hashed "user..." names) and the
// pairs to load, sorted, each with an 8-byte value.
func treeKeys(records int) ([][]byte, []blink.Pair) {
	keys := make([][]byte, records)
	pairs := make([]blink.Pair, records)
	for i := range keys {
		keys[i] = generator.AppendKey(nil, int64(i), 0, false)
		pairs[i] = blink.Pair{Key: keys[i], Value: binary.LittleEndian.AppendUint64(nil, uint64(i))}
	}
	slices.SortFunc(pairs, func(a, b blink.Pair) int { return bytes.Compare(a.Key, b.Key) })
	return keys, pairs
}

// treeLinesBound is an upper bound on the lines Build takes for pairs at fill.
func treeLinesBound(pairs []blink.Pair, fill float64) int {
	var b int
	for _, p := range pairs {
		b += 4 + 2*len(p.Key) + len(p.Value)
	}
	leaves := b/int(fill*selccLine-14-2*128) + 2
	return leaves + leaves/8 + 8
}

// clusterOptions returns the measured cluster's options for a point's system.
func (c SelccConfig) clusterOptions(system string, frames, perNode int) selcc.Options {
	// The paper's modes: write-back (Fig. 17 acknowledges a write before its line reaches far
	// memory) and a case-1 holder forwarding with its hand-over FAA in flight (§4.4.1).
	o := selcc.Options{LineSize: selccLine, Frames: frames, EvictBatch: c.EvictBatch, Durability: selcc.WriteBack, Threads: perNode,
		EagerForward: true}
	switch system {
	case SEL:
		o = selcc.Options{Mode: selcc.SEL, LineSize: selccLine}
	case AblNone:
		o.NoForwarding, o.NoDirtyBounds, o.EvictBatch = true, true, 1
	case AblForward:
		o.NoDirtyBounds, o.EvictBatch = true, 1
	case AblBatch:
		o.NoDirtyBounds = true
	}
	return o
}

// runSelccSeed runs one point with one seed: the data laid out by a setup cluster (GCLs
// allocated round robin over the memory nodes, or the tree bulk-loaded over them) and released,
// then a fresh cluster in the point's mode, clients closed-loop on it, a warm-up until
// throughput converges (see Measure) and a window of enough operations.
func runSelccSeed(cfg SelccConfig, sp selccSpec, seed uint64) (selccRun, error) {
	if sp.system == Sherman || sp.system == ShermanDefault {
		return runShermanSeed(cfg, sp, seed)
	}
	tree := sp.fig == figTree || sp.fig == figAblation
	perNode := (sp.clients + 7) / 8
	var keys [][]byte
	var pairs []blink.Pair
	lines := sp.size
	if tree {
		keys, pairs = treeKeys(sp.size)
		lines = treeLinesBound(pairs, cfg.TreeFill)
	}
	div := cfg.CacheDiv
	if tree {
		div = cfg.TreeCacheDiv
	}
	memSize := max(uint64(64<<20), (uint64(lines)*(selccLine+8)*3/8+(1<<20)-1)/(1<<20)*(1<<20))
	model := SelccModel(perNode, lines/div+1, memSize)
	cfg.Costs.apply(&model)
	s, err := sim.New(model, seed)
	if err != nil {
		return selccRun{}, err
	}
	defer s.Close()
	comp, mem := s.Topology().ComputeNodes(), s.Topology().MemoryNodes()
	out := selccRun{}
	var gs []selcc.GCL
	var root selcc.GCL
	var setupErr error
	s.Run(func() { gs, root, out.lines, setupErr = selccSetup(s, comp, mem, sp, pairs, cfg.TreeFill) })
	if setupErr != nil {
		return out, setupErr
	}
	so := cfg.clusterOptions(sp.system, max(1, out.lines/div), perNode)
	if so.Mode == selcc.Cached {
		out.frames = so.Frames
	}

	// The draws: a point's clients share one distribution, each with its own random source.
	var next func(r *rand.Rand, prev int) int
	switch {
	case sp.dist == Locality:
		next = func(r *rand.Rand, prev int) int {
			if prev >= 0 && r.IntN(2) == 0 {
				return prev
			}
			return r.IntN(sp.size)
		}
	case sp.dist == Uniform:
		next = func(r *rand.Rand, _ int) int { return r.IntN(sp.size) }
	default:
		dist := Permuted
		if tree {
			dist = Scrambled // YCSB's, as the paper's YCSB runs draw
		}
		kd, err := newKeyDist(dist, uint64(sp.size), generator.ZipfianTheta)
		if err != nil {
			return out, err
		}
		next = func(r *rand.Rand, _ int) int { return int(kd.Next(r)) }
	}

	var runErr error
	s.Run(func() {
		ctx := context.Background()
		c, err := selcc.Open(ctx, s, so)
		if err != nil {
			runErr = err
			return
		}
		type loadClient struct {
			m  farmem.Memory
			op func(ctx context.Context, r *rand.Rand) (bool, error) // true: a write
		}
		lcs := make([]*loadClient, sp.clients)
		for i := range lcs {
			m, err := s.Open(ctx, comp[i%len(comp)])
			if err != nil {
				runErr = err
				return
			}
			defer m.Close()
			cl, err := c.Client(ctx, m)
			if err != nil {
				runErr = err
				return
			}
			lc := &loadClient{m: m}
			lcs[i] = lc
			if tree {
				a, err := alloc.New(ctx, m, selccAlloc)
				if err != nil {
					runErr = err
					return
				}
				defer a.Close()
				t, err := blink.Open(c, cl, a, root)
				if err != nil {
					runErr = err
					return
				}
				val := binary.LittleEndian.AppendUint64(nil, uint64(i))
				lc.op = func(ctx context.Context, r *rand.Rand) (bool, error) {
					k := keys[next(r, -1)]
					if r.IntN(100) < sp.reads {
						_, err := t.Get(ctx, k)
						return false, err
					}
					return true, t.Update(ctx, k, val)
				}
				continue
			}
			buf := make([]byte, cfg.Access)
			slots := selccLine / cfg.Access
			prev := -1
			lc.op = func(ctx context.Context, r *rand.Rand) (bool, error) {
				prev = next(r, prev)
				g := gs[prev]
				off := r.IntN(slots) * cfg.Access
				if r.IntN(100) < sp.reads {
					gd, err := cl.RLock(ctx, g)
					if err != nil {
						return false, err
					}
					err = gd.Read(ctx, off, buf)
					if e := gd.Unlock(ctx); err == nil {
						err = e
					}
					return false, err
				}
				gd, err := cl.Lock(ctx, g)
				if err != nil {
					return true, err
				}
				binary.LittleEndian.PutUint64(buf, r.Uint64())
				err = gd.Write(ctx, off, buf)
				if e := gd.Unlock(ctx); err == nil {
					err = e
				}
				return true, err
			}
		}
		var w0, ww0 time.Duration
		waits := func() (w, ww time.Duration) {
			for _, n := range comp {
				st := c.NodeStats(n)
				w, ww = w+st.LatchWait, ww+st.WriterWait
			}
			return w, ww
		}
		runErr = measureLoop(s, cfg.Measure, &out, func(i int) *loadClient { return lcs[i] }, len(lcs),
			func(lc *loadClient) farmem.Memory { return lc.m },
			func(ctx context.Context, lc *loadClient, r *rand.Rand) (bool, error) { return lc.op(ctx, r) },
			func(start bool) {
				w, ww := waits()
				if start {
					w0, ww0 = w, ww
					return
				}
				out.wait, out.writerWait = w-w0, ww-ww0
			})
	})
	if runErr != nil {
		return out, runErr
	}
	out.tput = float64(out.ops) / out.window.Seconds()
	return out, nil
}

// measureLoop runs n closed-loop clients until the warm-up has converged (see Measure) and the
// window holds enough operations; it counts in out the window's operations, those that made
// no round trip (hits) and the errors, their latencies by class (op reports whether it was a
// write), and the fabric's counters over the window; window (if not nil) is called as the
// window starts and as it ends. It runs inside the simulation.
func measureLoop[C any](s *sim.Sim, ms Measure, out *selccRun, client func(int) C, n int, mem func(C) farmem.Memory,
	op func(context.Context, C, *rand.Rand) (bool, error), window func(start bool)) error {
	ctx := context.Background()
	rt := s.Runtime()
	measuring, stop := false, false
	var done uint64
	g := s.NewGroup()
	for i := range n {
		lc := client(i)
		m := mem(lc)
		g.Go(func() {
			r := m.Runtime().Rand()
			for !stop {
				before, t0 := m.Stats().RoundTrips, rt.Now()
				write, err := op(ctx, lc, r)
				done++
				if !measuring {
					continue
				}
				if err != nil {
					out.errs++
					continue
				}
				out.ops++
				hit := m.Stats().RoundTrips == before
				if hit {
					out.hits++
				}
				k := latMissRead
				switch {
				case write:
					k = latWrite
				case hit:
					k = latHitRead
				}
				out.lat[k] += rt.Now().Sub(t0)
				out.n[k]++
			}
		})
	}
	g.Go(func() {
		out.converged, out.warmup = warmUp(ctx, rt, ms, &done, nil, false)
		s.ResetStats()
		if window != nil {
			window(true)
		}
		from := rt.Now()
		measuring = true
		measureWindow(ctx, rt, ms, from, &out.ops, nil)
		measuring, stop = false, true
		if window != nil {
			window(false)
		}
		out.window = rt.Now().Sub(from)
		rep := s.Report()
		out.fabric = rep.Stats
		mem := s.Topology().MemoryNodes()
		for _, nr := range rep.NICs {
			if slices.Contains(mem, nr.Node) {
				out.memBusy += nr.Busy
				out.memBytes += nr.Bytes
			}
		}
	})
	return g.Wait()
}

// selccSetup formats the memory nodes and lays the point's data out with a SEL-mode cluster
// (every write straight to far memory), which it then closes: GCLs allocated round robin over
// the memory nodes (by one client per compute node, each with an allocator of its own memory
// node), or the tree bulk-loaded over lines allocated the same way. It returns the GCLs, the
// tree's root and the number of lines the data takes; it runs inside the simulation.
func selccSetup(s *sim.Sim, comp, mem []farmem.NodeID, sp selccSpec, pairs []blink.Pair, fill float64) ([]selcc.GCL, selcc.GCL, int, error) {
	ctx := context.Background()
	k := min(len(comp), len(mem))
	ms := make([]farmem.Memory, k)
	as := make([]*alloc.Allocator, k)
	cls := make([]*selcc.Client, k)
	for i := range k {
		m, err := s.Open(ctx, comp[i])
		if err != nil {
			return nil, 0, 0, err
		}
		defer m.Close()
		ms[i] = m
	}
	if err := alloc.FormatAll(ctx, ms[0], alloc.FormatOptions{}); err != nil {
		return nil, 0, 0, err
	}
	c, err := selcc.Open(ctx, s, selcc.Options{Mode: selcc.SEL, LineSize: selccLine})
	if err != nil {
		return nil, 0, 0, err
	}
	defer c.Close()
	for i := range k {
		o := selccAlloc
		o.Nodes = []farmem.NodeID{mem[i]}
		a, err := alloc.New(ctx, ms[i], o)
		if err != nil {
			return nil, 0, 0, err
		}
		defer a.Close()
		as[i] = a
		if cls[i], err = c.Client(ctx, ms[i]); err != nil {
			return nil, 0, 0, err
		}
	}
	n := 0
	newLine := func(ctx context.Context) (selcc.GCL, error) {
		i := n % k
		n++
		return cls[i].Alloc(ctx, as[i])
	}
	if pairs == nil {
		gs := make([]selcc.GCL, sp.size)
		for j := range gs {
			if gs[j], err = newLine(ctx); err != nil {
				return nil, 0, 0, err
			}
		}
		return gs, 0, n, nil
	}
	root, err := blink.Build(ctx, c, cls[0], newLine, pairs, fill)
	return nil, root, n, err
}
