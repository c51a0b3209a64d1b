package numaemu

import (
	"fmt"
	"slices"
	"sync"
	"time"
)

// clockThreshold: delays at least this long poll the clock instead of counting iterations, so
// that a preemption or a change of CPU frequency in the middle does not stretch them.
const clockThreshold = time.Microsecond

// Injector delays the calling goroutine by a requested time by spinning: a calibrated count of
// a fixed dependent arithmetic loop for short delays, and a spin on the monotonic clock for
// delays of at least a microsecond. It never sleeps (a sleep's granularity is tens of
// microseconds) and never yields, so it burns the CPU it delays, as a stalled load would.
type Injector struct {
	nsPerIter float64       // calibrated cost of one spin iteration
	overhead  float64       // fixed cost of one short Delay call beyond its iterations, ns (may be < 0)
	clockCost time.Duration // one read of the monotonic clock
	clockBias time.Duration // mean overshoot of the clock-polled path
}

// Calibration is what [NewInjector] measured.
type Calibration struct {
	NsPerIter float64       // one iteration of the spin loop
	Overhead  time.Duration // fixed cost of a short delay call (negative: overlap between calls)
	ClockRead time.Duration // one read of the monotonic clock
	ClockBias time.Duration // mean overshoot of a clock-polled (long) delay, corrected for
}

var (
	defaultOnce sync.Once
	defaultInj  *Injector
)

// Default returns an injector calibrated on first use (about 20 ms, once per process).
func Default() *Injector {
	defaultOnce.Do(func() { defaultInj = NewInjector() })
	return defaultInj
}

// NewInjector calibrates a new injector against the monotonic clock: it times spins long
// enough (~1 ms) for the clock's resolution not to matter and keeps the fastest of several
// runs, the one least disturbed by interrupts and preemption.
func NewInjector() *Injector {
	in := &Injector{clockCost: clockReadCost()}
	n := 1 << 12
	for {
		if d := timeSpin(n); d >= 200*time.Microsecond || n >= 1<<30 {
			break
		}
		n *= 2
	}
	n *= 5 // ~1 ms
	best := time.Duration(1<<63 - 1)
	for range 7 {
		best = min(best, timeSpin(n))
	}
	in.nsPerIter = float64(best) / float64(n)
	// The fixed costs, measured through Delay itself with back-to-back calls: the call and
	// arithmetic beyond the iterations of a short delay, and the overshoot of the clock poll of
	// a long one. The short one can come out negative: an out-of-order core overlaps the tail
	// of one chain with the start of the next (as it overlaps a cache miss with independent
	// work), which a single long run does not show. Two rounds, each correcting the last.
	for range 2 {
		in.overhead += float64(batchMean(in, 100*time.Nanosecond) - 100*time.Nanosecond)
		in.clockBias += batchMean(in, 2*time.Microsecond) - 2*time.Microsecond
	}
	return in
}

// Calibration returns the injector's calibration.
func (in *Injector) Calibration() Calibration {
	return Calibration{NsPerIter: in.nsPerIter, Overhead: time.Duration(in.overhead), ClockRead: in.clockCost, ClockBias: in.clockBias}
}

// Delay spins for d (nothing for d <= 0).
func (in *Injector) Delay(d time.Duration) {
	switch {
	case d <= 0:
	case d >= clockThreshold:
		// Count most of it, then poll the clock for the rest: the poll bounds the damage of a
		// preemption, the count keeps the overshoot to a fraction of one clock read.
		start := time.Now()
		deadline := start.Add(d - in.clockBias)
		in.spinFor(d - 2*in.clockCost - 200*time.Nanosecond)
		for time.Now().Before(deadline) {
			spin(4)
		}
	default:
		in.spinFor(d)
	}
}

func (in *Injector) spinFor(d time.Duration) {
	if n := (float64(d) - in.overhead) / in.nsPerIter; n >= 1 {
		spin(int(n + 0.5))
	}
}

// spin runs n iterations of a dependent multiply-add chain (a 64-bit LCG step) that the
// compiler cannot remove (the result is returned from a function that is not inlined) and
// that touches no memory, so the race detector and the cache leave it alone.
//
//go:noinline
func spin(n int) uint64 {
	x := uint64(n)
	for range n {
		x = x*6364136223846793005 + 1442695040888963407
	}
	return x
}

// batchMean is the mean duration of back-to-back delays of d (best of three batches).
func batchMean(in *Injector, d time.Duration) time.Duration {
	const calls = 2000
	best := time.Duration(1<<63 - 1)
	for range 3 {
		t0 := time.Now()
		for range calls {
			in.Delay(d)
		}
		best = min(best, time.Since(t0))
	}
	return best / calls
}

func timeSpin(n int) time.Duration {
	t0 := time.Now()
	spin(n)
	return time.Since(t0)
}

func clockReadCost() time.Duration {
	const reads = 10000
	best := time.Duration(1<<63 - 1)
	for range 3 {
		t0 := time.Now()
		for range reads {
			_ = time.Now()
		}
		best = min(best, time.Since(t0))
	}
	return best / reads
}

// Accuracy is how well [Injector.Delay] met a target.
type Accuracy struct {
	Target   time.Duration
	Mean     time.Duration // median over batches of the mean delay in the batch
	ErrorPct float64       // (Mean - Target) / Target * 100; for a zero target, 0
	P50, P99 time.Duration // single delays, each timed with the clock (its read cost removed)
}

// String reports the accuracy in one line.
func (a Accuracy) String() string {
	return fmt.Sprintf("target %v: mean %v (%+.1f%%), single p50 %v p99 %v", a.Target, a.Mean, a.ErrorPct, a.P50, a.P99)
}

// Measure delays n times for target and reports the result against the clock. The mean is
// the median over batches of 100 back-to-back delays, so a preemption spoils one batch, not
// the figure.
func (in *Injector) Measure(target time.Duration, n int) Accuracy {
	const batch = 100
	n = max(n, batch)
	a := Accuracy{Target: target}
	var means []time.Duration
	for done := 0; done < n; done += batch {
		t0 := time.Now()
		for range batch {
			in.Delay(target)
		}
		means = append(means, time.Since(t0)/batch)
	}
	slices.Sort(means)
	a.Mean = means[len(means)/2]
	if target > 0 {
		a.ErrorPct = float64(a.Mean-target) / float64(target) * 100
	}
	single := make([]time.Duration, 0, n)
	for range n {
		t := time.Now()
		in.Delay(target)
		single = append(single, max(0, time.Since(t)-in.clockCost))
	}
	slices.Sort(single)
	a.P50, a.P99 = single[len(single)/2], single[len(single)*99/100]
	return a
}
