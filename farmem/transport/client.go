package transport

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/farmem/farmem/farmem"
)

// ClientState is what every transport client keeps the same way: embed it in the client type
// and call Init once. It supplies Info, Runtime and Stats, the single verbs and Do (through
// the embedded [Verbs]), and the closed and crashed states every verb checks ([Usable]) with
// the channel that wakes a blocked Wait or Call when either is set ([ClientState.Done]).
type ClientState struct {
	Verbs
	// ClientInfo is the client's id, node, slot and slice, as the Registry gave them.
	ClientInfo farmem.ClientInfo
	// Counters are the client's counted costs; the Registry folds them into the fabric's
	// Stats when the client is released.
	Counters Counters

	rt       farmem.Runtime
	state    atomic.Uint32 // stateClosed, stateCrashed: one load tells Usable both
	done     chan struct{}
	doneOnce sync.Once
}

// Init sets the client's info and runtime, and its Verbs' one-op runner and Post.
func (s *ClientState) Init(info farmem.ClientInfo, rt farmem.Runtime, runOne func(ctx context.Context, op farmem.Op) (uint64, error), post func(ctx context.Context, b *farmem.Batch) *farmem.Pending) {
	s.ClientInfo, s.rt = info, rt
	s.Verbs.RunOne, s.Verbs.PostBatch = runOne, post
	s.done = make(chan struct{})
}

// Info implements farmem.Memory.
func (s *ClientState) Info() farmem.ClientInfo { return s.ClientInfo }

// Runtime implements farmem.Memory.
func (s *ClientState) Runtime() farmem.Runtime { return s.rt }

// Stats implements farmem.Memory.
func (s *ClientState) Stats() farmem.Stats { return s.Counters.Snapshot() }

// SetClosed marks the client closed and closes Done. It reports whether this call closed it:
// Close goes on to release the client only then, which makes it idempotent.
func (s *ClientState) SetClosed() bool {
	if s.state.Or(stateClosed)&stateClosed != 0 {
		return false
	}
	s.doneOnce.Do(func() { close(s.done) })
	return true
}

// SetCrashed marks the client crashed (fail-stop) and closes Done.
func (s *ClientState) SetCrashed() {
	s.state.Or(stateCrashed)
	s.doneOnce.Do(func() { close(s.done) })
}

// Done is closed once the client is closed or crashed.
func (s *ClientState) Done() <-chan struct{} { return s.done }

// Usable reports why the client cannot be used (closed: ErrClosed; crashed: ErrNodeDown), or
// nil. Every verb, Post, Wait and Call asks it first.
func (s *ClientState) Usable() error {
	if s.state.Load() == 0 {
		return nil
	}
	return s.unusable()
}

// unusable is Usable's error for a closed or crashed client.
func (s *ClientState) unusable() error {
	switch {
	case s.state.Load()&stateClosed != 0:
		return fmt.Errorf("farmem: client %d: %w", s.ClientInfo.ID, farmem.ErrClosed)
	case s.state.Load()&stateCrashed != 0:
		return fmt.Errorf("farmem: client %d crashed: %w", s.ClientInfo.ID, farmem.ErrNodeDown)
	}
	return nil
}

// Crashed reports whether the client was crashed.
func (s *ClientState) Crashed() bool { return s.state.Load()&stateCrashed != 0 }

// The bits of ClientState.state.
const (
	stateClosed uint32 = 1 << iota
	stateCrashed
)
