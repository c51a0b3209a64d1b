package race

import (
	"context"

	"github.com/farmem/farmem/farmem"
)

// prefetcher is what a farmem.Memory may offer beside its verbs: a hint that brings the lines
// of a range towards the CPU's caches (cxl's clients offer it; the hint reads and changes
// nothing and is not a verb), and a Do that does not ask for a batch's lines itself. A handle
// whose Memory offers them asks for a key's two combined buckets and subtable header as soon as
// the key is hashed, for a fingerprint match's block as soon as decodeView finds its slot word,
// for the slot and the old block's head of an update through an address-cache entry before
// its new block is made (updateStraight), and for a new block's lines as soon as it is
// allocated (before it is encoded), so that the misses overlap the work before the batch that
// reads them (pinning, the rest of the buckets' decoding, building the new block of an update,
// the batch's own set-up and checks) instead of following it. A batch reading blocks hinted so runs through DoHinted: cxl's Do asks for a
// batch's lines as it checks the batch, and would ask for each of them twice. Nothing depends
// on the hint: the batches read as before.
type prefetcher interface {
	Prefetch(a farmem.Addr, n int)
	// Prefetch2 is Prefetch of [a, a+n) and of [b, b+m) in one call (one call's overhead
	// where the handle learns two addresses at once).
	Prefetch2(a farmem.Addr, n int, b farmem.Addr, m int)
	// DoHinted is Memory.Do for a batch whose reads' lines were hinted already: it does not
	// ask for them again.
	DoHinted(ctx context.Context, b *farmem.Batch) error
}

// prefetchLookup hints the lines locate's first batch for op will read in the subtable the
// directory cache names.
func (t *Table) prefetchLookup(op *opState) {
	if t.pf == nil {
		return
	}
	st := t.subtableFor(op.k.h1)
	n := int(2 * t.geo.perB * 8)
	t.pf.Prefetch2(t.geo.slotAddr(st, op.ranges[0]), n, st.Add(stHeaderOff), t.headerReadLen())
	if !op.same {
		t.pf.Prefetch(t.geo.slotAddr(st, op.ranges[1]), n)
	}
}

// hintBlock hints the lines of the block slot word w names (decodeView, for a fingerprint match
// of a matchOnly view): all of them, or for an operation that reads only the block's head
// (op.keyOnly) the head's.
func (t *Table) hintBlock(op *opState, w Slot) {
	if t.pf != nil {
		n := int(w.Size())
		if op.keyOnly {
			n = headLen(w, len(op.key))
		}
		t.pf.Prefetch(w.Addr(), n)
	}
}

// doHinted runs b, whose reads' lines were hinted, without hinting them again when the Memory
// offers the hint (Do otherwise).
func (t *Table) doHinted(ctx context.Context, b *farmem.Batch) error {
	if t.pf != nil {
		return t.pf.DoHinted(ctx, b)
	}
	return t.m.Do(ctx, b)
}
