package transport_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/farmem/farmem/farmem"
	"github.com/farmem/farmem/farmem/transport"
)

// TestInboxFIFOAndBound: one lane runs in order, one message at a time; a full inbox makes
// Put wait until a message finishes or ctx ends; Close drops what is queued (running Done)
// and refuses later Puts.
func TestInboxFIFOAndBound(t *testing.T) {
	ctx := context.Background()
	release := make(chan struct{})
	var mu sync.Mutex
	var order []byte
	running, maxRunning := 0, 0
	in := transport.NewInbox(3, 1<<20, func(m transport.Message) {
		mu.Lock()
		running++
		maxRunning = max(maxRunning, running)
		mu.Unlock()
		<-release
		mu.Lock()
		running--
		order = append(order, m.Req[0])
		mu.Unlock()
	})
	stop := make(chan struct{})
	for i := range 3 {
		require.NoError(t, in.Put(ctx, stop, transport.Message{From: 1, Req: []byte{byte(i)}}))
	}
	// Full: a fourth Put waits, and gives up with its context.
	short, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	err := in.Put(short, stop, transport.Message{From: 2, Req: []byte{9}})
	cancel()
	require.ErrorIs(t, err, context.DeadlineExceeded)
	// It goes in once a message finishes.
	put := make(chan error, 1)
	go func() { put <- in.Put(ctx, stop, transport.Message{From: 1, Req: []byte{3}}) }()
	release <- struct{}{}
	require.NoError(t, <-put)
	for range 3 {
		release <- struct{}{}
	}
	require.Eventually(t, func() bool { mu.Lock(); defer mu.Unlock(); return len(order) == 4 }, 10*time.Second, time.Millisecond)
	mu.Lock()
	require.Equal(t, []byte{0, 1, 2, 3}, order, "one sender's messages in order")
	require.Equal(t, 1, maxRunning, "one sender's messages one at a time")
	mu.Unlock()

	// A stopped node fails a waiting Put.
	for i := range 3 {
		require.NoError(t, in.Put(ctx, stop, transport.Message{From: 5, Req: []byte{byte(i)}}))
	}
	close(stop)
	require.ErrorIs(t, in.Put(ctx, stop, transport.Message{From: 6, Req: []byte{1}}), farmem.ErrNodeDown)

	// Close drops the queued messages, whose Done still runs, and refuses new ones.
	in.Close()
	in.Close()
	close(release) // let the running one finish
	require.ErrorIs(t, in.Put(ctx, make(chan struct{}), transport.Message{From: 7}), farmem.ErrNodeDown)
}

// TestInboxDoneRunsForDropped: every message's Done runs once, whether it ran or Close dropped
// it.
func TestInboxDoneRunsForDropped(t *testing.T) {
	ctx := context.Background()
	gate := make(chan struct{})
	in := transport.NewInbox(100, 1<<20, func(transport.Message) { <-gate })
	var mu sync.Mutex
	done := map[byte]int{}
	for i := range 5 {
		require.NoError(t, in.Put(ctx, nil, transport.Message{From: 1, Req: []byte{byte(i)}, Done: func() {
			mu.Lock()
			done[byte(i)]++
			mu.Unlock()
		}}))
	}
	in.Close()
	close(gate)
	require.Eventually(t, func() bool { mu.Lock(); defer mu.Unlock(); return len(done) == 5 }, 10*time.Second, time.Millisecond)
	mu.Lock()
	defer mu.Unlock()
	for i := range 5 {
		require.Equal(t, 1, done[byte(i)], "Done of message %d", i)
	}
}

// TestInboxLanesConcurrent: different senders' lanes run at once.
func TestInboxLanesConcurrent(t *testing.T) {
	ctx := context.Background()
	both := make(chan struct{})
	arrived := make(chan struct{}, 2)
	in := transport.NewInbox(100, 1<<20, func(transport.Message) {
		arrived <- struct{}{}
		<-both
	})
	defer in.Close()
	require.NoError(t, in.Put(ctx, nil, transport.Message{From: 1}))
	require.NoError(t, in.Put(ctx, nil, transport.Message{From: 2}))
	<-arrived
	<-arrived // both lanes started while neither finished
	close(both)
}
