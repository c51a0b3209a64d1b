package farmem

import (
	"context"
	"math/rand/v2"
	"time"
)

// Time is a point in fabric time, in nanoseconds. Real transports use the Unix wall clock, so
// times stored in far memory (leases) compare across processes; the simulator uses virtual time.
type Time int64

// Add returns t + d.
func (t Time) Add(d time.Duration) Time { return t + Time(d) }

// Sub returns the duration t - u.
func (t Time) Sub(u Time) time.Duration { return time.Duration(t - u) }

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
