package ptrsync

import (
	"context"

	"github.com/farmem/farmem/farmem"
)

// SevereFailures is the number of failed CASes from which an optimistic operation counts as
// severely contended (Stats.Severe): the paper's hotness threshold, an update that had to CAS
// three times. ds/cider's routing uses the same threshold.
const SevereFailures = 2

// Stats are the counters every synchronizer of this vocabulary keeps for its client.
type Stats struct {
	// Commits counts Commit calls; Retries those that returned Retry.
	Commits, Retries uint64
	// Optimistic and Pessimistic count finished operations (Committed or Combined) by the
	// path they took: lock-free, or through the pointer's lock.
	Optimistic, Pessimistic uint64
	// CASes counts pointer CASes (Installs) the client issued, FailedCAS those that found
	// another word.
	CASes, FailedCAS uint64
	// Severe counts optimistic operations that needed SevereFailures or more failed CASes.
	Severe uint64
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
	return s
}

// Finish counts a Commit's result (Commits, Retries).
func (s *Stats) Finish(res Result) {
	s.Commits++
	if res.Outcome == Retry {
		s.Retries++
	}
}

// Op describes a client's last operation (for routing measurements): what Plan was told, and,
// once it finished, how.
type Op struct {
	Kind Kind
	Key  uint64
	// Pessimistic reports whether it went through the pointer's lock.
	Pessimistic bool
	// Retries counts its failed pointer CASes, over all its Commits.
	Retries int
	// Outcome is the final outcome (Committed or Combined; Retry while unfinished).
	Outcome Outcome
}

// Execute CASes t's pointer from exp, and over newer words of the same key, until it commits,
// finds a word that is not the key's, or reaches the deadline: the optimistic path, and what a
// lock holder does under its lock. exp must be Old or a word read during the operation (it is
// confirmed with Same first unless it is Old); 0 returns Retry at once. It returns the result;
// the word the pointer held at its last CAS (the new word if it committed, 0 if it made no CAS:
// a hint a lock holder may pass on must be a word a CAS saw, never a guess); and the failed
// CASes. It counts CASes and FailedCAS in st; onFail, if not nil, is told the count of failed
// CASes so far after each one. Costs: see the package doc (Optimistic).
func Execute(ctx context.Context, t Target, exp uint64, st *Stats, onFail func(fails int)) (res Result, seen uint64, fails int, err error) {
	if exp == 0 {
		return Result{Outcome: Retry}, 0, 0, nil
	}
	if exp != t.Old() {
		ok, err := t.Same(ctx, exp)
		if err != nil || !ok {
			return Result{Outcome: Retry}, 0, 0, err
		}
	}
	return execute(ctx, t, exp, false, st, onFail)
}

// execute is Execute's loop from exp, confirmed. With lost set, exp is instead the word a first
// CAS (from Old, made and counted already) found: the loop begins with that lost CAS's handling.
func execute(ctx context.Context, t Target, exp uint64, lost bool, st *Stats, onFail func(fails int)) (res Result, seen uint64, fails int, err error) {
	retry := func(seen uint64, err error) (Result, uint64, int, error) {
		return Result{Outcome: Retry}, seen, fails, err
	}
	var rt farmem.Runtime
	for {
		found := exp
		if !lost {
			if rt == nil {
				rt = t.Memory().Runtime()
			}
			now := rt.Now()
			if now > t.Deadline() {
				return retry(seen, nil)
			}
			st.CASes++
			var nw uint64
			found, nw, err = t.Install(ctx, exp)
			if err != nil {
				return retry(0, err)
			}
			if found == exp {
				return Result{Outcome: Committed, Replaced: exp, CheckedAt: now}, nw, fails, nil
			}
		}
		lost = false
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

// Step is the first step of an optimistic Commit (Execute from Target.Old) as a structure made
// it itself, for Straight.CommitStraight: the deadline check, and unless it was past the
// deadline, the CAS from Old.
type Step struct {
	// Old is the Target's Old word, the CAS's expected word.
	Old uint64
	// Checked is the clock reading of the deadline check (the client's Runtime, as Execute's).
	Checked farmem.Time
	// Late says the reading was past the Target's Deadline: no CAS was made.
	Late bool
	// Found is the word the CAS found (Old if it committed), New the word it installed.
	Found, New uint64
	// Err is the CAS's error: its outcome is unknown.
	Err error
}

// ExecuteStep is Execute from t.Old() whose first step (the deadline check and the first CAS)
// the structure made itself, s: it counts s's CAS in st as Execute would, and after a lost CAS
// continues Execute's loop through t exactly as Execute would have from there. It returns
// Execute's results; t is not used unless s's CAS was lost.
func ExecuteStep(ctx context.Context, t Target, s Step, st *Stats, onFail func(fails int)) (res Result, seen uint64, fails int, err error) {
	switch {
	case s.Old == 0:
		return Result{Outcome: Retry}, 0, 0, nil
	case s.Late:
		return Result{Outcome: Retry}, 0, 0, nil
	}
	st.CASes++
	switch {
	case s.Err != nil:
		return Result{Outcome: Retry}, 0, 0, s.Err
	case s.Found == s.Old:
		return Result{Outcome: Committed, Replaced: s.Old, CheckedAt: s.Checked}, s.New, 0, nil
	}
	return execute(ctx, t, s.Found, true, st, onFail)
}

// Straight is a Synchronizer that lets a structure make the first step of a lock-free commit
// itself, with its own concrete calls instead of the Target's methods: the deadline check and
// the CAS from Old that Execute would make first. The synchronizer sees the operation as it
// would through Plan and Commit: its counters, routing state and credits change alike.
type Straight interface {
	Synchronizer
	// PlanStraight is Plan, and reports whether the operation's next Commit would be Execute
	// from Target.Old and nothing else (straight): then the structure may make Execute's first
	// step itself and call CommitStraight in place of that Commit.
	PlanStraight(kind Kind, key uint64) (p Plan, straight bool)
	// CommitStraight is the Commit whose first step the structure made, s (ExecuteStep): t is
	// used only after a lost CAS, to continue as Execute would. Valid only for an operation
	// PlanStraight reported straight, in place of its first Commit; later Commits of the
	// operation go through Commit.
	CommitStraight(ctx context.Context, t Target, s Step) (Result, error)
}

// Optimistic is lock-free synchronization (RACE's, and CIDER's O-SYNC): CAS the pointer from
// the word read; when the CAS finds a newer block of the same key, CAS again over it; otherwise
// let the structure look again. It needs no lock entry and writes the new block early. Its
// costs are the package doc's table.
type Optimistic struct {
	stats Stats
	last  Op
}

// NewOptimistic returns an Optimistic synchronizer for one client.
func NewOptimistic() *Optimistic { return &Optimistic{} }

// LockSize implements Synchronizer: no lock entry.
func (o *Optimistic) LockSize() int { return 0 }

// Plan implements Synchronizer: the block is written in the first round trip, no entry read.
func (o *Optimistic) Plan(kind Kind, key uint64) Plan {
	o.last = Op{Kind: kind, Key: key}
	return Plan{}
}

var _ Straight = (*Optimistic)(nil)

// PlanStraight implements Straight: every Commit is Execute from Old.
func (o *Optimistic) PlanStraight(kind Kind, key uint64) (Plan, bool) {
	return o.Plan(kind, key), true
}

// Commit implements Synchronizer.
func (o *Optimistic) Commit(ctx context.Context, t Target) (Result, error) {
	res, _, fails, err := Execute(ctx, t, t.Old(), &o.stats, nil)
	return o.finish(res, fails, err)
}

// CommitStraight implements Straight.
func (o *Optimistic) CommitStraight(ctx context.Context, t Target, s Step) (Result, error) {
	res, _, fails, err := ExecuteStep(ctx, t, s, &o.stats, nil)
	return o.finish(res, fails, err)
}

// finish counts a Commit's result and its failed CASes.
func (o *Optimistic) finish(res Result, fails int, err error) (Result, error) {
	o.last.Retries += fails
	o.stats.Finish(res)
	if res.Outcome != Retry {
		o.stats.Optimistic++
		if o.last.Retries >= SevereFailures {
			o.stats.Severe++
		}
		o.last.Outcome = res.Outcome
	}
	return res, err
}

// Stats returns the client's counters.
func (o *Optimistic) Stats() Stats { return o.stats }

// Last describes the client's last operation.
func (o *Optimistic) Last() Op { return o.last }
