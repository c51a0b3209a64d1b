package repro

import (
	"fmt"
	"io"
	"math"
	"text/tabwriter"
)

// writeFactor writes the factor analysis (CiderConfig.Factor): at the largest client count on
// the write-intensive mix, each synchronizer with and without local write combining, and CIDER
// without contention-aware routing.
func (r *CiderResult) writeFactor(w io.Writer) error {
	if len(r.Factor) == 0 {
		return nil
	}
	n := r.Factor[0].Clients
	fmt.Fprintf(w, "\nFactor analysis (§5.4.1): %d clients, write-intensive; Mops/s with and without local write combining (lwc), "+
		"and CIDER without contention-aware routing (cider-pessimistic: every update through the lock and global WC)\n", n)
	tw := tabwriter.NewWriter(w, 0, 0, 1, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "structure\tsynchronizer\twith lwc\twithout lwc\twith/without\t")
	for _, f := range r.Factor {
		main := r.Point(f.Struct, f.Mix, f.Sync, f.Clients)
		with, without := main, f
		if f.LocalWC == r.Config.LocalWC { // cider-pessimistic: not in the main sweep
			if f.LocalWC {
				with, without = f, CiderPoint{}
			} else {
				with, without = CiderPoint{}, f
			}
		} else if f.LocalWC {
			with, without = f, main
		}
		cell := func(p CiderPoint) string {
			if p.Sync == "" {
				return "-"
			}
			return fmtTput(p)
		}
		ratio := "-"
		if with.Sync != "" && without.Sync != "" {
			ratio = fmt.Sprintf("%.2f", with.Throughput/math.Max(1, without.Throughput))
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t\n", f.Struct, f.Sync, cell(with), cell(without), ratio)
	}
	return tw.Flush()
}

// RatioCI is CIDER's throughput over another synchronizer's at one point: the mean over seeds
// of the per-seed ratios (same seed, same draws) with its 95% confidence half-width.
func RatioCI(cd, other CiderPoint) (mean, half float64) {
	k := min(len(cd.PerSeed), len(other.PerSeed))
	rs := make([]float64, 0, k)
	for i := range k {
		rs = append(rs, cd.PerSeed[i]/math.Max(1, other.PerSeed[i]))
	}
	return MeanCI(rs)
}

// Headline is the largest CIDER over optimistic ratio of the sweep (over structures, mixes and
// client counts, by mean), with its interval and where it was measured.
func (r *CiderResult) Headline() (ratio, half float64, at CiderPoint) {
	for _, p := range r.Points {
		if p.Sync != CIDER {
			continue
		}
		o := r.Point(p.Struct, p.Mix, Optimistic, p.Clients)
		if o.Sync == "" {
			continue
		}
		if m, h := RatioCI(p, o); m > ratio {
			ratio, half, at = m, h, p
		}
	}
	return ratio, half, at
}

// peak returns the client count of a synchronizer's highest throughput on a structure and mix.
func (r *CiderResult) peak(st, mx, k string) int {
	best, at := -1.0, 0
	for _, n := range r.Config.Clients {
		if p := r.Point(st, mx, k, n); p.Sync != "" && p.Throughput > best {
			best, at = p.Throughput, n
		}
	}
	return at
}

// crossover returns the smallest client count from which the spinlock stays above optimistic
// synchronization (0 if it never does).
func (r *CiderResult) crossover(st, mx string) int {
	at := 0
	for _, n := range r.Config.Clients {
		s, o := r.Point(st, mx, Spin, n), r.Point(st, mx, Optimistic, n)
		if s.Sync == "" || o.Sync == "" {
			return 0
		}
		if s.Throughput > o.Throughput {
			if at == 0 {
				at = n
			}
		} else {
			at = 0
		}
	}
	return at
}

// WritePaper writes the comparison with the figures that survive in the paper's text (§5.2.1,
// Fig. 12 and 15, and the abstract's 6.6x), a row per figure with the sweep's own value, on the
// pointer array under the write-intensive mix where the paper measured them (the headline over
// every structure, mix and client count).
func (r *CiderResult) WritePaper(w io.Writer) error {
	c := r.Config
	has := func(xs []string, x string) bool {
		for _, v := range xs {
			if v == x {
				return true
			}
		}
		return false
	}
	if !has(c.Syncs, Optimistic) || !has(c.Syncs, CIDER) {
		return nil
	}
	st, mx := Array, WriteIntensive
	if !has(c.Structs, st) {
		st = c.Structs[0]
	}
	if !has(c.Mixes, mx) {
		mx = c.Mixes[0]
	}
	top := c.Clients[len(c.Clients)-1]
	fmt.Fprintf(w, "\nBeside the paper (figures that survive in its text; ours on %s, %s unless stated)\n", st, mx)
	tw := tabwriter.NewWriter(w, 0, 0, 1, ' ', 0)
	fmt.Fprintln(tw, "figure\tpaper\tthis run\t")
	fmt.Fprintf(tw, "O-SYNC peak (clients)\t48-64\t%d\t\n", r.peak(st, mx, Optimistic))
	if has(c.Syncs, Spin) {
		x := "never"
		if n := r.crossover(st, mx); n > 0 {
			x = fmt.Sprint(n)
		}
		fmt.Fprintf(tw, "CAS spinlock above O-SYNC from (clients)\t~384\t%s\t\n", x)
	}
	ideal, recall, comb := Routing(r.Point(st, mx, Optimistic, top), r.Point(st, mx, CIDER, top))
	fmt.Fprintf(tw, "ideal pessimistic share at %d clients\t4%%\t%.1f%%\t\n", top, 100*ideal)
	fmt.Fprintf(tw, "  of which CIDER routes pessimistic\t88%%\t%.1f%%\t\n", 100*recall)
	fmt.Fprintf(tw, "  CIDER's pessimistic updates combined\t87%%\t%.1f%%\t\n", 100*comb)
	h, hci, at := r.Headline()
	fmt.Fprintf(tw, "max CIDER / O-SYNC (all structures, mixes, counts)\tup to 6.6x\t%.2fx ± %.2f (%s, %s, %d clients)\t\n", h, hci, at.Struct, at.Mix, at.Clients)
	if has(c.Syncs, MCS) {
		m, mci := RatioCI(r.Point(st, mx, CIDER, top), r.Point(st, mx, MCS, top))
		fmt.Fprintf(tw, "CIDER / ShiftLock (far MCS) at %d clients\t(lost)\t%.2fx ± %.2f\t\n", top, m, mci)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	lwc := "with local write combining under every synchronizer"
	if !c.LocalWC {
		lwc = "WITHOUT local write combining (not the paper's baseline setup)"
	}
	fmt.Fprintf(w, "Ratios are means over seeds of per-seed ratios ± 95%% half-widths, %s; the band over the atomic unit "+
		"comes from rerunning with --atomic-unit (100ns, 250ns, 500ns).\n", lwc)
	return nil
}
