package rdma

import (
	"bytes"
	"context"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/farmem/farmem/farmem"
)

type lockedBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuf) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuf) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// Repeated lines of one kind are cut to the burst per window, and the first line of a later
// window says how many were dropped; other kinds are not affected.
func TestRateLogSuppresses(t *testing.T) {
	var out lockedBuf
	const every = 200 * time.Millisecond
	rl := newRateLog(slog.New(slog.NewTextHandler(&out, nil)), every, 3)
	start := time.Now()
	for range 50 {
		rl.warn("a", "line a")
	}
	rl.warn("b", "line b")
	if time.Since(start) >= every {
		t.Skip("the machine is too slow to log 51 lines within one window")
	}
	require.Equal(t, 3, strings.Count(out.String(), "line a"))
	require.Equal(t, 1, strings.Count(out.String(), "line b"))
	time.Sleep(every + every/2)
	rl.warn("a", "line a")
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	require.Contains(t, lines[len(lines)-1], "suppressed=47")
}

// The node-wide budget makes a second large holder wait until the first releases.
func TestBudgetWaits(t *testing.T) {
	b := newBudget(100)
	stop := make(chan struct{})
	require.True(t, b.acquire(60, stop))
	got := make(chan bool, 1)
	go func() { got <- b.acquire(60, stop) }()
	select {
	case <-got:
		t.Fatal("acquired past the limit")
	case <-time.After(50 * time.Millisecond):
	}
	b.release(60)
	require.True(t, <-got)
	require.Equal(t, int64(60), b.inUse.Load())
	go func() { got <- b.acquire(60, stop) }()
	close(stop)
	require.False(t, <-got, "a closed server ends the wait")
}

// In process: with a handshake budget of 16, 300 silent connections do not keep a client
// that holds the secret out, and the node's counters show the evictions.
func TestSilentConnectionsDoNotLockOut(t *testing.T) {
	sv, err := NewServer(ServerOptions{Node: 1, Size: 1 << 16, Secret: testSecret, MaxUnauth: 16, MaxConns: 8})
	require.NoError(t, err)
	t.Cleanup(func() { _ = sv.Close() })
	addr, err := sv.Listen("127.0.0.1:0")
	require.NoError(t, err)
	var silent []net.Conn
	t.Cleanup(func() {
		for _, c := range silent {
			_ = c.Close()
		}
	})
	for range 300 {
		c, err := net.Dial("tcp", addr)
		require.NoError(t, err)
		silent = append(silent, c)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for range 3 {
		st, err := QueryStatus(ctx, addr, testSecret, 10*time.Second)
		require.NoError(t, err, "a client holding the secret gets in")
		require.Equal(t, farmem.NodeID(1), st.Node)
	}
	m := sv.Metrics()
	require.GreaterOrEqual(t, m.Refused["evicted"], uint64(280), "silent connections were pushed out")
	require.LessOrEqual(t, m.ConnsHandshaking, 16)
	require.Zero(t, m.Refused["busy"])
}
