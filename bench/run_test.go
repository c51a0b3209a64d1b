package bench

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/farmem/farmem/bench/generator"
	"github.com/farmem/farmem/farmem"
	"github.com/farmem/farmem/internal/stattest"
	"github.com/farmem/farmem/sim"
	"github.com/stretchr/testify/require"
)

func smallWorkload(t *testing.T, name string, props map[string]string) *Workload {
	t.Helper()
	w, err := Builtin(name)
	require.NoError(t, err)
	all := map[string]string{"recordcount": "2000", "operationcount": "20000", "valuesize": "100"}
	for k, v := range props {
		all[k] = v
	}
	w, err = w.With(all)
	require.NoError(t, err)
	return w
}

func runRow(t *testing.T, rep *Report, store string, phase Phase) Row {
	t.Helper()
	for _, r := range rep.Rows {
		if r.Store == store && r.Phase == phase {
			return r
		}
	}
	t.Fatalf("no %s row for %s in %+v", phase, store, rep.Rows)
	return Row{}
}

// The runner with the Go map: the load phase inserts recordcount keys, the run phase counts
// operationcount ops split over the workers, and the workers' histograms are merged.
func TestRunGoMap(t *testing.T) {
	w := smallWorkload(t, "a", nil)
	m := NewMapStore()
	defer m.Close()
	rep, err := Run(t.Context(), Config{Workload: w, Stores: []Store{m}, Clients: 4})
	require.NoError(t, err)
	require.Len(t, rep.Rows, 2)
	load := runRow(t, rep, "gomap", PhaseLoad)
	require.Empty(t, load.Error)
	require.Equal(t, uint64(2000), load.Ops)
	require.Equal(t, uint64(2000), load.ByOp["insert"].Ops)
	require.Equal(t, 2000, m.Len())
	require.Equal(t, 4, load.Clients)
	require.Equal(t, int64(2000), load.Histogram.TotalCount())

	run := runRow(t, rep, "gomap", PhaseRun)
	require.Empty(t, run.Error)
	require.Equal(t, "a", run.Workload)
	require.Equal(t, 4, run.Clients)
	require.Equal(t, uint64(20000), run.Ops, "first error: %s", run.FirstError)
	require.Zero(t, run.Errors)
	require.Equal(t, run.Ops, run.ByOp["read"].Ops+run.ByOp["update"].Ops)
	require.Len(t, run.ByOp, 2)
	stattest.RequireBinomial(t, "reads", int(run.ByOp["read"].Ops), 20000, 0.5)
	require.Equal(t, int64(run.Ops), run.Histogram.TotalCount(), "histograms merged")
	require.Positive(t, run.Latency.P50)
	require.LessOrEqual(t, run.Latency.P50, run.Latency.P99)
	require.LessOrEqual(t, run.Latency.P99, run.Latency.P999)
	require.LessOrEqual(t, run.Latency.P999, run.Latency.Max)
	require.Positive(t, run.Throughput)
	require.InDelta(t, float64(run.Ops)/run.Seconds, run.Throughput, 1e-6*run.Throughput)
	require.Nil(t, run.Costs, "the Go map counts no costs")
	require.Equal(t, 2000, m.Len(), "workload A inserts nothing")
}

// A duration-bounded run with a warm-up records only the measured window.
func TestRunDuration(t *testing.T) {
	w := smallWorkload(t, "b", nil)
	m := NewMapStore()
	rep, err := Run(t.Context(), Config{Workload: w, Stores: []Store{m}, Clients: 2,
		Duration: 150 * time.Millisecond, Warmup: 50 * time.Millisecond})
	require.NoError(t, err)
	run := runRow(t, rep, "gomap", PhaseRun)
	require.Equal(t, 0.15, run.Seconds)
	require.Positive(t, run.Ops)
	require.Zero(t, run.Errors)
	// Steps counts warm-up ops too; the row does not.
	require.InDelta(t, float64(run.Ops)/0.15, run.Throughput, 1)
}

// Workload D inserts during the run; reads go to the newest keys and never miss, because a
// key is read only once its insert is acknowledged. Inserted keys are new keys.
func TestRunInsertsLatest(t *testing.T) {
	w := smallWorkload(t, "d", nil)
	m := NewMapStore()
	rep, err := Run(t.Context(), Config{Workload: w, Stores: []Store{m}, Clients: 4})
	require.NoError(t, err)
	run := runRow(t, rep, "gomap", PhaseRun)
	require.Zero(t, run.Errors, "first error: %s", run.FirstError)
	ins := run.ByOp["insert"].Ops
	stattest.RequireBinomial(t, "inserts", int(ins), 20000, 0.05)
	require.Equal(t, 2000+int(ins), m.Len())
}

// recordingStore counts reads per key (for the key distribution seen through the harness).
type recordingStore struct {
	*MapStore
	mu    sync.Mutex
	reads map[string]int
}

type recordingSession struct {
	Session
	s *recordingStore
}

func (r *recordingStore) Open(ctx context.Context) (Session, error) {
	s, err := r.MapStore.Open(ctx)
	return &recordingSession{Session: s, s: r}, err
}

func (r *recordingSession) Read(ctx context.Context, key []byte) ([]byte, error) {
	r.s.mu.Lock()
	r.s.reads[string(key)]++
	r.s.mu.Unlock()
	return r.Session.Read(ctx, key)
}

// Through the harness, workload C's hottest key is YCSB's: the key named by key number
// FNVHash64(0) mod n, where n counts recordcount plus the expected inserts plus one, read with
// the frequency YCSB's folding gives.
func TestRunZipfianHotKey(t *testing.T) {
	w := smallWorkload(t, "c", map[string]string{"operationcount": "100000"})
	rs := &recordingStore{MapStore: NewMapStore(), reads: map[string]int{}}
	_, err := Run(t.Context(), Config{Workload: w, Stores: []Store{rs}, Clients: 2})
	require.NoError(t, err)
	n := w.InsertCount + 1 // no inserts expected
	s := generator.NewScrambledZipfian(0, n-1)
	hot := generator.KeyName(s.Fold(0), 1, false)
	best := ""
	for k, c := range rs.reads {
		if best == "" || c > rs.reads[best] {
			best = k
		}
	}
	require.Equal(t, hot, best)
	// The hot key's probability: the large space's items 0..199999 that fold onto it, and the
	// rest of the space's mass spread evenly (an approximation good to well under a sigma here).
	space := generator.NewZipfianZeta(0, generator.ScrambledItemCount, generator.ZipfianTheta, generator.ScrambledZeta)
	p, tail := 0.0, 1.0
	for i := range int64(200_000) {
		q := space.Prob(i)
		tail -= q
		if s.Fold(i) == s.Fold(0) {
			p += q
		}
	}
	p += tail / float64(n)
	stattest.RequireBinomial(t, "hot key reads", rs.reads[hot], 100000, p)
}

// orderedStore is a test store with an ordered index, so that workload E runs.
type orderedStore struct {
	mu   sync.Mutex
	keys []string
	vals map[string][]byte
}

type orderedSession struct{ s *orderedStore }

func (o *orderedStore) Name() string                                   { return "ordered" }
func (o *orderedStore) Open(ctx context.Context) (Session, error)      { return orderedSession{o}, nil }
func (o *orderedStore) Close() error                                   { return nil }
func (o orderedSession) Close() error                                  { return nil }
func (o orderedSession) Update(ctx context.Context, k, v []byte) error { return nil }
func (o orderedSession) Read(ctx context.Context, k []byte) ([]byte, error) {
	o.s.mu.Lock()
	defer o.s.mu.Unlock()
	if v, ok := o.s.vals[string(k)]; ok {
		return v, nil
	}
	return nil, ErrNotFound
}
func (o orderedSession) Insert(ctx context.Context, k, v []byte) error {
	o.s.mu.Lock()
	defer o.s.mu.Unlock()
	if _, ok := o.s.vals[string(k)]; ok {
		return ErrExists
	}
	o.s.vals[string(k)] = slices.Clone(v)
	i, _ := slices.BinarySearch(o.s.keys, string(k))
	o.s.keys = slices.Insert(o.s.keys, i, string(k))
	return nil
}
func (o orderedSession) Scan(ctx context.Context, start []byte, n int, visit func(key, value []byte)) (int, error) {
	o.s.mu.Lock()
	defer o.s.mu.Unlock()
	i, _ := slices.BinarySearch(o.s.keys, string(start))
	return min(n, len(o.s.keys)-i), nil
}

// Workload E says clearly that the Go map cannot run it (no ordered index), without loading
// it or failing the run, and runs on a store that has one.
func TestRunWorkloadE(t *testing.T) {
	w := smallWorkload(t, "e", map[string]string{"operationcount": "2000"})
	m := NewMapStore()
	o := &orderedStore{vals: map[string][]byte{}}
	rep, err := Run(t.Context(), Config{Workload: w, Stores: []Store{m, o}, Clients: 2})
	require.NoError(t, err)
	for _, r := range rep.Rows {
		if r.Store == "gomap" {
			require.Equal(t, PhaseRun, r.Phase, "gomap is not loaded for a workload it cannot run")
			require.Contains(t, r.Unsupported, "workload e needs an ordered index for its scans")
			require.Zero(t, r.Ops)
		}
	}
	require.Zero(t, m.Len())
	run := runRow(t, rep, "ordered", PhaseRun)
	require.Empty(t, run.Unsupported)
	require.Zero(t, run.Errors, run.FirstError)
	require.Equal(t, uint64(2000), run.Ops)
	stattest.RequireBinomial(t, "scans", int(run.ByOp["scan"].Ops), 2000, 0.95)
	var b bytes.Buffer
	require.NoError(t, rep.WriteTable(&b))
	require.Contains(t, b.String(), "gomap e: unsupported: gomap: workload e needs an ordered index")
}

// unsupportedSession is a Scanner whose scans are not supported after all (an ordered index
// interface with nothing plugged in): the row says so.
type unsupportedStore struct{ *MapStore }
type unsupportedSession struct{ Session }

func (u unsupportedStore) Name() string { return "half" }
func (u unsupportedStore) Open(ctx context.Context) (Session, error) {
	s, err := u.MapStore.Open(ctx)
	return unsupportedSession{s}, err
}
func (unsupportedSession) Scan(ctx context.Context, start []byte, n int, visit func(key, value []byte)) (int, error) {
	return 0, fmt.Errorf("kvstore: scan: no ordered index configured: %w", farmem.ErrNotSupported)
}

func TestRunUnsupportedAtRunTime(t *testing.T) {
	w := smallWorkload(t, "e", map[string]string{"operationcount": "1000"})
	rep, err := Run(t.Context(), Config{Workload: w, Stores: []Store{unsupportedStore{NewMapStore()}}, Clients: 2})
	require.NoError(t, err)
	run := runRow(t, rep, "half", PhaseRun)
	require.Contains(t, run.Unsupported, "no ordered index configured")
}

// costStore counts costs as a far-memory store would: a read is one round trip and one READ
// verb of the value's size; an update or insert two round trips, a failed CAS and a WRITE.
type costStore struct{ *MapStore }
type costSession struct {
	Session
	st farmem.Stats
}

func (c costStore) Name() string { return "costed" }
func (c costStore) Open(ctx context.Context) (Session, error) {
	s, err := c.MapStore.Open(ctx)
	return &costSession{Session: s}, err
}
func (c *costSession) Costs() farmem.Stats { return c.st }
func (c *costSession) Read(ctx context.Context, key []byte) ([]byte, error) {
	v, err := c.Session.Read(ctx, key)
	c.st.RoundTrips++
	c.st.Verbs[farmem.TargetMemory][farmem.OpRead]++
	c.st.BytesIn += uint64(len(v))
	return v, err
}
func (c *costSession) write(value []byte) {
	c.st.RoundTrips += 2
	c.st.Verbs[farmem.TargetMemory][farmem.OpCAS]++
	c.st.Verbs[farmem.TargetMemory][farmem.OpWrite]++
	c.st.FailedCAS++
	c.st.BytesOut += uint64(len(value)) + 8
	c.st.BytesIn += 8
}
func (c *costSession) Insert(ctx context.Context, key, value []byte) error {
	c.write(value)
	return c.Session.Insert(ctx, key, value)
}
func (c *costSession) Update(ctx context.Context, key, value []byte) error {
	c.write(value)
	return c.Session.Update(ctx, key, value)
}

// Counted costs are per-op deltas, exact per op kind and averaged over the mix.
func TestRunCosts(t *testing.T) {
	w := smallWorkload(t, "f", nil) // reads and read-modify-writes
	rep, err := Run(t.Context(), Config{Workload: w, Stores: []Store{costStore{NewMapStore()}}, Clients: 3})
	require.NoError(t, err)
	load := runRow(t, rep, "costed", PhaseLoad)
	require.Equal(t, &Costs{RoundTrips: 2, Verbs: 2, BytesOut: 108, BytesIn: 8, FailedCAS: 1,
		VerbsByKind: map[string]float64{"cas": 1, "write": 1}, Total: load.Costs.Total}, load.Costs)
	require.Equal(t, uint64(4000), load.Costs.Total.RoundTrips)
	run := runRow(t, rep, "costed", PhaseRun)
	require.Zero(t, run.Errors)
	rd, rmw := run.ByOp["read"], run.ByOp["readmodifywrite"]
	require.Equal(t, 1.0, rd.Costs.RoundTrips)
	require.Equal(t, 1.0, rd.Costs.Verbs)
	require.Equal(t, map[string]float64{"read": 1}, rd.Costs.VerbsByKind)
	require.Equal(t, 100.0, rd.Costs.BytesIn)
	require.Equal(t, 0.0, rd.Costs.FailedCAS)
	require.Equal(t, 3.0, rmw.Costs.RoundTrips)
	require.Equal(t, 3.0, rmw.Costs.Verbs)
	require.Equal(t, 1.0, rmw.Costs.FailedCAS)
	require.Equal(t, 108.0, rmw.Costs.BytesOut)
	n := float64(rd.Ops + rmw.Ops)
	require.InDelta(t, (float64(rd.Ops)*1+float64(rmw.Ops)*3)/n, run.Costs.RoundTrips, 1e-9)
	require.InDelta(t, float64(rmw.Ops)/n, run.Costs.FailedCAS, 1e-9)
	require.Equal(t, uint64(rd.Ops+3*rmw.Ops), run.Costs.Total.RoundTrips)
}

// A sweep over clients runs each point on the loaded store; stores interleave per point.
func TestRunSweep(t *testing.T) {
	w := smallWorkload(t, "b", map[string]string{"operationcount": "4000"})
	sw, err := ParseSweep("clients=1, 2,4")
	require.NoError(t, err)
	require.Equal(t, "clients=1,2,4", sw.String())
	a, b := NewMapStore(), costStore{NewMapStore()}
	rep, err := Run(t.Context(), Config{Workload: w, Stores: []Store{a, b}, Sweep: sw})
	require.NoError(t, err)
	require.Equal(t, "clients", rep.Sweep)
	var got []string
	for _, r := range rep.Rows {
		got = append(got, fmt.Sprintf("%s %s %d %s", r.Store, r.Phase, r.Clients, r.Point))
		if r.Phase == PhaseRun {
			require.Equal(t, uint64(4000), r.Ops)
		}
	}
	require.Equal(t, []string{"gomap load 4 ", "costed load 4 ",
		"gomap run 1 1", "costed run 1 1", "gomap run 2 2", "costed run 2 2", "gomap run 4 4", "costed run 4 4"}, got)

	// A sweep over a run-time property.
	sw, err = ParseSweep("requestdistribution=uniform,zipfian,hotspot")
	require.NoError(t, err)
	rep, err = Run(t.Context(), Config{Workload: w, Stores: []Store{NewMapStore()}, Sweep: sw, Clients: 2})
	require.NoError(t, err)
	require.Len(t, rep.Rows, 4)
	require.Equal(t, "hotspot", rep.Rows[3].Point)
	require.Zero(t, rep.Rows[3].Errors)

	// Sweeps that cannot be run.
	for _, s := range []string{"recordcount=1,2", "nonsense=1", "clients=0", "clients=x", "readproportion=0.5"} {
		sw, err := ParseSweep(s)
		require.NoError(t, err)
		_, err = Run(t.Context(), Config{Workload: w, Stores: []Store{NewMapStore()}, Sweep: sw})
		require.Error(t, err, s)
		require.True(t, errors.Is(err, farmem.ErrInvalid) || errors.Is(err, ErrWorkload), s)
	}
	for _, s := range []string{"clients", "=1", "clients=", "clients=1,,2"} {
		_, err := ParseSweep(s)
		require.ErrorIs(t, err, farmem.ErrInvalid, s)
	}
}

// failingStore cannot open sessions; the other stores still run.
type failingStore struct{}

func (failingStore) Name() string { return "broken" }
func (failingStore) Open(ctx context.Context) (Session, error) {
	return nil, fmt.Errorf("cannot connect: %w", farmem.ErrNodeDown)
}
func (failingStore) Close() error { return nil }

func TestRunFailingStore(t *testing.T) {
	w := smallWorkload(t, "c", map[string]string{"operationcount": "100"})
	rep, err := Run(t.Context(), Config{Workload: w, Stores: []Store{failingStore{}, NewMapStore()}})
	require.NoError(t, err)
	require.Len(t, rep.Rows, 3)
	require.Contains(t, rep.Rows[0].Error, "cannot connect")
	require.Equal(t, uint64(100), runRow(t, rep, "gomap", PhaseRun).Ops)

	// A store that loses its data: loading twice fails with the key that exists.
	m := NewMapStore()
	_, err = Run(t.Context(), Config{Workload: w, Stores: []Store{m}})
	require.NoError(t, err)
	rep, err = Run(t.Context(), Config{Workload: w, Stores: []Store{m}})
	require.NoError(t, err)
	require.Contains(t, rep.Rows[0].Error, "key exists")
	require.Len(t, rep.Rows, 1, "a store whose load failed does not run")
	rep, err = Run(t.Context(), Config{Workload: w, Stores: []Store{m}, SkipLoad: true})
	require.NoError(t, err)
	require.Len(t, rep.Rows, 1)
	require.Zero(t, rep.Rows[0].Errors)

	_, err = Run(t.Context(), Config{Stores: []Store{m}})
	require.ErrorIs(t, err, farmem.ErrInvalid)
	_, err = Run(t.Context(), Config{Workload: w})
	require.ErrorIs(t, err, farmem.ErrInvalid)
	_, err = Run(t.Context(), Config{Workload: w, Stores: []Store{m}, Clients: -1})
	require.ErrorIs(t, err, farmem.ErrInvalid)
}

func TestRunCanceled(t *testing.T) {
	w := smallWorkload(t, "a", nil)
	ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
	defer cancel()
	start := time.Now()
	rep, err := Run(ctx, Config{Workload: w, Stores: []Store{NewMapStore()}, Duration: time.Hour})
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.NotNil(t, rep)
	require.Less(t, time.Since(start), 10*time.Second)
}

// The progress line rewrites itself and is cleared at the end.
func TestProgress(t *testing.T) {
	w := smallWorkload(t, "c", nil)
	var b syncBuffer
	_, err := Run(t.Context(), Config{Workload: w, Stores: []Store{NewMapStore()}, Duration: 450 * time.Millisecond, Progress: &b})
	require.NoError(t, err)
	out := b.String()
	require.Contains(t, out, "\r\x1b[Kgomap run c clients=1: ")
	require.Contains(t, out, "/0s, ") // the duration, rounded
	require.Contains(t, out, " ops/s")
	require.True(t, strings.HasSuffix(out, "\r\x1b[K"), "the line is cleared at the end")

	// IsTerminal: a pipe and /dev/null are not terminals; a pty master is.
	pr, pw, err := os.Pipe()
	require.NoError(t, err)
	defer pr.Close()
	defer pw.Close()
	require.False(t, IsTerminal(pw))
	null, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
	require.NoError(t, err)
	defer null.Close()
	require.False(t, IsTerminal(null))
	require.False(t, IsTerminal(nil))
	if pty, err := os.OpenFile("/dev/ptmx", os.O_RDWR, 0); err == nil {
		defer pty.Close()
		require.True(t, IsTerminal(pty))
	}
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// slotSession is a minimal far-memory session for the simulator test: a direct-mapped table
// of value slots on memory node 1 (collisions overwrite), one READ or one WRITE per op. Its
// costs are its Memory's Stats.
type slotSession struct {
	m     farmem.Memory
	slots uint64
	size  int
	buf   []byte
}

func (s *slotSession) addr(key []byte) farmem.Addr {
	h := uint64(generator.FNVHash64(int64(len(key))))
	for _, b := range key {
		h = (h ^ uint64(b)) * 1099511628211
	}
	return farmem.MakeAddr(1, 64<<10+(h%s.slots)*uint64(s.size))
}
func (s *slotSession) Read(ctx context.Context, key []byte) ([]byte, error) {
	return s.buf, s.m.Read(ctx, s.addr(key), s.buf)
}
func (s *slotSession) Insert(ctx context.Context, key, value []byte) error {
	return s.m.Write(ctx, s.addr(key), value)
}
func (s *slotSession) Update(ctx context.Context, key, value []byte) error {
	return s.m.Write(ctx, s.addr(key), value)
}
func (s *slotSession) Close() error        { return nil }
func (s *slotSession) Costs() farmem.Stats { return s.m.Stats() }

// The simulator hook: Driver and Workers run the same workload in sim's closed loop, each
// client loading its part in Start and returning Worker.Step. Costs are exact (one round trip
// and one verb of 64 bytes per op), the worker's window is the loop's, and the run is a
// function of the seed.
func TestSimHook(t *testing.T) {
	w := smallWorkload(t, "a", map[string]string{"valuesize": "64"})
	const clients = 8
	run := func(seed uint64) (Row, Row, *sim.LoadResult) {
		m := sim.ConnectX6()
		m.ComputeNodes, m.ClientsPerNode, m.MaxHandlers = 2, 8, 2
		s, err := sim.New(m, seed)
		require.NoError(t, err)
		defer s.Close()
		d, err := NewDriver(w)
		require.NoError(t, err)
		workers := make([]*Worker, clients)
		res, err := s.RunClosedLoop(sim.ClosedLoop{Clients: clients, Warmup: 20 * time.Microsecond,
			Duration: 500 * time.Microsecond,
			Start: func(ctx context.Context, c farmem.Memory, i int) (sim.OpFunc, error) {
				sess := &slotSession{m: c, slots: 4096, size: 64, buf: make([]byte, 64)}
				wk, err := d.NewWorker(sess, WorkerOptions{Rand: c.Runtime().Rand(), Now: FabricClock(c.Runtime()),
					Warmup: 20 * time.Microsecond, Duration: 500 * time.Microsecond})
				if err != nil {
					return nil, err
				}
				if err := wk.Load(ctx, i, clients); err != nil {
					return nil, err
				}
				workers[i] = wk
				return wk.Step, nil
			}})
		require.NoError(t, err)
		return Summarize("slots/sim", PhaseLoad, 0, workers), Summarize("slots/sim", PhaseRun, res.Window, workers), res
	}
	load, row, res := run(1)
	require.Equal(t, uint64(2000), load.Ops)
	require.Equal(t, 1.0, load.Costs.RoundTrips)
	require.Equal(t, 64.0, load.Costs.BytesOut)
	require.Zero(t, row.Errors)
	require.Equal(t, res.Ops, row.Ops, "the workers' window is the closed loop's")
	require.Equal(t, res.Latency.TotalCount(), row.Histogram.TotalCount())
	require.Equal(t, res.Latency.ValueAtQuantile(99), row.Latency.P99)
	require.InDelta(t, res.Throughput, row.Throughput, 1e-6*res.Throughput)
	require.Equal(t, 1.0, row.Costs.RoundTrips)
	require.Equal(t, 1.0, row.Costs.Verbs)
	require.Equal(t, 64.0, row.Costs.Bytes())
	require.Equal(t, row.Ops, res.Report.Stats.RoundTrips, "per-op deltas add up to the fabric's count")
	stattest.RequireBinomial(t, "reads", int(row.ByOp["read"].Ops), int(row.Ops), 0.5)

	_, row2, _ := run(1)
	row.Histogram, row2.Histogram = nil, nil
	require.Equal(t, row, row2, "same seed, same run")
	_, row3, _ := run(2)
	require.NotEqual(t, row.ByOp["read"].Ops, row3.ByOp["read"].Ops, "another seed, another run")
}
