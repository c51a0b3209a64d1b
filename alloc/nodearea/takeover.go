package nodearea

import (
	"context"
	"encoding/binary"
	"fmt"

	"github.com/farmem/farmem/farmem"
)

// Taking over the latches of a client that lost its access.
//
// A client whose own verbs fail with farmem.ErrNodeDown while its compute node lives (the
// fabric cut that client alone off: a queue pair in error, the simulator's CrashClient) can no
// longer release the latches it holds, and its node's other clients would wait for them
// forever. Its goroutine still runs, knows what it held, and can ask a live client of the same
// node to release them on its behalf: an exclusive hold is recognised by the holder id the word
// records (ReleaseFor checks it, so it never releases a live client's hold), a shared hold only
// by the caller's own count (RReleaseFor trusts it). Costs: one local verb each.

// HeldBy reports whether the latch word w is held exclusively by client id.
func HeldBy(w uint64, id farmem.ClientID) bool {
	return w&latchX != 0 && w&latchHolder == uint64(id)
}

// ReleaseFor releases, through l's client, the exclusive hold of client id on l's word, keeping
// the pending bit, with one MaskedCAS that checks the holder. It reports whether id held it.
func (l Latch) ReleaseFor(ctx context.Context, id farmem.ClientID) (bool, error) {
	mask := latchX | latchHolder
	prev, err := l.m.MaskedCAS(ctx, l.a, latchX|uint64(id), mask, 0, mask)
	if err != nil {
		return false, l.err("release for", err)
	}
	return prev&mask == latchX|uint64(id), nil
}

// RReleaseFor releases, through l's client, k shared holds another client took on l's word
// (one FAA). It fails with farmem.ErrInvalid, changing nothing, if the word shows fewer than k
// shared holders or an exclusive holder.
func (l Latch) RReleaseFor(ctx context.Context, k int) error {
	var b [8]byte
	if err := l.m.Read(ctx, l.a, b[:]); err != nil {
		return l.err("rrelease for", err)
	}
	prev := binary.LittleEndian.Uint64(b[:])
	for {
		if prev&latchX != 0 || prev&latchReaders < uint64(k) {
			return fmt.Errorf("nodearea: release %d shared holds of latch %v: word %#x: %w", k, l.a, prev, farmem.ErrInvalid)
		}
		got, err := l.m.CAS(ctx, l.a, prev, prev-uint64(k))
		if err != nil {
			return l.err("rrelease for", err)
		}
		if got == prev {
			return nil
		}
		prev = got
	}
}

// ClearStalePending clears l's pending bit if it is all the word holds (no holder, no reader):
// a writer that set it and then lost its access can no longer clear it, and it keeps readers
// out. A writer still waiting sets it again. It reports whether it cleared it.
func (l Latch) ClearStalePending(ctx context.Context) (bool, error) {
	prev, err := l.m.CAS(ctx, l.a, latchPending, 0)
	if err != nil {
		return false, l.err("clear pending", err)
	}
	return prev == latchPending, nil
}
