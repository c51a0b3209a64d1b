// Package wordmem applies farmem verbs to a region of memory word by word: aligned 8-byte loads
// and stores that never tear, atomics with the semantics of [transport.Apply], and byte copies
// that proceed one word at a time (so a long access can interleave with a concurrent one only at
// word boundaries). Bytes map to words in little-endian order on every host.
//
// The region may be a Go []uint64 (the local transport: the race detector sees its atomics, and
// so the synchronization structures build on them) or mapped memory; all word access goes
// through sync/atomic, which is coherent within one coherence domain. MapWords gives words of a
// mapping of their own (the simulator's nodes, whose procs run one at a time).
package wordmem

import (
	"encoding/binary"
	"sync/atomic"
	"unsafe"

	"github.com/farmem/farmem/farmem"
	"github.com/farmem/farmem/farmem/transport"
)

// Mem is a region of 8-byte-aligned memory.
type Mem struct {
	base unsafe.Pointer
	size uint64
}

// FromWords returns the region backed by w.
func FromWords(w []uint64) Mem {
	if len(w) == 0 {
		return Mem{}
	}
	return Mem{base: unsafe.Pointer(&w[0]), size: uint64(len(w)) * 8}
}

// FromPointer returns the region of size bytes at p, which must be 8-byte aligned and stay
// mapped while the Mem is used.
func FromPointer(p unsafe.Pointer, size uint64) Mem { return Mem{base: p, size: size &^ 7} }

// Size returns the region's size in bytes.
func (m Mem) Size() uint64 { return m.size }

func (m Mem) word(off uint64) *uint64 { return (*uint64)(unsafe.Add(m.base, off)) }

// Load returns the aligned word at off.
func (m Mem) Load(off uint64) uint64 { return atomic.LoadUint64(m.word(off)) }

// Store sets the aligned word at off.
func (m Mem) Store(off, v uint64) { atomic.StoreUint64(m.word(off), v) }

// Atomic applies an atomic op (CAS, FAA or MaskedCAS) to the aligned word at off and returns the
// word it found. The caller has checked alignment and bounds.
func (m Mem) Atomic(op *farmem.Op, off uint64) uint64 {
	w := m.word(off)
	if op.Kind == farmem.OpFAA {
		return atomic.AddUint64(w, op.Swap) - op.Swap
	}
	for {
		found := atomic.LoadUint64(w)
		next, ok := transport.Apply(op, found)
		if !ok || atomic.CompareAndSwapUint64(w, found, next) {
			return found
		}
	}
}

// ReadAt copies len(dst) bytes at off into dst, one word at a time, calling between (if not nil)
// after each word but the last.
func (m Mem) ReadAt(dst []byte, off uint64, between func()) {
	if between == nil && off&7 == 0 {
		// Whole words from an aligned start, each stored straight into dst.
		for len(dst) >= 8 {
			binary.LittleEndian.PutUint64(dst, m.Load(off))
			dst, off = dst[8:], off+8
		}
	}
	for len(dst) > 0 {
		wo := off &^ 7
		skip := off - wo
		n := min(8-skip, uint64(len(dst)))
		var b [8]byte
		binary.LittleEndian.PutUint64(b[:], m.Load(wo))
		copy(dst[:n], b[skip:skip+n])
		dst = dst[n:]
		off += n
		if between != nil && len(dst) > 0 {
			between()
		}
	}
}

// WriteAt copies src to off, one word at a time, calling between (if not nil) after each word
// but the last. Whole words are stored; partial words at either end are merged with a CAS loop
// so that bytes outside the range are never lost to a concurrent writer.
func (m Mem) WriteAt(src []byte, off uint64, between func()) {
	for len(src) > 0 {
		wo := off &^ 7
		skip := off - wo
		n := min(8-skip, uint64(len(src)))
		if n == 8 {
			m.Store(wo, binary.LittleEndian.Uint64(src))
		} else {
			w := m.word(wo)
			for {
				old := atomic.LoadUint64(w)
				var b [8]byte
				binary.LittleEndian.PutUint64(b[:], old)
				copy(b[skip:skip+n], src[:n])
				if atomic.CompareAndSwapUint64(w, old, binary.LittleEndian.Uint64(b[:])) {
					break
				}
			}
		}
		src = src[n:]
		off += n
		if between != nil && len(src) > 0 {
			between()
		}
	}
}
