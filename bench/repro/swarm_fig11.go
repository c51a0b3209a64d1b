package repro

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/farmem/farmem/bench/baseline/abd"
	"github.com/farmem/farmem/bench/generator"
	"github.com/farmem/farmem/ds/maxreg"
	"github.com/farmem/farmem/farmem"
	"github.com/farmem/farmem/sim"
)

// The faults of Fig. 11: the memory node fails stop (its verbs fail at once, as a killed
// process's connections reset) or fails silent (its verbs time out after the model's down
// timeout, as a paused process's do).
const (
	FaultCrash = "crash"
	FaultHang  = "hang"
)

// swarmBin is one bin of Fig. 11's timeline: the operations that returned in it and the
// median and 99th percentile of their latencies.
type swarmBin struct {
	ops      int
	p50, p99 time.Duration
}

// swarmTimelineSim runs Fig. 11's point: pt.clients run YCSB operations on SWARM objects for
// pt.warmupSpan, then for pt.span, and about a third of the way through the span the first memory
// node (a replica of three keys in four) fails as pt.fault says and never comes back. Every
// operation that returned in the window is binned by when it returned; a failed operation,
// in the window or not, is counted in errors.
func swarmTimelineSim(ctx context.Context, s *sim.Sim, pt swarmPoint, sp maxreg.Params, ap abd.Params) (swarmRun, error) {
	env, err := swarmSetup(ctx, s, pt, sp, ap)
	if err != nil {
		return swarmRun{}, err
	}
	defer env.close()
	// Every client opens its handle of every key first: an Open is a client's one-time cost
	// (the paper's clients hold every key's location from the start), and handles opened
	// lazily in the window would hold its throughput down until all were.
	if err := swarmParallel(ctx, s, len(env.cs), func(i int) error {
		for k := range pt.keys {
			if _, err := env.object(env.cs[i], k); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		return swarmRun{}, fmt.Errorf("opening handles: %w", err)
	}
	rt := s.Runtime()
	start := rt.Now().Add(pt.warmupSpan)
	faultAt, end := start.Add(fig11Fault(pt.span, pt.bin)), start.Add(pt.span)
	victim := s.Topology().MemoryNodes()[0]
	faultErr := make(chan error, 1)
	rt.Go(func() {
		if err := rt.Sleep(ctx, faultAt.Sub(rt.Now())); err != nil {
			faultErr <- err
			return
		}
		if pt.fault == FaultHang {
			faultErr <- s.Hang(victim)
			return
		}
		faultErr <- s.Crash(victim)
	})
	type rec struct {
		done farmem.Time
		lat  time.Duration
	}
	recs := make([][]rec, len(env.cs))
	var errs int
	err = swarmParallel(ctx, s, len(env.cs), func(i int) error {
		c := env.cs[i]
		crt := c.m.Runtime()
		rng := crt.NewRand()
		keys := generator.NewScrambledZipfian(0, int64(pt.keys-1))
		val := make([]byte, 64)
		for n := 0; crt.Now() < end; n++ {
			k := int(keys.Next(rng))
			get := rng.IntN(100) < pt.reads
			o, err := env.object(c, k)
			if err != nil {
				return err
			}
			t0 := crt.Now()
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
			if done := crt.Now(); done >= start {
				recs[i] = append(recs[i], rec{done: done, lat: done.Sub(t0)})
			}
		}
		return nil
	})
	if err != nil {
		return swarmRun{}, err
	}
	if err := <-faultErr; err != nil {
		return swarmRun{}, fmt.Errorf("failing %v: %w", victim, err)
	}
	nb := int((pt.span + pt.bin - 1) / pt.bin)
	lats := make([][]time.Duration, nb)
	run := swarmRun{errors: errs}
	for i := range recs {
		for _, r := range recs[i] {
			b := int(r.done.Sub(start) / pt.bin)
			if b >= nb {
				continue // returned after the window
			}
			lats[b] = append(lats[b], r.lat)
		}
	}
	for _, ls := range lats {
		slices.Sort(ls)
		run.timeline = append(run.timeline, swarmBin{ops: len(ls), p50: swarmQuantile(ls, 0.5), p99: swarmQuantile(ls, 0.99)})
	}
	return run, nil
}

// fig11Fault is when into a window of span the node fails: at the bin boundary nearest a
// third of the way.
func fig11Fault(span, bin time.Duration) time.Duration {
	return (span/bin + 1) / 3 * bin
}

// swarmFig11Summary is what one seed's Fig. 11 timeline shows: before the fault, the
// throughput (operations per µs) and the mean of the bins' medians; after it, the lowest
// bin's throughput and the highest bin's median (as shares of before), how long until a bin's
// median was back within 10% of before (-1: never in the window), and the last third's
// throughput and median (shares of before).
type swarmFig11Summary struct {
	before, beforeP50          float64
	lowest, highest            float64
	back                       time.Duration
	lastThroughput, lastMedian float64
}

// fig11Summary summarizes run's timeline, whose fault came at fault into the window.
func fig11Summary(run swarmRun, bin, fault time.Duration) swarmFig11Summary {
	first := int((fault + bin - 1) / bin) // the first bin wholly after the fault
	tl := run.timeline
	sm := swarmFig11Summary{back: -1, lowest: math.Inf(1)}
	if first < 1 || first >= len(tl) {
		return sm
	}
	var ops, p50 float64
	for _, b := range tl[:first] {
		ops += float64(b.ops)
		p50 += swarmUS(b.p50)
	}
	sm.before = ops / float64(first) / swarmUS(bin)
	sm.beforeP50 = p50 / float64(first)
	last := len(tl) - (len(tl)-first)/3
	var lops, lp50 float64
	for i, b := range tl[first:] {
		i += first
		tp := float64(b.ops) / swarmUS(bin) / math.Max(sm.before, 1e-9)
		md := swarmUS(b.p50) / math.Max(sm.beforeP50, 1e-9)
		sm.lowest = math.Min(sm.lowest, tp)
		sm.highest = math.Max(sm.highest, md)
		if sm.back < 0 && b.ops > 0 && md <= 1.05 {
			sm.back = time.Duration(i)*bin - fault
		}
		if i >= last {
			lops += tp
			lp50 += md
		}
	}
	if n := float64(len(tl) - last); n > 0 {
		sm.lastThroughput, sm.lastMedian = lops/n, lp50/n
	}
	return sm
}

// writeFig11 prints Fig. 11's timelines and their summary beside the paper's description.
func (r *SwarmResult) writeFig11(b *strings.Builder) {
	if len(r.Fig11) == 0 {
		return
	}
	c := r.Config
	fault := fig11Fault(c.Fig11Span, c.Fig11Bin)
	a0 := r.Fig11[0]
	fmt.Fprintf(b, "\nFig. 11: a memory node fails under load: SWARM, YCSB B (95%% gets), %d clients (%d per client server) each with one operation at a time, %d keys; after %v of warm-up, a window of %v in bins of %v (virtual time, by when operations returned); %v into the window the first memory node (a replica of 3 keys in 4) fails and stays failed: fail-stop (crash: its verbs fail at once, as a killed process's connections reset) or fail-silent (hang: its verbs time out after the model's down timeout, %v, as a stopped process's do). Means over seeds.\n",
		a0.Clients, (a0.Clients+3)/4, a0.Keys, c.Fig11Warmup, c.Fig11Span, c.Fig11Bin, fault, r.DownTimeout)
	tw := tabwriter.NewWriter(b, 0, 0, 1, ' ', tabwriter.AlignRight)
	hdr := "from the fault µs\t"
	for _, a := range r.Fig11 {
		hdr += fmt.Sprintf("%s Mops/s\tp50 µs\tp99 µs\t", a.Fault)
	}
	fmt.Fprintln(tw, hdr)
	nb := 0
	for _, a := range r.Fig11 {
		for _, run := range a.Runs {
			nb = max(nb, len(run.timeline))
		}
	}
	for i := range nb {
		row := fmt.Sprintf("%.0f\t", swarmUS(time.Duration(i)*c.Fig11Bin-fault))
		for _, a := range r.Fig11 {
			var tp, p50, p99 []float64
			for _, run := range a.Runs {
				if i < len(run.timeline) {
					bn := run.timeline[i]
					tp = append(tp, float64(bn.ops)/swarmUS(c.Fig11Bin))
					p50, p99 = append(p50, swarmUS(bn.p50)), append(p99, swarmUS(bn.p99))
				}
			}
			m0, _ := MeanCI(tp)
			m1, _ := MeanCI(p50)
			m2, _ := MeanCI(p99)
			row += fmt.Sprintf("%.2f\t%.2f\t%.2f\t", m0, m1, m2)
		}
		fmt.Fprintln(tw, row)
	}
	tw.Flush()
	fmt.Fprintf(b, "Summary per fault (per seed, then mean ±95%%): throughput and the mean of the bins' medians before the fault; after it, the lowest bin's throughput and the highest bin's median as shares of before, the time until a bin's median is back within 5%% of before, and the last third of the window\n")
	tw = tabwriter.NewWriter(b, 0, 0, 1, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "fault\tfailed ops\tbefore Mops/s\tp50 µs\tlowest bin\thighest p50\tp50 back after µs\tlast third Mops/s\tp50\t")
	for _, a := range r.Fig11 {
		var before, p50, low, high, back, lt, lm []float64
		never, errs := 0, 0
		for _, run := range a.Runs {
			sm := fig11Summary(run, c.Fig11Bin, fault)
			errs += run.errors
			before, p50 = append(before, sm.before), append(p50, sm.beforeP50)
			low, high = append(low, 100*sm.lowest), append(high, 100*sm.highest)
			lt, lm = append(lt, 100*sm.lastThroughput), append(lm, 100*sm.lastMedian)
			if sm.back < 0 {
				never++
			} else {
				back = append(back, swarmUS(sm.back))
			}
		}
		ci := func(xs []float64, unit string) string {
			m, h := MeanCI(xs)
			return fmt.Sprintf("%.2f±%.2f%s", m, h, unit)
		}
		pct := func(xs []float64) string {
			m, h := MeanCI(xs)
			return fmt.Sprintf("%.0f±%.0f%%", m, h)
		}
		backs := ci(back, "")
		if never > 0 {
			backs = fmt.Sprintf("not in %d of %d seeds", never, len(a.Runs))
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t\n", a.Fault, errs, ci(before, ""), ci(p50, ""), pct(low), pct(high), backs, pct(lt), pct(lm))
	}
	tw.Flush()
	b.WriteString(swarmPaperFig11)
}

// swarmPaperFig11 is what the paper reports of Fig. 11 (§7.7), in words: the text gives no
// numbers, and the figure's values are not in the text we have.
const swarmPaperFig11 = "Paper (§7.7, Fig. 11; the text gives no numbers): no loss of availability, the throughput goes on through the crash with no operation failing; the latency rises after the crash, because in-place copies were lost and the remaining replicas are no longer unanimous, and recovers as later operations rebuild both; operations that had contacted the crashed node merely contact one more (no reconfiguration).\n"

// swarmJSONBin is one bin of a Fig. 11 timeline in WriteJSON's output.
type swarmJSONBin struct {
	Ops          int
	P50US, P99US float64
}

func jsonTimeline(runs []swarmRun) [][]swarmJSONBin {
	var out [][]swarmJSONBin
	for _, r := range runs {
		var bs []swarmJSONBin
		for _, b := range r.timeline {
			bs = append(bs, swarmJSONBin{Ops: b.ops, P50US: swarmUS(b.p50), P99US: swarmUS(b.p99)})
		}
		out = append(out, bs)
	}
	return out
}

// Timeline returns Fig. 11's point's operations per bin, summed over seeds (the bins of the
// longest seed), and its failed operations.
func (a SwarmAgg) Timeline() (ops []int, errors int) {
	for _, r := range a.Runs {
		errors += r.errors
		for i, b := range r.timeline {
			if i == len(ops) {
				ops = append(ops, 0)
			}
			ops[i] += b.ops
		}
	}
	return ops, errors
}
