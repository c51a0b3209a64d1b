// Package atomics is word access on mapped memory: 8-byte loads, stores, compare-and-swap and
// fetch-and-add on an address; word-by-word copies in and out; cache-line write-back and flush;
// fences; non-temporal stores; and detection of the CPU features these rely on.
//
// It serves regions of memory that the Go runtime does not manage (an mmap'd memfd, /dev/shm or
// hugetlbfs file, an fsdax file or a devdax device shared by several processes), though every
// function also works on Go memory. A [Region] (base pointer and size) offers the checked API:
// offsets are bounds-checked and atomics' alignment is verified, and misuse returns an error
// wrapping [farmem.ErrOutOfRange] or [farmem.ErrMisaligned] instead of faulting. The package-level
// functions are the unchecked fast path; each states its precondition.
//
// # Builds
//
// On amd64 the primitives are Go assembly and the CPU is probed with CPUID at start-up ([CPU]).
// With the build tag noasm, and on every other architecture, a pure-Go fallback is used: words
// go through sync/atomic, and since pure Go cannot issue cache-line instructions, write-back and
// flush degrade to a full fence and [CPU] reports no cache-line feature (so
// [WriteBackWith] and [FlushForReadWith] return [ErrUnsupported] for an explicit instruction).
// Every exported name exists in every build.
//
// # What each primitive guarantees (amd64, assembly build)
//
//   - [Load] is one aligned 8-byte MOV: it never tears, and x86-TSO gives it acquire ordering. It
//     reads whatever this core's cache hierarchy holds; if the line is cached, it does not go to
//     memory.
//   - [Store] is XCHG, a sequentially consistent store (like sync/atomic's): it never tears and it
//     drains this core's store buffer. It does not write the line back to memory; it stays dirty
//     in the cache until evicted or written back.
//   - [CAS] is LOCK CMPXCHG and [FAA] is LOCK XADD. They are atomic and fully fenced with respect
//     to every agent in the same cache-coherence domain (the cores of this host, and CXL devices
//     that take part in coherence). They are NOT atomic across hosts that share memory without
//     hardware coherence: the lock is a cache-line lock in this host's caches, invisible to another
//     host's caches. A multi-host pool without coherence needs atomics executed by the device
//     (what an Uncached region in package cxl assumes, DESIGN §4). A misaligned LOCK access that
//     spans two lines becomes a bus lock, or a #AC fault on CPUs with split-lock detection; the
//     unchecked functions therefore require 8-byte alignment and [Region] enforces it.
//   - [StoreNT] is MOVNTI: a weakly ordered store that bypasses (and evicts) the cache line,
//     combining in a write-combining buffer. It is not ordered with later stores, and not visible
//     to other cores in any promised order, until an SFENCE ([SFence]); it issues none itself.
//     [StoreWordsNT] ends with SFENCE. A partial line written non-temporally costs a
//     read-for-ownership-free partial write to memory, which is slower than a full line.
//   - [WriteBack] writes back every line of a range with the best instruction the CPU has (CLWB,
//     else CLFLUSHOPT, else CLFLUSH) and then issues SFENCE, so the write-backs complete before any
//     later store. CLWB may keep the line cached (clean); CLFLUSHOPT and CLFLUSH invalidate it.
//     CLFLUSH is ordered with stores by itself, so its SFENCE is redundant but issued anyway.
//     Write-back makes data reach the memory controller (the persistence domain on ADR platforms);
//     it does not make another host's stale cached copy go away: that host must flush before it
//     reads.
//   - [FlushForRead] invalidates every line of a range (CLFLUSHOPT, else CLFLUSH) and then issues
//     MFENCE, so the next load misses and is served from memory, not from a line this core held
//     before. x86 has no user-mode invalidate without write-back (INVD is privileged and
//     whole-cache): if this host holds a DIRTY copy of a line, the flush writes it back and can
//     overwrite a newer value another host stored in memory. The discipline therefore requires that
//     a host write back every line right after writing it (what [WriteBack] does), so its caches
//     hold only clean lines of shared memory. A flush is not a snapshot: speculation or a
//     prefetcher may refetch the line at any moment after the fence, so the guarantee is only that
//     a later load returns memory's value as of some time after the flush began.
//   - [SFence], [MFence] and [LFence] are the bare instructions.
//   - [LoadWords], [StoreWords] and the Region copies move the shared side's aligned words in
//     ascending order, each in one instruction: one 8-byte word, or, on a CPU whose 16-byte
//     aligned SSE accesses are single-copy atomic ([Features].Wide: both vendors state it for
//     processors with AVX), an aligned 16-byte pair of words (copies of 4 words or more), so a
//     concurrent writer can interleave with a long copy only at word boundaries; a copy as a
//     whole is not atomic. The pairs halve the instructions of a long copy and double the bytes
//     each load or store has in flight.
//
// # The Uncached discipline on one coherent host
//
// Package cxl's Uncached policy writes back after writes and flushes before reads, with atomics
// assumed device-coherent. On a single host with coherent caches (this machine, and any test
// machine) that reproduces the COST of a pool without hardware coherence: every written line
// goes to memory, every read misses, and the fences stall the pipeline. It does not reproduce the
// FAILURE MODES: because caches here are coherent, a missing flush is never caught (a stale read
// is impossible), and a dirty line clobbering another host's write cannot happen. Correctness of
// the discipline therefore has to be argued from the code, not observed in a test.
package atomics
