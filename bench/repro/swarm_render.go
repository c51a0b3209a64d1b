package repro

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"strings"
	"text/tabwriter"
	"time"
)

// The paper's figures the run is set beside (SWARM §7.1, §7.8, §7.9; Table 2).
var (
	swarmPaperMedian = map[string][2]float64{ // get, update medians in µs (Fig. 5)
		SysRAW: {1.9, 1.6}, SysSWARM: {2.4, 3.1}, SysDMABD: {4.3, 4.9},
	}
	swarmPaperRT     = map[string][2]int{SysRAW: {1, 1}, SysSWARM: {1, 1}, SysDMABD: {2, 2}}
	swarmPaperUpd12  = []float64{73, 7, 14, 6}   // % of updates in 1, 2, 3, 4 round trips
	swarmPaperGet12  = []float64{14, 8, 78}      // % of gets in 1, 2, more
	swarmPaperOneRTB = []float64{23, 57, 86, 99} // % of 1-RT updates at 1/4/16/64 words, YCSB B
	swarmPaperOneRTA = []float64{2, 11, 39, 99}  // YCSB A
)

func swarmUS(d time.Duration) float64 { return float64(d) / 1e3 }

// seedMedians returns each seed's median get and update latency in µs.
func (a SwarmAgg) seedMedians() (gets, upds []float64) {
	for _, r := range a.Runs {
		gets = append(gets, swarmUS(swarmQuantile(r.getLat, 0.5)))
		upds = append(upds, swarmUS(swarmQuantile(r.updLat, 0.5)))
	}
	return gets, upds
}

func (a SwarmAgg) all() (getLat, updLat []time.Duration, getRT, updRT []uint64, errs int) {
	for _, r := range a.Runs {
		getLat, updLat = append(getLat, r.getLat...), append(updLat, r.updLat...)
		getRT, updRT = append(getRT, r.getRT...), append(updRT, r.updRT...)
		errs += r.errors
	}
	return
}

// shares returns, per seed, the percentage of xs equal to each of 1..len(buckets)-1 and, in
// the last bucket, at least len(buckets): the mean and half-width over seeds.
func (a SwarmAgg) shares(upd bool, buckets int) (mean, half []float64) {
	per := make([][]float64, buckets)
	for _, r := range a.Runs {
		xs := r.getRT
		if upd {
			xs = r.updRT
		}
		cnt := make([]float64, buckets)
		for _, x := range xs {
			cnt[min(int(max(x, 1)), buckets)-1]++
		}
		for i := range cnt {
			per[i] = append(per[i], 100*cnt[i]/math.Max(1, float64(len(xs))))
		}
	}
	for i := range per {
		m, h := MeanCI(per[i])
		mean, half = append(mean, m), append(half, h)
	}
	return mean, half
}

func (r *SwarmResult) fig5(sys string) (SwarmAgg, bool) {
	for _, a := range r.Fig5 {
		if a.System == sys {
			return a, true
		}
	}
	return SwarmAgg{}, false
}

// ratio returns sys's median over RAW's, seed by seed, for gets (0) or updates (1), in aggs.
func swarmRatio(aggs []SwarmAgg, sys string, which int) (float64, float64) {
	var raw, x SwarmAgg
	for _, a := range aggs {
		switch a.System {
		case SysRAW:
			raw = a
		case sys:
			x = a
		}
	}
	rg, ru := raw.seedMedians()
	xg, xu := x.seedMedians()
	if which == 0 {
		return seedRatios(xg, rg)
	}
	return seedRatios(xu, ru)
}

// WriteText prints the run's tables and the comparison with the paper.
func (r *SwarmResult) WriteText(w io.Writer) error {
	c := r.Config
	var b strings.Builder
	fmt.Fprintf(&b, "SWARM reproduction: %s; 3 replicas of each object on 3 of the 4 memory nodes (majority 2), 64-byte values; seeds %v\n", r.Model, c.Seeds)
	fmt.Fprintf(&b, "Model: one-way latency %v plus up to %v of jitter (the paper's P1-P99 spread of gets) and memory-node READ/atomic service %v (calibrated on the paper's RAW medians, 1.6µs update and 1.9µs get), memory-node WRITE service %v (ConnectX-4: 150M msg/s), client CPU %v per verb (unpinned: band below), 8 cores per client server, 12.5 GB/s ports.\n",
		r.Latency, r.Jitter, r.MemRead, r.MemWrite, r.OpCPU)
	fmt.Fprintf(&b, "Objects are keyed directly: in the paper's steady state every key's location is in the client's index cache, so gets and updates go to the replicas with no index access (SWARM-KV's index is not in this run). Keys are YCSB's scrambled Zipfian (0.99). Each client runs its operations one at a time: a warm-up, then the window; the window's two halves' median latencies are printed as its convergence check. Medians are means over seeds of each seed's median ±95%% (Student's t); ratios are means of per-seed ratios ±95%%.\n")
	if len(r.Fig5) > 0 {
		fmt.Fprintf(&b, "\nTable 2: round trips per operation, Fig. 5's workload (common = median; p99; max), beside the paper's (common/p99)\n")
		tw := tabwriter.NewWriter(&b, 0, 0, 1, ' ', tabwriter.AlignRight)
		fmt.Fprintln(tw, "system\tget\tp99\tmax\tupdate\tp99\tmax\tpaper get\tpaper update\terrors\t")
		for _, a := range r.Fig5 {
			_, _, grt, urt, errs := a.all()
			p := swarmPaperRT[a.System]
			fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%d\t%d\t%d/%d\t%d/%d\t%d\t\n", a.System,
				swarmQuantile(grt, 0.5), swarmQuantile(grt, 0.99), swarmQuantile(grt, 1),
				swarmQuantile(urt, 0.5), swarmQuantile(urt, 0.99), swarmQuantile(urt, 1), p[0], p[0], p[1], p[1], errs)
		}
		tw.Flush()
		fmt.Fprintf(&b, "\nFig. 5: latency, YCSB B (95%% gets), 4 clients (one per client server) each with one operation at a time, %d keys, %d operations per client after %d of warm-up\n", c.Keys, c.Ops, c.Warmup)
		tw = tabwriter.NewWriter(&b, 0, 0, 1, ' ', tabwriter.AlignRight)
		fmt.Fprintln(tw, "system\tget p50 µs\tp1\tp99\tupdate p50 µs\tp1\tp99\twindow halves p50\tpaper get\tpaper update\t")
		for _, a := range r.Fig5 {
			gs, ups := a.seedMedians()
			gm, gh := MeanCI(gs)
			um, uh := MeanCI(ups)
			gl, ul, _, _, _ := a.all()
			var h0, h1 []float64
			for _, run := range a.Runs {
				h0, h1 = append(h0, swarmUS(run.halves[0])), append(h1, swarmUS(run.halves[1]))
			}
			m0, _ := MeanCI(h0)
			m1, _ := MeanCI(h1)
			p := swarmPaperMedian[a.System]
			fmt.Fprintf(tw, "%s\t%.2f±%.2f\t%.2f\t%.2f\t%.2f±%.2f\t%.2f\t%.2f\t%.2f/%.2f\t%.1f\t%.1f\t\n", a.System, gm, gh,
				swarmUS(swarmQuantile(gl, 0.01)), swarmUS(swarmQuantile(gl, 0.99)), um, uh, swarmUS(swarmQuantile(ul, 0.01)), swarmUS(swarmQuantile(ul, 0.99)), m0, m1, p[0], p[1])
		}
		tw.Flush()
		fmt.Fprintf(&b, "\nFig. 5's ratios to RAW beside the paper's (band: the model and its reruns at %s)\n", swarmBandNames(c.Band))
		tw = tabwriter.NewWriter(&b, 0, 0, 1, ' ', tabwriter.AlignRight)
		fmt.Fprintln(tw, "ratio\tours\tband\tpaper\tours/paper\t")
		for _, q := range []struct {
			sys   string
			which int
			paper float64
		}{{SysSWARM, 0, 1.26}, {SysSWARM, 1, 1.94}, {SysDMABD, 0, 2.26}, {SysDMABD, 1, 3.06}} {
			m, h := swarmRatio(r.Fig5, q.sys, q.which)
			lo, hi := m, m
			for _, row := range r.Band {
				x, _ := swarmRatio(row, q.sys, q.which)
				lo, hi = math.Min(lo, x), math.Max(hi, x)
			}
			op := []string{"get", "update"}[q.which]
			fmt.Fprintf(tw, "%s/RAW %s\t%.2fx±%.2f\t%.2f-%.2fx\t%.2fx\t%.0f%%\t\n", q.sys, op, m, h, lo, hi, q.paper, 100*m/q.paper)
		}
		tw.Flush()
	}
	r.writeFig11(&b)
	if a := r.Fig12; a != nil {
		fmt.Fprintf(&b, "\nFig. 12: extreme contention, SWARM, %d clients on one key, YCSB A (50%% gets), one word per writer, %d operations per client after %d of warm-up\n", a.Clients, c.ContendedOps, c.ContendedWarmup)
		um, uh := a.shares(true, 4)
		gm, gh := a.shares(false, 3)
		gl, ul, _, urt, errs := a.all()
		tw := tabwriter.NewWriter(&b, 0, 0, 1, ' ', tabwriter.AlignRight)
		fmt.Fprintln(tw, "operation\t1 RT\t2 RT\t3 RT\t4+ RT\tp50 µs\tp99 µs\tpaper\t")
		fmt.Fprintf(tw, "update\t%s\t%s\t%s\t%s\t%.2f\t%.2f\t%s (at most 4; p99 10µs)\t\n", swarmPct(um[0], uh[0]), swarmPct(um[1], uh[1]), swarmPct(um[2], uh[2]), swarmPct(um[3], uh[3]),
			swarmUS(swarmQuantile(ul, 0.5)), swarmUS(swarmQuantile(ul, 0.99)), swarmPcts(swarmPaperUpd12))
		fmt.Fprintf(tw, "get\t%s\t%s\t%s\t\t%.2f\t%.2f\t%s (1/2/more; p99 30µs)\t\n", swarmPct(gm[0], gh[0]), swarmPct(gm[1], gh[1]), swarmPct(gm[2], gh[2]),
			swarmUS(swarmQuantile(gl, 0.5)), swarmUS(swarmQuantile(gl, 0.99)), swarmPcts(swarmPaperGet12))
		tw.Flush()
		fmt.Fprintf(&b, "(gets' third column is 3 or more round trips; the most an update took: %d; errors: %d)\n", swarmQuantile(urt, 1), errs)
	}
	if len(r.Fig13) > 0 {
		fmt.Fprintf(&b, "\nFig. 13: the max substitute, SWARM, %d clients (%d per client server), %d keys, %d operations per client after %d of warm-up: share of one-round-trip updates and medians by metadata words per key\n", c.Fig13Clients, (c.Fig13Clients+3)/4, c.Fig13Keys, c.ContendedOps, c.ContendedWarmup)
		tw := tabwriter.NewWriter(&b, 0, 0, 1, ' ', tabwriter.AlignRight)
		fmt.Fprintln(tw, "workload\twords\t1-RT updates\tpaper\tget p50 µs\t1-RT update p50 µs\terrors\t")
		for _, a := range r.Fig13 {
			um, uh := a.shares(true, 2)
			var paper float64
			idx := 0
			for i, w := range []int{1, 4, 16, 64} {
				if w == a.Words {
					idx = i
				}
			}
			wl := "B"
			paper = swarmPaperOneRTB[idx]
			if a.Reads == 50 {
				wl, paper = "A", swarmPaperOneRTA[idx]
			}
			gl, ul, _, urt, errs := a.all()
			var one []time.Duration
			for i, x := range urt {
				if x == 1 {
					one = append(one, ul[i])
				}
			}
			fmt.Fprintf(tw, "YCSB %s\t%d\t%s\t%.0f%%\t%.2f\t%.2f\t%d\t\n", wl, a.Words, swarmPct(um[0], uh[0]), paper,
				swarmUS(swarmQuantile(gl, 0.5)), swarmUS(swarmQuantile(one, 0.5)), errs)
		}
		tw.Flush()
	}
	b.WriteString(swarmNotes)
	_, err := io.WriteString(w, b.String())
	return err
}

func swarmPct(m, h float64) string { return fmt.Sprintf("%.1f±%.1f%%", m, h) }

func swarmPcts(xs []float64) string {
	var parts []string
	for _, x := range xs {
		parts = append(parts, fmt.Sprintf("%.0f", x))
	}
	return strings.Join(parts, "/") + "%"
}

func swarmBandNames(vs []Variant) string {
	if len(vs) == 0 {
		return "no variant"
	}
	var parts []string
	for _, v := range vs {
		parts = append(parts, v.String())
	}
	return strings.Join(parts, "; ")
}

// swarmNotes explains each difference from the paper that the tables show.
const swarmNotes = `
Beside the paper, each difference:
- RAW's medians are the model's calibration (one-way latency and the memory node's READ service are set from them), so RAW matches the paper by construction; every other latency follows from the same costs.
- Round trips (Table 2) are the protocols' own and match the paper's common case. ds/swarm's register (maxreg.Replicated) sends every get and update to all 3 replicas and waits for a majority; the paper's implementation sends to a majority chosen by key hash and falls back to all (§6), and keeps the in-place copy on one replica. DM-ABD here does as our SWARM does, so both pay the same fan-out. The p99 and max columns can exceed the paper's p99 (DM-ABD's update at 3): with 1,000 keys instead of 100K the hottest keys see concurrent updates more often, and a CAS that finds the word moved, or a get whose majority does not yet hold the largest stamp, costs a round trip.
- SWARM's ratios: our update posts, per replica, its record, its CAS, a read of the metadata words and one of its own timestamp-lock words (12 verbs on 3 replicas) where the artifact posts 3 verbs to 2 replicas; our get reads 3 replicas where the artifact reads 2. The client CPU per verb is therefore what moves SWARM's ratios most, and it is not pinned (the paper's "200+ ns" is per series of verbs to one node): the band shows how far. With no per-verb CPU the model's ratios would tend to 1.0 (get) and 1.2 (update: a CAS's service over a WRITE's), which is why a round-trip-only simulator cannot reproduce the paper's 1.26x and 1.94x.
- DM-ABD's ratios come from its second round trip; what remains below the paper's is the per-verb CPU of the paper's C++ client (its Table 3 puts DM-ABD's client CPU at 99% against RAW's 46.6%: polling two round trips), which the model charges only per verb posted.
- Fig. 11: as in the paper, no operation fails and the throughput goes on through the failure. Our register sends every operation to all three replicas and waits for the first two answers, so a failed replica needs no fallback and no reconfiguration; what the failure costs is that the majority is then the two survivors, both of which must answer where the faster two of three did before: a few percent on the median and on the throughput, which stays while the node is down (nothing is lost that later operations would rebuild: our in-place copies are on every replica). The paper's implementation contacts a majority chosen by the key's hash, falls back to all replicas when one does not answer in time, and keeps the in-place copy on one replica, so a crash costs it the fallback and lost in-place copies: the rise it shows and recovers from. A silent node costs the same as a stopped one here: its verbs time out in the background while the other two answer.
- Fig. 12: Safe-Guess's guesses use the artifact's tick (466ns, a third of its 1.4µs minimum round trip). Our round trips count In-n-Out's chase of an out-of-place buffer (when no valid in-place copy of the larger tuple answered, which on a key updated every microsecond is most of the time) as a round trip of its own, where the paper counts M's read as one; so a slow-path update the paper counts at 2 or 3 shows here at 3 or 4, and none shows at 2. Gets taking 3 or more round trips are 84% here against the paper's 78%, and the rest split about 7/10% against the paper's 14/8%: fewer gets find a valid in-place copy of the latest tuple (ours are refreshed in the background after each update returns), which we suspect and have not established. Updates stay within the paper's bound of 4.
- Fig. 13: with a word per writer nearly every update takes one round trip, as in the paper. With shared words our shares are a few points above the paper's (on A more than on B). The share is set by whether another writer of the word updated the key since this client last read it, a ratio of access rates on the key that the key count (500 here, 100K in the paper) barely changes; the cause of the gap is not established. Medians of gets grow with the words read (8 bytes each), as the paper's do (3.1 to 3.6µs there from 1 to 64 words).
`

// MedianRoundTrips returns the point's median round trips per get and per update over every
// seed, and its failed operations.
func (a SwarmAgg) MedianRoundTrips() (get, update uint64, errors int) {
	_, _, grt, urt, errs := a.all()
	return swarmQuantile(grt, 0.5), swarmQuantile(urt, 0.5), errs
}

// MaxUpdateRoundTrips returns the most round trips one update took, over every seed.
func (a SwarmAgg) MaxUpdateRoundTrips() uint64 {
	_, _, _, urt, _ := a.all()
	return swarmQuantile(urt, 1)
}

// OneRoundTripUpdates returns the share (0 to 1) of updates that took one round trip, over
// every seed.
func (a SwarmAgg) OneRoundTripUpdates() float64 {
	_, _, _, urt, _ := a.all()
	n := 0
	for _, x := range urt {
		if x == 1 {
			n++
		}
	}
	return float64(n) / math.Max(1, float64(len(urt)))
}

// swarmJSONPoint is one point of WriteJSON's output.
type swarmJSONPoint struct {
	Figure                         string
	System                         string
	Clients, Keys, ReadPct, Words  int
	Variant                        string `json:",omitempty"`
	GetMedianUS, UpdateMedianUS    []float64
	GetRoundTrips, UpdateRoundTrip map[uint64]int
	Errors                         int
	// Fault and Timeline (per seed, bin by bin) are Fig. 11's.
	Fault    string           `json:",omitempty"`
	Timeline [][]swarmJSONBin `json:",omitempty"`
}

func (a SwarmAgg) jsonPoint(fig, variant string) swarmJSONPoint {
	gs, ups := a.seedMedians()
	_, _, grt, urt, errs := a.all()
	hist := func(xs []uint64) map[uint64]int {
		h := map[uint64]int{}
		for _, x := range xs {
			h[x]++
		}
		return h
	}
	return swarmJSONPoint{Figure: fig, System: a.System, Clients: a.Clients, Keys: a.Keys, ReadPct: a.Reads, Words: a.Words,
		Variant: variant, GetMedianUS: gs, UpdateMedianUS: ups, GetRoundTrips: hist(grt), UpdateRoundTrip: hist(urt), Errors: errs}
}

// WriteJSON writes every point: per-seed medians and round-trip histograms.
func (r *SwarmResult) WriteJSON(w io.Writer) error {
	var pts []swarmJSONPoint
	for _, a := range r.Fig5 {
		pts = append(pts, a.jsonPoint("5", ""))
	}
	for i, row := range r.Band {
		for _, a := range row {
			pts = append(pts, a.jsonPoint("5", r.Config.Band[i].String()))
		}
	}
	for _, a := range r.Fig11 {
		p := a.jsonPoint("11", "")
		p.Fault, p.Timeline = a.Fault, jsonTimeline(a.Runs)
		pts = append(pts, p)
	}
	if r.Fig12 != nil {
		pts = append(pts, r.Fig12.jsonPoint("12", ""))
	}
	for _, a := range r.Fig13 {
		pts = append(pts, a.jsonPoint("13", ""))
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(struct {
		Model  string
		Seeds  []uint64
		Points []swarmJSONPoint
	}{r.Model, r.Config.Seeds, pts})
}
