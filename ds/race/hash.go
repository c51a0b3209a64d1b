package race

import (
	"encoding/binary"
	"math/bits"
)

// Multipliers of the key hash: odd 64-bit constants with well-mixed bits.
const (
	mulA = 0x9e3779b97f4a7c15
	mulB = 0xc2b2ae3d27d4eb4f
	mulC = 0x165667b19e3779f9
)

// fmix is a 64-bit finalizer: every input bit affects every output bit.
func fmix(x uint64) uint64 {
	x ^= x >> 33
	x *= 0xff51afd7ed558ccd
	x ^= x >> 33
	x *= 0xc4ceb9fe1a85ec53
	x ^= x >> 33
	return x
}

// hash64 is the table's hash of a byte string under a seed. It is a pure function of its
// inputs, the same in every process (unlike hash/maphash), since the layout of the table in far
// memory depends on it.
func hash64(seed uint64, b []byte) uint64 {
	return hashTail(seed^uint64(len(b))*mulA, b)
}

// hash64Parts is hash64 of the concatenation of a and b, where len(a) is a multiple of 8.
func hash64Parts(seed uint64, a, b []byte) uint64 {
	h := seed ^ uint64(len(a)+len(b))*mulA
	for ; len(a) >= 8; a = a[8:] {
		k := binary.LittleEndian.Uint64(a)
		h = bits.RotateLeft64(h^(k*mulB), 29) * mulC
	}
	return hashTail(h, b)
}

// hashTail folds b into the running hash h and finalizes it.
func hashTail(h uint64, b []byte) uint64 {
	for len(b) >= 8 {
		k := binary.LittleEndian.Uint64(b)
		h = bits.RotateLeft64(h^(k*mulB), 29) * mulC
		b = b[8:]
	}
	if len(b) > 0 {
		var t [8]byte
		copy(t[:], b)
		k := binary.LittleEndian.Uint64(t[:]) ^ uint64(len(b))<<56
		h = bits.RotateLeft64(h^(k*mulB), 29) * mulC
	}
	return fmix(h)
}

// keyHash is what the table derives from a key: two independent 64-bit hashes. The low bits of
// h1 choose the subtable (extendible hashing uses suffixes), the high 32 bits of h1 the first
// candidate bucket; the low 32 bits of h2 the second candidate bucket, and its top byte the
// fingerprint. Bucket choices and fingerprint use bits the directory never uses (depth is at
// most MaxDepthLimit < 32), so a key keeps its slot index when its subtable splits.
type keyHash struct {
	h1, h2 uint64
}

// hashKey hashes key with the table's seed.
func hashKey(seed uint64, key []byte) keyHash {
	return keyHash{h1: hash64(seed, key), h2: hash64(seed^mulC, key)}
}

// reduce maps a 32-bit hash uniformly onto [0, n).
func reduce(x uint32, n uint64) uint64 { return uint64(x) * n >> 32 }
