package farmem

import (
	"context"
	"math/rand/v2"
	"runtime"
	"sync/atomic"
	"time"
)

// Time is a point in fabric time, in nanoseconds. Real transports use the Unix wall clock, so
// times stored in far memory (leases) compare across processes; the simulator uses virtual time.
type Time int64

// Add returns t + d.
func (t Time) Add(d time.Duration) Time { return t + Time(d) }

// Sub returns the duration t - u.
func (t Time) Sub(u Time) time.Duration { return time.Duration(t - u) }

// Before reports whether t is before u.
func (t Time) Before(u Time) bool { return t < u }

// Runtime is the fabric's clock, scheduler and randomness. Code in ds/ and kvstore/ takes time,
// background goroutines and random numbers only from here (never time.Now, time.Sleep, a bare go
// statement or the global math/rand), and holds no Go lock across a verb or a Wait, so the
// simulator can run it deterministically in virtual time.
type Runtime interface {
	// Now returns the current fabric time.
	Now() Time
	// Sleep pauses for d of fabric time, or until ctx ends (returning its error).
	Sleep(ctx context.Context, d time.Duration) error
	// AfterFunc runs f in its own goroutine after d of fabric time, unless stopped first.
	AfterFunc(d time.Duration, f func()) Timer
	// Go runs f in a background goroutine scheduled by the fabric.
	Go(f func())
	// WithTimeout returns a context that ends after d of fabric time.
	WithTimeout(parent context.Context, d time.Duration) (context.Context, context.CancelFunc)
	// Rand returns this runtime's own random source, seeded from the fabric's seed. It is for
	// one goroutine (the client's); use NewRand for others.
	Rand() *rand.Rand
	// NewRand returns a new source whose seed derives from the fabric's seed and a counter, so
	// a simulated run stays a function of its seed.
	NewRand() *rand.Rand
	// Compute accounts d of CPU work by the caller. Real transports only count it (the work was
	// real); the simulator charges it to the caller's compute node's cores.
	Compute(d time.Duration)
}

// Timer is a pending AfterFunc.
type Timer interface {
	// Stop cancels the call; it reports whether it did so before f started.
	Stop() bool
}

// WallRuntime is the Runtime of real transports: the Unix wall clock, goroutines, and seeded
// PCG sources. Its zero value is not usable; build it with [NewWallRuntime].
type WallRuntime struct {
	seed    uint64
	stream  *atomic.Uint64
	own     *rand.Rand
	compute *atomic.Int64
}

// NewWallRuntime returns a wall-clock runtime whose random sources derive from seed.
func NewWallRuntime(seed uint64) *WallRuntime {
	w := &WallRuntime{seed: seed, stream: new(atomic.Uint64), compute: new(atomic.Int64)}
	w.own = w.NewRand()
	return w
}

// Fork returns a runtime sharing w's clock and seed with a random source of its own: one per
// client.
func (w *WallRuntime) Fork() *WallRuntime {
	f := &WallRuntime{seed: w.seed, stream: w.stream, compute: w.compute}
	f.own = f.NewRand()
	return f
}

// Now implements Runtime.
func (w *WallRuntime) Now() Time { return Time(time.Now().UnixNano()) }

// spinBelow is the sleep below which timers are too coarse and Sleep spins, yielding.
const spinBelow = 50 * time.Microsecond

// Sleep implements Runtime. Sleeps shorter than 50µs spin (yielding the processor), since
// timers cannot time microseconds.
func (w *WallRuntime) Sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	if d < spinBelow {
		for end := time.Now().Add(d); time.Now().Before(end); runtime.Gosched() {
			if err := ctx.Err(); err != nil {
				return err
			}
		}
		return nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// AfterFunc implements Runtime.
func (w *WallRuntime) AfterFunc(d time.Duration, f func()) Timer { return time.AfterFunc(d, f) }

// Go implements Runtime.
func (w *WallRuntime) Go(f func()) { go f() }

// WithTimeout implements Runtime.
func (w *WallRuntime) WithTimeout(parent context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeout(parent, d)
}

// Rand implements Runtime.
func (w *WallRuntime) Rand() *rand.Rand { return w.own }

// NewRand implements Runtime.
func (w *WallRuntime) NewRand() *rand.Rand {
	n := w.stream.Add(1)
	return rand.New(rand.NewPCG(w.seed, n*0x9e3779b97f4a7c15))
}

// Compute implements Runtime: it adds d to the total ComputeTime reports.
func (w *WallRuntime) Compute(d time.Duration) { w.compute.Add(int64(d)) }

// ComputeTime returns the CPU time accounted with Compute so far, by this runtime and its forks.
func (w *WallRuntime) ComputeTime() time.Duration { return time.Duration(w.compute.Load()) }
