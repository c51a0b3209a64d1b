package cider

import (
	"context"
	"fmt"

	"github.com/farmem/farmem/ds/race"
	"github.com/farmem/farmem/farmem"
)

// Kind is the operation a pointer change belongs to.
type Kind uint8

// The kinds of change. Inserts never go through a synchronizer: they CAS an empty pointer.
const (
	// Update replaces the key's block with a new one.
	Update Kind = iota + 1
	// Delete empties the key's pointer.
	Delete
)

func (k Kind) String() string {
	switch k {
	case Update:
		return "update"
	case Delete:
		return "delete"
	}
	return fmt.Sprintf("kind(%d)", uint8(k))
}

// Outcome is what a Commit did: race.Retry, race.Committed or race.Combined (see
// race.Outcome).
type Outcome = race.Outcome

// The outcomes, named here for the pointer array's use.
const (
	Retry     = race.Retry
	Committed = race.Committed
	Combined  = race.Combined
)

// Plan is what a synchronizer wants from the structure for one operation (see race.Plan): with
// DeferWrite the new block is written by Target.Install, only if this client publishes it.
type Plan = race.Plan

// Target is one attempt at changing a data pointer, as a structure presents it to a
// synchronizer. The structure has located the pointer and read it (Old), and confirmed that it
// holds the key; the synchronizer changes it with Install, a CAS from a word read during the
// operation (the structure's epoch pin keeps such a word from naming a reused block, so the
// CAS has no ABA problem), and may retry over a newer word only once Same has confirmed it.
type Target interface {
	// Kind is the operation.
	Kind() Kind
	// Key is the key's identity for contention tracking (the pointer array's index, a hash of
	// a RACE key).
	Key() uint64
	// Pointer is the address of the data pointer word.
	Pointer() farmem.Addr
	// Lock is the address of the pointer's lock entry (qlock.EntrySize bytes), or nil if the
	// structure keeps none.
	Lock() farmem.Addr
	// Old is the pointer word the structure read, holding a block of the key.
	Old() uint64
	// Install CASes the pointer from expected to the new word (the new block's, written first
	// if it is not yet, in the same round trip where the structure can; 0 for a delete). It
	// returns the word it found (expected if it succeeded) and the new word.
	Install(ctx context.Context, expected uint64) (found, installed uint64, err error)
	// Same reports whether w, a nonzero word read during this operation, names a block of the
	// key (at once if w is Old; a RACE table reads the block otherwise).
	Same(ctx context.Context, w uint64) (bool, error)
	// Deadline is the fabric time after which no CAS may use a word read during this attempt.
	Deadline() farmem.Time
	// Memory is the client's Memory.
	Memory() farmem.Memory
}

// Result is what Commit did: its Outcome, and on Committed the word its CAS replaced (whose
// block the structure retires).
type Result struct {
	Outcome  Outcome
	Replaced uint64
}

// Synchronizer makes the final pointer change of updates and deletes. One belongs to one client
// (one goroutine), like the structure handle that calls it; CIDER's contention state is shared
// by the clients of a compute node through Credits.
type Synchronizer interface {
	// LockSize is the bytes of lock entry the synchronizer needs per pointer: 0 or
	// qlock.EntrySize.
	LockSize() int
	// Plan is called once per update or delete, before the operation's first round trip.
	Plan(kind Kind, key uint64) Plan
	// Commit attempts the change (see race.Synchronizer.Commit for the outcomes). An error means
	// the outcome is unknown.
	Commit(ctx context.Context, t Target) (Result, error)
	// Stats returns the synchronizer's counters.
	Stats() Stats
	// Last describes the client's last finished operation.
	Last() OpInfo
}

// Stats count one client's synchronizer work.
type Stats struct {
	// Commits counts Commit calls; Retries those that returned Retry.
	Commits, Retries uint64
	// Optimistic and Pessimistic count finished operations by the path they took.
	Optimistic, Pessimistic uint64
	// CASes counts pointer CASes this client issued and FailedCAS those that found another
	// word.
	CASes, FailedCAS uint64
	// Severe counts optimistic operations that needed HotnessThreshold or more failed CASes.
	Severe uint64
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
	s.Commits += o.Commits
	s.Retries += o.Retries
	s.Optimistic += o.Optimistic
	s.Pessimistic += o.Pessimistic
	s.CASes += o.CASes
	s.FailedCAS += o.FailedCAS
	s.Severe += o.Severe
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
	s.Commits -= o.Commits
	s.Retries -= o.Retries
	s.Optimistic -= o.Optimistic
	s.Pessimistic -= o.Pessimistic
	s.CASes -= o.CASes
	s.FailedCAS -= o.FailedCAS
	s.Severe -= o.Severe
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

// OpInfo describes a client's last finished operation (for routing measurements).
type OpInfo struct {
	Kind Kind
	Key  uint64
	// Pessimistic reports the path; Role the role on it; Retries the failed pointer CASes.
	Pessimistic bool
	Role        Role
	Retries     int
	// Outcome is the final outcome (Committed or Combined).
	Outcome Outcome
}

// execute CASes t's pointer from exp to the new word, over newer words of the same key until
// the deadline: the optimistic path, and what a lock holder does. It returns the result, the
// word the pointer held at its last CAS (the new word if it committed; 0 if it made no CAS: a
// hint for the next holder must be a word seen in the pointer, never a guess passed on), and
// the failed CASes. onFail, if not nil, is told the count after each failed CAS.
func execute(ctx context.Context, t Target, exp uint64, st *Stats, onFail func(fails int)) (Result, uint64, int, error) {
	fails := 0
	retry := func(seen uint64, err error) (Result, uint64, int, error) {
		return Result{Outcome: Retry}, seen, fails, err
	}
	if exp == 0 {
		return retry(0, nil)
	}
	if exp != t.Old() {
		ok, err := t.Same(ctx, exp)
		if err != nil || !ok {
			return retry(0, err)
		}
	}
	rt := t.Memory().Runtime()
	seen := uint64(0)
	for {
		if rt.Now() > t.Deadline() {
			return retry(seen, nil)
		}
		st.CASes++
		found, nw, err := t.Install(ctx, exp)
		if err != nil {
			return retry(0, err)
		}
		if found == exp {
			return Result{Outcome: Committed, Replaced: exp}, nw, fails, nil
		}
		seen = found
		st.FailedCAS++
		fails++
		if onFail != nil {
			onFail(fails)
		}
		if found == 0 {
			return retry(0, nil)
		}
		ok, err := t.Same(ctx, found)
		if err != nil || !ok {
			return retry(found, err)
		}
		exp = found
	}
}

// finish counts a Commit's outcome.
func (s *Stats) finish(res Result) {
	s.Commits++
	if res.Outcome == Retry {
		s.Retries++
	}
}

// Optimistic is lock-free synchronization (O-SYNC): CAS the pointer from the word read; when the
// CAS finds a newer block of the same key, CAS again over it; otherwise look again. It needs no
// lock entry. On RACE, race.Optimistic is the same algorithm inside the table.
type Optimistic struct {
	stats Stats
	last  OpInfo
}

// NewOptimistic returns an Optimistic synchronizer for one client.
func NewOptimistic() *Optimistic { return &Optimistic{} }

// LockSize implements Synchronizer: no lock entry.
func (o *Optimistic) LockSize() int { return 0 }

// Plan implements Synchronizer: the block is written in the first round trip.
func (o *Optimistic) Plan(kind Kind, key uint64) Plan {
	o.last = OpInfo{Kind: kind, Key: key}
	return Plan{}
}

// Commit implements Synchronizer.
func (o *Optimistic) Commit(ctx context.Context, t Target) (Result, error) {
	res, _, fails, err := execute(ctx, t, t.Old(), &o.stats, nil)
	o.last.Retries += fails
	o.stats.finish(res)
	if res.Outcome != Retry {
		o.stats.Optimistic++
		if o.last.Retries >= HotnessThreshold {
			o.stats.Severe++
		}
		o.last.Outcome = res.Outcome
	}
	return res, err
}

// Stats implements Synchronizer.
func (o *Optimistic) Stats() Stats { return o.stats }

// Last returns the client's last finished operation.
func (o *Optimistic) Last() OpInfo { return o.last }
