package bench

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
	"github.com/farmem/farmem/farmem"
)

// Phase names what a Row measured.
type Phase string

// The phases of a benchmark.
const (
	PhaseLoad Phase = "load"
	PhaseRun  Phase = "run"
)

// Report is the result of Run: one Row per store, phase and sweep point.
type Report struct {
	// Workload is the workload's name; Properties its effective properties (at the first
	// point of a sweep over a property).
	Workload   string            `json:"workload"`
	Properties map[string]string `json:"properties,omitempty"`
	// Sweep is the swept parameter ("clients", or a property), empty for a single point.
	Sweep string `json:"sweep,omitempty"`
	Rows  []Row  `json:"rows"`
}

// Row is what one store did in one phase at one point.
type Row struct {
	Store    string `json:"store"`
	Workload string `json:"workload"`
	Phase    Phase  `json:"phase"`
	Clients  int    `json:"clients"`
	// Point is the value of the swept parameter at this row ("" without a sweep).
	Point string `json:"point,omitempty"`
	// Unsupported says why the store could not run the workload (E without an ordered
	// index); Error why the run failed. Either leaves the measurements empty.
	Unsupported string `json:"unsupported,omitempty"`
	Error       string `json:"error,omitempty"`
	// Ops counts successful operations in the measured window, Errors failed ones;
	// FirstError is the first failure's text.
	Ops        uint64 `json:"ops"`
	Errors     uint64 `json:"errors"`
	FirstError string `json:"first_error,omitempty"`
	// Seconds is the measured window; Throughput is Ops per second of it.
	Seconds    float64 `json:"seconds"`
	Throughput float64 `json:"ops_per_sec"`
	// Latency of the successful operations.
	Latency Latency `json:"latency_ns"`
	// Costs per operation (successful or not), nil when the store does not count costs.
	Costs *Costs `json:"costs_per_op,omitempty"`
	// ByOp breaks the row down by operation kind ("read", "update", ...).
	ByOp map[string]OpRow `json:"by_op,omitempty"`
	// Histogram holds every latency of the row (nanoseconds), for further analysis.
	Histogram *hdrhistogram.Histogram `json:"-"`
}

// OpRow is one operation kind's share of a Row.
type OpRow struct {
	Ops        uint64  `json:"ops"`
	Errors     uint64  `json:"errors"`
	FirstError string  `json:"first_error,omitempty"`
	Latency    Latency `json:"latency_ns"`
	Costs      *Costs  `json:"costs_per_op,omitempty"`
}

// Latency summarizes a latency distribution in nanoseconds.
type Latency struct {
	Mean float64 `json:"mean"`
	P50  int64   `json:"p50"`
	P99  int64   `json:"p99"`
	P999 int64   `json:"p999"`
	Max  int64   `json:"max"`
}

// Costs are counted far-memory costs per operation: farmem.Stats deltas averaged over the
// operations attempted whose costs were read, which for a run phase are those that ended in the
// measured window and, per worker, the one begun in it that ended after it (see Worker.Step).
type Costs struct {
	RoundTrips float64 `json:"round_trips"`
	Verbs      float64 `json:"verbs"`
	BytesOut   float64 `json:"bytes_out"`
	BytesIn    float64 `json:"bytes_in"`
	FailedCAS  float64 `json:"failed_cas"`
	Calls      float64 `json:"calls"`
	// VerbsByKind breaks Verbs down by kind ("read", "write", "cas", "faa", "mcas"), kinds
	// with none left out.
	VerbsByKind map[string]float64 `json:"verbs_by_kind,omitempty"`
	// Total is the sum over the row's operations.
	Total farmem.Stats `json:"-"`
}

// Bytes returns BytesOut+BytesIn.
func (c *Costs) Bytes() float64 { return c.BytesOut + c.BytesIn }

func latencyOf(h *hdrhistogram.Histogram) Latency {
	if h == nil || h.TotalCount() == 0 {
		return Latency{}
	}
	return Latency{Mean: h.Mean(), P50: h.ValueAtQuantile(50), P99: h.ValueAtQuantile(99),
		P999: h.ValueAtQuantile(99.9), Max: h.Max()}
}

func costsOf(s farmem.Stats, n uint64) *Costs {
	c := &Costs{Total: s}
	if n == 0 {
		return c
	}
	f := float64(n)
	c.RoundTrips = float64(s.RoundTrips) / f
	c.Verbs = float64(s.TotalVerbs()) / f
	c.BytesOut = float64(s.BytesOut+s.CallBytesOut) / f
	c.BytesIn = float64(s.BytesIn+s.CallBytesIn) / f
	c.FailedCAS = float64(s.FailedCAS) / f
	c.Calls = float64(s.Calls) / f
	for k := range farmem.NumOpKinds {
		if v := s.VerbsOf(k); v > 0 {
			if c.VerbsByKind == nil {
				c.VerbsByKind = map[string]float64{}
			}
			c.VerbsByKind[k.String()] = float64(v) / f
		}
	}
	return c
}

// Summarize merges the workers' records of phase into a Row: histograms merged, operations
// and costs summed, throughput over elapsed (the measured window). Use it after a simulated
// run too: Summarize(name, PhaseRun, res.Window, workers). It first settles the costs each
// worker has read for a run of operations but not yet charged (one reading of its session's
// costs; see Worker.Step), so call it once the workers have stopped.
func Summarize(store string, phase Phase, elapsed time.Duration, workers []*Worker) Row {
	for _, wk := range workers {
		if wk != nil && wk.cost != nil {
			wk.settle()
		}
	}
	row := Row{Store: store, Phase: phase, Clients: len(workers), Seconds: elapsed.Seconds(),
		ByOp: map[string]OpRow{}}
	all := newHist()
	var allCost farmem.Stats
	var costOps uint64
	costed := len(workers) > 0
	for op := range NumOps {
		var o OpRow
		h := newHist()
		var cost farmem.Stats
		var opCostOps uint64
		for _, wk := range workers {
			if wk == nil {
				continue
			}
			t := &wk.run
			if phase == PhaseLoad {
				t = &wk.load
			}
			costed = costed && t.costed
			ot := &t.ops[op]
			o.Ops += ot.ok
			o.Errors += ot.errs
			if ot.firstErr != nil && o.FirstError == "" {
				o.FirstError = ot.firstErr.Error()
			}
			if ot.hist != nil {
				h.Merge(ot.hist)
			}
			cost = cost.Add(ot.costs)
			opCostOps += ot.costOps
		}
		if o.Ops+o.Errors == 0 {
			continue
		}
		o.Latency = latencyOf(h)
		if costed {
			o.Costs = costsOf(cost, opCostOps)
		}
		row.ByOp[op.String()] = o
		row.Ops += o.Ops
		row.Errors += o.Errors
		if row.FirstError == "" {
			row.FirstError = o.FirstError
		}
		all.Merge(h)
		allCost = allCost.Add(cost)
		costOps += opCostOps
	}
	if len(workers) > 0 && workers[0] != nil {
		row.Workload = workers[0].d.w.Name
	}
	row.Latency = latencyOf(all)
	row.Histogram = all
	if costed {
		row.Costs = costsOf(allCost, costOps)
	}
	if elapsed > 0 {
		row.Throughput = float64(row.Ops) / elapsed.Seconds()
	}
	return row
}

// WriteJSON writes the report as indented JSON.
func (r *Report) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

// WriteTable writes the report as an aligned table: one line per row, latencies in
// microseconds, costs per operation ("-" for a store that does not count them), then a note for
// each row that could not run.
func (r *Report) WriteTable(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	head := []string{"store", "workload", "phase"}
	if r.Sweep != "" && r.Sweep != "clients" {
		head = append(head, r.Sweep)
	}
	head = append(head, "clients", "ops", "errors", "ops/s", "p50 µs", "p99 µs", "p999 µs",
		"rt/op", "verbs/op", "bytes/op", "failcas/op")
	fmt.Fprintln(tw, strings.Join(head, "\t")+"\t")
	var notes []string
	for _, row := range r.Rows {
		cells := []string{row.Store, row.Workload, string(row.Phase)}
		if r.Sweep != "" && r.Sweep != "clients" {
			cells = append(cells, row.Point)
		}
		cells = append(cells, strconv.Itoa(row.Clients))
		switch {
		case row.Unsupported != "":
			notes = append(notes, fmt.Sprintf("%s %s: unsupported: %s", row.Store, row.Workload, row.Unsupported))
			cells = append(cells, "unsupported")
			for range 9 {
				cells = append(cells, "-")
			}
		case row.Error != "":
			notes = append(notes, fmt.Sprintf("%s %s %s: failed: %s", row.Store, row.Workload, row.Phase, row.Error))
			cells = append(cells, "failed")
			for range 9 {
				cells = append(cells, "-")
			}
		default:
			cells = append(cells, strconv.FormatUint(row.Ops, 10), strconv.FormatUint(row.Errors, 10),
				fmtRate(row.Throughput), fmtMicros(row.Latency.P50), fmtMicros(row.Latency.P99),
				fmtMicros(row.Latency.P999))
			if c := row.Costs; c != nil {
				cells = append(cells, fmtCost(c.RoundTrips), fmtCost(c.Verbs), fmtCost(c.Bytes()), fmtCost(c.FailedCAS))
			} else {
				cells = append(cells, "-", "-", "-", "-")
			}
			if row.FirstError != "" {
				notes = append(notes, fmt.Sprintf("%s %s %s clients=%d: %d failed ops, the first: %s", row.Store,
					row.Workload, row.Phase, row.Clients, row.Errors, row.FirstError))
			}
		}
		fmt.Fprintln(tw, strings.Join(cells, "\t")+"\t")
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	seen := map[string]bool{}
	for _, n := range notes {
		if seen[n] {
			continue
		}
		seen[n] = true
		if _, err := fmt.Fprintln(w, n); err != nil {
			return err
		}
	}
	return nil
}

// fmtRate formats a rate for the table: 850, 12.3k, 4.56M.
func fmtRate(v float64) string {
	switch {
	case v >= 1e6:
		return fmtSI(v, 'f', 2, 1e3)
	case v >= 1e3:
		return fmtSI(v, 'f', 1, 1e3)
	}
	return fmtSI(v, 'f', 0, 1e3)
}

// fmtSI formats v with strconv's format and prec after scaling it by the largest of G, M and
// k (k only from kFrom up) that its magnitude reaches.
func fmtSI(v float64, format byte, prec int, kFrom float64) string {
	a := math.Abs(v)
	for _, u := range []struct {
		scale, from float64
		suffix      string
	}{{1e9, 1e9, "G"}, {1e6, 1e6, "M"}, {1e3, kFrom, "k"}} {
		if a >= u.from {
			return strconv.FormatFloat(v/u.scale, format, prec, 64) + u.suffix
		}
	}
	return strconv.FormatFloat(v, format, prec, 64)
}

func fmtMicros(ns int64) string {
	us := float64(ns) / 1e3
	switch {
	case us >= 100:
		return strconv.FormatFloat(us, 'f', 0, 64)
	case us >= 10:
		return strconv.FormatFloat(us, 'f', 1, 64)
	}
	return strconv.FormatFloat(us, 'f', 2, 64)
}

func fmtCost(v float64) string {
	if v == math.Trunc(v) && v < 1e6 {
		return strconv.FormatFloat(v, 'f', 0, 64)
	}
	if v >= 100 {
		return strconv.FormatFloat(v, 'f', 0, 64)
	}
	return strconv.FormatFloat(v, 'f', 2, 64)
}

// Metric is what a sweep plot shows on its y axis.
type Metric string

// The metrics WriteSVG can plot.
const (
	MetricThroughput Metric = "throughput"
	MetricP50        Metric = "p50"
	MetricP99        Metric = "p99"
	MetricP999       Metric = "p999"
	MetricRoundTrips Metric = "roundtrips"
	MetricVerbs      Metric = "verbs"
	MetricBytes      Metric = "bytes"
	MetricFailedCAS  Metric = "failedcas"
)

// Metrics lists the metrics WriteSVG can plot.
func Metrics() []Metric {
	return []Metric{MetricThroughput, MetricP50, MetricP99, MetricP999, MetricRoundTrips,
		MetricVerbs, MetricBytes, MetricFailedCAS}
}

func (m Metric) label() string {
	switch m {
	case MetricThroughput:
		return "throughput (ops/s)"
	case MetricP50, MetricP99, MetricP999:
		return string(m) + " latency (µs)"
	case MetricRoundTrips:
		return "round trips per op"
	case MetricVerbs:
		return "verbs per op"
	case MetricBytes:
		return "bytes per op"
	case MetricFailedCAS:
		return "failed CAS per op"
	}
	return string(m)
}

// value returns the row's metric, or false if the row does not have it.
func (m Metric) value(row Row) (float64, bool) {
	switch m {
	case MetricThroughput:
		return row.Throughput, true
	case MetricP50:
		return float64(row.Latency.P50) / 1e3, true
	case MetricP99:
		return float64(row.Latency.P99) / 1e3, true
	case MetricP999:
		return float64(row.Latency.P999) / 1e3, true
	}
	if row.Costs == nil {
		return 0, false
	}
	switch m {
	case MetricRoundTrips:
		return row.Costs.RoundTrips, true
	case MetricVerbs:
		return row.Costs.Verbs, true
	case MetricBytes:
		return row.Costs.Bytes(), true
	case MetricFailedCAS:
		return row.Costs.FailedCAS, true
	}
	return 0, false
}

// Plot returns the line plot of metric over the report's run rows: one series per store, the
// swept parameter (or the client count) on the x axis. Rows that could not run are left out.
func (r *Report) Plot(metric Metric) (*Plot, error) {
	if _, ok := metric.value(Row{Costs: &Costs{}}); !ok {
		return nil, fmt.Errorf("bench: unknown metric %q (have %v): %w", metric, Metrics(), farmem.ErrInvalid)
	}
	param := r.Sweep
	if param == "" {
		param = "clients"
	}
	xOf := func(row Row) string {
		if param == "clients" {
			return strconv.Itoa(row.Clients)
		}
		return row.Point
	}
	// The x values, in order of first appearance; numeric if every one parses.
	var xs []string
	seen := map[string]bool{}
	var stores []string
	byStore := map[string]map[string]float64{}
	for _, row := range r.Rows {
		if row.Phase != PhaseRun || row.Unsupported != "" || row.Error != "" {
			continue
		}
		y, ok := metric.value(row)
		if !ok {
			continue
		}
		x := xOf(row)
		if !seen[x] {
			seen[x] = true
			xs = append(xs, x)
		}
		if byStore[row.Store] == nil {
			byStore[row.Store] = map[string]float64{}
			stores = append(stores, row.Store)
		}
		byStore[row.Store][x] = y
	}
	if len(xs) == 0 {
		return nil, fmt.Errorf("bench: nothing to plot: no run row has %s: %w", metric, farmem.ErrInvalid)
	}
	p := &Plot{
		Title:  fmt.Sprintf("workload %s: %s", r.Workload, metric.label()),
		XLabel: param,
		YLabel: metric.label(),
	}
	numeric := true
	xv := make([]float64, len(xs))
	for i, x := range xs {
		v, err := strconv.ParseFloat(x, 64)
		if err != nil || math.IsInf(v, 0) || math.IsNaN(v) {
			numeric = false
			break
		}
		xv[i] = v
	}
	if !numeric {
		p.XCategories = xs
		for i := range xv {
			xv[i] = float64(i)
		}
	} else if param == "clients" {
		lo, hi := math.Inf(1), math.Inf(-1)
		for _, v := range xv {
			lo, hi = min(lo, v), max(hi, v)
		}
		p.LogX = lo > 0 && hi/lo >= 8
	}
	for _, s := range stores {
		ser := Series{Name: s}
		for i, x := range xs {
			if y, ok := byStore[s][x]; ok {
				ser.X = append(ser.X, xv[i])
				ser.Y = append(ser.Y, y)
			}
		}
		p.Series = append(p.Series, ser)
	}
	return p, nil
}

// WriteSVG writes the plot of metric over the report's sweep (see Plot) as an SVG document.
func (r *Report) WriteSVG(w io.Writer, metric Metric) error {
	p, err := r.Plot(metric)
	if err != nil {
		return err
	}
	return p.WriteSVG(w)
}
