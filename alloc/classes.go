package alloc

import (
	"math/bits"
	"slices"
)

// minBlock is the smallest block and the granule of every class size: every block is at least
// 16-byte aligned.
const minBlock = 16

// classSizes are the size classes, ascending: every multiple of 16 up to 256, then eight classes
// per doubling (at most 12.5% internal fragmentation), up to MaxChunkSize/2. A node's arena uses
// the classes up to half its chunk size; larger blocks are whole chunks.
var classSizes = func() []uint64 {
	var s []uint64
	for c := uint64(minBlock); c <= 256; c += minBlock {
		s = append(s, c)
	}
	for p := uint64(256); p < MaxChunkSize/2; p *= 2 {
		step := p / 8
		for c := p + step; c <= 2*p; c += step {
			s = append(s, c)
		}
	}
	return s
}()

// classOf returns the smallest class that holds size bytes (size <= MaxChunkSize/2), in
// closed form (it is on every allocation's path): above 256 bytes, a size in (p, 2p], p a power
// of two, falls in the k-th of the eight classes of that doubling, k = ceil((size-p)/(p/8)), and
// the doublings below p hold 8*(log2(p)-8) classes after the 16 of at most 256 bytes.
func classOf(size uint64) int {
	if size <= 256 {
		return int(max(size, 1)+minBlock-1)/minBlock - 1
	}
	lg := bits.Len64(size-1) - 1 // log2 of p
	p := uint64(1) << lg
	return 16 + 8*(lg-8) + int((size-p-1)>>(lg-3))
}

// classBelow returns the largest class of at most n bytes, or -1 if n < minBlock.
func classBelow(n uint64) int {
	if n >= classSizes[len(classSizes)-1] {
		return len(classSizes) - 1
	}
	i, _ := slices.BinarySearch(classSizes, n+1) // the first class of more than n bytes
	return i - 1
}

// alignBucket sorts free blocks by the alignment their offset happens to have, so that aligned
// requests find aligned blocks: 0 for 16-byte, 1 for 32-byte, 2 for 64-byte or better.
func alignBucket(off uint64) int {
	switch {
	case off&63 == 0:
		return 2
	case off&31 == 0:
		return 1
	}
	return 0
}

// minBucket is the first bucket whose blocks satisfy align (a power of two of at most 64).
func minBucket(align uint64) int {
	switch {
	case align >= 64:
		return 2
	case align == 32:
		return 1
	}
	return 0
}
