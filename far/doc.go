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
//	SingleWriter  [version][value]                     Load, Store    one owner
//	OutOfPlace    [cell] -> immutable block [value]    CAS loop       any, lock-free
//	Locked        [qlock entry 16][cell] -> block      FIFO lock      any
//
// LoadMany reads many pointers in LoadManyRoundTrips, or LoadManyIndirectRoundTrips if any
// is OutOfPlace or Locked.
//
// SingleWriter is a sequence lock whose reader needs no second round trip: a load's batch
// reads the version, the value and the version again, and the contract orders the ops of one
// batch to one node, so equal even versions prove that no store overlapped the value's read.
// A torn load is read again (the count is in ClientStats.TornRetries).
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
// # Limits
//
//   - A value is at most farmem.MaxOpBytes-8 bytes; a pointer's blocks are on its own node.
//   - SingleWriter's single writer is a discipline (Ptr.Own), not enforced across clients.
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
