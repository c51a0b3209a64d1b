package cider

import (
	"context"
	"encoding/binary"
	"fmt"
	"time"

	"github.com/farmem/farmem/ds/ptrsync"
	"github.com/farmem/farmem/ds/qlock"
	"github.com/farmem/farmem/farmem"
)

// SpinOptions configure a Spin synchronizer.
type SpinOptions struct {
	// Lease is how long a holder's claim on the lock word stands (default 10ms of fabric time):
	// a waiter that finds it expired (plus ClockSkew) takes the lock over with a CAS.
	Lease time.Duration
	// ClockSkew bounds the difference between clients' fabric clocks (default 1ms).
	ClockSkew time.Duration
	// Backoff and MaxBackoff shape the Smart framework's truncated exponential backoff
	// (defaults 1µs and 1024 Backoff): the i-th retry of an acquisition pauses
	// min(cap, Backoff·2^min(i,10)) plus a uniform jitter below Backoff, where cap is the
	// client's adaptive bound: it starts at Backoff and, every spinAdapt acquisition events,
	// halves (not below Backoff) if under 10% of them were failed CASes and doubles (not above
	// MaxBackoff) if over half were.
	Backoff, MaxBackoff time.Duration
}

// spinAdapt is how many acquisition events (failed CASes and acquisitions) a Spin counts
// before it adapts its backoff bound; the Smart framework leaves the period to its caller.
const spinAdapt = 64

func (o *SpinOptions) setDefaults() error {
	if o.Lease == 0 {
		o.Lease = 10 * time.Millisecond
	}
	if o.ClockSkew == 0 {
		o.ClockSkew = time.Millisecond
	}
	if o.Backoff == 0 {
		o.Backoff = time.Microsecond
	}
	if o.MaxBackoff == 0 {
		o.MaxBackoff = o.Backoff << 10
	}
	if o.Lease <= 0 || o.ClockSkew < 0 || o.Backoff <= 0 || o.MaxBackoff < o.Backoff {
		return fmt.Errorf("cider: spin options %+v: %w", *o, farmem.ErrInvalid)
	}
	return nil
}

// Spin is the CAS spinlock of the Smart framework (the paper's CAS baseline): the first word of
// the pointer's lock entry holds 0 (free) or the holder's client id << 48 | its lease deadline
// in units of 2^16 ns. A client acquires with a CAS from 0, in the same round trip as a read of
// the pointer (so it CASes the pointer from a fresh word); on failure it backs off with the
// framework's adaptive truncated exponential backoff (see SpinOptions) and tries again; it
// releases with a CAS of its word back to 0, awaited, as the framework does; a lock whose
// lease expired is taken over with a CAS. The
// holder's pointer CAS is fenced by the word it read (see qlock's package doc), so a holder
// paused past its lease cannot undo its successor's change.
type Spin struct {
	m     farmem.Memory
	rt    farmem.Runtime
	id    uint64
	opts  SpinOptions
	stats Stats
	last  OpInfo

	// The adaptive backoff bound and the events counted since it last adapted.
	cap               time.Duration
	retries, acquired int

	detached detachedCtx // of the lock's release
}

// NewSpin returns client m's spinlock synchronizer.
func NewSpin(m farmem.Memory, opts SpinOptions) (*Spin, error) {
	if err := opts.setDefaults(); err != nil {
		return nil, err
	}
	return &Spin{m: m, rt: m.Runtime(), id: uint64(m.Info().ID), opts: opts, cap: opts.Backoff}, nil
}

// LockSize implements ptrsync.Synchronizer.
func (s *Spin) LockSize() int { return qlock.EntrySize }

// Plan implements ptrsync.Synchronizer: the block is written in the first round trip, before
// the lock is taken.
func (s *Spin) Plan(kind ptrsync.Kind, key uint64) ptrsync.Plan {
	s.last = OpInfo{Op: ptrsync.Op{Kind: kind, Key: key, Pessimistic: true}, Role: Lone}
	return ptrsync.Plan{}
}

// Stats returns the client's counters.
func (s *Spin) Stats() Stats { return s.stats }

// Last returns the client's last finished operation.
func (s *Spin) Last() OpInfo { return s.last }

const spinUnit = 16 // deadlines in units of 2^16 ns

func (s *Spin) word(now farmem.Time) uint64 {
	return s.id<<48 | uint64(now.Add(s.opts.Lease))>>spinUnit&(1<<48-1)
}

// expired reports whether lock word w's lease ran out (plus the clock skew) by now.
func (s *Spin) expired(w uint64, now farmem.Time) bool {
	deadline := farmem.Time((w & (1<<48 - 1)) << spinUnit)
	return deadline.Add(s.opts.ClockSkew) < now
}

// Commit implements ptrsync.Synchronizer.
func (s *Spin) Commit(ctx context.Context, t ptrsync.Target) (ptrsync.Result, error) {
	lock := t.Lock()
	var pb [8]byte
	retry := 0
	expect := uint64(0)
	for {
		now := s.rt.Now()
		if now > t.Deadline() {
			s.stats.Finish(ptrsync.Result{})
			return ptrsync.Result{Outcome: ptrsync.Retry}, nil
		}
		mine := s.word(now)
		var b farmem.Batch
		b.CAS(lock, expect, mine)
		b.Read(t.Pointer(), pb[:])
		s.stats.LockCASes++
		if err := s.m.Do(ctx, &b); err != nil {
			return ptrsync.Result{Outcome: ptrsync.Retry}, fmt.Errorf("cider: spin acquire: %w", err)
		}
		prev, _ := b.Result(0)
		if prev == expect {
			s.acquired++
			s.adapt()
			res, err := s.locked(ctx, t, binary.LittleEndian.Uint64(pb[:]))
			s.detached.parent = ctx // the release goes out even if ctx ended
			if _, uerr := s.m.CAS(&s.detached, lock, mine, 0); err == nil && uerr != nil {
				err = fmt.Errorf("cider: spin release: %w", uerr)
			}
			return res, err
		}
		s.stats.LockFailed++
		if s.expired(prev, now) {
			expect = prev // take the dead holder's lock over, at once
			continue
		}
		expect = 0
		s.retries++
		s.adapt()
		b0 := s.opts.Backoff
		d := min(s.cap, b0<<min(retry, 10)) + time.Duration(s.rt.Rand().Int64N(int64(b0)))
		retry++
		if err := s.rt.Sleep(ctx, d); err != nil {
			return ptrsync.Result{Outcome: ptrsync.Retry}, err
		}
	}
}

// adapt moves the backoff bound by the share of failed CASes once spinAdapt events are counted.
func (s *Spin) adapt() {
	n := s.retries + s.acquired
	if n < spinAdapt {
		return
	}
	switch rate := float64(s.retries) / float64(n); {
	case rate < 0.1:
		s.cap = max(s.opts.Backoff, s.cap/2)
	case rate > 0.5:
		s.cap = min(s.opts.MaxBackoff, 2*s.cap)
	}
	s.retries, s.acquired = 0, 0
}

// locked is the critical section: CAS the pointer from the word read with the lock.
func (s *Spin) locked(ctx context.Context, t ptrsync.Target, cur uint64) (ptrsync.Result, error) {
	res, _, fails, err := ptrsync.Execute(ctx, t, cur, &s.stats.Stats, nil)
	s.last.Retries += fails
	s.stats.Finish(res)
	if res.Outcome != ptrsync.Retry {
		s.stats.Pessimistic++
		s.stats.Lone++
		s.last.Outcome = res.Outcome
	}
	return res, err
}

// MCS is pessimistic synchronization through the far MCS lock alone (the paper's ShiftLock
// baseline): take the pointer's lock (ds/qlock), CAS the pointer from the word the previous
// holder left (passed in the hand-over) or from the word read, and hand the lock on with the
// new word. No combining.
type MCS struct {
	lk       *qlock.Locker
	stats    Stats
	last     OpInfo
	detached detachedCtx // of the lock's release (releaseDetached)
}

// NewMCS returns client m's MCS synchronizer; its lock node is placed by opts.
func NewMCS(m farmem.Memory, opts qlock.Options) (*MCS, error) {
	lk, err := qlock.New(m, opts)
	if err != nil {
		return nil, err
	}
	return &MCS{lk: lk}, nil
}

// LockSize implements ptrsync.Synchronizer.
func (s *MCS) LockSize() int { return qlock.EntrySize }

// Plan implements ptrsync.Synchronizer: the block is written in the first round trip.
func (s *MCS) Plan(kind ptrsync.Kind, key uint64) ptrsync.Plan {
	s.last = OpInfo{Op: ptrsync.Op{Kind: kind, Key: key, Pessimistic: true}, Role: Lone}
	return ptrsync.Plan{}
}

// Stats returns the client's counters.
func (s *MCS) Stats() Stats { return s.stats }

// LockStats returns the counters of the client's lock.
func (s *MCS) LockStats() qlock.Stats { return s.lk.Stats() }

// Last returns the client's last finished operation.
func (s *MCS) Last() OpInfo { return s.last }

// Commit implements ptrsync.Synchronizer.
func (s *MCS) Commit(ctx context.Context, t ptrsync.Target) (ptrsync.Result, error) {
	a, msg, err := s.lk.Lock(ctx, t.Lock())
	if err != nil {
		return ptrsync.Result{Outcome: ptrsync.Retry}, err
	}
	exp := t.Old()
	if w, ok := hintOf(msg, t); ok {
		exp = w
	}
	res, cur, fails, err := ptrsync.Execute(ctx, t, exp, &s.stats.Stats, nil)
	s.last.Retries += fails
	if rerr := releaseDetached(ctx, &s.detached, a, cur, t); err == nil && rerr != nil && !isReset(rerr) {
		err = rerr
	}
	s.stats.Finish(res)
	if res.Outcome != ptrsync.Retry {
		s.stats.Pessimistic++
		s.stats.Lone++
		s.last.Outcome = res.Outcome
	}
	return res, err
}
