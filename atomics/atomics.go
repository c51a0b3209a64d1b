package atomics

import (
	"errors"
	"fmt"
	"runtime/debug"
	"strings"
	"unsafe"

	"github.com/farmem/farmem/farmem"
)

// ErrUnsupported: the CPU (or this build) lacks the instruction a discipline names. It wraps
// [farmem.ErrNotSupported].
var ErrUnsupported = fmt.Errorf("atomics: instruction not available: %w", farmem.ErrNotSupported)

// ErrFault: [Guard] caught a memory fault (a SIGSEGV or SIGBUS on mapped memory, such as a
// truncated file or a PROT_NONE page).
var ErrFault = errors.New("atomics: memory fault")

// Discipline names how written data reaches memory, or how a read is made to miss the cache.
type Discipline uint8

// The disciplines. Plain issues no cache-line instruction (fences only).
const (
	Plain       Discipline = iota // ordinary stores; fences only
	CLWB                          // write back, the line may stay cached (clean)
	CLFLUSHOPT                    // write back and invalidate, weakly ordered
	CLFLUSH                       // write back and invalidate, ordered with stores
	NonTemporal                   // MOVNTI stores that bypass the cache, then SFENCE
)

var disciplineNames = [...]string{"plain", "clwb", "clflushopt", "clflush", "nt"}

// String returns the discipline's lower-case name.
func (d Discipline) String() string {
	if int(d) < len(disciplineNames) {
		return disciplineNames[d]
	}
	return fmt.Sprintf("discipline(%d)", uint8(d))
}

// ParseDiscipline returns the discipline named s (as [Discipline.String] spells it).
func ParseDiscipline(s string) (Discipline, error) {
	for i, n := range disciplineNames {
		if strings.EqualFold(s, n) {
			return Discipline(i), nil
		}
	}
	return Plain, fmt.Errorf("atomics: unknown discipline %q: %w", s, farmem.ErrInvalid)
}

// Features is what the CPU offers and this build can use.
type Features struct {
	Asm         bool   // the assembly implementation is in use (amd64 without noasm)
	Vendor      string // CPUID vendor string, empty without assembly
	LineSize    int    // cache-line size in bytes that flushes step by (CPUID leaf 1, else 64)
	CLFLUSH     bool   // CPUID.1:EDX[19]
	CLFLUSHOPT  bool   // CPUID.(7,0):EBX[23]
	CLWB        bool   // CPUID.(7,0):EBX[24]
	NonTemporal bool   // MOVNTI (SSE2, CPUID.1:EDX[26])
	// Wide: 16-byte aligned SSE loads and stores are single-copy atomic, which both vendors'
	// manuals state for processors that report AVX (CPUID.1:ECX[28]); the copies then move
	// aligned 16-byte pairs of words.
	Wide bool
}

var features = detect()

// CPU returns the features detected at start-up.
func CPU() Features { return features }

// Has reports whether discipline d can be used. Plain always can.
func (f Features) Has(d Discipline) bool {
	switch d {
	case Plain:
		return true
	case CLWB:
		return f.Asm && f.CLWB
	case CLFLUSHOPT:
		return f.Asm && f.CLFLUSHOPT
	case CLFLUSH:
		return f.Asm && f.CLFLUSH
	case NonTemporal:
		return f.Asm && f.NonTemporal
	}
	return false
}

// WriteBack returns the instruction [WriteBack] uses: CLWB, else CLFLUSHOPT, else CLFLUSH, else
// Plain (no assembly: fences only).
func (f Features) WriteBack() Discipline {
	for _, d := range [...]Discipline{CLWB, CLFLUSHOPT, CLFLUSH} {
		if f.Has(d) {
			return d
		}
	}
	return Plain
}

// FlushForRead returns the instruction [FlushForRead] uses: CLFLUSHOPT, else CLFLUSH, else
// Plain. CLWB never: it may leave the line cached, so the next load could hit it.
func (f Features) FlushForRead() Discipline {
	for _, d := range [...]Discipline{CLFLUSHOPT, CLFLUSH} {
		if f.Has(d) {
			return d
		}
	}
	return Plain
}

// String lists the features, e.g. "asm AuthenticAMD line=64 clflush clflushopt clwb nt".
func (f Features) String() string {
	var b strings.Builder
	if f.Asm {
		fmt.Fprintf(&b, "asm %s", f.Vendor)
	} else {
		b.WriteString("noasm")
	}
	fmt.Fprintf(&b, " line=%d", f.LineSize)
	for _, d := range [...]Discipline{CLFLUSH, CLFLUSHOPT, CLWB, NonTemporal} {
		if f.Has(d) {
			b.WriteString(" " + d.String())
		}
	}
	if f.Asm && f.Wide {
		b.WriteString(" wide")
	}
	return b.String()
}

// Load returns the word at p. Precondition: p is 8-byte aligned and mapped.
func Load(p *uint64) uint64 { return load(p) }

// Store sets the word at p (sequentially consistent). Precondition: as [Load].
func Store(p *uint64, v uint64) { store(p, v) }

// CAS sets the word at p to new if it equals old, atomically within the coherence domain, and
// returns the word it found (so it swapped if and only if the result equals old). Precondition:
// as [Load].
func CAS(p *uint64, old, new uint64) uint64 { return cas(p, old, new) }

// FAA adds delta to the word at p (modulo 2^64), atomically within the coherence domain, and
// returns the previous word. Precondition: as [Load].
func FAA(p *uint64, delta uint64) uint64 { return faa(p, delta) }

// AddOwned adds delta (modulo 2^64) to the word at p, which only the calling goroutine writes
// (a counter of its own), with a plain load and store: no locked instruction, so no full fence
// and no exclusive hold of the line. Other goroutines may read the word with [Load] or
// sync/atomic at any time and see whole words, each addition at most once and in order; a
// concurrent writer of the same word loses additions, which is why it has one writer. Without
// assembly it is an atomic addition. Precondition: as [Load].
func AddOwned(p *uint64, delta uint64) { addOwned(p, delta) }

// AddOwned8 adds delta[i] to dst[i] for each of the eight words, as AddOwned adds one (the words
// only the calling goroutine writes, readers seeing whole words), in one call: a counter set
// that changes together (a batch's verbs, bytes and round trip) is added without a branch or
// a call per word. Adding 0 leaves a word as it is. Without assembly it is eight atomic
// additions.
func AddOwned8(dst, delta *[8]uint64) { addOwned8(dst, delta) }

// StoreNT stores v at p with a non-temporal hint (MOVNTI) and NO fence: call [SFence] before
// anything that must observe it in order. Without assembly it is an ordinary atomic store.
// Precondition: as [Load].
func StoreNT(p *uint64, v uint64) { storeNT(p, v) }

// SFence orders all earlier stores, non-temporal stores and CLWB/CLFLUSHOPT before later stores.
func SFence() { sfence() }

// MFence orders all earlier loads, stores and flushes before all later ones.
func MFence() { mfence() }

// LFence completes all earlier instructions locally before later ones start (it does not order
// CLFLUSHOPT or CLWB; use [MFence] for flush-before-read).
func LFence() { lfence() }

// LoadWords copies len(dst) words starting at src into dst, one aligned 8-byte load each, in
// ascending order. Precondition: src is 8-byte aligned and the len(dst) words are mapped.
func LoadWords(dst []uint64, src *uint64) {
	if len(dst) > 0 {
		copyOutWords(&dst[0], src, uintptr(len(dst)))
	}
}

// StoreWords copies src to the words starting at dst, one aligned 8-byte store each, in
// ascending order. The stores are ordinary (not XCHG): they are ordered among themselves by
// x86-TSO but not fenced against later loads. Precondition: as [LoadWords].
func StoreWords(dst *uint64, src []uint64) {
	if len(src) > 0 {
		copyInWords(dst, &src[0], uintptr(len(src)))
	}
}

// LoadBytes copies the len(dst)/8 words starting at src into dst as little-endian bytes, as
// [LoadWords] copies them (whole words, never torn), for a caller that has checked the range
// already ([Region.ReadBytes] checks it). Precondition: src is 8-byte aligned, len(dst) a
// multiple of 8 and the words mapped.
func LoadBytes(dst []byte, src *uint64) {
	if len(dst) >= 8 {
		copyOutBytes(&dst[0], src, uintptr(len(dst)/8))
	}
}

// StoreBytes copies src, little-endian bytes, to the len(src)/8 words starting at dst, as
// [StoreWords] copies them. Precondition: as [LoadBytes].
func StoreBytes(dst *uint64, src []byte) {
	if len(src) >= 8 {
		copyInBytes(dst, &src[0], uintptr(len(src)/8))
	}
}

// StoreWordsNT is [StoreWords] with non-temporal stores, followed by SFENCE.
func StoreWordsNT(dst *uint64, src []uint64) {
	if len(src) > 0 {
		copyInWordsNT(dst, &src[0], uintptr(len(src)))
	}
}

// WriteBack writes back every cache line that overlaps [p, p+n) with [Features.WriteBack]'s
// instruction and then issues SFENCE. Without assembly it is a full fence. Precondition: the
// range is mapped.
func WriteBack(p unsafe.Pointer, n uintptr) {
	d := features.WriteBack()
	if d != Plain {
		lines(d, p, n)
	}
	sfence()
}

// WriteBackWith is [WriteBack] with a chosen instruction. Plain issues SFENCE alone. It returns
// an error wrapping [ErrUnsupported] if the CPU or build lacks the instruction, and one
// wrapping [farmem.ErrInvalid] for NonTemporal (non-temporal is a way of storing, not of writing
// back data already stored).
func WriteBackWith(d Discipline, p unsafe.Pointer, n uintptr) error {
	switch d {
	case Plain:
	case CLWB, CLFLUSHOPT, CLFLUSH:
		if !features.Has(d) {
			return fmt.Errorf("atomics: write-back with %v: %w", d, ErrUnsupported)
		}
		lines(d, p, n)
	default:
		return fmt.Errorf("atomics: write-back with %v: %w", d, farmem.ErrInvalid)
	}
	sfence()
	return nil
}

// FlushForRead invalidates (writing back if dirty) every cache line that overlaps [p, p+n)
// with [Features.FlushForRead]'s instruction and then issues MFENCE, so that the next load of
// the range is served from memory. See the package doc for what this does not promise. Without
// assembly it is a full fence.
func FlushForRead(p unsafe.Pointer, n uintptr) {
	d := features.FlushForRead()
	if d != Plain {
		lines(d, p, n)
	}
	mfence()
}

// FlushForReadWith is [FlushForRead] with a chosen instruction (CLFLUSHOPT or CLFLUSH; Plain
// issues MFENCE alone). CLWB and NonTemporal are rejected with [farmem.ErrInvalid]: neither
// invalidates.
func FlushForReadWith(d Discipline, p unsafe.Pointer, n uintptr) error {
	switch d {
	case Plain:
	case CLFLUSHOPT, CLFLUSH:
		if !features.Has(d) {
			return fmt.Errorf("atomics: flush with %v: %w", d, ErrUnsupported)
		}
		lines(d, p, n)
	default:
		return fmt.Errorf("atomics: flush before read with %v: %w", d, farmem.ErrInvalid)
	}
	mfence()
	return nil
}

// Guard runs f with the goroutine's panic-on-fault set (debug.SetPanicOnFault), and turns a
// memory fault inside f (for instance a load from a mapping whose file was truncated) into an
// error wrapping [ErrFault] that names the faulting address (a dereference near address 0
// counts too). Other panics propagate.
func Guard(f func()) (err error) {
	old := debug.SetPanicOnFault(true)
	defer func() {
		debug.SetPanicOnFault(old)
		if r := recover(); r != nil {
			if err = FaultOf(r); err == nil {
				panic(r)
			}
		}
	}()
	f()
	return nil
}

// Prefetch asks the CPU to bring every cache line that overlaps [p, p+n) towards its caches
// (PREFETCHT0), so that the loads of several independent accesses wait for memory together
// rather than one after another. It is a hint: it never faults, even on an unmapped address,
// changes no memory and orders nothing. Without assembly it does nothing. A range of at most a
// line (a word, a header) costs two prefetches and no loop.
func Prefetch(p unsafe.Pointer, n uintptr) {
	if n > 0 {
		prefetch(p, n)
	}
}
