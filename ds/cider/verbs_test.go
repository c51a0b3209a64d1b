package cider_test

import (
	"context"

	"github.com/farmem/farmem/ds/qlock"
	"github.com/farmem/farmem/farmem"
	"github.com/farmem/farmem/farmem/farmemtest"
)

// afterVerbs holds one-shot actions on a client's verbs: each armed action runs once, right
// after the first verb (completed without error) its predicate accepts. This is how the tests
// pause a lock holder or crash a client at a point of the protocol, with no hook in CIDER:
// the points are recognised by the verbs the client issues.
type afterVerbs struct {
	armed []armed
}

type armed struct {
	match func(farmemtest.Verb) bool
	act   func()
}

// arm adds an action. Arm it before the client's goroutine runs, or from it.
func (h *afterVerbs) arm(match func(farmemtest.Verb) bool, act func()) {
	h.armed = append(h.armed, armed{match, act})
}

func (h *afterVerbs) after(_ context.Context, v farmemtest.Verb, _ uint64, err error) {
	if err != nil {
		return
	}
	for i, a := range h.armed {
		if a.match(v) {
			h.armed = append(h.armed[:i:i], h.armed[i+1:]...)
			a.act()
			return
		}
	}
}

// interposed returns m seen through an Interposer running h's actions.
func interposed(m farmem.Memory, h *afterVerbs) farmem.Memory {
	return &farmemtest.Interposer{Memory: m, After: h.after}
}

// enqueued matches the Enqueue of a lock at entry (its one MaskedCAS): right after it the
// client holds the lock if it was free, before it looks for a successor.
func enqueued(entry farmem.Addr) func(farmemtest.Verb) bool {
	return func(v farmemtest.Verb) bool {
		op := v.Op()
		return v.Single && op.Kind == farmem.OpMaskedCAS && op.Addr.Node() == entry.Node() &&
			op.Addr.Offset() >= entry.Offset() && op.Addr.Offset() < entry.Offset()+qlock.EntrySize
	}
}

// anyEnqueue matches any lock's Enqueue: the only MaskedCAS of a pointer change.
func anyEnqueue(v farmemtest.Verb) bool { return v.Single && v.Op().Kind == farmem.OpMaskedCAS }

// sentWithoutBump matches a qlock message sent without a hand-over of the lock (a batch of
// writes into another lock node and no FAA of the lock's epoch): a coordinator's first one is
// the Exec that hands its batch to the executor.
func sentWithoutBump(v farmemtest.Verb) bool {
	if v.Single || v.Posted {
		return false
	}
	for _, op := range v.Batch.Ops {
		if op.Kind != farmem.OpWrite || !op.Addr.Node().IsCompute() {
			return false
		}
	}
	return true
}

// casAt matches a CAS of the word at a.
func casAt(a farmem.Addr) func(farmemtest.Verb) bool {
	return func(v farmemtest.Verb) bool { return v.Single && v.Op().Kind == farmem.OpCAS && v.Op().Addr == a }
}
