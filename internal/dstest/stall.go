package dstest

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/farmem/farmem/farmem"
	"github.com/farmem/farmem/farmem/local"
)

// StallFirst is a client's memory whose first Post after Arm, once every op of that batch is
// done, blocks until Release: the client is paused with its first round's answers in hand,
// before it looks at them (a client descheduled, or its process stopped, at that point).
// Stalled is closed when the pause begins.
type StallFirst struct {
	farmem.Memory
	armed   atomic.Bool
	posts   atomic.Int32
	Stalled chan struct{}
	release chan struct{}
}

// NewStallFirst wraps m.
func NewStallFirst(m farmem.Memory) *StallFirst {
	return &StallFirst{Memory: m, Stalled: make(chan struct{}), release: make(chan struct{})}
}

// Arm makes the next Post the one that stalls.
func (s *StallFirst) Arm() { s.armed.Store(true) }

// Release ends the pause.
func (s *StallFirst) Release() { close(s.release) }

// Post implements farmem.Memory.
func (s *StallFirst) Post(ctx context.Context, b *farmem.Batch) *farmem.Pending {
	p := s.Memory.Post(ctx, b)
	if s.armed.Load() && s.posts.Add(1) == 1 {
		_ = p.Wait(ctx, 0)
		close(s.Stalled)
		<-s.release
	}
	return p
}

// RestartFabric is a local fabric of three memory nodes and two compute nodes of 4 MiB each,
// not strict, with the given down timeout, for tests that restart a memory node (Restart,
// Adopt) under a client paused with StallFirst.
func RestartFabric(t testing.TB, down time.Duration) *local.Fabric {
	t.Helper()
	f, err := local.New(local.Options{Shape: local.Shape{MemoryNodes: 3, ComputeNodes: 2, MemorySize: 4 << 20},
		DownTimeout: down})
	require.NoError(t, err)
	t.Cleanup(func() { _ = f.Close() })
	return f
}
