package rdma

import (
	"bufio"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/farmem/farmem/farmem"
	"github.com/farmem/farmem/internal/wire"
)

// A compute node bounds the messages one connection has in flight by its outstanding limit: up
// to the limit they are queued (and the connection keeps serving), one more closes the
// connection; each is acknowledged with an empty CallReply once handled.
func TestMessageWindowBound(t *testing.T) {
	const limit = 4
	s := newSrv(1, heapRegion(1<<16), testSecret, testLogger(), limits{maxConns: 16, maxOutstanding: limit,
		maxFrame: wire.DefaultMaxFrame, handshake: time.Second, writeTimeout: time.Second})
	s.members = newRegistry()
	var mu sync.Mutex
	var held []func()
	s.msgs = func(_ farmem.ClientID, _ uint16, _ []byte, done func()) {
		mu.Lock()
		held = append(held, done)
		mu.Unlock()
	}
	client, server := net.Pipe()
	sc := &sconn{s: s, nc: server, br: bufio.NewReaderSize(server, 64<<10)}
	s.mu.Lock()
	s.conns[sc] = struct{}{}
	s.wg.Add(1)
	s.mu.Unlock()
	ended := make(chan struct{})
	go func() { sc.run(); close(ended) }()
	_ = client.SetDeadline(time.Now().Add(10 * time.Second))
	_, err := wire.ClientHandshake(client, client, 0, 1, wire.PurposeData, testSecret)
	require.NoError(t, err)
	frames := make(chan wire.Header, 16)
	go func() {
		var hdr [wire.HeaderSize]byte
		for {
			h, _, err := wire.ReadFrame(client, &hdr, nil, wire.DefaultMaxFrame)
			if err != nil {
				close(frames)
				return
			}
			frames <- h
		}
	}()
	msg := func(id uint64) []byte {
		b, start := wire.BeginFrame(nil, wire.TypeMsg, 0, id)
		return wire.EndFrame(wire.AppendCall(b, 7, 1, []byte("x")), start)
	}
	for i := range uint64(limit) {
		_, err := client.Write(msg(i + 1))
		require.NoError(t, err)
	}
	_, err = client.Write(wire.AppendHeader(nil, wire.Header{Type: wire.TypePing, ID: 99}))
	require.NoError(t, err)
	h := <-frames
	require.Equal(t, wire.TypePong, h.Type, "the connection serves with %d messages in flight", limit)
	mu.Lock()
	require.Len(t, held, limit)
	first := held[0]
	mu.Unlock()
	first()
	h = <-frames
	require.Equal(t, wire.TypeCallReply, h.Type, "a handled message is acknowledged")
	require.Equal(t, uint64(1), h.ID)
	// Back to the limit, then one more: a protocol violation that closes the connection.
	_, _ = client.Write(msg(5))
	_, _ = client.Write(msg(6))
	select {
	case <-ended:
	case <-time.After(10 * time.Second):
		t.Fatal("the connection was not closed past its outstanding limit")
	}
	_ = client.Close()
}
