package transport

import (
	"context"
	"math/rand/v2"
	"runtime"
	"sync/atomic"
	"time"

	"github.com/farmem/farmem/farmem"
)

// WallRuntime is the farmem.Runtime of real transports: the Unix wall clock, goroutines, and seeded
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

// Now implements Runtime: the Unix wall clock in nanoseconds, from one monotonic clock reading
// (see wallNow: a step of the wall clock is seen within 10 ms).
func (w *WallRuntime) Now() farmem.Time { return farmem.Time(wallNow()) }

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
func (w *WallRuntime) AfterFunc(d time.Duration, f func()) farmem.Timer { return time.AfterFunc(d, f) }

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

// Compute implements farmem.Runtime: it adds d to the total ComputeTime reports.
func (w *WallRuntime) Compute(d time.Duration) { w.compute.Add(int64(d)) }

// ComputeTime returns the CPU time accounted with Compute so far, by this runtime and its forks.
func (w *WallRuntime) ComputeTime() time.Duration { return time.Duration(w.compute.Load()) }
