package cider

import (
	"fmt"

	"github.com/farmem/farmem/ds/ptrsync"
)

// Stats count one client's synchronizer work: the counters every synchronizer keeps
// (ptrsync.Stats) and those of the lock-based paths.
type Stats struct {
	ptrsync.Stats
	// LockCASes and LockFailed count the spinlock's acquisition CASes and their failures.
	LockCASes, LockFailed uint64
	// Lone, Coordinator, Participant and Executor count pessimistic operations by their role in
	// global write combining (a lone holder executes its own change).
	Lone, Coordinator, Participant, Executor uint64
	// Batches counts combined batches this client executed and Batched their members (the
	// executor included), so Batched/Batches is the mean batch size.
	Batches, Batched uint64
	// Rejected counts enqueues refused because a delete closed the queue; Resets acquisitions
	// given up because their lock was reset; Unconfirmed combined outcomes a member could not
	// take as its own (another key's batch, or an unknown outcome), so it retried.
	Rejected, Resets, Unconfirmed uint64
}

// Add returns s + o.
func (s Stats) Add(o Stats) Stats {
	s.Stats = s.Stats.Add(o.Stats)
	s.LockCASes += o.LockCASes
	s.LockFailed += o.LockFailed
	s.Lone += o.Lone
	s.Coordinator += o.Coordinator
	s.Participant += o.Participant
	s.Executor += o.Executor
	s.Batches += o.Batches
	s.Batched += o.Batched
	s.Rejected += o.Rejected
	s.Resets += o.Resets
	s.Unconfirmed += o.Unconfirmed
	return s
}

// Sub returns s - o: the work between two snapshots.
func (s Stats) Sub(o Stats) Stats {
	s.Stats = s.Stats.Sub(o.Stats)
	s.LockCASes -= o.LockCASes
	s.LockFailed -= o.LockFailed
	s.Lone -= o.Lone
	s.Coordinator -= o.Coordinator
	s.Participant -= o.Participant
	s.Executor -= o.Executor
	s.Batches -= o.Batches
	s.Batched -= o.Batched
	s.Rejected -= o.Rejected
	s.Resets -= o.Resets
	s.Unconfirmed -= o.Unconfirmed
	return s
}

// Role is what an operation did in the pessimistic path.
type Role uint8

// The roles.
const (
	// NoRole: the operation took the optimistic path.
	NoRole Role = iota
	// Lone: it held the lock with nobody linked behind it and executed its own change.
	Lone
	// Coordinator: it held the lock with others behind it and handed the batch to the tail.
	Coordinator
	// Participant: it was combined into a batch between the coordinator and the executor.
	Participant
	// Executor: it was the tail of a batch and wrote the batch's (its own) block.
	Executor
)

func (r Role) String() string {
	switch r {
	case NoRole:
		return "optimistic"
	case Lone:
		return "lone"
	case Coordinator:
		return "coordinator"
	case Participant:
		return "participant"
	case Executor:
		return "executor"
	}
	return fmt.Sprintf("role(%d)", uint8(r))
}

// OpInfo describes a client's last operation (for routing measurements): ptrsync's description
// and its role on the pessimistic path.
type OpInfo struct {
	ptrsync.Op
	Role Role
}
