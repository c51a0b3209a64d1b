package race

import "github.com/farmem/farmem/farmem"

// prefetcher is what a farmem.Memory may offer beside its verbs: a hint that brings the lines
// of a range towards the CPU's caches (cxl's clients offer it; the hint reads and changes
// nothing and is not a verb). A handle whose Memory offers it asks for a key's two combined
// buckets and subtable header as soon as the key is hashed, and for a new block's lines as soon
// as it is allocated (before it is encoded), so that the misses overlap the work before the
// batch that reads them (pinning, building the new block of an update, the batch's own checks)
// instead of following it. A fingerprint match's block is not hinted: the batch that reads it
// follows its slot word's decoding at once, with nothing to overlap, and a Memory with the hint
// (cxl) asks for a batch's lines itself as it checks the batch, so a hint there would only ask
// for the same lines twice. Nothing depends on the hint: the batches read as before.
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
