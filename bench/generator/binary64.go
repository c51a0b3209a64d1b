package generator

import (
	"encoding/binary"
	"fmt"
	"math"
)

// KeyFormat is how a key number becomes the bytes of a key.
type KeyFormat string

// The key formats.
const (
	// KeyString is YCSB's (KeyName): "user" and the decimal key number, hashed with FNVHash64
	// unless inserts are ordered. It is the default.
	KeyString KeyFormat = "string"
	// KeyBinary64 is the 8-byte big-endian encoding of the key number itself plus one (never
	// its hash): key number k becomes the unsigned integer k+1, so the first key number, 0, is
	// not the all-zero key that Dolphin-style layouts reserve for an empty slot, and byte order
	// is numeric order. Key numbers run from 0 to MaxBinary64KeyNum, so every key is nonzero
	// and below 2^63.
	KeyBinary64 KeyFormat = "binary64"
)

// KeyFormats returns the known key formats, the default first.
func KeyFormats() []KeyFormat { return []KeyFormat{KeyString, KeyBinary64} }

// MaxBinary64KeyNum is the largest key number AppendBinary64Key encodes: its key is 2^63-1.
const MaxBinary64KeyNum = math.MaxInt64 - 1

// Binary64Len is the length of a KeyBinary64 key.
const Binary64Len = 8

// AppendBinary64Key appends the KeyBinary64 key of keynum to dst. A key number outside
// 0..MaxBinary64KeyNum is an error (it would encode to zero or to 2^63 and beyond); the
// workloads' key numbers are far inside (at most 2^40 records plus their inserts).
func AppendBinary64Key(dst []byte, keynum int64) ([]byte, error) {
	if keynum < 0 || keynum > MaxBinary64KeyNum {
		return dst, fmt.Errorf("generator: key number %d has no binary64 key (want 0..%d)", keynum, int64(MaxBinary64KeyNum))
	}
	return binary.BigEndian.AppendUint64(dst, uint64(keynum)+1), nil
}

// Binary64KeyNum returns the key number a KeyBinary64 key encodes, and false if key is not
// one (not 8 bytes, zero, or 2^63 and beyond).
func Binary64KeyNum(key []byte) (int64, bool) {
	if len(key) != Binary64Len {
		return 0, false
	}
	v := binary.BigEndian.Uint64(key)
	if v == 0 || v > math.MaxInt64 {
		return 0, false
	}
	return int64(v - 1), true
}
