package atomics

import (
	"fmt"
	"unsafe"

	"github.com/farmem/farmem/farmem"
)

// Region is a range of memory (usually mapped: a file or device shared with other processes)
// accessed through the checked API: every offset is bounds-checked, atomics and word copies
// must be 8-byte aligned, and violations return errors wrapping [farmem.ErrOutOfRange] or
// [farmem.ErrMisaligned] instead of touching memory. The zero Region is empty. A Region does
// not own its memory: the caller keeps it mapped while the Region is used. Faults of mapped
// memory itself (SIGBUS after truncation) are not caught here; wrap calls in [Guard] for that.
type Region struct {
	base unsafe.Pointer
	size uintptr
}

// NewRegion returns the region of size bytes at base. base must be 8-byte aligned and size a
// multiple of 8; a nil base is allowed only with size 0.
func NewRegion(base unsafe.Pointer, size uintptr) (Region, error) {
	if base == nil && size != 0 {
		return Region{}, fmt.Errorf("atomics: nil base with size %d: %w", size, farmem.ErrInvalid)
	}
	if uintptr(base)&7 != 0 || size&7 != 0 {
		return Region{}, fmt.Errorf("atomics: region %p+%d not 8-byte aligned: %w", base, size, farmem.ErrMisaligned)
	}
	if size > 0 && uintptr(base)+size-1 < uintptr(base) {
		return Region{}, fmt.Errorf("atomics: region %p+%d wraps the address space: %w", base, size, farmem.ErrOutOfRange)
	}
	return Region{base: base, size: size}, nil
}

// RegionOf returns the region backed by b (for example a mapping from unix.Mmap), under the
// conditions of [NewRegion].
func RegionOf(b []byte) (Region, error) {
	if len(b) == 0 {
		return Region{}, nil
	}
	return NewRegion(unsafe.Pointer(&b[0]), uintptr(len(b)))
}

// Base returns the region's first address.
func (r Region) Base() unsafe.Pointer { return r.base }

// Size returns the region's size in bytes.
func (r Region) Size() uint64 { return uint64(r.size) }

func (r Region) check(what string, off, n uint64) error {
	if off > uint64(r.size) || n > uint64(r.size)-off {
		return fmt.Errorf("atomics: %s of %d bytes at %#x in a region of %d: %w", what, n, off, r.size, farmem.ErrOutOfRange)
	}
	return nil
}

func (r Region) checkWords(what string, off, n uint64) error {
	if off&7 != 0 || n&7 != 0 {
		return fmt.Errorf("atomics: %s of %d bytes at %#x: %w", what, n, off, farmem.ErrMisaligned)
	}
	return r.check(what, off, n)
}

// Word returns a pointer to the aligned word at off, for the unchecked functions.
func (r Region) Word(off uint64) (*uint64, error) {
	if err := r.checkWords("word", off, 8); err != nil {
		return nil, err
	}
	return (*uint64)(unsafe.Add(r.base, uintptr(off))), nil
}

// Load returns the word at off.
func (r Region) Load(off uint64) (uint64, error) {
	p, err := r.Word(off)
	if err != nil {
		return 0, err
	}
	return load(p), nil
}

// Store sets the word at off.
func (r Region) Store(off, v uint64) error {
	p, err := r.Word(off)
	if err != nil {
		return err
	}
	store(p, v)
	return nil
}

// StoreNT stores v at off non-temporally, without a fence (see [StoreNT]).
func (r Region) StoreNT(off, v uint64) error {
	p, err := r.Word(off)
	if err != nil {
		return err
	}
	storeNT(p, v)
	return nil
}

// CAS is [CAS] on the word at off.
func (r Region) CAS(off, old, new uint64) (uint64, error) {
	p, err := r.Word(off)
	if err != nil {
		return 0, err
	}
	return cas(p, old, new), nil
}

// FAA is [FAA] on the word at off.
func (r Region) FAA(off, delta uint64) (uint64, error) {
	p, err := r.Word(off)
	if err != nil {
		return 0, err
	}
	return faa(p, delta), nil
}

// ReadWords copies len(dst) words at off into dst (see [LoadWords]).
func (r Region) ReadWords(off uint64, dst []uint64) error {
	if err := r.checkWords("read", off, uint64(len(dst))*8); err != nil || len(dst) == 0 {
		return err
	}
	copyOutWords(&dst[0], (*uint64)(unsafe.Add(r.base, uintptr(off))), uintptr(len(dst)))
	return nil
}

// WriteWords copies src to the words at off (see [StoreWords]).
func (r Region) WriteWords(off uint64, src []uint64) error {
	if err := r.checkWords("write", off, uint64(len(src))*8); err != nil || len(src) == 0 {
		return err
	}
	copyInWords((*uint64)(unsafe.Add(r.base, uintptr(off))), &src[0], uintptr(len(src)))
	return nil
}

// WriteWordsNT is [Region.WriteWords] with non-temporal stores, then SFENCE.
func (r Region) WriteWordsNT(off uint64, src []uint64) error {
	if err := r.checkWords("write", off, uint64(len(src))*8); err != nil || len(src) == 0 {
		return err
	}
	copyInWordsNT((*uint64)(unsafe.Add(r.base, uintptr(off))), &src[0], uintptr(len(src)))
	return nil
}

// ReadBytes copies len(dst) bytes at off into dst word by word, each word little-endian. off
// and len(dst) must be multiples of 8 (byte-granular access to shared words is
// internal/wordmem's job).
func (r Region) ReadBytes(off uint64, dst []byte) error {
	if err := r.checkWords("read", off, uint64(len(dst))); err != nil || len(dst) == 0 {
		return err
	}
	copyOutBytes(&dst[0], (*uint64)(unsafe.Add(r.base, uintptr(off))), uintptr(len(dst)/8))
	return nil
}

// WriteBytes copies src to off word by word, each word little-endian, under the conditions
// of [Region.ReadBytes].
func (r Region) WriteBytes(off uint64, src []byte) error {
	if err := r.checkWords("write", off, uint64(len(src))); err != nil || len(src) == 0 {
		return err
	}
	copyInBytes((*uint64)(unsafe.Add(r.base, uintptr(off))), &src[0], uintptr(len(src)/8))
	return nil
}

// WriteBytesNT is [Region.WriteBytes] with non-temporal stores, then SFENCE.
func (r Region) WriteBytesNT(off uint64, src []byte) error {
	if err := r.checkWords("write", off, uint64(len(src))); err != nil || len(src) == 0 {
		return err
	}
	copyInBytesNT((*uint64)(unsafe.Add(r.base, uintptr(off))), &src[0], uintptr(len(src)/8))
	return nil
}

// WriteBack is [WriteBack] on [off, off+n); any alignment.
func (r Region) WriteBack(off, n uint64) error {
	if err := r.check("write-back", off, n); err != nil {
		return err
	}
	if n == 0 {
		sfence()
		return nil
	}
	WriteBack(unsafe.Add(r.base, uintptr(off)), uintptr(n))
	return nil
}

// WriteBackWith is [WriteBackWith] on [off, off+n).
func (r Region) WriteBackWith(d Discipline, off, n uint64) error {
	if err := r.check("write-back", off, n); err != nil {
		return err
	}
	if n == 0 {
		return WriteBackWith(d, r.base, 0)
	}
	return WriteBackWith(d, unsafe.Add(r.base, uintptr(off)), uintptr(n))
}

// FlushForRead is [FlushForRead] on [off, off+n); any alignment.
func (r Region) FlushForRead(off, n uint64) error {
	if err := r.check("flush", off, n); err != nil {
		return err
	}
	if n == 0 {
		mfence()
		return nil
	}
	FlushForRead(unsafe.Add(r.base, uintptr(off)), uintptr(n))
	return nil
}

// FlushForReadWith is [FlushForReadWith] on [off, off+n).
func (r Region) FlushForReadWith(d Discipline, off, n uint64) error {
	if err := r.check("flush", off, n); err != nil {
		return err
	}
	if n == 0 {
		return FlushForReadWith(d, r.base, 0)
	}
	return FlushForReadWith(d, unsafe.Add(r.base, uintptr(off)), uintptr(n))
}
