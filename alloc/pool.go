package alloc

import (
	"context"
	"encoding/binary"
	"fmt"
	"slices"

	"github.com/farmem/farmem/farmem"
)

// The free-chunk pool of a node is a stack of whole free chunks linked through their first
// word, whose head word (offPool in the node's header) holds a tag and the top chunk:
//
//	head word:  tag (24 bits) << 40 | index+1 of the top chunk (0: empty)
//	link word:  the first 8 bytes of a pooled chunk: index+1 of the next chunk (0: last)
//
// An index is (offset - HeapBase) / ChunkSize. Every successful push or pop moves the head word
// with a CAS that increments the tag; see the package doc, "Free chunks", for why that makes
// the stack safe and what it costs.
const (
	poolIdxBits = 40
	poolIdxMask = 1<<poolIdxBits - 1
)

// poolAttempts bounds the CAS retries of one push or pop; past it the operation gives up (a
// pop reports no chunk, a push keeps its chunks) rather than spin against heavy contention.
const poolAttempts = 64

// keepSpares is how many whole free chunks per node an allocator keeps for itself when it
// gives chunks back to the node's pool.
const keepSpares = 1

// chunkOf returns the offset of the chunk holding off.
func (ar *arena) chunkOf(off uint64) uint64 { return off - (off-ar.base)%ar.chunk }

// unlist accounts for a block of n bytes leaving the free lists.
func (ar *arena) unlist(off, n uint64) {
	ar.freeIn.sub(ar.chunkOf(off), n)
	ar.listed -= min(n, ar.listed)
}

// coalesce turns every chunk whose bytes are all free (in the free lists or the magazine, or in
// those and the uncarved rest of the current chunk) back into a spare chunk, which any size class
// can carve again; with force (the arena is out of chunks) it also breaks free runs of chunks
// into spares. A pass costs no verb and time linear in the free blocks held, so unless forced
// it runs only when at least a chunk's worth of blocks, and half of what the lists hold, was
// freed since the last pass. forget is called on each chunk made spare (its words lose any
// atomic use, as a recycled block's do).
func (ar *arena) coalesce(force bool, forget func(off, n uint64)) int {
	ar.settle() // the magazine's blocks count too
	due := ar.sincePass > 0 && (force || (ar.listed >= ar.chunk && ar.sincePass >= max(ar.chunk, ar.listed/2)))
	found := 0
	if due {
		ar.sincePass = 0
		whole := make(map[uint64]bool)
		ar.freeIn.each(func(c, n uint64) {
			if n == ar.chunk {
				whole[c] = true
			}
		})
		if ar.cur < ar.end {
			c := ar.chunkOf(ar.cur)
			if ar.chunkOf(ar.end-1) == c && ar.freeIn.get(c)+(ar.end-ar.cur) == ar.chunk {
				whole[c] = true
				ar.cur, ar.end = 0, 0
			}
		}
		if len(whole) > 0 {
			for c := range ar.free {
				for k := range ar.free[c] {
					ar.free[c][k] = slices.DeleteFunc(ar.free[c][k], func(off uint64) bool { return whole[ar.chunkOf(off)] })
				}
			}
			for c := range whole {
				ar.listed -= min(ar.freeIn.get(c), ar.listed)
				ar.freeIn.del(c)
				ar.spare = append(ar.spare, c)
				forget(c, ar.chunk)
			}
			// Lowest chunks are carved first: memory stays compact.
			slices.Sort(ar.spare)
			slices.Reverse(ar.spare)
			found = len(whole)
		}
	}
	if force {
		for n, offs := range ar.large {
			for _, off := range offs {
				for k := range n {
					ar.spare = append(ar.spare, off+k*ar.chunk)
				}
				found += int(n)
			}
			delete(ar.large, n)
		}
	}
	ar.st.Coalesced += uint64(found)
	return found
}

// poolIndex returns the pool index+1 of the chunk at off.
func (ar *arena) poolIndex(off uint64) uint64 { return (off-ar.base)/ar.chunk + 1 }

// poolChunk returns the chunk of pool index+1 i, and whether it is one of the heap's.
func (ar *arena) poolChunk(i uint64) (uint64, bool) {
	if i == 0 || i > (ar.limit-ar.base)/ar.chunk {
		return 0, false
	}
	return ar.base + (i-1)*ar.chunk, true
}

// pushPool puts the chunks offs (held by this allocator, all free) on the node's pool: a Read
// of the head word, then one batch writing each chunk's link word and CASing the head word
// (2 round trips; 1 more per lost CAS). The chunks are the pool's once the CAS lands. pushed is
// false, with a nil error, if every CAS was lost (the chunks are still the caller's). If a verb
// fails the CAS may or may not have landed, and the caller must give the chunks up (neither
// keep nor hand them over): lost ones leak, but none is ever held twice.
func (ar *arena) pushPool(ctx context.Context, m farmem.Memory, offs []uint64, forget func(off, n uint64)) (pushed bool, err error) {
	if len(offs) == 0 || ar.pool == 0 {
		return false, nil
	}
	head, err := ar.readWord(ctx, m, ar.pool)
	if err != nil {
		return false, err
	}
	for range poolAttempts {
		var b farmem.Batch
		for i, off := range offs {
			next := head & poolIdxMask
			if i+1 < len(offs) {
				next = ar.poolIndex(offs[i+1])
			}
			var w [8]byte
			binary.LittleEndian.PutUint64(w[:], next)
			forget(off, 8)
			b.Write(farmem.MakeAddr(ar.pool.Node(), off), w[:])
		}
		want := (head>>poolIdxBits+1)<<poolIdxBits | ar.poolIndex(offs[0])
		ic := b.CAS(ar.pool, head, want)
		if err := m.Do(ctx, &b); err != nil {
			return true, fmt.Errorf("alloc: %s: push free chunks: %w", ar.name, err)
		}
		prev, _ := b.Result(ic)
		if prev == head {
			post := &farmem.Batch{}
			post.Unsignaled(post.FAA(farmem.MakeAddr(ar.pool.Node(), offPoolN), uint64(len(offs))))
			m.Post(context.Background(), post)
			ar.st.Pooled += uint64(len(offs))
			return true, nil
		}
		head = prev
	}
	return false, nil
}

// popPool takes a chunk from the node's pool: a Read of the head word, a Read of the top
// chunk's link word, and a CAS of the head word (3 round trips; 2 more per lost CAS). ok is
// false when the pool is empty (after one round trip).
func (ar *arena) popPool(ctx context.Context, m farmem.Memory) (off uint64, ok bool, err error) {
	if ar.pool == 0 {
		return 0, false, nil
	}
	head, err := ar.readWord(ctx, m, ar.pool)
	if err != nil {
		return 0, false, err
	}
	for range poolAttempts {
		if head&poolIdxMask == 0 {
			return 0, false, nil
		}
		top, valid := ar.poolChunk(head & poolIdxMask)
		if !valid {
			return 0, false, fmt.Errorf("alloc: %s: pool head %#x names no chunk: %w", ar.name, head, ErrBadHeader)
		}
		link, err := ar.readWord(ctx, m, farmem.MakeAddr(ar.pool.Node(), top))
		if err != nil {
			return 0, false, err
		}
		if _, valid := ar.poolChunk(link); !valid && link != 0 {
			// The chunk left the pool since the head was read, and holds data now.
			if head, err = ar.readWord(ctx, m, ar.pool); err != nil {
				return 0, false, err
			}
			continue
		}
		prev, err := m.CAS(ctx, ar.pool, head, (head>>poolIdxBits+1)<<poolIdxBits|link)
		if err != nil {
			// The chunk may be ours now: it leaks rather than risk being held twice.
			return 0, false, fmt.Errorf("alloc: %s: pop free chunk: %w", ar.name, err)
		}
		if prev == head {
			post := &farmem.Batch{}
			post.Unsignaled(post.FAA(farmem.MakeAddr(ar.pool.Node(), offPoolN), ^uint64(0)))
			m.Post(context.Background(), post)
			ar.st.Unpooled++
			return top, true, nil
		}
		head = prev
	}
	return 0, false, nil
}

func (ar *arena) readWord(ctx context.Context, m farmem.Memory, a farmem.Addr) (uint64, error) {
	var w [8]byte
	if err := m.Read(ctx, a, w[:]); err != nil {
		return 0, fmt.Errorf("alloc: %s: read %v: %w", ar.name, a, err)
	}
	return le64(w[:]), nil
}

// forgetter returns the function that makes a range of ar's words plain data again, on every
// node a symmetric block exists on.
func (a *Allocator) forgetter(ar *arena) func(off, n uint64) {
	return func(off, n uint64) {
		if ar.sym {
			for _, node := range a.all {
				forgetAtomic(a.m, farmem.MakeAddr(node, off), n)
			}
			return
		}
		forgetAtomic(a.m, farmem.MakeAddr(ar.bump.Node(), off), n)
	}
}

// Coalescing modes of giveBack.
const (
	rebuildNone  = iota // push only chunks already whole (Close: its record describes free blocks as they are)
	rebuildDue          // coalesce when enough was freed since the last pass
	rebuildForce        // coalesce now, and break free runs of chunks into chunks
)

// giveBack coalesces each node arena's free blocks into whole chunks as mode says and pushes
// the whole free chunks beyond keep onto the node's pool, where every client can claim them.
// A push whose outcome is unknown gives its chunks up (see pushPool); its error is returned.
func (a *Allocator) giveBack(ctx context.Context, keep int, mode int) error {
	var errs []error
	for _, n := range a.nodes {
		ar := a.arenas[n]
		if mode != rebuildNone {
			ar.coalesce(mode == rebuildForce, ar.forget)
		}
		if len(ar.spare) <= keep {
			continue
		}
		offs := slices.Clone(ar.spare[keep:])
		ar.spare = ar.spare[:keep]
		pushed, err := ar.pushPool(ctx, a.m, offs, a.forgetter(ar))
		if err != nil {
			errs = append(errs, err)
		}
		if !pushed {
			ar.spare = append(ar.spare, offs...)
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("alloc: give back free chunks: %w", errs[0])
	}
	return nil
}

// roomForRecord makes room for a handover record when no held block can store it and the
// heaps are exhausted: it withdraws the client's announcement (Close is about to anyway),
// scans the epoch table so that retired blocks no other client holds back become free,
// rebuilds whole chunks from every free block, and, while no layout fits, takes chunks from the
// nodes' pools (at most one per record segment). It returns the new snapshot and whether a
// layout fits. Close takes this path only when it would otherwise lose what it holds.
func (a *Allocator) roomForRecord(ctx context.Context, withdraw func(*farmem.Batch)) (*handover, bool) {
	var b farmem.Batch
	withdraw(&b)
	if a.m.Do(ctx, &b) == nil {
		a.ep.announced = false
		_, _ = a.scan(ctx)
	}
	for _, n := range a.nodes {
		a.arenas[n].coalesce(true, a.arenas[n].forget)
	}
	h := a.snapshot()
	if _, _, _, ok := a.planRecord(h); ok {
		return h, true
	}
	for range maxSegs {
		got := false
		for _, n := range a.nodes {
			ar := a.arenas[n]
			if off, ok, err := ar.popPool(ctx, a.m); err == nil && ok {
				ar.forget(off, ar.chunk)
				ar.spare = append(ar.spare, off)
				got = true
				break
			}
		}
		if !got {
			return h, false
		}
		h = a.snapshot()
		if _, _, _, ok := a.planRecord(h); ok {
			return h, true
		}
	}
	return h, false
}
