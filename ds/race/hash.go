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

// identity is the key's identity for the synchronizer (ptrsync.Synchronizer.Plan's key): its
// second hash, the same in every client of the table, computed already (ptrsync.KeyHash would
// be a second pass over the key, on an update's critical path). Two keys share it with
// probability 2^-64, as they would share KeyHash's.
func (k keyHash) identity() uint64 { return k.h2 }

// hashKey hashes key with the table's seed: h1 is hash64(seed, key) and h2 is
// hash64(seed^mulC, key), computed in one pass that loads each 8-byte word of the key once and
// folds it into both, and that loads a short tail without a copy (the last 8 bytes of a key of
// at least 8, shifted; byte by byte otherwise). It runs before a lookup can ask for the key's
// buckets, so its time is on every operation's critical path.
func hashKey(seed uint64, key []byte) keyHash {
	n := len(key)
	h1 := seed ^ uint64(n)*mulA
	h2 := seed ^ mulC ^ uint64(n)*mulA
	b := key
	for len(b) >= 8 {
		k := binary.LittleEndian.Uint64(b) * mulB
		h1 = bits.RotateLeft64(h1^k, 29) * mulC
		h2 = bits.RotateLeft64(h2^k, 29) * mulC
		b = b[8:]
	}
	if r := len(b); r > 0 {
		var k uint64
		if n >= 8 {
			// The tail is the key's last r bytes: the last word's top r bytes, moved down.
			k = binary.LittleEndian.Uint64(key[n-8:]) >> (64 - 8*uint(r))
		} else {
			for i := r - 1; i >= 0; i-- {
				k = k<<8 | uint64(b[i])
			}
		}
		k = (k ^ uint64(r)<<56) * mulB
		h1 = bits.RotateLeft64(h1^k, 29) * mulC
		h2 = bits.RotateLeft64(h2^k, 29) * mulC
	}
	return keyHash{h1: fmix(h1), h2: fmix(h2)}
}

// reduce maps a 32-bit hash uniformly onto [0, n).
func reduce(x uint32, n uint64) uint64 { return uint64(x) * n >> 32 }
