package sherman

import (
	"bytes"
	"fmt"
)

// Codec says how keys are stored: every key takes Width bytes in a node (a leaf's entry, an
// internal node's separator, a fence), which is what a cached internal node is charged per
// separator beside its 8-byte child pointer.
type Codec struct {
	// Width is the bytes a stored key takes (a multiple of 8).
	Width int
	// Fixed is the exact key length if nonzero (no length byte): Fixed8 has Fixed 8, Width 8.
	Fixed int
	// MaxLen is the longest key accepted (Fixed, or Width-1 for variable-length keys).
	MaxLen int
}

// Fixed8 is Dolphin's comparison: keys of exactly 8 bytes (big-endian integers compare as
// numbers), stored in 8 bytes.
func Fixed8() Codec { return Codec{Width: 8, Fixed: 8, MaxLen: 8} }

// Bytes is SELCC's comparison: byte strings of 0 to maxLen bytes compared bytewise, stored as
// a length byte and the bytes, padded to a multiple of 8. maxLen is at most 255.
func Bytes(maxLen int) Codec {
	w := (1 + maxLen + 7) &^ 7
	return Codec{Width: w, MaxLen: maxLen}
}

func (c Codec) check() error {
	switch {
	case c.Width <= 0 || c.Width%8 != 0 || c.Width > 256:
		return fmt.Errorf("%w: codec width %d", ErrParams, c.Width)
	case c.Fixed != 0 && (c.Fixed != c.Width || c.MaxLen != c.Fixed):
		return fmt.Errorf("%w: fixed codec %+v", ErrParams, c)
	case c.Fixed == 0 && (c.MaxLen < 0 || c.MaxLen > 255 || c.MaxLen >= c.Width):
		return fmt.Errorf("%w: variable codec %+v", ErrParams, c)
	}
	return nil
}

// valid reports whether k can be stored.
func (c Codec) valid(k []byte) error {
	if c.Fixed != 0 && len(k) != c.Fixed {
		return fmt.Errorf("%w: %d bytes, want %d", ErrKey, len(k), c.Fixed)
	}
	if len(k) > c.MaxLen {
		return fmt.Errorf("%w: %d bytes, at most %d", ErrKey, len(k), c.MaxLen)
	}
	return nil
}

// put stores k in dst (Width bytes).
func (c Codec) put(dst, k []byte) {
	clear(dst[:c.Width])
	if c.Fixed != 0 {
		copy(dst, k)
		return
	}
	dst[0] = byte(len(k))
	copy(dst[1:], k)
}

// get returns the key stored in src (a fresh slice).
func (c Codec) get(src []byte) []byte {
	if c.Fixed != 0 {
		return bytes.Clone(src[:c.Fixed])
	}
	n := int(src[0])
	if n > c.MaxLen {
		n = c.MaxLen
	}
	return bytes.Clone(src[1 : 1+n])
}
