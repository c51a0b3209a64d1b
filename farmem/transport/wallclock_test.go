package transport

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// The one-reading clock agrees with time.Now's wall clock: every reading lies between two
// time.Now readings taken around it, give or take a millisecond (the anchor's own error is at
// most wallAnchorSlack as a rule; the margin covers a thread preempted through every retry),
// also across anchor renewals.
func TestWallNowIsTheWallClock(t *testing.T) {
	const margin = int64(time.Millisecond)
	end := time.Now().Add(3 * wallAnchorPeriod)
	n := 0
	for time.Now().Before(end) || n < 1000 {
		a := time.Now().UnixNano()
		w := wallNow()
		b := time.Now().UnixNano()
		require.GreaterOrEqual(t, w, a-margin)
		require.LessOrEqual(t, w, b+margin)
		n++
	}
	old := wallAnchor.Load()
	time.Sleep(2 * wallAnchorPeriod)
	wallNow()
	require.NotSame(t, old, wallAnchor.Load(), "an old anchor is renewed")
}
