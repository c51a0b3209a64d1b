package kvstore

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/farmem/farmem/farmem"
)

// ManagerOptions configure FlexKV's manager (Store.RunManager). The zero value is the paper's
// configuration with no memory split: Δ = 1 s, δ = 0.1, a reassignment at D >= 0.25·B, a
// workload shift at a 10% change of the read share.
type ManagerOptions struct {
	// Period is Δ, how often the manager reads the counters, runs Algorithm 1 and feeds the
	// knob one sample (default 1 s of fabric time).
	Period time.Duration
	// Step is the knob's δ (default 0.1); Threshold Algorithm 1's trigger as a share of the
	// random-reshuffle baseline (default 0.25); Shift the change of the read share that starts
	// a new knob round (default 0.1).
	Step, Threshold, Shift float64
	// NodeMemory is each compute node's memory for its local index and cache, in bytes: the
	// cache holds (NodeMemory - local index) / EntryBytes entries (EntryBytes default 192: a
	// 128-byte pair and its entry's bookkeeping). Zero leaves each cache at the kind's
	// CacheEntries (no split: the ratio then trades nothing).
	NodeMemory, EntryBytes int64
	// Ratio is the index-offload ratio the knob starts from (the paper's i = 0). With Fixed
	// the knob is off and the ratio stays there (the ablation's static steps).
	Ratio float64
	Fixed bool
	// Static assigns partitions to compute nodes by number (partition p to the p mod C-th node)
	// once, with no hotness detection (the ablation's "+Proxy" step).
	Static bool
	// Window is how many periods of access counts make a partition's hotness (default 1: the
	// paper's window of Δ). A period short enough to sample few accesses per partition makes
	// the ranks of cold partitions noise, which Algorithm 1 reads as displacement; a window
	// of several periods smooths it.
	Window int
	// Lease is the manager's lease at the coordinator (default three periods): a manager that
	// stops renewing it is replaced once it runs out.
	Lease time.Duration
	// Trace, if set, is called after every period with what the manager saw and did.
	Trace func(ManagerPeriod)
}

func (o ManagerOptions) withDefaults() ManagerOptions {
	if o.Period <= 0 {
		o.Period = time.Second
	}
	if o.Step <= 0 {
		o.Step = 0.1
	}
	if o.Threshold <= 0 {
		o.Threshold = 0.25
	}
	if o.Shift <= 0 {
		o.Shift = 0.1
	}
	if o.EntryBytes <= 0 {
		o.EntryBytes = 192
	}
	if o.Lease <= 0 {
		o.Lease = 3 * o.Period
	}
	if o.Window <= 0 {
		o.Window = 1
	}
	return o
}

// ManagerPeriod is what the manager saw over one period and what it did at its end.
type ManagerPeriod struct {
	// At is the period's end (the manager's clock), Term the manager's lease term.
	At   farmem.Time
	Term uint64
	// Ops, Reads count the operations the compute nodes' clients ran in the period's sample
	// (the period less the hand-overs run at the end of the one before); Throughput is Ops
	// per second of it.
	Ops, Reads uint64
	Throughput float64
	// Ratio is the index-offload ratio in force during the period, Next the one set for the
	// next; Settled whether the knob's round has ended.
	Ratio, Next float64
	Settled     bool
	// Displacement and Baseline are Algorithm 1's D and B of the period; Reassigned whether
	// they triggered a reassignment (or this was the first assignment).
	Displacement int
	Baseline     float64
	Reassigned   bool
	// Nodes are the live compute nodes (answering the manager), Served the index RPCs each
	// one's proxy served in the period's sample (the load Fig. 19 compares), Dead those that
	// did not answer.
	Nodes  []farmem.NodeID
	Served []uint64
	Dead   []farmem.NodeID
	// Proxied is the share of the period's partition accesses that fell on proxied
	// partitions.
	Proxied float64
	// Moved counts the hand-overs run at the period's end, Failed those rolled back or
	// failed, Recovered the partitions of dead proxies handed back to the memory nodes.
	Moved, Failed, Recovered int
	// Shift is whether the period's read share differed from that of the knob's round's
	// reference sample by ManagerOptions.Shift or more, which restarted the round.
	Shift bool
}

// CV is the coefficient of variation (standard deviation over mean) of Served, the proxies'
// load; 0 with no load.
func (p ManagerPeriod) CV() float64 { return CV(p.Served) }

// CV is the coefficient of variation of xs (population standard deviation over mean); 0 for
// an empty or all-zero xs.
func CV(xs []uint64) float64 {
	if len(xs) == 0 {
		return 0
	}
	var sum float64
	for _, x := range xs {
		sum += float64(x)
	}
	mean := sum / float64(len(xs))
	if mean == 0 {
		return 0
	}
	var v float64
	for _, x := range xs {
		d := float64(x) - mean
		v += d * d
	}
	return math.Sqrt(v/float64(len(xs))) / mean
}

// ErrNotManager: another manager holds the manager's lease.
var ErrNotManager = errors.New("kvstore: flexkv: another manager holds the lease")

// RunManager runs FlexKV's manager on this store until ctx ends (then it returns nil): every
// Period it reads each compute node's access counters (a Call each), runs Algorithm 1
// (rank-aware hotness detection: ranks, displacement, a sticky rank-based reassignment when
// D >= Threshold·B) and Algorithm 2 (the throughput-guided knob of the unified index-offload
// ratio, one sample per period), moves the partitions whose owner changes by hand-overs
// (Store.HandOver's pause and resume, each carrying a new epoch that every index RPC is
// checked against), and sets each node's split of NodeMemory between its local index and its
// cache.
//
// Where it runs and how it is elected: in any process that opens the store (the paper's
// evaluation colocates it with the first compute node), under a lease kept by the coordinator
// (the lowest compute node, which already serializes hand-overs): a manager takes the lease
// when it is free or has run out, renews it every period, and acts only while it holds it;
// any number may be started, one acts at a time, and a restarted one (or another process)
// takes over once the lease of the one that died has run out. It keeps no state the cluster
// needs (the routes live at the coordinator, the counters on the nodes): a new manager reads
// the routes and starts over, and a stale one that still acts after losing its lease only
// runs hand-overs, each safe on its own.
//
// A compute node that does not answer (farmem.ErrNodeDown) is left out of the assignment,
// and every partition it proxies is recovered: handed back to the memory nodes once its
// proxy's lease is fenced (the coordinator's recovery: the memory nodes' copy holds every
// write a proxy acknowledged; every other node is paused, drained and its cache cleared,
// which drops the pairs the dead proxy's directory covered). A node that answers again is
// assigned partitions again.
//
// It fails with farmem.ErrInvalid on a store of another kind or the Aceso baseline.
//
// A knob round restarts on a workload shift (Algorithm 2's line 5: a period whose read share
// differs by Shift or more from that of the round's reference sample) or a reassignment. The
// period that shows a shift may straddle the change, so the restarted round takes its
// reference sample (line 7: the throughput at the current ratio, and the read share later
// periods are compared with) from the next period, run entirely after the shift was seen.
//
// A period's sample (its throughput for the knob, the proxies' load) starts once the
// hand-overs run at the end of the one before are done: the counters are read again then
// (one more Call per node) and the operations counted during the hand-overs dropped.
//
// Limits: the coordinator is not replaced (when it is down the manager waits); a reassignment
// is a sequence of per-partition hand-overs, each pausing only its partition (the paper
// pauses all moving partitions at once with a staging map).
func (s *Store) RunManager(ctx context.Context, o ManagerOptions) error {
	k, ok := s.opts.Index.(*FlexKV)
	if !ok || k.NoProxy {
		return fmt.Errorf("kvstore: index %s has no proxies to manage: %w", s.opts.Index.Name(), farmem.ErrInvalid)
	}
	o = o.withDefaults()
	mg := &manager{s: s, k: k, o: o, rt: s.rt, knob: NewKnob(o.Ratio, o.Step)}
	for mg.id == 0 {
		mg.id = s.rt.Rand().Uint64()
	}
	mg.last = s.rt.Now()
	for {
		if err := s.rt.Sleep(ctx, o.Period); err != nil {
			return nil
		}
		err := s.with(ctx, func(idx Index) error {
			x, ok := idx.(*flexIndex)
			if !ok {
				return fmt.Errorf("kvstore: flexkv manager: index %T: %w", idx, farmem.ErrInvalid)
			}
			return mg.period(ctx, x)
		})
		switch {
		case ctx.Err() != nil:
			return nil
		case errors.Is(err, farmem.ErrInvalid):
			return err
		}
		// Other errors (the coordinator down, another manager's lease) are retried next
		// period.
	}
}

// manager is RunManager's state between periods.
type manager struct {
	s    *Store
	k    *FlexKV
	o    ManagerOptions
	rt   farmem.Runtime
	id   uint64
	term uint64
	knob *Knob
	last farmem.Time
	// oldRanks are Algorithm 1's R_old (nil before the first assignment); lists each live
	// node's hot-to-cold partition list, for listNodes.
	oldRanks  []int
	lists     [][]int
	listNodes []farmem.NodeID
	served    map[farmem.NodeID]uint64
	readShare float64 // the read share of the knob's round's reference sample
	// refPending: a round was (re)started at the end of the last period, whose sample is
	// not the round's: the next period is its reference sample (Algorithm 2's line 7).
	refPending bool
	started    bool
	window     [][]uint64 // the last Window periods' access counts per partition
	carry      []uint64   // accesses counted during the last hand-overs, per partition
}

// period runs one period's work with the pool's client x.
func (mg *manager) period(ctx context.Context, x *flexIndex) error {
	m := x.m
	now := mg.rt.Now()
	span := now.Sub(mg.last)
	mg.last = now
	coord, err := coordinator(m)
	if err != nil {
		return err
	}
	// The lease.
	req := le.AppendUint64(nil, mg.id)
	req = le.AppendUint64(req, uint64(mg.o.Lease))
	rep, err := m.Call(ctx, coord, farmem.OwnerFlexKV.Method(flexMgrElect), req)
	if err != nil {
		return fmt.Errorf("kvstore: flexkv manager: lease: %w", err)
	}
	if len(rep) != 9 {
		return errWire
	}
	if rep[0] != stOK {
		mg.started = false // another manager acts: start over when this one takes the lease
		return ErrNotManager
	}
	if term := le.Uint64(rep[1:]); term != mg.term {
		mg.term, mg.started = term, false
	}
	// The counters.
	var live, dead []farmem.NodeID
	var stats []mgrStatsResp
	var cst mgrStatsResp
	for _, node := range m.Topology().ComputeNodes() {
		rep, err := m.Call(ctx, node, farmem.OwnerFlexKV.Method(flexMgrStats), nil)
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			dead = append(dead, node)
			continue
		}
		st, err := decMgrStats(rep)
		if err != nil {
			return err
		}
		live = append(live, node)
		stats = append(stats, st)
		if node == coord {
			cst = st
		}
	}
	if len(cst.owners) == 0 {
		return fmt.Errorf("kvstore: flexkv manager: coordinator %v: %w", coord, farmem.ErrNodeDown)
	}
	parts := len(cst.owners)
	hot := make([]uint64, parts)
	tr := ManagerPeriod{At: now, Term: mg.term, Nodes: live, Dead: dead, Ratio: mg.knob.Ratio()}
	if mg.served == nil {
		mg.served = map[farmem.NodeID]uint64{}
	}
	for i, st := range stats {
		for p, c := range st.parts {
			if p < parts {
				hot[p] += uint64(c)
			}
		}
		tr.Ops += st.reads + st.writes
		tr.Reads += st.reads
		tr.Served = append(tr.Served, st.served-mg.served[live[i]])
		mg.served[live[i]] = st.served
	}
	var all, onProxy uint64
	for p, h := range hot {
		all += h
		if cst.owners[p] != 0 {
			onProxy += h
		}
	}
	if all > 0 {
		tr.Proxied = float64(onProxy) / float64(all)
	}
	// The accesses counted during the last period's hand-overs (left out of its sample) still
	// count toward hotness.
	for p, c := range mg.carry {
		if p < parts {
			hot[p] += c
			all += c
		}
	}
	mg.carry = nil
	// Hotness over the sliding window of periods.
	if all > 0 {
		mg.window = append(mg.window, hot)
		if len(mg.window) > mg.o.Window {
			mg.window = mg.window[1:]
		}
		hot = make([]uint64, parts)
		for _, h := range mg.window {
			for p, c := range h {
				hot[p] += c
			}
		}
	}
	if span > 0 {
		tr.Throughput = float64(tr.Ops) / span.Seconds()
	}
	// Dead proxies: recover their partitions (the coordinator refuses until each lease is
	// fenced; asked again next period).
	for p, o := range cst.owners {
		for _, d := range dead {
			if o == d {
				if moved, err := x.n.recoverPart(ctx, m, p, o, cst.epochs[p]); err == nil && moved {
					tr.Recovered++
				}
			}
		}
	}
	// Algorithm 1.
	changedNodes := !sameNodes(live, mg.listNodes)
	if mg.o.Static {
		if !mg.started || changedNodes {
			mg.lists, mg.listNodes, tr.Reassigned = AssignStatic(parts, live), live, true
		}
	} else if all > 0 || !mg.started {
		ranks := Ranks(hot, len(live))
		tr.Baseline = DisplacementBaseline(parts, len(live))
		if mg.oldRanks != nil {
			tr.Displacement = Displacement(ranks, mg.oldRanks)
		}
		// The displacement is read once the window is full: a filling window's ranks move
		// with its length, not with the workload.
		full := len(mg.window) >= mg.o.Window
		if !mg.started || changedNodes || full && Reassign(ranks, mg.oldRanks, len(live), mg.o.Threshold) {
			mg.lists, mg.listNodes, tr.Reassigned = AssignByRank(hot, live, cst.owners), live, true
		}
		if all > 0 {
			mg.oldRanks = ranks
		}
	}
	// Algorithm 2: the period just run is the sample of the ratio in force.
	share := 0.0
	if tr.Ops > 0 {
		share = float64(tr.Reads) / float64(tr.Ops)
	}
	if !mg.o.Fixed {
		switch {
		case !mg.started:
			// The first period ran before any assignment: the round's reference sample is
			// the next one.
			mg.refPending = true
		case tr.Reassigned || mg.refPending && tr.Ops == 0:
			mg.knob.Restart()
			mg.refPending = true
		case mg.refPending:
			// The round's first sample, SAMPLE(i, Δ), run entirely after the shift was seen:
			// it sets both the reference throughput and the reference read share.
			mg.knob.Observe(tr.Throughput)
			mg.readShare, mg.refPending = share, false
		case math.Abs(share-mg.readShare) >= mg.o.Shift && tr.Ops > 0:
			// A workload shift. The period that shows it may straddle the change, so neither
			// its throughput nor its read share is the new workload's: the round restarts and
			// takes both from the next, full period.
			mg.knob.Restart()
			mg.refPending = true
			tr.Shift = true
		default:
			mg.knob.Observe(tr.Throughput)
		}
	}
	mg.started = true
	tr.Next = mg.knob.Ratio()
	tr.Settled, _ = mg.knob.Settled()
	// Apply: partitions leaving a proxy first, then those taken over.
	want := Offloaded(parts, mg.listNodes, mg.lists, tr.Next)
	for pass := range 2 {
		for p := range parts {
			if want[p] == cst.owners[p] || (pass == 0) != (want[p] == 0) || isIn(cst.owners[p], dead) {
				continue
			}
			if err := x.handOver(ctx, p, want[p]); err != nil {
				if ctx.Err() != nil {
					return ctx.Err()
				}
				tr.Failed++
				continue
			}
			tr.Moved++
		}
	}
	// The next period's sample starts once the hand-overs are done: the counters are read
	// again and their operations dropped. The paper's adjustment takes 3-5 ms of a 1 s
	// period; with a scaled-down Δ the hand-overs can take much of a period, and a knob
	// probe sampled over its own hand-overs looks worse than the ratio it left.
	if tr.Moved > 0 {
		mg.restartSample(ctx, m, live)
	}
	// The split.
	if mg.o.NodeMemory > 0 {
		req := le.AppendUint64(nil, uint64(mg.o.NodeMemory))
		req = le.AppendUint64(req, uint64(mg.o.EntryBytes))
		for _, node := range live {
			_, _ = m.Call(ctx, node, farmem.OwnerFlexKV.Method(flexMgrSplit), req)
		}
	}
	if mg.o.Trace != nil {
		mg.o.Trace(tr)
	}
	return nil
}

// restartSample reads the live nodes' counters after a period's hand-overs and starts the
// next period's sample there: the operations and proxy loads counted meanwhile are dropped,
// the partition accesses carried into the next period's hotness. A node that does not answer
// is left to the next period (its counts then fall in its sample). Cost: one Call per live
// node.
func (mg *manager) restartSample(ctx context.Context, m farmem.Memory, live []farmem.NodeID) {
	for _, node := range live {
		rep, err := m.Call(ctx, node, farmem.OwnerFlexKV.Method(flexMgrStats), nil)
		if err != nil {
			continue
		}
		st, err := decMgrStats(rep)
		if err != nil {
			continue
		}
		if len(mg.carry) < len(st.parts) {
			mg.carry = append(mg.carry, make([]uint64, len(st.parts)-len(mg.carry))...)
		}
		for p, c := range st.parts {
			mg.carry[p] += uint64(c)
		}
		mg.served[node] = st.served
	}
	mg.last = mg.rt.Now()
}

func sameNodes(a, b []farmem.NodeID) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func isIn(n farmem.NodeID, set []farmem.NodeID) bool {
	for _, x := range set {
		if x == n {
			return true
		}
	}
	return false
}
