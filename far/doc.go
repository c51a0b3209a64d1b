// Package far gives Go programs typed far memory: pointers to fixed-size values (Ptr[T]),
// atomic words (Uint64, Int64) and a sharded counter (Counter), over any farmem transport
// (cxl, rdma over tcp or ibverbs, the simulator, the local transport), using only the
// user-facing contract: farmem.Memory's verbs and batches, alloc for placement and deferred
// free, and ds/qlock's far lock. Containers built on it are in far/farcoll.
//
// # Use
//
//	c, err := far.NewClient(ctx, m, far.Options{})   // one per goroutine, over its farmem.Memory
//	p, err := far.NewPtr(ctx, c, Point{X: 1}, far.PtrOptions[Point]{Mode: far.SingleWriter})
//	v, err := p.Load(ctx, c)
//	err = p.Store(ctx, c, Point{X: 2})
//	n, err := far.NewUint64(ctx, c, 0, 0)
//	x, err := n.Add(ctx, c, 1)
//
// A Client is one goroutine's (like its farmem.Memory): it holds the allocator, the far-lock
// node and the scratch buffers. Ptr, Uint64, Int64 and Counter are plain values (an address,
// a mode, a codec) that any client may use and that a program stores in far memory as their
// Addr and rebuilds with PtrAt, Uint64At, CounterAt.
//
// # Types and codecs
//
// A T lives in far memory encoded by a Codec[T] in a fixed number of bytes. Far memory never
// holds Go pointers: every constructor checks T with reflect (CheckType) and refuses pointers,
// slices, strings, maps, interfaces, channels, functions, uintptr and the platform-sized int
// and uint. Go's type system cannot express "holds no pointers", so this is checked at
// construction, not at compile time. Binary is the default codec: encoding/binary's packed
// little-endian layout, without unsafe; a hand-written Codec can replace it for hot types.
// A codec that also has DecodeInto (DecoderInto) decodes in place into the caller's variable,
// which is what makes Ptr.LoadInto of a large T cost little more than the Read itself.
//
// # Pointer modes
//
// An aligned 8-byte word never tears, so a T that encodes in at most 8 bytes is atomic in one
// verb (Word). A longer write tears word by word under concurrent access, and no
// transport has a 16-byte atomic, so a larger T cannot be both one-round-trip and linearizable
// under concurrent writers. Each Mode below is linearizable, at different costs (round trips
// in the constants WordLoadRoundTrips, OutOfPlaceUpdateRoundTrips and the like):
//
//	mode          layout                               Update         writers
//	Word          [value word]                         CAS loop       any
//	SingleWriter  [H][value][T]                        Load, Store    one owner
//	OutOfPlace    [cell] -> immutable block [value]    CAS loop       any, lock-free
//	Locked        [qlock entry 16][cell] -> block      FIFO lock      any
//
// LoadMany reads many pointers in LoadManyRoundTrips, or LoadManyIndirectRoundTrips if any
// is OutOfPlace or Locked.
//
// SingleWriter loads in one round trip (see "Single-writer loads"); a torn load is read again
// (the count is in ClientStats.TornRetries).
//
// OutOfPlace never overwrites a value: a store writes a new block and swaps the cell to it
// with a CAS in the same batch (ordered at the node, so a reader that sees the new address
// sees the block's bytes). Loads are wait-free, two dependent reads. Replaced blocks are
// retired through alloc's epochs (deferred free), and readers are pinned while they read a
// block, so a block is never reused under a reader.
//
// Locked adds a far MCS lock (ds/qlock) for read-modify-write that would otherwise retry under
// contention. The lock serialises updates; the cell still changes only by a CAS from the block
// read under the lock, which fences a holder whose lock was reset while it was paused (qlock's
// package doc, "Fencing"): its CAS fails and its update runs again.
//
// # Single-writer loads
//
// A SingleWriter pointer is a record: H, the value's words as the codec wrote them, T. H and T
// hold the 64-bit version of the store that wrote the record (the owner counts its stores, so
// a version is never reused). A store is three Writes in one batch, in this order: T, the
// value, H. A load reads the record and decodes the value straight from it if H == T, and
// reads again otherwise. A store is linearized at its Write of H, a load at its read of H's
// word. What a load needs is that every word of the value it returns is store v's, where v is
// the H it read; no transport makes a Read of more than 8 bytes atomic (each aligned word of it
// is atomic, no more), so how the load reads depends on the order in which the transport
// copies a long Read, which the client asks its Memory once (transport.OrderedReader).
//
// Reads copied in address order: one Read. cxl copies a Read word by word in ascending order
// with plain loads (assembly MOVs; sync/atomic loads in the pure-Go build and for short or
// unaligned accesses), and x86-TSO keeps loads in order with loads and stores with stores;
// local copies with ascending sync/atomic loads. The reader thus loads H first and T last, the
// reverse of the owner's order, and the owner's three Writes become visible in batch order
// (the contract's order of one batch: program-ordered stores on cxl). If H == T == v, the load
// of H saw store v's last Write, so every later load sees store v or a later one; the load of
// T did not see store v+1's first Write, so no earlier load saw any of store v+1 or later.
// Every word is store v's, however long the reader is paused in the middle of its copy.
//
// Reads copied in any order: three Reads in one batch. A NIC's DMA does not promise address
// order, nor do the simulator (which lands a long access's pieces in a random order on
// purpose) and cxl's Uncached policy (lines are fetched again after a flush in no promised
// order). There the load reads H, the value and T as three Reads of one batch to the record's
// node, still one round trip: the contract orders the ops of one batch to one node (each
// executes after, and observes the effects of, every earlier one), on the reader's side as on
// the owner's, and the argument above holds op by op. Neither way rests on a timing
// assumption.
//
// The record costs 8*(k+2) bytes for a value of k words (80 bytes for 64), the check is one
// comparison, and the value is decoded in place (with the codec's DecodeInto, into the
// caller's variable): the benchmark beside the raw verbs is in docs/typed.md.
//
// # Limits
//
//   - A value is at most farmem.MaxOpBytes-8 bytes; a pointer's blocks are on its own node.
//   - SingleWriter's single writer is a discipline (Ptr.Own), not enforced across clients.
//     A store that fails half way leaves the record torn, and loads read again until the
//     owner's next store. A Memory that claims transport.OrderedReader wrongly breaks the
//     one-Read load; a wrapper of a Memory that does not pass the method on only costs the
//     three-Read load.
//   - An OutOfPlace or Locked update by a client paused past its allocator lease (alloc's
//     Options.Lease, default 1s) may apply fn to a block that was reused meanwhile: the lease
//     is the bound the allocator gives every reader.
//   - An operation that fails with farmem.ErrNodeDown or a context error may or may not have
//     taken effect.
//
// # Runtime
//
// The package takes time only from the client's farmem.Runtime (through alloc and qlock),
// starts no goroutine and holds no Go lock, so it runs unchanged on the simulator.
package far
