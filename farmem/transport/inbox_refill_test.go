package transport_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/farmem/farmem/farmem/transport"
)

// TestInboxLaneRefilledAsItEmpties: a sender that puts its messages as fast as an inbox of one
// message takes them (its lane empties as often as it fills) still has every message run
// exactly once, in order, one at a time. A lane's goroutine that popped its last message and
// let go of the lock before deciding to stop left a gap in which a Put saw the lane empty and
// started a second goroutine: the two ran the same messages at once, twice, and the count
// went past the one a waiter expected (cxl's conformance Send test waited out its minute so
// under load). Without the fix this fails in every run: thousands of messages out of place.
func TestInboxLaneRefilledAsItEmpties(t *testing.T) {
	const n = 20000
	var mu sync.Mutex
	var got []int
	running, maxRunning := 0, 0
	in := transport.NewInbox(1, transport.InboxBytes, func(m transport.Message) {
		mu.Lock()
		running++
		maxRunning = max(maxRunning, running)
		got = append(got, int(m.Method))
		running--
		mu.Unlock()
	})
	defer in.Close()
	ctx := context.Background()
	for i := range n {
		require.NoError(t, in.Put(ctx, nil, transport.Message{From: 1, Method: uint16(i)}))
	}
	require.Eventually(t, func() bool { mu.Lock(); defer mu.Unlock(); return len(got) >= n }, time.Minute, time.Millisecond)
	time.Sleep(10 * time.Millisecond) // a duplicate run still in flight lands
	mu.Lock()
	defer mu.Unlock()
	misplaced := 0
	for i, m := range got {
		if uint16(m) != uint16(i) {
			misplaced++
		}
	}
	require.Equal(t, 1, maxRunning, "a lane's messages ran at once")
	require.Equal(t, n, len(got), "messages run (twice, or not at all)")
	require.Zero(t, misplaced, "messages out of place")
}
