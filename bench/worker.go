package bench

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync/atomic"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
	"github.com/farmem/farmem/bench/generator"
	"github.com/farmem/farmem/farmem"
)

// Driver holds what the workers running one workload against one store share: the workload,
// the templates of its generators, and the insert key sequence (a generator.AckCounter
// starting at recordcount, as YCSB's transaction inserts do), which carries across the points
// of a sweep.
// Its methods are safe for concurrent use.
//
// Key choice follows YCSB's CoreWorkload: zipfian is a generator.ScrambledZipfian over
// insertcount plus twice the inserts operationcount*insertproportion expects (so that inserts
// do not shift the hot keys), uniform and hotspot draw over the loaded records only, latest
// follows the insert sequence; a key beyond the last acknowledged insert is drawn again.
type Driver struct {
	w       *Workload
	inserts *generator.AckCounter
	cum     [NumOps]float64     // cumulative proportions
	keys    generator.Generator // templates; workers clone them
	scanLen generator.Generator
	field   generator.Generator // nil for constant field lengths
}

// NewDriver prepares w for running (for latest, this computes zeta over recordcount once).
func NewDriver(w *Workload) (*Driver, error) {
	if w == nil {
		return nil, fmt.Errorf("bench: no workload: %w", ErrWorkload)
	}
	return newDriver(w, generator.NewAckCounter(w.RecordCount)), nil
}

func newDriver(w *Workload, inserts *generator.AckCounter) *Driver {
	d := &Driver{w: w, inserts: inserts}
	sum := 0.0
	for op := range NumOps {
		sum += w.Proportion[op]
		d.cum[op] = sum
	}
	lo, hi := w.InsertStart, w.InsertStart+w.InsertCount-1
	switch w.RequestDistribution {
	case DistZipfian:
		expected := int64(float64(w.OperationCount) * w.Proportion[OpInsert] * 2)
		d.keys = generator.NewScrambledZipfian(lo, hi+1+expected)
	case DistLatest:
		d.keys = generator.NewLatest(inserts)
	case DistHotspot:
		d.keys = generator.NewHotspot(lo, hi, w.HotspotDataFraction, w.HotspotOpnFraction)
	default:
		d.keys = generator.NewUniform(lo, hi)
	}
	if w.ScanLengthDistribution == "zipfian" {
		d.scanLen = generator.NewZipfianRange(int64(w.MinScanLength), int64(w.MaxScanLength), generator.ZipfianTheta)
	} else {
		d.scanLen = generator.NewUniform(int64(w.MinScanLength), int64(w.MaxScanLength))
	}
	if w.FixedValueSize == 0 {
		switch w.FieldLengthDistribution {
		case "uniform":
			d.field = generator.NewUniform(1, int64(w.FieldLength))
		case "zipfian":
			d.field = generator.NewZipfianRange(1, int64(w.FieldLength), generator.ZipfianTheta)
		}
	}
	return d
}

// Workload returns the driver's workload.
func (d *Driver) Workload() *Workload { return d.w }

// Inserts returns the shared insert key sequence.
func (d *Driver) Inserts() *generator.AckCounter { return d.inserts }

// With returns a driver for nw, a variant of the driver's workload that differs only in
// run-time properties (proportions, distributions, scan lengths), sharing this driver's insert
// sequence: the next point of a sweep over one loaded store.
func (d *Driver) With(nw *Workload) (*Driver, error) {
	for k, def := range propDefs {
		if def.loadTime && d.w.Effective()[k] != nw.Effective()[k] {
			return nil, fmt.Errorf("bench: %s differs (%s, was %s): a change to the loaded data needs a fresh store: %w",
				k, nw.Effective()[k], d.w.Effective()[k], ErrWorkload)
		}
	}
	return newDriver(nw, d.inserts), nil
}

// Check returns an error wrapping ErrNeedsOrderedIndex (and so errors.ErrUnsupported) if the
// workload scans and s is not a Scanner.
func (d *Driver) Check(s Session) error {
	if _, ok := s.(Scanner); d.w.NeedsScan() && !ok {
		return fmt.Errorf("workload %s %w", d.w.Name, ErrNeedsOrderedIndex)
	}
	return nil
}

// chooseOp is YCSB's DiscreteGenerator over the proportions.
func (d *Driver) chooseOp(r *rand.Rand) Op {
	u := r.Float64() * d.cum[NumOps-1]
	for op := range NumOps {
		if u < d.cum[op] {
			return op
		}
	}
	for op := NumOps - 1; op > 0; op-- { // rounding: the last op with a share
		if d.w.Proportion[op] > 0 {
			return op
		}
	}
	return OpRead
}

// WorkerOptions configure a Worker.
type WorkerOptions struct {
	// Rand is the worker's random source (required). On the simulator use the client's
	// m.Runtime().Rand(), so that the run is a function of the seed.
	Rand *rand.Rand
	// Now is the clock latencies are measured with. The default is the wall clock; on the
	// simulator use FabricClock(m.Runtime()).
	Now func() time.Duration
	// Warmup and Duration set the measured window of Step: it starts Warmup after the worker's
	// first Step and lasts Duration (0: no end). Operations that end outside the window are
	// executed but not recorded, as the simulator's closed loop does.
	Warmup, Duration time.Duration
}

// FabricClock returns a clock reading rt's fabric time (virtual time on the simulator).
func FabricClock(rt farmem.Runtime) func() time.Duration {
	return func() time.Duration { return time.Duration(rt.Now()) }
}

// Worker runs a workload's operations on one Session with its own generator state and its own
// histograms. It is for one goroutine. Step is the hook for the simulator's closed loop: its
// method value has sim.OpFunc's type.
type Worker struct {
	d       *Driver
	sess    Session
	scan    Scanner
	cost    Coster
	r       *rand.Rand
	now     func() time.Duration
	keys    generator.Generator
	scanLen generator.Generator
	field   generator.Generator
	key     []byte
	val     []byte
	stamp   uint64

	warmup, dur time.Duration
	started     bool
	from, to    time.Duration
	lastEnd     time.Duration

	load, run tally
	steps     atomic.Uint64
	// last is the session's costs after the worker's previous operation (valid when
	// haveLast): the costs before the next one, since the worker uses its session for nothing
	// else in between.
	last     farmem.Stats
	haveLast bool
	grp      costGroup
}

// costGroup is a run of consecutive operations of one kind, each begun inside the measured
// window, whose costs the worker reads once for the whole run (at its start, and when an
// operation of another kind, or one begun outside the window, comes next, or Summarize settles
// it) rather than around each operation: the costs then weigh on the store's throughput no
// more than they must (a reading is a few hundred bytes of counters, and a read-only workload
// needs one per worker). Every operation of the run counts in the window's costs, the last
// one too if it ended after the window (it began inside it): the costs per operation are
// averaged over the operations whose costs were read (opTally.costOps), not over those whose
// latencies were.
type costGroup struct {
	open  bool
	op    Op
	n     uint64
	start farmem.Stats
}

// NewWorker returns a worker running d's workload on s.
func (d *Driver) NewWorker(s Session, o WorkerOptions) (*Worker, error) {
	if o.Rand == nil || s == nil {
		return nil, fmt.Errorf("bench: a worker needs a session and a random source: %w", farmem.ErrInvalid)
	}
	wk := &Worker{d: d, sess: s, r: o.Rand, now: o.Now, warmup: o.Warmup, dur: o.Duration,
		keys: cloneGen(d.keys), scanLen: cloneGen(d.scanLen), field: cloneGen(d.field)}
	wk.scan, _ = s.(Scanner)
	wk.cost, _ = s.(Coster)
	wk.load.costed = wk.cost != nil
	wk.run.costed = wk.cost != nil
	if wk.now == nil {
		t0 := time.Now()
		wk.now = func() time.Duration { return time.Since(t0) }
	}
	wk.val = make([]byte, d.w.ValueSize())
	for i := 0; i < len(wk.val); i += 8 {
		v := wk.r.Uint64()
		for j := 0; j < 8 && i+j < len(wk.val); j++ {
			wk.val[i+j] = byte(v >> (8 * j))
		}
	}
	return wk, nil
}

func cloneGen(g generator.Generator) generator.Generator {
	switch g := g.(type) {
	case *generator.Zipfian:
		return g.Clone()
	case *generator.ScrambledZipfian:
		return g.Clone()
	case *generator.Latest:
		return g.Clone()
	}
	return g // stateless: Uniform, Hotspot, nil
}

// Session returns the worker's session. Verbs issued on it between two operations of the
// worker are counted in the costs of the next one.
func (wk *Worker) Session() Session { return wk.sess }

// Steps returns how many operations Step has executed (measured or not); it may be read from
// another goroutine, for a progress line.
func (wk *Worker) Steps() uint64 { return wk.steps.Load() }

// startAt fixes the start of the measured window (the wall runner starts all its workers
// together).
func (wk *Worker) startAt(t time.Duration) {
	wk.started = true
	wk.from = t + wk.warmup
	wk.to = 0
	if wk.dur > 0 {
		wk.to = wk.from + wk.dur
	}
}

// Load inserts part of parts of the workload's records (keys insertstart..insertstart+
// insertcount-1 split into parts contiguous ranges of key numbers) and records the inserts as
// the load phase. It stops at the first error.
func (wk *Worker) Load(ctx context.Context, part, parts int) error {
	w := wk.d.w
	if parts < 1 || part < 0 || part >= parts {
		return fmt.Errorf("bench: load part %d of %d: %w", part, parts, farmem.ErrInvalid)
	}
	lo := w.InsertStart + int64(part)*w.InsertCount/int64(parts)
	hi := w.InsertStart + int64(part+1)*w.InsertCount/int64(parts)
	// Every insert is the load phase's: one costs reading before them and one after.
	var n uint64
	if wk.cost != nil {
		wk.settle()
		before := wk.reading()
		defer func() {
			wk.last, wk.haveLast = wk.cost.Costs(), true
			wk.load.addCosts(OpInsert, &wk.last, &before, n)
		}()
	}
	for k := lo; k < hi; k++ {
		if err := ctx.Err(); err != nil {
			return err
		}
		var err error
		if wk.key, err = w.AppendKey(wk.key[:0], k); err != nil {
			return fmt.Errorf("bench: load key %d: %w", k, err)
		}
		val := wk.value()
		start := wk.now()
		err = wk.sess.Insert(ctx, wk.key, val)
		end := wk.now()
		wk.haveLast = false
		wk.steps.Add(1)
		n++
		wk.load.record(OpInsert, end-start, err)
		if err != nil {
			return fmt.Errorf("bench: load key %d (%q): %w", k, wk.key, err)
		}
	}
	return nil
}

// Step runs one operation of the workload's mix and returns its error. Its measurement goes
// into the worker's run phase if it ends inside the measured window (its costs: see costGroup).
func (wk *Worker) Step(ctx context.Context) error {
	op := wk.d.chooseOp(wk.r)
	start := wk.now()
	if !wk.started {
		wk.startAt(start)
	}
	inside := start >= wk.from && (wk.to == 0 || start < wk.to)
	if wk.cost != nil {
		if wk.grp.open && (!inside || op != wk.grp.op) {
			wk.settle()
		}
		if inside && !wk.grp.open {
			wk.grp = costGroup{open: true, op: op, start: wk.reading()}
		}
		if !inside {
			wk.before()
		}
	}
	err := wk.do(ctx, op)
	end := wk.now()
	wk.haveLast = false
	wk.lastEnd = end
	wk.steps.Add(1)
	measured := end >= wk.from && (wk.to == 0 || end <= wk.to)
	if measured {
		wk.run.record(op, end-start, err)
	}
	if wk.cost != nil {
		if inside {
			wk.grp.n++
		} else {
			after := wk.cost.Costs()
			if measured {
				wk.run.addCosts(op, &after, &wk.last, 1)
			}
			wk.last, wk.haveLast = after, true
		}
	}
	return err
}

// reading returns the session's costs now: wk.last when it was read after the previous
// operation (the session did nothing since), else a new reading, which becomes wk.last.
func (wk *Worker) reading() farmem.Stats {
	if !wk.haveLast {
		wk.last, wk.haveLast = wk.cost.Costs(), true
	}
	return wk.last
}

// before makes sure wk.last holds the session's costs before the next operation.
func (wk *Worker) before() { _ = wk.reading() }

// settle reads the session's costs once and charges what the open cost group spent to the run
// phase (see costGroup). It does nothing without an open group.
func (wk *Worker) settle() {
	if !wk.grp.open {
		return
	}
	g := &wk.grp
	g.open = false
	wk.last, wk.haveLast = wk.cost.Costs(), true
	wk.run.addCosts(g.op, &wk.last, &g.start, g.n)
}

func (wk *Worker) do(ctx context.Context, op Op) error {
	w := wk.d.w
	if op == OpInsert {
		k := wk.d.inserts.Next()
		var err error
		if wk.key, err = w.AppendKey(wk.key[:0], k); err == nil {
			err = wk.sess.Insert(ctx, wk.key, wk.value())
		}
		wk.d.inserts.Ack(k) // acknowledged whatever the outcome, as YCSB does
		return err
	}
	k, err := wk.nextKeynum()
	if err != nil {
		return err
	}
	if wk.key, err = w.AppendKey(wk.key[:0], k); err != nil {
		return err
	}
	switch op {
	case OpRead:
		_, err = wk.sess.Read(ctx, wk.key)
	case OpUpdate:
		err = wk.sess.Update(ctx, wk.key, wk.value())
	case OpScan:
		if wk.scan == nil {
			return fmt.Errorf("workload %s %w", w.Name, ErrNeedsOrderedIndex)
		}
		_, err = wk.scan.Scan(ctx, wk.key, int(wk.scanLen.Next(wk.r)), nil)
	case OpReadModifyWrite:
		if _, err = wk.sess.Read(ctx, wk.key); err == nil {
			err = wk.sess.Update(ctx, wk.key, wk.value())
		}
	}
	return err
}

// nextKeynum is YCSB's: draw until the key has been inserted. A workload narrowed to part of
// the records (insertstart, insertcount) also draws again a key of the records outside its
// part (another process's, perhaps not loaded yet): YCSB's zipfian range ends one past the
// part, and for a whole-record workload such keys are past the last insert anyway.
func (wk *Worker) nextKeynum() (int64, error) {
	last := wk.d.inserts.Last()
	w := wk.d.w
	partEnd := w.InsertStart + w.InsertCount
	for range 1000 {
		if k := wk.keys.Next(wk.r); k <= last && (k < partEnd || k >= w.RecordCount) {
			return k, nil
		}
	}
	return 0, fmt.Errorf("bench: no inserted key in 1000 draws (last inserted key number %d)", last)
}

// value returns the next value to write: a buffer of random bytes whose first word is stamped
// with a counter, so that consecutive writes differ.
func (wk *Worker) value() []byte {
	size := len(wk.val)
	if wk.field != nil {
		size = 0
		for range wk.d.w.FieldCount {
			size += int(wk.field.Next(wk.r))
		}
	}
	v := wk.val[:size]
	wk.stamp++
	for j := 0; j < 8 && j < len(v); j++ {
		v[j] = byte(wk.stamp >> (8 * j))
	}
	return v
}

// Histogram range: latencies from 1 ns to 100 s at 2 significant digits (1% resolution),
// about 30 KiB each, so that hundreds of simulated workers stay cheap.
const (
	histMax     = int64(100 * time.Second)
	histSigFigs = 2
)

func newHist() *hdrhistogram.Histogram { return hdrhistogram.New(1, histMax, histSigFigs) }

// tally is a worker's record of one phase.
type tally struct {
	costed bool
	ops    [NumOps]opTally
}

type opTally struct {
	ok, errs uint64
	hist     *hdrhistogram.Histogram // latencies of successful ops
	costs    farmem.Stats            // of the costOps attempts whose costs were read
	costOps  uint64
	firstErr error
}

func (t *tally) record(op Op, lat time.Duration, err error) {
	o := &t.ops[op]
	if err != nil {
		o.errs++
		if o.firstErr == nil {
			o.firstErr = err
		}
		return
	}
	o.ok++
	if o.hist == nil {
		o.hist = newHist()
	}
	_ = o.hist.RecordValue(min(max(int64(lat), 1), histMax))
}

// addCosts charges to op the costs between two readings of the session, spent by n operations.
func (t *tally) addCosts(op Op, after, before *farmem.Stats, n uint64) {
	if !t.costed {
		return
	}
	o := &t.ops[op]
	addDelta(&o.costs, after, before)
	o.costOps += n
}

// addDelta adds after - before to s, field by field, in place (farmem.Stats.Add of
// farmem.Stats.Sub without their copies of the whole struct).
func addDelta(s, after, before *farmem.Stats) {
	s.RoundTrips += after.RoundTrips - before.RoundTrips
	for t := range farmem.NumTargets {
		for k := range farmem.NumOpKinds {
			s.Verbs[t][k] += after.Verbs[t][k] - before.Verbs[t][k]
		}
	}
	s.Unsignaled += after.Unsignaled - before.Unsignaled
	s.BytesOut += after.BytesOut - before.BytesOut
	s.BytesIn += after.BytesIn - before.BytesIn
	s.FailedCAS += after.FailedCAS - before.FailedCAS
	s.Calls += after.Calls - before.Calls
	s.CallBytesOut += after.CallBytesOut - before.CallBytesOut
	s.CallBytesIn += after.CallBytesIn - before.CallBytesIn
	s.Waits += after.Waits - before.Waits
	s.Messages += after.Messages - before.Messages
	s.MessageBytes += after.MessageBytes - before.MessageBytes
	s.MessageFailures += after.MessageFailures - before.MessageFailures
}
