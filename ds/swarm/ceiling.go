package swarm

import (
	"context"
	"errors"
	"fmt"

	"github.com/farmem/farmem/ds/maxreg"
	"github.com/farmem/farmem/farmem"
)

// ErrCeiling: WriteBelow found a tuple at or above its ceiling and did not write (see
// WriteBelow).
var ErrCeiling = errors.New("swarm: the register holds a tuple at or above the write's ceiling")

// WriteBelow is Write for a register whose tuples at or above timestamp ceiling are final: a
// store's tombstones (WriteFinal) that no later write may overtake. It runs Write's protocol,
// except that where Write would re-execute above a larger tuple m it read (the slow path,
// after winning the write-mode timestamp lock, so that no reader did or will return its
// guessed tuple) and m's timestamp is at least ceiling, it returns ErrCeiling instead: the
// write had no effect. A guessed tuple that a reader pinned before the lock is the write
// (it returns nil, linearized below m). When the handle already knows of such a tuple on a
// replica, or its writer's timestamps reached the ceiling (it wrote a final tuple), it
// reads the register first (a read writes what it returns back to a majority) and returns
// ErrCeiling if the read returned one, so that it never publishes a guess above one nor
// answers from a tuple a single replica holds. With per-node lanes the writer's timestamps
// are the node's, which another client of the node may raise to the ceiling meanwhile: the
// write checks them again once it holds the node's lane, and refuses the same way: the look
// before the lane only spares a write a read answers (a node-mate's final tuple may be
// stamped, the lane's timestamps raised, and not yet written when it looks, so only the
// decision under the lane may call the ceiling reached without a final tuple an error).
// Round trips as Write's, or a read's when it stops there. ceiling must be above 0.
func (r *Register) WriteBelow(ctx context.Context, value []byte, ceiling uint64) error {
	if ceiling == 0 {
		return fmt.Errorf("%w: ceiling 0", ErrBadParams)
	}
	above := r.rep.LastTS() >= ceiling
	for _, t := range r.rep.Known() {
		above = above || t.TS() >= ceiling
	}
	if above {
		if err := r.refuseAbove(ctx, ceiling, !r.p.PerNode); !errors.Is(err, errBelow) {
			return err
		}
	}
	return r.write(ctx, value, ceiling)
}

// errBelow: refuseAbove found no reason to refuse.
var errBelow = errors.New("swarm: below the ceiling")

// refuseAbove decides a WriteBelow whose handle knows of a tuple at or above ceiling, or whose
// writer's timestamps reached it: a read makes what the handle knows a majority's (its
// write-back) and ErrCeiling is returned if it returned such a tuple; errBelow if it did not
// and the writer's timestamps are below the ceiling (the write may go on). When they reached
// it without the register holding such a tuple, settled (the writer's lane is the caller's:
// its own, or its node's held) makes that an error (its final tuple's write failed at a
// minority); otherwise errBelow, for the caller to decide again under the lane (a node-mate's
// final write may still be in flight).
func (r *Register) refuseAbove(ctx context.Context, ceiling uint64, settled bool) error {
	m, _, err := r.rep.Read(ctx)
	if err != nil {
		return fmt.Errorf("swarm: write: %w", err)
	}
	if m.TS() >= ceiling {
		return ErrCeiling
	}
	if settled && r.rep.LastTS() >= ceiling {
		return fmt.Errorf("swarm: write: this writer's timestamps reached the ceiling %d, which the register does not hold: %w", ceiling, maxreg.ErrExhausted)
	}
	return errBelow
}

// WriteFinal writes value VERIFIED with a timestamp of at least ts (at most maxreg.MaxTS
// once the writer's slot rule is applied: ts at most maxreg.MaxTS-maxreg.MaxSlots+1 always
// fits), with no guess and no lock: a write at a timestamp no guess reaches (a store's
// tombstone, at the ceiling WriteBelow is given), which readers return at once. It is
// linearizable with WriteBelow's writes (given that ceiling) because its timestamp is above
// every timestamp they can guess or re-execute with, so it is the maximum from the moment a
// majority holds it. A plain Write's slow path may still re-execute above it (up to
// maxreg.MaxTS): a protocol that needs it final writes with WriteBelow only. One round trip, plus In-n-Out's (a lost CAS on a shared metadata word).
func (r *Register) WriteFinal(ctx context.Context, value []byte, ts uint64) error {
	if r.closed {
		return ErrClosed
	}
	if _, err := r.rep.WriteAbove(ctx, value, true, ts); err != nil {
		return fmt.Errorf("swarm: final write: %w", err)
	}
	return nil
}

// FinalTS is the smallest timestamp WriteFinal can always take (whatever the writer's slot
// rule): the ceiling a store's tombstones are written at.
const FinalTS = maxreg.MaxTS - maxreg.MaxSlots + 1

// FormatQuorum is Format for a register created while up to f of its 2f+1 replicas may be
// down (maxreg.FormatReplicatedQuorum, which says what a replica skipped then holds): the
// timestamp-lock words of each replica that answers are zeroed, then the In-n-Out replicas
// formatted; it succeeds once a majority of replicas has both.
func FormatQuorum(ctx context.Context, m farmem.Memory, addrs []farmem.Addr, p maxreg.Params) error {
	p = withWriters(p)
	base := maxreg.Size(p)
	if base == 0 {
		return fmt.Errorf("%w: %+v", ErrBadParams, p)
	}
	locked := make([]bool, len(addrs))
	var last error
	for i, a := range addrs {
		err := zeroLocks(ctx, m, a+farmem.Addr(base), p.Writers)
		switch {
		case err == nil:
			locked[i] = true
		case errors.Is(err, farmem.ErrNodeDown):
			last = err
		default:
			return fmt.Errorf("swarm: format: %w", err)
		}
	}
	ok, err := maxreg.FormatReplicatedQuorum(ctx, m, addrs, p)
	if err != nil {
		return fmt.Errorf("swarm: format: %w", err)
	}
	n := 0
	for i := range addrs {
		if ok[i] && locked[i] {
			n++
		}
	}
	if n < len(addrs)/2+1 {
		return fmt.Errorf("swarm: format: %d of %d replicas formatted: %w: %w", n, len(addrs), maxreg.ErrNoQuorum, last)
	}
	return nil
}

// zeroLocks zeroes n timestamp-lock words from at with atomics (they are only ever written
// by atomics).
func zeroLocks(ctx context.Context, m farmem.Memory, at farmem.Addr, n int) error {
	b := new(farmem.Batch)
	for w := range uint64(n) {
		b.MaskedCAS(at+farmem.Addr(8*w), 0, 0, 0, ^uint64(0))
		if len(b.Ops) == farmem.MaxBatchOps {
			if err := m.Do(ctx, b); err != nil {
				return err
			}
			b = new(farmem.Batch)
		}
	}
	if len(b.Ops) > 0 {
		return m.Do(ctx, b)
	}
	return nil
}
