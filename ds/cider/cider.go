package cider

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"github.com/farmem/farmem/ds/ptrsync"
	"github.com/farmem/farmem/ds/qlock"
	"github.com/farmem/farmem/farmem"
)

// Mode chooses how CIDER routes updates.
type Mode uint8

// The modes.
const (
	// Auto routes by the compute node's credits (contention-aware synchronization).
	Auto Mode = iota
	// AlwaysOptimistic and AlwaysPessimistic force one path for every update.
	AlwaysOptimistic
	AlwaysPessimistic
	// RandomMode picks a path at random per update (from the client's runtime): every key
	// sees both paths at once, optimistic CASes racing combined batches, which Auto brings
	// about only on keys it finds hot. Use it to exercise or measure that interplay.
	RandomMode
)

// Options configure a CIDER synchronizer.
type Options struct {
	// Lock places the client's lock node and sets the lease of the MCS lock.
	Lock qlock.Options
	// Mode routes updates (default Auto).
	Mode Mode
	// NoCombine disables global write combining: pessimistic updates then behave as MCS.
	NoCombine bool
	// EarlyCredit records an optimistic update's failed CASes in the credits as soon as they
	// reach HotnessThreshold, rather than when the update completes as Algorithm 1 does (the
	// default): a key in a storm of failing CASes then turns hot after two such updates have
	// failed that often, instead of after two of them have fought their way through it.
	EarlyCredit bool
	// Backoff is the first pause of an update whose enqueue a delete refused; pauses double up
	// to 1ms (default 2µs).
	Backoff time.Duration
}

// CIDER is the paper's synchronizer: the far MCS lock (ds/qlock) with global write combining,
// and contention-aware routing of each update by its compute node's credits. See the package
// doc for the protocol and its decisions.
type CIDER struct {
	m       farmem.Memory
	rt      farmem.Runtime
	lk      *qlock.Locker
	credits *Credits
	opts    Options
	stats   Stats
	// detached is the context of the lock's release (releaseDetached).
	detached detachedCtx

	// The operation in progress (one per client at a time).
	op struct {
		info     OpInfo
		backoff  time.Duration
		recorded bool         // its retry count is in the credits already
		watch    *qlock.Watch // of a lock entry a delete closed
	}
}

// NewCIDER returns client m's CIDER synchronizer; credits is its compute node's contention
// state (one Credits per compute node, shared by the node's clients).
func NewCIDER(m farmem.Memory, credits *Credits, opts Options) (*CIDER, error) {
	if credits == nil {
		return nil, fmt.Errorf("cider: CIDER needs its compute node's Credits: %w", farmem.ErrInvalid)
	}
	if opts.Backoff == 0 {
		opts.Backoff = 2 * time.Microsecond
	}
	if opts.Backoff < 0 || opts.Mode > RandomMode {
		return nil, fmt.Errorf("cider: options %+v: %w", opts, farmem.ErrInvalid)
	}
	lk, err := qlock.New(m, opts.Lock)
	if err != nil {
		return nil, err
	}
	return &CIDER{m: m, rt: m.Runtime(), lk: lk, credits: credits, opts: opts}, nil
}

// LockSize implements ptrsync.Synchronizer.
func (s *CIDER) LockSize() int { return qlock.EntrySize }

// Stats returns the client's counters.
func (s *CIDER) Stats() Stats { return s.stats }

// LockStats returns the counters of the client's lock.
func (s *CIDER) LockStats() qlock.Stats { return s.lk.Stats() }

// Last returns the client's last finished operation.
func (s *CIDER) Last() OpInfo { return s.op.info }

// Plan implements ptrsync.Synchronizer: it routes the operation. A delete always takes the lock
// (as a closing acquisition); an update takes it if its key has credit on this compute node
// (and spends one), and then defers its block write.
func (s *CIDER) Plan(kind ptrsync.Kind, key uint64) ptrsync.Plan {
	pess := kind == ptrsync.Delete
	if kind == ptrsync.Update {
		switch s.opts.Mode {
		case Auto:
			pess = s.credits.Take(key)
		case AlwaysPessimistic:
			pess = true
		case RandomMode:
			pess = s.rt.Rand().IntN(2) == 0
		}
	}
	s.op.info = OpInfo{Op: ptrsync.Op{Kind: kind, Key: key, Pessimistic: pess}}
	s.op.backoff, s.op.recorded, s.op.watch = 0, false, nil
	return ptrsync.Plan{DeferWrite: pess && kind == ptrsync.Update}
}

var _ ptrsync.Straight = (*CIDER)(nil)

// PlanStraight implements ptrsync.Straight: Plan, and whether the operation is routed
// lock-free (its Commit is then Execute from the Target's Old word).
func (s *CIDER) PlanStraight(kind ptrsync.Kind, key uint64) (ptrsync.Plan, bool) {
	p := s.Plan(kind, key)
	return p, !s.op.info.Pessimistic
}

// Commit implements ptrsync.Synchronizer.
func (s *CIDER) Commit(ctx context.Context, t ptrsync.Target) (ptrsync.Result, error) {
	var res ptrsync.Result
	var err error
	info := &s.op.info
	if !info.Pessimistic {
		var fails int
		res, _, fails, err = ptrsync.Execute(ctx, t, t.Old(), &s.stats.Stats, s.onFail)
		info.Retries += fails
	} else {
		res, err = s.pessimistic(ctx, t)
	}
	return s.finish(res, err)
}

// CommitStraight implements ptrsync.Straight: the optimistic Commit (ptrsync.ExecuteStep from
// the structure's first step), counted as Commit counts it. An operation Plan routed through
// the lock is refused (Retry and an error wrapping farmem.ErrInvalid), with nothing counted.
func (s *CIDER) CommitStraight(ctx context.Context, t ptrsync.Target, step ptrsync.Step) (ptrsync.Result, error) {
	info := &s.op.info
	if info.Pessimistic {
		return ptrsync.Result{Outcome: ptrsync.Retry}, fmt.Errorf("cider: straight commit of an operation routed through the lock: %w", farmem.ErrInvalid)
	}
	res, _, fails, err := ptrsync.ExecuteStep(ctx, t, step, &s.stats.Stats, s.onFail)
	info.Retries += fails
	return s.finish(res, err)
}

// finish counts a Commit's result: its statistics and, for a finished update under Auto, the
// credits (Algorithm 1's bookkeeping).
func (s *CIDER) finish(res ptrsync.Result, err error) (ptrsync.Result, error) {
	info := &s.op.info
	s.stats.Finish(res)
	if res.Outcome == ptrsync.Retry || err != nil {
		return res, err
	}
	info.Outcome = res.Outcome
	if !info.Pessimistic {
		s.stats.Optimistic++
		if info.Retries >= HotnessThreshold {
			s.stats.Severe++
		}
		if s.opts.Mode == Auto && info.Kind == ptrsync.Update && !s.op.recorded {
			s.credits.AfterOptimistic(info.Key, info.Retries)
		}
		return res, nil
	}
	s.stats.Pessimistic++
	if s.opts.Mode == Auto && info.Kind == ptrsync.Update {
		s.credits.AfterPessimistic(info.Key, info.Role != Lone)
	}
	return res, nil
}

// onFail, with Options.EarlyCredit, records an optimistic update's failed CASes in the
// credits as soon as they reach HotnessThreshold, rather than when the update completes.
func (s *CIDER) onFail(n int) {
	info := &s.op.info
	if !s.opts.EarlyCredit {
		return
	}
	if total := info.Retries + n; total == HotnessThreshold && !s.op.recorded && s.opts.Mode == Auto && info.Kind == ptrsync.Update {
		s.credits.AfterOptimistic(info.Key, total)
		s.op.recorded = true
	}
}

// Message aux fields: on Granted and Exec bit 0 says Word is a hint (the pointer word as last
// seen) and the bits above tag the pointer it was read at (ptrsync.HintTag: 0 unless the lock
// entry is shared by hashing); on Done and Combined bit 0 says the batch committed (Word is the
// word the executor's CAS replaced, or the address of the pointer it changed on a shared entry:
// outcomeWord) and the bits above count the members that have returned so far.
const (
	auxHint    = 1
	auxOK      = 1
	countShift = 1
	maxCount   = 1<<(qlock.AuxBits-countShift) - 1
)

// hintOf returns the pointer word a Granted or Exec message passes on to target t, if it has
// one for t: an empty pointer is no hint (it may have been filled since: the receiver uses the
// word it read), nor is a word tagged with another pointer than t's (a lock entry shared by
// hashing, ptrsync.SharedLock: the Aux bits above auxHint carry ptrsync.HintTag, 0 for a
// pointer with its own entry).
func hintOf(m qlock.Msg, t ptrsync.Target) (uint64, bool) {
	if (m.Kind == qlock.Granted || m.Kind == qlock.Exec) && !m.Damaged && m.Aux&auxHint != 0 && m.Word != 0 &&
		m.Aux>>1 == ptrsync.HintTag(t) {
		return m.Word, true
	}
	return 0, false
}

// hintAux is the Aux of a Granted or Exec message passing on a word read at t's pointer.
func hintAux(t ptrsync.Target) uint32 { return auxHint | ptrsync.HintTag(t)<<1 }

// outcomeWord is what an executor's Done message carries besides success: the word its CAS
// replaced, which each member confirms with Same; or, on a lock entry shared by hashing
// (ptrsync.SharedLock), the address of the pointer it changed, which each member compares with
// its own (a member takes the outcome only for its own pointer, whose words all name blocks of
// its key).
func outcomeWord(t ptrsync.Target, replaced uint64) uint64 {
	if ptrsync.IsShared(t) {
		return uint64(t.Pointer())
	}
	return replaced
}

func outcomeMsg(kind qlock.Kind, ok bool, w uint64, count int) qlock.Msg {
	aux := uint32(min(count, maxCount)) << countShift
	if ok {
		aux |= auxOK
	} else {
		w = 0
	}
	return qlock.Msg{Kind: kind, Word: w, Aux: aux}
}

func outcomeOf(m qlock.Msg) (ok bool, w uint64, count int) {
	if m.Damaged {
		return false, 0, 0
	}
	return m.Aux&auxOK != 0, m.Word, int(m.Aux >> countShift)
}

func isReset(err error) bool { return errors.Is(err, qlock.ErrReset) }

// pessimistic runs one attempt through the lock: enqueue, then act on the first message.
func (s *CIDER) pessimistic(ctx context.Context, t ptrsync.Target) (ptrsync.Result, error) {
	del := t.Kind() == ptrsync.Delete
	a, err := s.lk.Enqueue(ctx, t.Lock(), del)
	if errors.Is(err, qlock.ErrClosedEntry) {
		// A delete is queued: this incarnation of the key is going away. Pause, then let the
		// structure look again. Meanwhile watch the entry: a delete that died holding the lock
		// would keep it closed, and no waiter is queued to notice.
		s.stats.Rejected++
		if s.op.watch == nil || s.op.watch.Entry() != t.Lock() {
			s.op.watch = s.lk.Watch(t.Lock())
		}
		if _, err := s.op.watch.Check(ctx); err != nil {
			return ptrsync.Result{Outcome: ptrsync.Retry}, err
		}
		if s.op.backoff == 0 {
			s.op.backoff = s.opts.Backoff
		}
		d := s.op.backoff
		s.op.backoff = min(2*s.op.backoff, time.Millisecond)
		return ptrsync.Result{Outcome: ptrsync.Retry}, s.rt.Sleep(ctx, d)
	}
	if err != nil {
		return ptrsync.Result{Outcome: ptrsync.Retry}, err
	}
	var msg qlock.Msg
	if !a.Immediate() {
		msg, err = a.Await(ctx, qlock.Granted, qlock.Exec, qlock.Combined)
		if isReset(err) {
			s.stats.Resets++
			return ptrsync.Result{Outcome: ptrsync.Retry}, nil
		}
		if err != nil {
			return ptrsync.Result{Outcome: ptrsync.Retry}, err
		}
	}
	switch msg.Kind {
	case qlock.Exec:
		if !msg.Damaged {
			return s.executor(ctx, t, a, msg)
		}
		// The coordinator is unknown (a stale writer overwrote it): hold the lock alone; the
		// coordinator times out and retries.
	case qlock.Combined:
		return s.participant(ctx, t, a, msg)
	}
	return s.holder(ctx, t, a, msg)
}

// holder has the lock, granted or found free: alone if nobody is linked behind it (or it is a
// delete, or combining is off), else it coordinates a batch.
func (s *CIDER) holder(ctx context.Context, t ptrsync.Target, a *qlock.Acquisition, msg qlock.Msg) (ptrsync.Result, error) {
	exp := t.Old()
	if w, ok := hintOf(msg, t); ok {
		exp = w
	}
	if t.Kind() == ptrsync.Update && !s.opts.NoCombine {
		succ, linked, err := a.Successor(ctx)
		if err != nil {
			return ptrsync.Result{Outcome: ptrsync.Retry}, err
		}
		if linked {
			return s.coordinator(ctx, t, a, succ)
		}
	}
	return s.alone(ctx, t, a, exp, true)
}

// alone executes the change itself and releases the lock (unless the lock is known lost).
func (s *CIDER) alone(ctx context.Context, t ptrsync.Target, a *qlock.Acquisition, exp uint64, release bool) (ptrsync.Result, error) {
	s.stats.Lone++
	s.op.info.Role = Lone
	res, cur, fails, err := ptrsync.Execute(ctx, t, exp, &s.stats.Stats, nil)
	s.op.info.Retries += fails
	if release {
		if rerr := releaseDetached(ctx, &s.detached, a, cur, t); err == nil && rerr != nil && !isReset(rerr) {
			err = rerr
		}
	}
	return res, err
}

// detachedCtx is context.WithoutCancel without its allocation: its parent's values, never
// done, no deadline. A synchronizer keeps one for what must go out at the end of an operation
// even after the operation's context ended (the release of the lock: the change may have
// landed).
type detachedCtx struct{ parent context.Context }

// releaseDetached releases a, passing word and t's hint on, under d set to ctx's values (d
// keeps them until its next use).
func releaseDetached(ctx context.Context, d *detachedCtx, a *qlock.Acquisition, word uint64, t ptrsync.Target) error {
	d.parent = ctx
	return a.Release(d, word, hintAux(t))
}

func (d *detachedCtx) Deadline() (time.Time, bool) { return time.Time{}, false }
func (d *detachedCtx) Done() <-chan struct{}       { return nil }
func (d *detachedCtx) Err() error                  { return nil }
func (d *detachedCtx) Value(key any) any {
	if d.parent == nil {
		return nil
	}
	return d.parent.Value(key)
}

// coordinator closes the batch by reading the tail of the queue (with the pointer, in the same
// round trip), hands the lock to that executor, waits for its outcome, and passes the lock and
// the outcome along the batch.
func (s *CIDER) coordinator(ctx context.Context, t ptrsync.Target, a *qlock.Acquisition, succ qlock.Ticket) (ptrsync.Result, error) {
	var wb, pb [8]byte
	var b farmem.Batch
	b.Read(a.Entry(), wb[:])
	b.Read(t.Pointer(), pb[:])
	if err := s.m.Do(ctx, &b); err != nil {
		return ptrsync.Result{Outcome: ptrsync.Retry}, fmt.Errorf("cider: read queue tail: %w", err)
	}
	w := qlock.Word(binary.LittleEndian.Uint64(wb[:]))
	ptr := binary.LittleEndian.Uint64(pb[:])
	e := w.Tail()
	if w.Gen() != a.Gen() {
		// The lock was reset under us: the queue behind is dead. Change alone (the CAS fences
		// us) and hand nothing on.
		return s.alone(ctx, t, a, ptr, false)
	}
	if e == a.Ticket() || e.IsZero() {
		return s.alone(ctx, t, a, ptr, true)
	}
	s.stats.Coordinator++
	s.op.info.Role = Coordinator
	// Step 2: the tail executes the batch, holding the lock.
	if err := a.Send(ctx, e, qlock.Msg{Kind: qlock.Exec, Word: ptr, From: a.Ticket(), Aux: hintAux(t)}, false); err != nil {
		// The tail is unreachable: change alone and hand over as plain MCS would.
		s.stats.Coordinator--
		return s.alone(ctx, t, a, ptr, true)
	}
	// Step 4: the executor's outcome (and the lock) come back.
	done, err := a.Await(ctx, qlock.Done)
	if err != nil {
		if isReset(err) {
			// The executor died or stalled: whether it changed the pointer is unknown, but this
			// update was never visible, so doing it again is safe.
			s.stats.Resets++
			return ptrsync.Result{Outcome: ptrsync.Retry}, nil
		}
		return ptrsync.Result{Outcome: ptrsync.Retry}, err
	}
	ok, word, _ := outcomeOf(done)
	// Step 5: the lock and the outcome go along the batch.
	_ = a.Send(ctx, succ, outcomeMsg(qlock.Combined, ok, word, 1), false)
	return s.combined(ctx, t, ok, word)
}

// combined decides a coordinator's or participant's own outcome from its batch's: Combined if
// the executor committed over a block of this key, else Retry.
func (s *CIDER) combined(ctx context.Context, t ptrsync.Target, ok bool, w uint64) (ptrsync.Result, error) {
	if ptrsync.IsShared(t) {
		// w names the pointer the executor changed: only the same pointer is this key's.
		if ok && w == uint64(t.Pointer()) {
			return ptrsync.Result{Outcome: ptrsync.Combined}, nil
		}
		s.stats.Unconfirmed++
		return ptrsync.Result{Outcome: ptrsync.Retry}, nil
	}
	if ok && w != 0 {
		same, err := t.Same(ctx, w)
		if err != nil {
			return ptrsync.Result{Outcome: ptrsync.Retry}, err
		}
		if same {
			return ptrsync.Result{Outcome: ptrsync.Combined}, nil
		}
	}
	s.stats.Unconfirmed++
	return ptrsync.Result{Outcome: ptrsync.Retry}, nil
}

// executor is the tail of a batch: it writes its own block and CASes the pointer from the
// word the coordinator read, tells the coordinator, then waits for the lock to come back at
// the end of the batch and releases it to whoever queued behind.
func (s *CIDER) executor(ctx context.Context, t ptrsync.Target, a *qlock.Acquisition, msg qlock.Msg) (ptrsync.Result, error) {
	s.stats.Executor++
	s.op.info.Role = Executor
	exp := t.Old()
	if w, ok := hintOf(msg, t); ok {
		exp = w
	}
	res, cur, fails, err := ptrsync.Execute(ctx, t, exp, &s.stats.Stats, nil)
	s.op.info.Retries += fails
	// Step 4.
	ok := err == nil && res.Outcome == ptrsync.Committed
	if serr := a.Send(ctx, msg.From, outcomeMsg(qlock.Done, ok, outcomeWord(t, res.Replaced), 0), false); serr != nil {
		// The coordinator is gone: the batch will time out and retry.
		return res, err
	}
	back, werr := a.Await(ctx, qlock.Combined)
	switch {
	case werr == nil:
		_, _, count := outcomeOf(back)
		s.stats.Batches++
		s.stats.Batched += uint64(count) + 1
		if rerr := releaseDetached(ctx, &s.detached, a, cur, t); err == nil && rerr != nil && !isReset(rerr) {
			err = rerr
		}
	case isReset(werr):
		s.stats.Resets++
	case err == nil && ctx.Err() != nil:
		err = werr
	}
	return res, err
}

// participant was combined: it passes the lock and the outcome to its successor and takes the
// outcome as its own if it concerns its key.
func (s *CIDER) participant(ctx context.Context, t ptrsync.Target, a *qlock.Acquisition, msg qlock.Msg) (ptrsync.Result, error) {
	s.stats.Participant++
	s.op.info.Role = Participant
	ok, w, count := outcomeOf(msg)
	succ, err := a.AwaitSuccessor(ctx)
	if err == nil {
		_ = a.Send(ctx, succ, outcomeMsg(qlock.Combined, ok, w, count+1), false)
	} else if !isReset(err) {
		return ptrsync.Result{Outcome: ptrsync.Retry}, err
	}
	if t.Kind() == ptrsync.Delete {
		ok = false // a delete is never combined (it closes its queue, so this cannot happen)
	}
	return s.combined(ctx, t, ok, w)
}
