package race

import (
	"encoding/binary"
	"fmt"

	"github.com/farmem/farmem/farmem"
)

// KV block layout (out of place: every Insert and Update writes a fresh block, never changed
// while a slot can point at it, except for its valid word):
//
//	[0, 2)    key length (uint16)
//	[2, 4)    value length (uint16; MaxKV fits)
//	[4, 8)    stamp (uint32): chosen at random when the block is written, so that an address
//	          cache can tell this block from a later block at the same address
//	[8, 16)   insert lease deadline (fabric time, ns): how long the block's tentative slot is
//	          protected from other inserters of the same key
//	[16, 24)  valid word: 0 while the block may be the key's current value; a writer that is
//	          about to replace or delete it sets it nonzero with a plain Write (InvalidWord).
//	          It is outside the checksum and never the target of an atomic.
//	[24, ...) key, then value, then zeros up to a multiple of 8
//	last 8    checksum: hash of every byte before it, the valid word read as 0, and of the
//	          block's own address
//
// The slot records the block's length in Units; bytes past the checksum are not part of it.
// Layout version 2 added the stamp and the valid word (version 1 blocks had a 16-byte header).
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
)

// blockSize returns the bytes of a block holding a key and value of these lengths.
func blockSize(kl, vl int) uint64 {
	return blockHeader + (uint64(kl+vl)+7)&^7 + blockTrailer
}

// checkKV reports whether key and value fit a block.
func checkKV(key, val []byte) error {
	if len(key) > MaxKey || len(key)+len(val) > MaxKV {
		return fmt.Errorf("race: key of %d and value of %d bytes (at most %d together, key at most %d): %w",
			len(key), len(val), MaxKV, MaxKey, ErrTooLarge)
	}
	return nil
}

// encodeBlock returns the bytes of a block at addr (its blockSize, in a buffer of whole Units).
func encodeBlock(addr farmem.Addr, key, val []byte, deadline farmem.Time, stamp uint32) []byte {
	n := blockSize(len(key), len(val))
	return encodeBlockInto(make([]byte, (n+Unit-1)&^(Unit-1)), addr, key, val, deadline, stamp)
}

// encodeBlockInto is encodeBlock into buf (at least blockSize bytes; its contents do not
// matter), and returns buf[:blockSize].
func encodeBlockInto(buf []byte, addr farmem.Addr, key, val []byte, deadline farmem.Time, stamp uint32) []byte {
	n := blockSize(len(key), len(val))
	b := buf[:n]
	le := binary.LittleEndian
	le.PutUint16(b[0:], uint16(len(key)))
	le.PutUint16(b[2:], uint16(len(val)))
	le.PutUint32(b[4:], stamp)
	le.PutUint64(b[8:], uint64(deadline))
	le.PutUint64(b[ValidOffset:], 0)
	copy(b[blockHeader:], key)
	copy(b[blockHeader+len(key):], val)
	clear(b[blockHeader+len(key)+len(val) : n-8])
	le.PutUint64(b[n-8:], blockSum(addr, b[:n-8]))
	return b
}

// blockSum is the checksum of a block's bytes before its checksum, its valid word read as 0.
// It never writes to b.
func blockSum(addr farmem.Addr, b []byte) uint64 {
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
	if len(b) < blockOverhead {
		return blk, fmt.Errorf("race: block at %v: %d bytes: %w", addr, len(b), ErrCorrupt)
	}
	le := binary.LittleEndian
	kl, vl := int(le.Uint16(b[0:])), int(le.Uint16(b[2:]))
	if kl+vl > MaxKV {
		return blk, fmt.Errorf("race: block at %v: bad header: %w", addr, ErrCorrupt)
	}
	n := blockSize(kl, vl)
	if n > uint64(len(b)) {
		return blk, fmt.Errorf("race: block at %v: %d bytes, header says %d: %w", addr, len(b), n, ErrCorrupt)
	}
	for _, p := range b[blockHeader+kl+vl : n-8] {
		if p != 0 {
			return blk, fmt.Errorf("race: block at %v: nonzero padding: %w", addr, ErrCorrupt)
		}
	}
	if le.Uint64(b[n-8:]) != blockSum(addr, b[:n-8]) {
		return blk, fmt.Errorf("race: block at %v: checksum mismatch: %w", addr, ErrCorrupt)
	}
	blk.Key = b[blockHeader : blockHeader+kl : blockHeader+kl]
	blk.Value = b[blockHeader+kl : blockHeader+kl+vl : blockHeader+kl+vl]
	blk.Deadline = farmem.Time(le.Uint64(b[8:]))
	blk.Stamp = le.Uint32(b[4:])
	blk.Invalid = le.Uint64(b[ValidOffset:]) != 0
	return blk, nil
}
