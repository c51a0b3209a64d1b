package race

import (
	"encoding/binary"
	"fmt"
	"math/bits"

	"github.com/zeebo/xxh3"

	"github.com/farmem/farmem/farmem"
)

// KV block layout (out of place: every Insert and Update writes a fresh block, never changed
// while a slot can point at it, except for its valid word):
//
//	[0, 2)    key length (uint16)
//	[2, 4)    value length (low 15 bits; MaxKV fits), and in bit 15 the checksum format: set
//	          in a version 3 block, clear in a version 2 block
//	[4, 8)    stamp (uint32): chosen at random when the block is written, so that an address
//	          cache can tell this block from a later block at the same address
//	[8, 16)   insert lease deadline (fabric time, ns): how long the block's tentative slot is
//	          protected from other inserters of the same key
//	[16, 24)  valid word: 0 while the block may be the key's current value; a writer that is
//	          about to replace or delete it sets it nonzero with a plain Write (InvalidWord).
//	          It is outside the checksum and never the target of an atomic.
//	[24, ...) key, then value, then zeros up to a multiple of 8
//	last 8    checksum of the block's address and every byte before the checksum but the
//	          valid word. Version 3 (sum3): XXH3-64 of the bytes from 24 on, folded with the
//	          address and the first two words by the multiply-rotate rounds of the key hash and a
//	          64-bit finalizer: about three times faster than version 2's on a 1 KiB block (87
//	          ns against 234 to 331 on a loaded 2-core AMD EPYC).
//	          Version 2 (sum2): the key hash's own loop over the whole, the valid word read as 0.
//
// The slot records the block's length in Units; bytes past the checksum are not part of it.
// Layout version 2 added the stamp and the valid word (version 1 blocks had a 16-byte header);
// version 3 changed only the checksum, so both have the same size and DecodeBlock reads both,
// telling them apart by the format bit. A table writes the blocks of its root's version (a
// version 2 table, created by an older binary, keeps writing version 2 blocks, so older
// binaries can still share it).
const (
	blockHeader   = 24
	blockTrailer  = 8
	blockOverhead = blockHeader + blockTrailer
	// ValidOffset is the offset of a block's valid word.
	ValidOffset = 16
	// InvalidWord is what a writer stores in the valid word of a block it is replacing.
	InvalidWord uint64 = 1
	// MaxKV is the largest len(key)+len(value) a block holds.
	MaxKV = MaxBlockSize - blockOverhead
	// MaxKey is the longest key.
	MaxKey  = 1<<16 - 1
	sumSeed = 0x6b7652414345636b // "kcECARvk"
	// sum3Flag is the format bit of a version 3 block, in its value length field.
	sum3Flag = 1 << 15
)

// blockSize returns the bytes of a block holding a key and value of these lengths.
func blockSize(kl, vl int) uint64 {
	return blockHeader + (uint64(kl+vl)+7)&^7 + blockTrailer
}

// blockStamp returns the stamp of an encoded block (b at least its header).
func blockStamp(b []byte) uint32 { return binary.LittleEndian.Uint32(b[4:]) }

// checkKV reports whether key and value fit a block.
func checkKV(key, val []byte) error {
	if len(key) > MaxKey || len(key)+len(val) > MaxKV {
		return fmt.Errorf("race: key of %d and value of %d bytes (at most %d together, key at most %d): %w",
			len(key), len(val), MaxKV, MaxKey, ErrTooLarge)
	}
	return nil
}

// encodeBlock returns the bytes of a version 3 block at addr (its blockSize, in a buffer of
// whole Units).
func encodeBlock(addr farmem.Addr, key, val []byte, deadline farmem.Time, stamp uint32) []byte {
	n := blockSize(len(key), len(val))
	return encodeBlockInto(make([]byte, (n+Unit-1)&^(Unit-1)), addr, key, val, deadline, stamp)
}

// encodeBlockInto is encodeBlock into buf (at least blockSize bytes; its contents do not
// matter), and returns buf[:blockSize].
func encodeBlockInto(buf []byte, addr farmem.Addr, key, val []byte, deadline farmem.Time, stamp uint32) []byte {
	return encodeBlockVersion(buf, addr, key, val, deadline, stamp, 3)
}

// encodeBlockVersion is encodeBlockInto in the block format of layout version 2 or 3.
func encodeBlockVersion(buf []byte, addr farmem.Addr, key, val []byte, deadline farmem.Time, stamp uint32, version int) []byte {
	n := blockSize(len(key), len(val))
	b := buf[:n]
	// The header and the block's last two words (the word before the checksum, then the
	// checksum), as arrays: n is at least blockOverhead, so each is one bounds check rather
	// than one per field.
	hd, tl := (*[blockHeader]byte)(b), (*[16]byte)(b[n-16:])
	le := binary.LittleEndian
	vl := uint16(len(val))
	if version >= 3 {
		vl |= sum3Flag
	}
	le.PutUint16(hd[0:], uint16(len(key)))
	le.PutUint16(hd[2:], vl)
	le.PutUint32(hd[4:], stamp)
	le.PutUint64(hd[8:], uint64(deadline))
	le.PutUint64(hd[ValidOffset:], 0)
	// The padding (fewer than 8 bytes, before the checksum) lies within the word before the
	// checksum: zero that word, then copy the key and value over its start. (With neither,
	// that word is the valid word, zero already.)
	le.PutUint64(tl[:8], 0)
	copy(b[blockHeader:], key)
	copy(b[blockHeader+len(key):], val)
	if version >= 3 {
		le.PutUint64(tl[8:], sum3(addr, b[:n-8]))
	} else {
		le.PutUint64(tl[8:], sum2(addr, b[:n-8]))
	}
	return b
}

// sum3 is the version 3 checksum of a block's bytes before its checksum (at least
// blockHeader of them); the valid word is not read.
func sum3(addr farmem.Addr, b []byte) uint64 {
	le := binary.LittleEndian
	hd := (*[16]byte)(b) // the lengths, the stamp and the deadline: one bounds check
	h := sumSeed ^ uint64(addr)*mulA
	h = bits.RotateLeft64(h^(le.Uint64(hd[0:])*mulB), 29) * mulC
	h = bits.RotateLeft64(h^(le.Uint64(hd[8:])*mulB), 29) * mulC
	return fmix(h ^ xxh3.Hash(b[blockHeader:]))
}

// sum2 is the version 2 checksum of a block's bytes before its checksum, its valid word read
// as 0. It never writes to b.
func sum2(addr farmem.Addr, b []byte) uint64 {
	if binary.LittleEndian.Uint64(b[ValidOffset:]) == 0 {
		return hash64(sumSeed^uint64(addr), b)
	}
	var tmp [blockHeader]byte
	copy(tmp[:], b[:blockHeader])
	binary.LittleEndian.PutUint64(tmp[ValidOffset:], 0)
	return hash64Parts(sumSeed^uint64(addr), tmp[:], b[blockHeader:])
}

// Block is a decoded KV block.
type Block struct {
	Key, Value []byte
	// Deadline is the insert lease of the block's tentative slot.
	Deadline farmem.Time
	// Stamp tells this block from others written at the same address.
	Stamp uint32
	// Invalid reports a nonzero valid word: a writer has replaced or deleted the block, or is
	// about to. A committed slot may still name an invalid block (the writer's CAS failed);
	// only address caches look at it.
	Invalid bool
}

// DecodeBlock decodes and validates the bytes of the block at addr (at least its length, as the
// slot records it). It never panics: a block torn by a concurrent write, reused for another
// block, or not a block at all gives an error wrapping ErrCorrupt. Key and Value alias b.
func DecodeBlock(addr farmem.Addr, b []byte) (Block, error) {
	var blk Block
	err := decodeBlockInto(addr, b, &blk)
	return blk, err
}

// decodeBlockInto is DecodeBlock into *blk, which it sets only if the block validates (no
// Block copied out through returns, on a cached read's path).
func decodeBlockInto(addr farmem.Addr, b []byte, blk *Block) error {
	if len(b) < blockOverhead {
		return fmt.Errorf("race: block at %v: %d bytes: %w", addr, len(b), ErrCorrupt)
	}
	le := binary.LittleEndian
	// The header and, once the block's length is known, its last two words, as arrays: one
	// bounds check each rather than one per field.
	hd := (*[blockHeader]byte)(b)
	kl, vl := int(le.Uint16(hd[0:])), int(le.Uint16(hd[2:])&^sum3Flag)
	v3 := le.Uint16(hd[2:])&sum3Flag != 0
	if kl+vl > MaxKV {
		return fmt.Errorf("race: block at %v: bad header: %w", addr, ErrCorrupt)
	}
	n := blockSize(kl, vl)
	if n > uint64(len(b)) {
		return fmt.Errorf("race: block at %v: %d bytes, header says %d: %w", addr, len(b), n, ErrCorrupt)
	}
	tl := (*[16]byte)(b[n-16 : n])
	// The padding, fewer than 8 bytes, is the top of the word before the checksum (n-16 is
	// at least 16: in the header when there is no key or value, and then no padding): one
	// load and a shift (by 64, none, gives 0).
	if pad := n - 8 - uint64(blockHeader+kl+vl); le.Uint64(tl[:8])>>(64-8*pad) != 0 {
		return fmt.Errorf("race: block at %v: nonzero padding: %w", addr, ErrCorrupt)
	}
	var sum uint64
	if v3 {
		sum = sum3(addr, b[:n-8])
	} else {
		sum = sum2(addr, b[:n-8])
	}
	if le.Uint64(tl[8:]) != sum {
		return fmt.Errorf("race: block at %v: checksum mismatch: %w", addr, ErrCorrupt)
	}
	blk.Key = b[blockHeader : blockHeader+kl : blockHeader+kl]
	blk.Value = b[blockHeader+kl : blockHeader+kl+vl : blockHeader+kl+vl]
	blk.Deadline = farmem.Time(le.Uint64(hd[8:]))
	blk.Stamp = le.Uint32(hd[4:])
	blk.Invalid = le.Uint64(hd[ValidOffset:]) != 0
	return nil
}
