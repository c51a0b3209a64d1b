package far

import (
	"encoding/binary"

	"github.com/farmem/farmem/farmem"
)

// A SingleWriter pointer's record:
//
//	word 0          H: the version of the store that wrote the record (64 bits, never reused)
//	words 1..k      the value's encoding, zero-padded to k words, as the codec wrote it
//	word k+1        T: the version again
//
// The owner writes a record as three Writes in one batch: T first, then the value, then H. A
// load takes the record as valid when H == T; it reads it with one Read where the client's
// Memory reads in address order (transport.OrderedReader), and with a batch of three Reads (H,
// the value, T) elsewhere. Why either is linearizable is argued in the package doc
// ("Single-writer loads").

// swWords returns the value words k of an n-byte value.
func swWords(n int) int { return (n + 7) / 8 }

// swRecordSize returns the bytes of the record of an n-byte value.
func swRecordSize(n int) int { return 8 * (swWords(n) + 2) }

// swSeal completes a record whose value is already encoded at rec[8:8+n] (rec is
// swRecordSize(n) bytes): it zeroes the padding and sets H and T to v.
func swSeal(rec []byte, n int, v uint64) {
	clear(rec[8+n : len(rec)-8])
	binary.LittleEndian.PutUint64(rec[0:8], v)
	binary.LittleEndian.PutUint64(rec[len(rec)-8:], v)
}

// swValid reports whether a record read into rec (by one ordered Read, or by the batch of
// three) is whole: H == T. The value is then at rec[8:8+n], untouched.
func swValid(rec []byte) bool {
	return len(rec) >= 16 && binary.LittleEndian.Uint64(rec) == binary.LittleEndian.Uint64(rec[len(rec)-8:])
}

// swReads adds to b the reads of the record at a into rec: one Read if ordered, else H, the
// value and T as three Reads in this order (each executes after the one before: the
// contract's order within a batch to one node).
func swReads(b *farmem.Batch, a farmem.Addr, rec []byte, ordered bool) {
	if ordered {
		b.Read(a, rec)
		return
	}
	end := len(rec) - 8
	b.Read(a, rec[:8])
	b.Read(a.Add(8), rec[8:end])
	b.Read(a.Add(uint64(end)), rec[end:])
}
