package alloc

// chunkFree counts, per chunk of an arena, the bytes of that chunk that are in the arena's
// free lists (arena.freeIn). Every push and pop of a free block updates it, so it is on the
// path of every recycled allocation: a dense array indexed by the chunk's position in the
// arena, in pages allocated as the chunks they cover are first counted, costs an index
// computation and one load where a Go map cost a hash and a probe (about 3% of a store
// update's CPU time with a heap of 10^5 1 KiB blocks).
//
// Memory: 4 bytes per chunk of the pages touched (a page covers chunkFreePage chunks, 32 MiB
// of heap with the default 64 KiB chunks), plus a pointer per page up to the highest chunk
// counted. Counts fit 32 bits because a chunk is at most MaxChunkSize (1 GiB) bytes.
type chunkFree struct {
	base, chunk uint64
	shift       uint                     // log2(chunk)
	pages       []*[chunkFreePage]uint32 // by chunk index / chunkFreePage; nil until touched
	used        []uint16                 // nonzero entries per page
	n           int                      // nonzero entries in all
}

// chunkFreePage is the number of chunks a page of counts covers.
const chunkFreePage = 512

func newChunkFree(base, chunk uint64) chunkFree {
	shift := uint(0)
	for uint64(1)<<shift < chunk {
		shift++
	}
	return chunkFree{base: base, chunk: chunk, shift: shift}
}

// index returns the chunk index of c, a chunk's offset, and its page and slot.
func (f *chunkFree) index(c uint64) (page, slot int) {
	i := (c - f.base) >> f.shift
	return int(i / chunkFreePage), int(i % chunkFreePage)
}

// get returns the bytes counted in chunk c.
func (f *chunkFree) get(c uint64) uint64 {
	p, s := f.index(c)
	if p >= len(f.pages) || f.pages[p] == nil {
		return 0
	}
	return uint64(f.pages[p][s])
}

// add counts n more bytes in chunk c.
func (f *chunkFree) add(c, n uint64) {
	if n == 0 {
		return
	}
	p, s := f.index(c)
	if p >= len(f.pages) {
		f.pages = append(f.pages, make([]*[chunkFreePage]uint32, p+1-len(f.pages))...)
		f.used = append(f.used, make([]uint16, p+1-len(f.used))...)
	}
	pg := f.pages[p]
	if pg == nil {
		pg = new([chunkFreePage]uint32)
		f.pages[p] = pg
	}
	if pg[s] == 0 {
		f.used[p]++
		f.n++
	}
	pg[s] += uint32(n)
}

// sub counts n fewer bytes in chunk c, down to 0.
func (f *chunkFree) sub(c, n uint64) {
	p, s := f.index(c)
	if p >= len(f.pages) || f.pages[p] == nil || f.pages[p][s] == 0 {
		return
	}
	pg := f.pages[p]
	if uint64(pg[s]) <= n {
		f.zero(p, s)
		return
	}
	pg[s] -= uint32(n)
}

// del forgets chunk c's count.
func (f *chunkFree) del(c uint64) {
	p, s := f.index(c)
	if p < len(f.pages) && f.pages[p] != nil && f.pages[p][s] != 0 {
		f.zero(p, s)
	}
}

func (f *chunkFree) zero(p, s int) {
	f.pages[p][s] = 0
	f.used[p]--
	f.n--
}

// each calls fn for every chunk with a nonzero count, in ascending order, skipping pages with
// none; fn may del the chunk it is given.
func (f *chunkFree) each(fn func(c, n uint64)) {
	for p, pg := range f.pages {
		if pg == nil || f.used[p] == 0 {
			continue
		}
		for s := range pg {
			if v := pg[s]; v != 0 {
				fn(f.base+uint64(p*chunkFreePage+s)<<f.shift, uint64(v))
			}
		}
	}
}

// len returns the number of chunks with a nonzero count.
func (f *chunkFree) len() int { return f.n }
