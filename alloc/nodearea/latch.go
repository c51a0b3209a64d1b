package nodearea

import (
	"context"
	"fmt"

	"github.com/farmem/farmem/farmem"
)

// Latch word layout.
const (
	latchX       = uint64(1) << 63 // held exclusively
	latchPending = uint64(1) << 62 // a writer waits: no new shared holder may enter
	latchHolder  = uint64(0xffff)  // the exclusive holder's client id, with latchX
	latchReaders = uint64(1)<<48 - 1
)

// Latch is a local shared-exclusive latch over one 8-byte word of the caller's own compute
// node's region (a word of an Area block, or of a client slice): the latch SELCC keeps per
// cached frame and FlexKV's proxy takes around its local CAS. A Latch value is a client's
// handle (it names the client), so each client of the node makes its own over the same word;
// the word must be zero before its first use (AllocZeroed gives such a word).
//
// The word holds an exclusive bit with the holder's client id, a writer-pending bit and a
// count of shared holders. Acquisition is a CAS; a client that cannot acquire waits with
// farmem.Memory.Wait on the word, event-driven (every release writes the word, which wakes the
// waiters, who retry). A writer that has to wait sets the pending bit, which keeps new shared
// holders out, so a stream of readers cannot starve writers (readers can be delayed by a stream
// of writers instead). Nothing is recorded about who holds the latch in shared mode, and a
// holder that dies holds it forever: like a CPU latch, it protects critical sections of
// clients that live as long as their node.
//
// Costs (verbs to the caller's own region, no round trip): Lock, RLock and TryLock 1 CAS when
// free (RLock 2 when other shared holders are in); Unlock 1 MaskedCAS; RUnlock 1 FAA; each wait
// is one Wait plus one CAS to retry (and, for a writer, 1 CAS to set the pending bit).
//
// A word that peers reach with NIC atomics must not be a latch: a NIC's atomics are not atomic
// with the host CPU's, so a latch is for the node's own clients only (on the simulator, a
// latch word stays a CPU access only while no peer has issued an atomic to it).
type Latch struct {
	m  farmem.Memory
	a  farmem.Addr
	id uint64
}

// NewLatch returns client m's handle on the latch at word a, which must be an aligned word of
// m's own compute node's region (farmem.ErrNotLocal otherwise, farmem.ErrMisaligned for an
// unaligned one).
func NewLatch(m farmem.Memory, a farmem.Addr) (Latch, error) {
	info := m.Info()
	if a.Node() != info.Node {
		return Latch{}, fmt.Errorf("nodearea: latch at %v is not in %v's region: %w", a, info.Node, farmem.ErrNotLocal)
	}
	if a.Offset()%8 != 0 {
		return Latch{}, fmt.Errorf("nodearea: latch at %v: %w", a, farmem.ErrMisaligned)
	}
	return Latch{m: m, a: a, id: uint64(info.ID)}, nil
}

// Addr returns the latch's word.
func (l Latch) Addr() farmem.Addr { return l.a }

// Lock takes the latch exclusively, waiting while anyone holds it. If ctx ends first it returns
// the context's error, after clearing the pending bit if it had set it (one more MaskedCAS,
// made past the context's end; another waiting writer sets the bit again), so that an abandoned
// Lock does not keep readers out; it returns a verb's error otherwise.
func (l Latch) Lock(ctx context.Context) error {
	mine := latchX | l.id
	prev, err := l.m.CAS(ctx, l.a, 0, mine)
	if err == nil && prev == 0 {
		return nil
	}
	setPending := false
	defer func() {
		if err != nil && setPending {
			_, _ = l.m.MaskedCAS(context.WithoutCancel(ctx), l.a, latchPending, latchPending, 0, latchPending)
		}
	}()
	for err == nil {
		var got uint64
		switch {
		case prev&(latchX|latchReaders) == 0:
			// Free with the pending bit set (by us or another writer): take it, clearing
			// the bit; other waiting writers set it again.
			if got, err = l.m.CAS(ctx, l.a, prev, mine); err == nil && got == prev {
				return nil
			}
		case prev&latchPending == 0:
			if got, err = l.m.CAS(ctx, l.a, prev, prev|latchPending); err == nil && got == prev {
				got |= latchPending
				setPending = true
			}
		default:
			// Held, pending set: wait until it is free or the pending bit went away.
			got, err = l.m.Wait(ctx, l.a, func(w uint64) bool {
				return w&(latchX|latchReaders) == 0 || w&latchPending == 0
			})
		}
		prev = got
	}
	err = l.err("lock", err)
	return err
}

// TryLock takes the latch exclusively if it is free, and reports whether it did; it never
// waits (SELCC's invalidation handlers use it so that they never block behind local threads).
func (l Latch) TryLock(ctx context.Context) (bool, error) {
	prev, err := l.m.CAS(ctx, l.a, 0, latchX|l.id)
	if err != nil {
		return false, l.err("trylock", err)
	}
	if prev == latchPending {
		if prev, err = l.m.CAS(ctx, l.a, latchPending, latchX|l.id); err != nil {
			return false, l.err("trylock", err)
		}
		return prev == latchPending, nil
	}
	return prev == 0, nil
}

// Unlock releases an exclusive hold with one MaskedCAS that checks the holder, keeping the
// pending bit. It fails with farmem.ErrInvalid, changing nothing, if this client does not hold
// the latch exclusively.
func (l Latch) Unlock(ctx context.Context) error {
	mask := latchX | latchHolder
	prev, err := l.m.MaskedCAS(ctx, l.a, latchX|l.id, mask, 0, mask)
	if err != nil {
		return l.err("unlock", err)
	}
	if prev&mask != latchX|l.id {
		return fmt.Errorf("nodearea: unlock latch %v: word %#x is not held by client %d: %w", l.a, prev, l.id, farmem.ErrInvalid)
	}
	return nil
}

// RLock takes the latch in shared mode, waiting while a writer holds it or waits for it.
func (l Latch) RLock(ctx context.Context) error {
	for prev := uint64(0); ; {
		if prev&(latchX|latchPending) != 0 {
			var err error
			if prev, err = l.m.Wait(ctx, l.a, func(w uint64) bool { return w&(latchX|latchPending) == 0 }); err != nil {
				return l.err("rlock", err)
			}
			continue
		}
		if prev&latchReaders == latchReaders {
			return fmt.Errorf("nodearea: rlock latch %v: %d shared holders: %w", l.a, prev, ErrNoSpace)
		}
		got, err := l.m.CAS(ctx, l.a, prev, prev+1)
		if err != nil {
			return l.err("rlock", err)
		}
		if got == prev {
			return nil
		}
		prev = got
	}
}

// TryRLock takes the latch in shared mode if no writer holds it or waits for it, and reports
// whether it did; it never waits.
func (l Latch) TryRLock(ctx context.Context) (bool, error) {
	for prev := uint64(0); prev&(latchX|latchPending) == 0 && prev&latchReaders != latchReaders; {
		got, err := l.m.CAS(ctx, l.a, prev, prev+1)
		if err != nil {
			return false, l.err("tryrlock", err)
		}
		if got == prev {
			return true, nil
		}
		prev = got
	}
	return false, nil
}

// RUnlock releases a shared hold with one FAA. It reports farmem.ErrInvalid if the word shows
// no shared holder (the decrement has then already corrupted the word: a bug of the caller).
func (l Latch) RUnlock(ctx context.Context) error {
	prev, err := l.m.FAA(ctx, l.a, ^uint64(0))
	if err != nil {
		return l.err("runlock", err)
	}
	if prev&latchX != 0 || prev&latchReaders == 0 {
		return fmt.Errorf("nodearea: runlock latch %v: word %#x had no shared holder: %w", l.a, prev, farmem.ErrInvalid)
	}
	return nil
}

func (l Latch) err(op string, err error) error {
	return fmt.Errorf("nodearea: %s latch %v: %w", op, l.a, err)
}
