package far

import "encoding/binary"

// A SingleWriter pointer's record, read whole by one Read:
//
//	word 0          H: the version of the store that wrote the record (64 bits, never reused)
//	words 1..k      the value's encoding, zero-padded to k words; each word's top byte is
//	                replaced by the stamp (the version's low byte)
//	words k+1..k+x  the displaced top bytes, seven per word (bytes 0..6), the stamp on top
//	word k+x+1      T: the version again
//
// The owner writes a record as three Writes in one batch: T first, then words 1..k+x, then H.
// A load takes the record as valid when H == T and every stamp equals H's low byte, then puts
// the displaced bytes back in place and decodes. Why that is linearizable, on transports that
// copy a long read in address order and on those that do not, is argued in the package doc
// ("Single-writer loads").

// stampMask keeps a record word's low 56 bits, which carry the value; the top byte is the stamp.
const stampMask = 1<<56 - 1

// swLayout returns the value words k and the displaced-byte words x of an n-byte value.
func swLayout(n int) (k, x int) {
	k = (n + 7) / 8
	return k, (k + 6) / 7
}

// swRecordSize returns the bytes of the record of an n-byte value.
func swRecordSize(n int) int {
	k, x := swLayout(n)
	return 8 * (k + x + 2)
}

// swSeal completes a record whose value is already encoded at rec[8:8+n] (rec is
// swRecordSize(n) bytes): it zeroes the padding, moves each value word's top byte to the
// displaced words, stamps every word with version v's low byte, and sets H and T to v.
func swSeal(rec []byte, n int, v uint64) {
	le := binary.LittleEndian
	k, x := swLayout(n)
	clear(rec[8+n : 8+8*k])
	s := v << 56
	body := rec[8 : 8+8*(k+x)]
	vals, ext := body[:8*k], body[8*k:]
	for len(vals) > 0 {
		var d uint64
		for sh := 0; sh < 56 && len(vals) >= 8; sh += 8 {
			w := le.Uint64(vals)
			d |= (w >> 56) << sh
			le.PutUint64(vals, w&stampMask|s)
			vals = vals[8:]
		}
		le.PutUint64(ext, d|s)
		ext = ext[8:]
	}
	le.PutUint64(rec[0:8], v)
	le.PutUint64(rec[len(rec)-8:], v)
}

// swOpen checks a record read whole into rec and, if it is valid (H == T and every stamp is
// H's low byte), restores the value's encoding in place at rec[8:8+8k] and returns true.
// A record that fails the check was torn by a concurrent store (or a store that failed half
// way) and must be read again. Seven value words share a displaced-byte word; a full group of
// seven is handled as one fixed-size block, which spares the bounds checks of the hot path.
func swOpen(rec []byte, k int) bool {
	le := binary.LittleEndian
	if len(rec) < 16 {
		return false
	}
	h := le.Uint64(rec)
	if h != le.Uint64(rec[len(rec)-8:]) {
		return false
	}
	s := h << 56
	body := rec[8 : len(rec)-8]
	if len(body) < 8*(k+(k+6)/7) {
		return false
	}
	vals, ext := body[:8*k], body[8*k:]
	var bad uint64
	for len(vals) >= 56 && len(ext) >= 8 {
		g := (*[56]byte)(vals)
		e := (*[8]byte)(ext)
		d := le.Uint64(e[:])
		w0, w1, w2, w3 := le.Uint64(g[0:]), le.Uint64(g[8:]), le.Uint64(g[16:]), le.Uint64(g[24:])
		w4, w5, w6 := le.Uint64(g[32:]), le.Uint64(g[40:]), le.Uint64(g[48:])
		bad |= (d ^ s) | (w0 ^ s) | (w1 ^ s) | (w2 ^ s) | (w3 ^ s) | (w4 ^ s) | (w5 ^ s) | (w6 ^ s)
		g[7], g[15], g[23], g[31], g[39], g[47], g[55] = e[0], e[1], e[2], e[3], e[4], e[5], e[6]
		vals, ext = vals[56:], ext[8:]
	}
	if len(vals) > 0 {
		if len(ext) < 8 {
			return false
		}
		d := le.Uint64(ext)
		bad |= d ^ s
		for len(vals) >= 8 {
			w := le.Uint64(vals)
			bad |= w ^ s
			le.PutUint64(vals, w&stampMask|d<<56)
			d >>= 8
			vals = vals[8:]
		}
	}
	return bad&^stampMask == 0
}
