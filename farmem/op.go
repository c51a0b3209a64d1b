package farmem

import "fmt"

// OpKind is the kind of a verb.
type OpKind uint8

// The verbs.
const (
	OpRead OpKind = iota
	OpWrite
	OpCAS
	OpFAA
	OpMaskedCAS
	// NumOpKinds is the number of verb kinds; OpKind values are below it.
	NumOpKinds
)

var opNames = [NumOpKinds]string{"read", "write", "cas", "faa", "mcas"}

func (k OpKind) String() string {
	if k < NumOpKinds {
		return opNames[k]
	}
	return fmt.Sprintf("op(%d)", uint8(k))
}

// Limits every transport enforces.
const (
	// MaxBatchOps is the largest number of ops in one batch.
	MaxBatchOps = 4096
	// MaxOpBytes is the largest Read or Write.
	MaxOpBytes = 16 << 20
	// MaxCallBytes is the largest Call request or reply.
	MaxCallBytes = 1 << 20
)

// Op is one verb of a [Batch]. Build ops with the Batch methods; read results with
// [Batch.Result] once the op is done.
type Op struct {
	Kind OpKind
	Addr Addr
	// Buf is the destination of a Read and the source of a Write. The transport owns it until
	// the op is done: after a Wait for fewer than all ops or a WaitNodes, until the batch's
	// completion hook ([Pending.Then]) runs.
	Buf []byte
	// Cmp is CAS's expected value and MaskedCAS's compare value.
	Cmp uint64
	// Swap is CAS's new value, FAA's delta and MaskedCAS's swap value.
	Swap uint64
	// CmpMask and SwapMask are MaskedCAS's masks.
	CmpMask, SwapMask uint64
	// Unsignaled ops are fire-and-forget: applied before the client's next op to the same node,
	// never waited for, and without a result.
	Unsignaled bool

	val uint64
	err error
}

// Batch is a list of ops posted together: one round trip on the caller's critical path, its
// nodes reached in parallel. Within one node, ops execute in batch order, each observing the
// effects of the earlier ones. A Batch must not be changed or reposted until the previous post
// of it is done.
type Batch struct {
	Ops []Op
	// pend is the Pending of the batch's last post, kept by a transport that hands it out
	// again for the batch's next post (see Pending).
	pend *Pending
}

// slot appends a zeroed op slot and returns it and its index; the caller stores the fields it
// gives into the slot in place: an Op literal appended whole was built in a stack temporary
// and copied in 16-byte moves that straddled its 8-byte stores (store-forwarding stalls: 7% of
// an uncontended cxl Get's CPU profile at 10^4 records, 1.4% in place), and so is one
// assigned whole (*o = Op{...}) wherever its fields might alias the slot. The builders are
// small enough to inline with it, so that appending a verb is a few stores in the caller
// rather than a call taking eight arguments (about 40 instructions a verb; a cached cxl Put
// builds five).
func (b *Batch) slot() (*Op, int) {
	i := len(b.Ops)
	if i == cap(b.Ops) {
		b.Ops = append(b.Ops, Op{})[:i]
	}
	b.Ops = b.Ops[:i+1]
	o := &b.Ops[i]
	*o = Op{}
	return o, i
}

// Read appends a read of len(dst) bytes at a into dst and returns the op's index.
func (b *Batch) Read(a Addr, dst []byte) int {
	o, i := b.slot()
	o.Kind, o.Addr, o.Buf = OpRead, a, dst
	return i
}

// Write appends a write of src at a and returns the op's index.
func (b *Batch) Write(a Addr, src []byte) int {
	o, i := b.slot()
	o.Kind, o.Addr, o.Buf = OpWrite, a, src
	return i
}

// CAS appends a compare-and-swap of the word at a and returns the op's index.
func (b *Batch) CAS(a Addr, old, new uint64) int {
	o, i := b.slot()
	o.Kind, o.Addr, o.Cmp, o.Swap = OpCAS, a, old, new
	return i
}

// FAA appends a fetch-and-add of delta (modulo 2^64) to the word at a and returns the op's index.
func (b *Batch) FAA(a Addr, delta uint64) int {
	o, i := b.slot()
	o.Kind, o.Addr, o.Swap = OpFAA, a, delta
	return i
}

// MaskedCAS appends a masked compare-and-swap (see [Memory.MaskedCAS]) and returns the op's index.
func (b *Batch) MaskedCAS(a Addr, cmp, cmpMask, swap, swapMask uint64) int {
	o, i := b.slot()
	o.Kind, o.Addr, o.Cmp, o.CmpMask, o.Swap, o.SwapMask = OpMaskedCAS, a, cmp, cmpMask, swap, swapMask
	return i
}

// Unsignaled marks op i fire-and-forget and returns i.
func (b *Batch) Unsignaled(i int) int {
	b.Ops[i].Unsignaled = true
	return i
}

// Reset empties the batch, keeping its storage, for reuse once its last post is done. The
// slots are not cleared (every field of a slot is set again when an op is appended over it),
// so the buffers and errors of the last post's ops stay referenced until then: at most the
// most ops the batch ever held. Clearing them cost an uncontended cxl Put about 4% of its CPU
// time (two batches a Put).
func (b *Batch) Reset() {
	b.Ops = b.Ops[:0]
}

// Result returns op i's outcome: the previous word for atomics, 0 for Read and Write, and the
// op's error. It is meaningful only once the op is done ([Pending.OpDone], or after Do or a
// Pending.Wait for all); an unsignaled op has no result.
func (b *Batch) Result(i int) (uint64, error) { return b.Ops[i].val, b.Ops[i].err }
