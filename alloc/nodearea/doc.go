// Package nodearea allocates blocks in a compute node's shared area (the part of its region
// after the client slices, from farmem.Topology.SharedBase to the end) and provides Latch, a
// local shared-exclusive latch over a word of that region. It is where per-compute-node state
// lives: SELCC's frames and their latches, FlexKV's proxied partitions, a structure's
// directory, anything that the clients of one compute node share and peers may reach with
// verbs.
//
//	a, err := nodearea.Open(ctx, m)            // one per client (farmem.Memory)
//	b, err := a.AllocZeroed(ctx, 64)           // a block in m's compute node's shared area
//	l, err := nodearea.NewLatch(m, b)          // a latch over the block's first word
//	err = l.Lock(ctx); ...; err = l.Unlock(ctx)
//	err = a.Free(ctx, b, 64)
//
// # No round trip, no Go lock
//
// Every verb the package issues targets the caller's own compute node's region: it never
// reaches a memory node, and on a transport where that region is local memory (every one of
// them: the region lives in the compute node) a verb is a CPU access. The allocator's state is
// kept in words of the area itself, so every client of the node shares it whatever process or
// transport it runs on, with no Go lock anywhere: an Area handle only caches constants.
//
// # Layout
//
// Words are little-endian; offsets are from SharedBase (which is 64-byte aligned).
//
//	[0, 8)        magic word: "NODEAR" in the top 48 bits, layout version in the low 16
//	[8, 16)       bump: bytes handed out from the data start
//	[64, 64+8k)   k free-list heads, one per size class
//	data start    the first multiple of 64 after the heads
//
// A head is a tagged pointer: a 24-bit tag in the top bits (advanced by every push and pop,
// so a stalled pop cannot install a stale successor: the ABA problem), and the block's offset
// from SharedBase in units of 16 bytes in the low 40 (0 = empty). A free block's first word
// holds its successor's offset in the same units.
//
// Size classes are every multiple of 16 up to 256 bytes, then eight per doubling (at most 12.5%
// internal fragmentation) up to the area's size; their number is fixed by the area's size,
// which every client reads from the same topology. A class's blocks are aligned to the largest
// power of two dividing the class size, at most 64 (a 64-byte class, or any multiple of 64, is
// cache-line aligned).
//
// # Formatting
//
// The all-zero area is a valid, empty allocator (no bump, every list empty), and compute node
// regions start zeroed on every transport (a reclaimed cxl compute id is zeroed). Opening CASes
// the magic word from zero to its value, so two clients opening at once both succeed and agree,
// and nobody ever sees a half-formatted header. A magic word of another value (another layout
// version, or something else that wrote the area) is refused with farmem.ErrInvalid.
//
// # Costs (verbs per operation, all to the caller's own region, none a round trip)
//
//	Open                      1 read, plus 1 CAS on the node's first open
//	Alloc, from a free list   3: read the head, read the block's link, CAS the head
//	Alloc, from the bump      3: read the head (empty), read the bump, CAS the bump
//	AllocZeroed               Alloc, plus 1 write of the block for a reused one
//	Free                      3: read the head, write the link, CAS the head
//	each lost race            +2 (pop: read the new head's link, CAS), +1 (bump), +2 (push)
//
// # Limits
//
// Blocks are not coalesced: a freed block is reused only by its own class, and the bump never
// moves back, so an area that has handed out all its bytes to one class cannot serve another
// (ErrNoSpace) until blocks of that class are freed. Free must be given the size the block was
// allocated with (any size of the same class is accepted). A client that dies leaks the blocks
// it held; the area lives as long as its compute node's region. The tag makes ABA need 2^24
// pushes and pops of one class while a pop is stalled between its read and its CAS.
//
// Exhaustion is an ordinary error wrapping farmem.ErrNoSpace (ErrNoSpace here is that
// sentinel), with the node, the class and the bytes in use in its text.
//
// # Runtime
//
// The package starts no goroutine, reads no clock and holds no Go lock; Latch waits with
// farmem.Memory.Wait, so everything here runs unchanged on the simulator.
package nodearea
