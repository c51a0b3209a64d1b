package transport

import (
	"sync/atomic"
	"time"
)

// wallNow returns the Unix wall clock in nanoseconds, as time.Now().UnixNano() does, from one
// clock reading instead of two: time.Now reads both CLOCK_REALTIME and CLOCK_MONOTONIC (two
// vDSO calls, about 80 ns on the development VM), where the wall clock is all a fabric time
// needs. It reads only the monotonic clock (time.Since, one call, about half that) and adds it
// to an anchor: the wall clock read with time.Now at a known monotonic reading, renewed every
// wallAnchorPeriod. On Linux both clocks advance at the same, NTP-disciplined rate and differ
// only by an offset that changes when the wall clock is stepped (settimeofday, an NTP step, a
// leap second), so the result equals the wall clock up to the reading's own jitter, except
// that a step shows up at the next renewal, at most wallAnchorPeriod later: the Runtime's
// clock is still the wall clock leases and ClockSkew are stated in, with a step delayed by
// that much. The anchor is shared by every WallRuntime of the process and renewed by whichever
// caller finds it old (an atomic pointer; no lock).
func wallNow() int64 {
	m := int64(time.Since(wallBase))
	a := wallAnchor.Load()
	if d := m - a.mono; d >= 0 && d < int64(wallAnchorPeriod) {
		return a.wall + d
	}
	return renewWallAnchor()
}

// wallAnchorPeriod is how long an anchor serves: the longest a wall-clock step goes unseen.
const wallAnchorPeriod = 10 * time.Millisecond

// clockAnchor is the wall clock (Unix ns) read at monotonic time mono (ns since wallBase).
type clockAnchor struct{ wall, mono int64 }

var (
	wallBase   = time.Now() // the monotonic origin
	wallAnchor atomic.Pointer[clockAnchor]
)

func init() { renewWallAnchor() }

// wallAnchorSlack bounds the time between the two clock readings of an anchor: time.Now reads
// the wall clock, then the monotonic one, and a thread preempted in between would otherwise
// anchor the wall clock that much early.
const wallAnchorSlack = 10 * time.Microsecond

// renewWallAnchor reads both clocks, publishes the pair and returns the wall reading. It reads
// the monotonic clock just before time.Now and tries again (a few times at most) when the two
// monotonic readings lie more than wallAnchorSlack apart, so the anchor's wall reading lags
// its monotonic one by at most that, as a rule.
func renewWallAnchor() int64 {
	var a *clockAnchor
	for range 4 {
		m0 := time.Since(wallBase)
		t := time.Now()
		m := t.Sub(wallBase)
		a = &clockAnchor{wall: t.UnixNano(), mono: int64(m)}
		if m-m0 <= wallAnchorSlack {
			break
		}
	}
	wallAnchor.Store(a)
	return a.wall
}
