package alloc

import (
	"context"
	"fmt"

	"github.com/farmem/farmem/farmem"
)

// arena is one client's view of one source of chunks: a memory node's heap, or the symmetric
// area (whose bump word is on the home node). It carves chunks into size classes and keeps the
// client's free lists for them; nothing here is shared with other clients but the bump word.
type arena struct {
	name        string
	sym         bool
	bump        farmem.Addr // the word chunks are claimed from with FAA
	base, limit uint64      // the offsets chunks come from
	chunk       uint64
	maxSmall    uint64 // larger blocks are whole chunks
	nClasses    int

	cur, end uint64        // the chunk being carved: [cur, end)
	free     [][3][]uint64 // by class, then alignment bucket: offsets of free blocks
	// mag is the magazine: by class, the small blocks this allocator retired that a scan made
	// reusable (reuseBelow), taken before the free lists. Its blocks are free but not counted
	// in freeIn, listed or sincePass, so the round trip of a retired block back to its retirer
	// (the steady state of a writer that replaces its blocks) costs an append and a pop, not
	// the accounting twice; settle moves them to the free lists, with their accounting, before
	// anything reads the lists or the accounting (coalesce, a handover's snapshot, absorb).
	mag       [][]uint64
	magged    bool                // mag may hold blocks (settle has work)
	large     map[uint64][]uint64 // free runs of whole chunks, by length in chunks
	spare     []uint64            // whole chunks claimed but not yet carved
	exhausted bool                // the bump word passed limit: claims fail without a verb
	chunks    *uint64             // the allocator's count of chunk claims

	// Chunk accounting for coalescing (pool.go): the bytes of each chunk (by its offset) that
	// are in the free lists, their total, and the bytes pushed onto the lists since the last
	// coalescing pass.
	freeIn    chunkFree
	listed    uint64
	sincePass uint64
	pool      farmem.Addr // the node's free-chunk pool head word (0 for the symmetric area)
	st        *Stats
	forget    func(off, n uint64) // makes a recycled range's words plain data (Allocator.forgetter)
	// claimFn, if set, stands for the FAA on the bump word: the replicated symmetric claim
	// (replica.go). It returns the claimed range's start, as the FAA's previous value.
	claimFn func(ctx context.Context, delta uint64) (uint64, error)
}

func newArena(name string, sym bool, bump farmem.Addr, base, limit, chunk uint64, st *Stats) *arena {
	maxSmall := chunk / 2
	n := classBelow(maxSmall) + 1
	ar := &arena{
		name: name, sym: sym, bump: bump, base: base, limit: limit, chunk: chunk, maxSmall: maxSmall,
		nClasses: n, free: make([][3][]uint64, n), mag: make([][]uint64, n), large: make(map[uint64][]uint64), chunks: &st.Chunks,
		freeIn: newChunkFree(base, chunk), st: st, forget: func(off, n uint64) {},
	}
	if !sym {
		ar.pool = farmem.MakeAddr(bump.Node(), offPool)
	}
	return ar
}

// chunksFor returns the number of whole chunks a large block of size bytes takes.
func (ar *arena) chunksFor(size uint64) uint64 { return (size + ar.chunk - 1) / ar.chunk }

// check validates a block handed back to the arena: inside it, aligned as the arena hands out
// blocks of that size.
func (ar *arena) check(off, size uint64) error {
	switch {
	case size == 0:
		return fmt.Errorf("alloc: free of 0 bytes at %s+%#x: %w", ar.name, off, farmem.ErrInvalid)
	case off < ar.base || off >= ar.limit || size > ar.limit-off:
		return fmt.Errorf("alloc: block %s+%#x of %d bytes is outside [%#x, %#x): %w", ar.name, off, size, ar.base, ar.limit, farmem.ErrInvalid)
	case size > ar.maxSmall && off%ar.chunk != 0:
		return fmt.Errorf("alloc: large block %s+%#x is not chunk-aligned: %w", ar.name, off, farmem.ErrInvalid)
	case off%minBlock != 0:
		return fmt.Errorf("alloc: block %s+%#x is not %d-byte aligned: %w", ar.name, off, minBlock, farmem.ErrInvalid)
	}
	return nil
}

// fits reports whether check accepts a block, with no error to build: cheap enough to be
// inlined on the path of every Retire.
func (ar *arena) fits(off, size uint64) bool {
	return off-ar.base < ar.limit-ar.base && size-1 < ar.limit-off && off%minBlock == 0 &&
		(size <= ar.maxSmall || off%ar.chunk == 0)
}

// blockSize is the number of bytes a block of size bytes really occupies.
func (ar *arena) blockSize(size uint64) uint64 {
	if size > ar.maxSmall {
		return ar.chunksFor(size) * ar.chunk
	}
	return classSizes[classOf(size)]
}

// put returns a block of size bytes to the free lists.
func (ar *arena) put(off, size uint64) {
	if size > ar.maxSmall {
		n := ar.chunksFor(size)
		ar.large[n] = append(ar.large[n], off)
		return
	}
	ar.push(off, classOf(size))
}

// fromMag takes the magazine's last block of class c if it is aligned to align.
func (ar *arena) fromMag(c int, align uint64) (uint64, bool) {
	if m := ar.mag[c]; len(m) > 0 {
		if off := m[len(m)-1]; off&(max(align, minBlock)-1) == 0 {
			ar.mag[c] = m[:len(m)-1]
			return off, true
		}
	}
	return 0, false
}

// settle moves the magazine's blocks to the free lists, accounted for like every free block.
func (ar *arena) settle() {
	if !ar.magged {
		return
	}
	for c, m := range ar.mag {
		for _, off := range m {
			ar.push(off, c)
		}
		ar.mag[c] = m[:0]
	}
	ar.magged = false
}

func (ar *arena) push(off uint64, c int) {
	l := &ar.free[c][alignBucket(off)]
	*l = append(*l, off)
	n := classSizes[c]
	ar.freeIn.add(ar.chunkOf(off), n)
	ar.listed += n
	ar.sincePass += n
}

// pop takes a free block of class c aligned to align, preferring the least aligned one.
func (ar *arena) pop(c int, align uint64) (uint64, bool) {
	for k := minBucket(align); k < 3; k++ {
		l := &ar.free[c][k]
		if n := len(*l); n > 0 {
			off := (*l)[n-1]
			*l = (*l)[:n-1]
			ar.unlist(off, classSizes[c])
			return off, true
		}
	}
	return 0, false
}

// carve cuts a block of cs bytes aligned to align from the current chunk; the padding it skips
// goes to the free lists.
func (ar *arena) carve(cs, align uint64) (uint64, bool) {
	if ar.end == 0 {
		return 0, false
	}
	off := alignUp(ar.cur, max(align, minBlock))
	if off > ar.end || cs > ar.end-off {
		return 0, false
	}
	ar.salvage(ar.cur, off)
	ar.cur = off + cs
	return off, true
}

// salvage cuts [from, to) into the largest blocks that fit and frees them.
func (ar *arena) salvage(from, to uint64) {
	for to-from >= minBlock {
		c := min(classBelow(to-from), ar.nClasses-1)
		ar.push(from, c)
		from += classSizes[c]
	}
}

// refill retires the current chunk (its tail goes to the free lists) and starts a new one.
func (ar *arena) refill(ctx context.Context, m farmem.Memory) error {
	off, err := ar.claim(ctx, m, 1, true)
	if err != nil {
		return err
	}
	if ar.end != 0 {
		ar.salvage(ar.cur, ar.end)
	}
	ar.cur, ar.end = off, off+ar.chunk
	return nil
}

// claim returns n contiguous whole chunks. One chunk comes from, in order: a spare chunk; one
// rebuilt from free blocks (coalesce, when due); one FAA on the bump word; once the heap is
// exhausted, a forced coalesce and then the node's pool of free chunks (popPool). Runs of n > 1
// chunks come from the bump word only. If a claim runs past the limit, the chunks that do fit
// become spares (no space is lost); a claim nothing satisfies fails with ErrNoSpace. Without
// rebuild, nothing is coalesced before the bump word is tried (Close's record, which describes
// free blocks as they are).
func (ar *arena) claim(ctx context.Context, m farmem.Memory, n uint64, rebuild bool) (uint64, error) {
	if n == 1 {
		if len(ar.spare) == 0 && rebuild {
			ar.coalesce(false, ar.forget)
		}
		if off, ok := ar.takeSpare(); ok {
			return off, nil
		}
	}
	if !ar.exhausted && n <= (ar.limit-ar.base)/ar.chunk {
		var prev uint64
		var err error
		if ar.claimFn != nil {
			prev, err = ar.claimFn(ctx, n*ar.chunk)
		} else {
			prev, err = m.FAA(ctx, ar.bump, n*ar.chunk)
		}
		if err != nil {
			return 0, fmt.Errorf("alloc: %s: claim chunk: %w", ar.name, err)
		}
		*ar.chunks++
		if prev < ar.base || prev%ar.chunk != 0 {
			return 0, fmt.Errorf("alloc: %s: bump pointer %#x is not a chunk of [%#x, %#x): %w", ar.name, prev, ar.base, ar.limit, ErrBadHeader)
		}
		if prev < ar.limit && n*ar.chunk <= ar.limit-prev {
			return prev, nil
		}
		ar.exhausted = true
		for p := prev; p < ar.limit && ar.chunk <= ar.limit-p; p += ar.chunk {
			ar.spare = append(ar.spare, p)
		}
	}
	if n == 1 {
		ar.coalesce(true, ar.forget)
		if off, ok := ar.takeSpare(); ok {
			return off, nil
		}
		off, ok, err := ar.popPool(ctx, m)
		if err != nil {
			return 0, err
		}
		if ok {
			ar.forget(off, ar.chunk)
			return off, nil
		}
	}
	if ar.exhausted {
		return 0, fmt.Errorf("alloc: %s: heap exhausted: %w", ar.name, farmem.ErrNoSpace)
	}
	return 0, fmt.Errorf("alloc: %s: %d chunks of %d bytes do not fit: %w", ar.name, n, ar.chunk, farmem.ErrNoSpace)
}

// takeSpare takes a spare chunk, if the arena has one.
func (ar *arena) takeSpare() (uint64, bool) {
	if k := len(ar.spare); k > 0 {
		off := ar.spare[k-1]
		ar.spare = ar.spare[:k-1]
		return off, true
	}
	return 0, false
}

// take returns a block for size bytes aligned to align from the magazine (its last block, if
// aligned), the free lists or the current chunk, without a verb; recycled says it came from
// the magazine or a free list (it may hold atomic words).
func (ar *arena) take(size, align uint64) (off uint64, recycled, ok bool) {
	if size > ar.maxSmall {
		return ar.takeLarge(size)
	}
	c := classOf(size)
	if off, ok := ar.fromMag(c, align); ok {
		return off, true, true
	}
	return ar.takeListed(c, align)
}

// takeLarge takes a free run of whole chunks for a large block of size bytes.
func (ar *arena) takeLarge(size uint64) (off uint64, recycled, ok bool) {
	n := ar.chunksFor(size)
	if l := ar.large[n]; len(l) > 0 {
		ar.large[n] = l[:len(l)-1]
		return l[len(l)-1], true, true
	}
	return 0, false, false
}

// takeListed is take of a block of class c once the magazine had none: the free lists, else
// the current chunk.
func (ar *arena) takeListed(c int, align uint64) (off uint64, recycled, ok bool) {
	if off, ok := ar.pop(c, align); ok {
		return off, true, true
	}
	off, ok = ar.carve(classSizes[c], align)
	return off, false, ok
}

// grow makes room for size bytes with verbs: a large block is claimed outright and returned; a
// small one gets a new chunk to carve, and grow returns ok == false.
func (ar *arena) grow(ctx context.Context, m farmem.Memory, size uint64) (off uint64, ok bool, err error) {
	if size > ar.maxSmall {
		off, err := ar.claim(ctx, m, ar.chunksFor(size), true)
		return off, err == nil, err
	}
	return 0, false, ar.refill(ctx, m)
}
