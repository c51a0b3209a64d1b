package race

import "github.com/farmem/farmem/farmem"

// prefetcher is what a farmem.Memory may offer beside its verbs: a hint that brings the lines
// of a range towards the CPU's caches (cxl's clients offer it; the hint reads and changes
// nothing and is not a verb). A handle whose Memory offers it asks for a key's two combined
// buckets and subtable header as soon as the key is hashed, for a fingerprint match's block as
// soon as its slot word is read, and for a new block's lines as soon as it is allocated (before
// it is encoded), so that the misses overlap the work before the batch
// that reads them (pinning, building the new block of an update, the batch's own checks) instead
// of following it. Nothing depends on the hint: the batches read as before.
type prefetcher interface {
	Prefetch(a farmem.Addr, n int)
}

// prefetchLookup hints the lines locate's first batch for op will read in the subtable the
// directory cache names.
func (t *Table) prefetchLookup(op *opState) {
	if t.pf == nil {
		return
	}
	st := t.subtableFor(op.k.h1)
	n := int(2 * t.geo.perB * 8)
	t.pf.Prefetch(t.geo.slotAddr(st, op.ranges[0]), n)
	if !op.same {
		t.pf.Prefetch(t.geo.slotAddr(st, op.ranges[1]), n)
	}
	t.pf.Prefetch(st.Add(stHeaderOff), 8)
}

// prefetchBlock hints the lines of the block slot word w names.
func (t *Table) prefetchBlock(w Slot) {
	if t.pf != nil {
		t.pf.Prefetch(w.Addr(), int(w.Size()))
	}
}
