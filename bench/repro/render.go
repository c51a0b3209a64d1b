package repro

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/farmem/farmem/bench"
)

// WriteText writes the sweep as aligned text tables, one per structure and mix: throughput
// (Mops/s of virtual time) per synchronizer, CIDER's ratios to the others, memory-node verbs
// and failed CASes per operation, and CIDER's write combining and routing (see Routing). Its
// bytes are a function of the result alone.
func (r *CiderResult) WriteText(w io.Writer) error {
	c := r.Config
	m := c.Measure
	topo := "compute nodes co-located on the memory nodes' NICs"
	if c.SeparateNICs {
		topo = "a NIC per compute node"
	}
	fmt.Fprintf(w, "CIDER sweep: sim.ConnectX6, 8 memory nodes, 4 clients per compute node, %s; zipf %.2f (%s); "+
		"array %d keys, race %d keys; seeds %v\n", topo, c.Theta, c.Dist, c.ArrayKeys, c.RaceKeys, c.Seeds)
	fmt.Fprintf(w, "Each point: warm-up until %d successive %v steps agree within %.0f%% (at least %v, at most %v), then a window "+
		"of at least %d operations and %v (at most %v); Mops/s is the mean over seeds ± the 95%% confidence half-width "+
		"(Student's t); a * marks a point whose warm-up hit its cap.\n",
		3, m.Step, 100*m.Tolerance, m.MinWarmup, m.MaxWarmup, m.MinOps, m.MinWindow, m.MaxWindow)
	lwc := "every synchronizer under local write combining (as the paper's §5.1 runs its baselines)"
	if !c.LocalWC {
		lwc = "no local write combining"
	}
	au := "the model's costs (atomic unit 250ns, atomic/WRITE cost 10.1x, CPU per verb 300ns, local access 100ns)"
	if !c.Costs.IsZero() {
		au = "the model's costs but " + c.Costs.String()
	}
	cr := "CIDER credits failed CASes at completion (Algorithm 1)"
	if c.EarlyCredit {
		cr = "CIDER credits failed CASes early (at the threshold, not Algorithm 1)"
	}
	fmt.Fprintf(w, "%s; %s; %s; lwc is the share of CIDER's updates combined on their compute node.\n", lwc, au, cr)
	for _, st := range c.Structs {
		for _, mx := range c.Mixes {
			fmt.Fprintf(w, "\n%s, %s\n", st, mx)
			tw := tabwriter.NewWriter(w, 0, 0, 1, ' ', tabwriter.AlignRight)
			var head []string
			head = append(head, "clients")
			for _, k := range c.Syncs {
				head = append(head, k+" Mops")
			}
			for _, k := range c.Syncs {
				if k != CIDER && hasSync(c, CIDER) {
					head = append(head, "cider/"+abbrev(k))
				}
			}
			for _, k := range c.Syncs {
				head = append(head, abbrev(k)+" mnv/op")
			}
			for _, k := range c.Syncs {
				head = append(head, abbrev(k)+" fcas/op")
			}
			if hasSync(c, CIDER) {
				head = append(head, "lwc", "wc-rate", "batch", "ideal", "routed", "comb", "cP50", "cP99")
			}
			fmt.Fprintln(tw, strings.Join(head, "\t")+"\t")
			for _, n := range c.Clients {
				row := []string{fmt.Sprint(n)}
				for _, k := range c.Syncs {
					row = append(row, fmtTput(r.Point(st, mx, k, n)))
				}
				cd := r.Point(st, mx, CIDER, n)
				for _, k := range c.Syncs {
					if k != CIDER && hasSync(c, CIDER) {
						row = append(row, fmt.Sprintf("%.2f", cd.Throughput/math.Max(1, r.Point(st, mx, k, n).Throughput)))
					}
				}
				for _, k := range c.Syncs {
					row = append(row, fmt.Sprintf("%.2f", r.Point(st, mx, k, n).MemoryVerbsPerOp()))
				}
				for _, k := range c.Syncs {
					row = append(row, fmt.Sprintf("%.3f", r.Point(st, mx, k, n).FailedCASPerOp()))
				}
				if hasSync(c, CIDER) {
					ideal, recall, comb := Routing(r.Point(st, mx, Optimistic, n), cd)
					row = append(row, fmt.Sprintf("%.3f", cd.LocalRate()), fmt.Sprintf("%.3f", cd.WCRate()), fmt.Sprintf("%.2f", cd.MeanBatch()),
						fmt.Sprintf("%.3f", ideal), fmt.Sprintf("%.3f", recall), fmt.Sprintf("%.3f", comb),
						cd.P50.Round(100*time.Nanosecond).String(), cd.P99.Round(time.Microsecond).String())
				}
				fmt.Fprintln(tw, strings.Join(row, "\t")+"\t")
			}
			if err := tw.Flush(); err != nil {
				return err
			}
		}
	}
	if err := r.writeFactor(w); err != nil {
		return err
	}
	return r.WritePaper(w)
}

// fmtTput is a point's throughput in Mops/s with its confidence half-width, starred if a
// seed's warm-up did not converge.
func fmtTput(p CiderPoint) string {
	s := fmt.Sprintf("%.2f±%.2f", p.Throughput/1e6, p.ThroughputCI/1e6)
	if !p.Converged {
		s += "*"
	}
	return s
}

func hasSync(c CiderConfig, name string) bool {
	for _, k := range c.Syncs {
		if k == name {
			return true
		}
	}
	return false
}

// abbrev is a synchronizer's short column name.
func abbrev(k string) string {
	if k == Optimistic {
		return "opt"
	}
	return k
}

// WriteJSON writes the configuration and every point as JSON.
func (r *CiderResult) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

// Plots returns one plot per structure and mix: throughput against clients (log scale), a line
// per synchronizer.
func (r *CiderResult) Plots() []bench.Plot {
	var out []bench.Plot
	for _, st := range r.Config.Structs {
		for _, mx := range r.Config.Mixes {
			p := bench.Plot{Title: fmt.Sprintf("CIDER sweep: %s, %s (sim.ConnectX6)", st, mx),
				XLabel: "clients", YLabel: "Mops/s (virtual time)", LogX: true}
			for _, k := range r.Config.Syncs {
				s := bench.Series{Name: k}
				for _, n := range r.Config.Clients {
					s.X = append(s.X, float64(n))
					s.Y = append(s.Y, r.Point(st, mx, k, n).Throughput/1e6)
				}
				p.Series = append(p.Series, s)
			}
			out = append(out, p)
		}
	}
	return out
}
