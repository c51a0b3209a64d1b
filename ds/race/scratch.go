package race

import "github.com/farmem/farmem/farmem"

// scratch is the memory a handle reuses from one operation to the next, so that an uncontended
// operation allocates next to nothing: the operation's state, the batch of its lookups and
// block reads, the buffers those read into, the decoded views, the new KV block and the change
// handed to the synchronizer. A handle belongs to one goroutine and runs one operation at a
// time, so one scratch serves them all.
//
// Nothing an operation returns to its caller aliases the scratch (Search copies the value out
// of the block buffer). A batch and the buffers of its ops belong to the transport until it is
// done: when a Do (or a single-verb Write of the new block) fails, its ops may still complete
// later, so the handle drops the whole scratch (lost) and the next user starts a fresh one;
// pointers the failing operation still holds keep the old one alive, untouched by anyone else.
type scratch struct {
	op opState
	// b is the batch of locate, learn, tryInsert and reread; each resets it before use and
	// reads its results before any other of them runs.
	b farmem.Batch
	// bkt receives addReads' reads: the two combined buckets, then the header, lock, parent and move words.
	bkt []byte
	// lv holds the views locate decodes; rv those of tryInsert and reread (an insert's view
	// after its tentative CAS, alive while locate's still is).
	lv, rv viewBuf
	// hv holds the views of a split's new half locate's hop decodes, and mv a mixed key's
	// merged view (hop).
	hv, mv viewBuf
	// cv holds the one-slot view of changeCached.
	cv viewBuf
	// js is matching's result (read before matching runs again).
	js []int
	// blocks and meta receive learn's reads of KV blocks and metadata entries; ps lists the
	// blocks of the current learn.
	blocks, meta []byte
	ps           []pendingBlock
	// nb is the operation's new KV block (at most one is alive at a time) and enc its bytes.
	nb  newBlock
	enc []byte
	// change is the Target of the current Update or Delete.
	change change
}

// viewBuf is the storage of a view's slices.
type viewBuf struct {
	idx   []uint64
	words []Slot
}

// pendingBlock is a KV block learn reads: its slot word (block key) and where its bytes land.
type pendingBlock struct {
	w      Slot
	buf    []byte
	op     int         // the index of its read in the batch
	inv    int         // the index of the write of its valid word (Options.Invalidate), or -1
	backup farmem.Addr // the backup copy read instead, its primary's node being down (or 0)
}

// lost drops the scratch after a failed Do: the transport may still own its batch and buffers.
func (t *Table) lost() { t.scr = new(scratch) }

// batch returns the scratch batch, emptied.
func (t *Table) batch() *farmem.Batch {
	b := &t.scr.b
	b.Reset()
	return b
}

// grow returns b resliced to n bytes, reallocated if its capacity is short. The bytes are not
// cleared.
func grow(b []byte, n int) []byte {
	if cap(b) < n {
		return make([]byte, n)
	}
	return b[:n]
}
