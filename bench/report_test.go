package bench

import (
	"bytes"
	"encoding/json"
	"encoding/xml"
	"errors"
	"flag"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/farmem/farmem/farmem"
	"github.com/farmem/farmem/internal/stattest"
	"github.com/stretchr/testify/require"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata")

// sampleReport is a fixed report: a sweep over clients with a costed store, the Go map, a
// store that cannot run the workload and one that failed.
func sampleReport() *Report {
	lat := func(p50 int64) Latency {
		return Latency{Mean: float64(p50) * 1.1, P50: p50, P99: p50 * 4, P999: p50 * 9, Max: p50 * 20}
	}
	kvCosts := &Costs{RoundTrips: 2.5, Verbs: 3.25, BytesOut: 530, BytesIn: 1064, FailedCAS: 0.01,
		VerbsByKind: map[string]float64{"read": 2.5, "cas": 0.75}, Total: farmem.Stats{RoundTrips: 250000}}
	rep := &Report{Workload: "a", Sweep: "clients", Properties: map[string]string{"recordcount": "100000"}}
	rep.Rows = append(rep.Rows,
		Row{Store: "kvstore/cxl", Workload: "a", Phase: PhaseLoad, Clients: 4, Ops: 100000, Seconds: 0.5,
			Throughput: 200000, Latency: lat(9000), Costs: &Costs{RoundTrips: 3, Verbs: 4, BytesOut: 1100, BytesIn: 16}},
		Row{Store: "gomap", Workload: "a", Phase: PhaseLoad, Clients: 4, Ops: 100000, Seconds: 0.05,
			Throughput: 2e6, Latency: lat(350)},
		Row{Store: "redis", Workload: "a", Phase: PhaseLoad, Clients: 4, Error: "bench: redis: connection refused"},
	)
	for i, c := range []int{1, 2, 4} {
		f := float64(c)
		rep.Rows = append(rep.Rows,
			Row{Store: "kvstore/cxl", Workload: "a", Phase: PhaseRun, Clients: c, Point: []string{"1", "2", "4"}[i],
				Ops: uint64(100000 * f), Errors: uint64(i), FirstError: map[bool]string{true: "kvstore: timeout"}[i > 0],
				Seconds: 2, Throughput: 50000 * f, Latency: lat(int64(12345 + 1000*i)), Costs: kvCosts},
			Row{Store: "gomap", Workload: "a", Phase: PhaseRun, Clients: c, Point: []string{"1", "2", "4"}[i],
				Ops: uint64(4e6 * f), Seconds: 2, Throughput: 2e6 * f * 0.9, Latency: lat(int64(250 + 10*i))},
			Row{Store: "ordered-less", Workload: "a", Phase: PhaseRun, Clients: c, Point: []string{"1", "2", "4"}[i],
				Unsupported: "ordered-less: workload a needs an ordered index"},
		)
	}
	return rep
}

func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		require.NoError(t, os.WriteFile(path, got, 0o644))
	}
	want, err := os.ReadFile(path)
	require.NoError(t, err, "run go test ./bench -run %s -update to create it", t.Name())
	require.Equal(t, string(want), string(got))
}

func TestWriteTableGolden(t *testing.T) {
	var b bytes.Buffer
	require.NoError(t, sampleReport().WriteTable(&b))
	golden(t, "table.golden", b.Bytes())
	// A sweep over a property gets a column for it.
	rep := sampleReport()
	rep.Sweep = "requestdistribution"
	b.Reset()
	require.NoError(t, rep.WriteTable(&b))
	require.Contains(t, strings.Split(b.String(), "\n")[0], "requestdistribution")
}

// The JSON encoding has the documented shape and decodes back to the same report.
func TestWriteJSON(t *testing.T) {
	rep := sampleReport()
	var b bytes.Buffer
	require.NoError(t, rep.WriteJSON(&b))
	golden(t, "report.golden.json", b.Bytes())

	var shape map[string]any
	require.NoError(t, json.Unmarshal(b.Bytes(), &shape))
	require.Equal(t, "a", shape["workload"])
	require.Equal(t, "clients", shape["sweep"])
	rows := shape["rows"].([]any)
	require.Len(t, rows, len(rep.Rows))
	kv := rows[3].(map[string]any)
	for _, k := range []string{"store", "workload", "phase", "clients", "point", "ops", "errors", "seconds",
		"ops_per_sec", "latency_ns", "costs_per_op"} {
		require.Contains(t, kv, k)
	}
	lat := kv["latency_ns"].(map[string]any)
	for _, k := range []string{"mean", "p50", "p99", "p999", "max"} {
		require.Contains(t, lat, k)
	}
	costs := kv["costs_per_op"].(map[string]any)
	for _, k := range []string{"round_trips", "verbs", "bytes_out", "bytes_in", "failed_cas", "calls", "verbs_by_kind"} {
		require.Contains(t, costs, k)
	}
	require.NotContains(t, rows[4].(map[string]any), "costs_per_op", "no costs for the Go map")
	require.Contains(t, rows[5].(map[string]any)["unsupported"], "ordered index")

	var back Report
	require.NoError(t, json.Unmarshal(b.Bytes(), &back))
	for i := range rep.Rows {
		if c := rep.Rows[i].Costs; c != nil {
			c.Total = farmem.Stats{} // not encoded: the per-op figures carry it
		}
	}
	require.Equal(t, *rep, back)
}

// parseSVG checks that the document is well-formed XML with an svg root, and returns the
// number of polylines and the text of every text element.
func parseSVG(t *testing.T, doc []byte) (polylines, circles int, texts []string) {
	t.Helper()
	dec := xml.NewDecoder(bytes.NewReader(doc))
	var stack []string
	for {
		tok, err := dec.Token()
		if errors.Is(err, io.EOF) {
			break
		}
		require.NoError(t, err, "well-formed XML")
		switch tk := tok.(type) {
		case xml.StartElement:
			if len(stack) == 0 {
				require.Equal(t, "svg", tk.Name.Local)
				require.Equal(t, "http://www.w3.org/2000/svg", tk.Name.Space)
			}
			stack = append(stack, tk.Name.Local)
			switch tk.Name.Local {
			case "polyline":
				polylines++
			case "circle":
				circles++
			}
		case xml.EndElement:
			stack = stack[:len(stack)-1]
		case xml.CharData:
			if len(stack) > 0 && stack[len(stack)-1] == "text" {
				texts = append(texts, string(tk))
			}
		}
	}
	require.Empty(t, stack, "every element closed")
	return polylines, circles, texts
}

func TestWriteSVG(t *testing.T) {
	rep := sampleReport()
	for _, m := range Metrics() {
		var b bytes.Buffer
		err := rep.WriteSVG(&b, m)
		require.NoError(t, err, m)
		lines, circles, texts := parseSVG(t, b.Bytes())
		joined := strings.Join(texts, "|")
		require.Contains(t, joined, "clients")
		require.Contains(t, joined, m.label())
		if m == MetricThroughput || m == MetricP99 || m == MetricP50 || m == MetricP999 {
			require.Equal(t, 2, lines, "%s: kvstore and gomap", m)
			require.Equal(t, 6, circles)
			require.Contains(t, joined, "gomap")
		} else {
			require.Equal(t, 1, lines, "%s: only kvstore counts costs", m)
			require.NotContains(t, joined, "gomap")
		}
		require.NotContains(t, joined, "ordered-less", "unsupported rows are not plotted")
		if m == MetricThroughput {
			golden(t, "throughput.golden.svg", b.Bytes())
			// Log x axis: the ticks are the client counts.
			for _, x := range []string{"1", "2", "4"} {
				require.Contains(t, texts, x)
			}
		}
	}
	require.ErrorIs(t, rep.WriteSVG(io.Discard, "latency"), farmem.ErrInvalid)
	require.ErrorIs(t, (&Report{Workload: "a"}).WriteSVG(io.Discard, MetricThroughput), farmem.ErrInvalid)

	// A categorical sweep, and titles that need escaping.
	cat := &Report{Workload: "<x&y>", Sweep: "requestdistribution", Rows: []Row{
		{Store: "a<b", Phase: PhaseRun, Point: "uniform", Throughput: 10},
		{Store: "a<b", Phase: PhaseRun, Point: "zipfian", Throughput: 20},
		{Store: "c", Phase: PhaseRun, Point: "zipfian", Throughput: 5},
	}}
	var b bytes.Buffer
	require.NoError(t, cat.WriteSVG(&b, MetricThroughput))
	lines, circles, texts := parseSVG(t, b.Bytes())
	require.Equal(t, 1, lines, "a single point draws no line")
	require.Equal(t, 3, circles)
	require.Contains(t, texts, "uniform")
	require.Contains(t, texts, "a<b")
	require.Contains(t, strings.Join(texts, " "), "<x&y>")
}

func TestPlotErrors(t *testing.T) {
	nan := 0.0
	nan = nan / nan
	for _, p := range []*Plot{
		{},
		{Series: []Series{{Name: "s", X: []float64{1}, Y: []float64{1, 2}}}},
		{Series: []Series{{Name: "s", X: []float64{1}, Y: []float64{nan}}}},
		{LogX: true, Series: []Series{{Name: "s", X: []float64{0, 1}, Y: []float64{1, 2}}}},
	} {
		require.ErrorIs(t, p.WriteSVG(io.Discard), farmem.ErrInvalid)
	}
	// Negative values and a flat line still draw.
	var b bytes.Buffer
	require.NoError(t, (&Plot{Title: "t", Series: []Series{{Name: "s", X: []float64{-3, 5, 100}, Y: []float64{-2, 0, 7}},
		{Name: "flat", X: []float64{1, 2}, Y: []float64{0, 0}}}}).WriteSVG(&b))
	parseSVG(t, b.Bytes())
	require.Equal(t, []float64{0, 0.5, 1}, ticks(0, 1, 0.5))
	require.Equal(t, 2.0, niceStep(1.5))
	require.Equal(t, 50.0, niceStep(31))
	require.Equal(t, "1.5M", fmtTick(1.5e6))
	require.Equal(t, "250k", fmtTick(250000))
}

// Summarize on a real run matches the workers' own records.
func TestSummarizeMerges(t *testing.T) {
	w := smallWorkload(t, "b", map[string]string{"operationcount": "3000"})
	d, err := NewDriver(w)
	require.NoError(t, err)
	m := NewMapStore()
	var workers []*Worker
	for i := range 3 {
		s, err := m.Open(t.Context())
		require.NoError(t, err)
		wk, err := d.NewWorker(s, WorkerOptions{Rand: stattest.NewRand(uint64(i))})
		require.NoError(t, err)
		require.NoError(t, wk.Load(t.Context(), i, 3))
		workers = append(workers, wk)
	}
	for i, wk := range workers {
		for range 1000 * (i + 1) {
			require.NoError(t, wk.Step(t.Context()))
		}
	}
	row := Summarize("gomap", PhaseRun, 0, workers)
	require.Equal(t, uint64(6000), row.Ops)
	require.Equal(t, int64(6000), row.Histogram.TotalCount())
	require.Zero(t, row.Throughput, "no window, no throughput")
	load := Summarize("gomap", PhaseLoad, 0, workers)
	require.Equal(t, uint64(2000), load.Ops)
	require.Equal(t, 2000, m.Len())
	require.Equal(t, "b", row.Workload)
	// Bad load parts.
	require.ErrorIs(t, workers[0].Load(t.Context(), 3, 3), farmem.ErrInvalid)
	_, err = d.NewWorker(nil, WorkerOptions{Rand: stattest.NewRand(1)})
	require.ErrorIs(t, err, farmem.ErrInvalid)
}
