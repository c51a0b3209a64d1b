package swarm

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/farmem/farmem/alloc"
	"github.com/farmem/farmem/ds/maxreg"
	"github.com/farmem/farmem/farmem"
)

// Errors.
var (
	// ErrBadParams: replicas or parameters out of range.
	ErrBadParams = fmt.Errorf("swarm: bad parameters: %w", farmem.ErrInvalid)
	// ErrNotWriter: the client's id has no writer lane or timestamp lock.
	ErrNotWriter = fmt.Errorf("swarm: client cannot write: %w", farmem.ErrInvalid)
	// ErrClosed: the handle was closed.
	ErrClosed = fmt.Errorf("swarm: handle closed: %w", farmem.ErrClosed)
)

// Options configure a handle.
type Options struct {
	// Refresher, if set, writes in-place copies and VERIFIED marks in the background on its own
	// client, from a goroutine started with Runtime.Go (see maxreg.Refresher); if nil, the
	// handle posts them unsignaled on its own client.
	Refresher *maxreg.Refresher
	// EarlyReuse is maxreg.ReplicatedOptions.EarlyReuse: the writer never waits for one of its
	// buffers to age; reads are then lock-free rather than wait-free above Params.Slots writes
	// per writer per maxreg ReuseDelay.
	EarlyReuse bool
	// Lanes is maxreg.ReplicatedOptions.Lanes: required for a register with per-node lanes
	// (maxreg.Params.PerNode), the same for every handle of the process on it.
	Lanes *maxreg.Lanes
}

// Stats are a handle's counters, one per path of the protocol (see the package doc).
type Stats struct {
	// Writes counts writes that returned nil. Fast: the guess was fresh (one round trip and a
	// background mark). Stale: the read half found a larger tag (the slow path), of which
	// Unpublished took the timestamp lock and re-executed with a fresh timestamp and Pinned
	// found a reader had pinned the guess (the write is done).
	Writes, Fast, Stale, Unpublished, Pinned uint64
	// Reads counts reads that returned. Verified: a VERIFIED tuple. Locked: a GUESSED tuple
	// seen twice and locked in read mode (then marked VERIFIED in the background). Second: two
	// tuples of one writer seen, the earlier returned. ReadLockFailed: read-mode locks that
	// failed (the read went on). Empty: the empty register.
	Reads, Verified, Locked, Second, ReadLockFailed, Empty uint64
	// ReadLockProbed counts read-mode locks that found the timestamp locked in write mode on
	// a replica whose metadata words, read in the same batch right behind the CAS, held a
	// tuple above the one being locked: the writer's write-back, which rides ahead of its
	// lock there. The reader's next M read then returns a larger tuple even if the majority
	// answering it holds none yet (the iteration bound's case; see the package doc).
	ReadLockProbed uint64
	// LockRestarts counts TRYLOCK attempts abandoned because a round fell due more than
	// Params.Lease after the attempt's first (a client stalled mid-lock): the next attempt
	// counts only its own answers (see tslock.go).
	LockRestarts uint64
	// MaxReadIterations is the most iterations of the read loop one read took;
	// MaxLockRounds the most rounds of CASes one TRYLOCK took; MaxWriteLockRounds the most
	// one of this writer's write-mode TRYLOCKs took.
	MaxReadIterations, MaxLockRounds, MaxWriteLockRounds uint64
}

// Register is one client's handle on a Safe-Guess register: it belongs to that client's
// goroutine. Its timestamp-lock caches are updated by completion hooks under a mutex never
// held across a verb.
type Register struct {
	m     farmem.Memory
	rt    farmem.Runtime
	rep   *maxreg.Replicated
	locks []farmem.Addr // per replica: the first timestamp-lock word
	n     int
	maj   int
	id    farmem.ClientID
	p     maxreg.Params
	skew  uint64 // ticks added to the clock's guesses (raised by every stale guess)

	mu        sync.Mutex
	lockCache map[farmem.ClientID][]uint64 // per writer, per replica: a lower bound of its lock word
	mine      []uint64                     // own GUESSED timestamps, ascending, some replica's lock word may still be below

	stats      Stats
	lockRounds atomic.Uint64
	maxWLock   uint64 // the most rounds a write-mode TRYLOCK took (owner goroutine)
	closed     bool
}

// lockBytes is the room for a replica's timestamp-lock words, one per writer.
func lockBytes(p maxreg.Params) uint64 { return (8*uint64(p.Writers) + 63) &^ 63 }

func withWriters(p maxreg.Params) maxreg.Params {
	if p.Writers == 0 {
		p.Writers = maxreg.DefaultWriters
	}
	return p
}

// Size returns the bytes a register with p takes on each replica (0 if p is out of range):
// an In-n-Out register (maxreg.Size) followed by one 8-byte timestamp-lock word per writer.
func Size(p maxreg.Params) uint64 {
	p = withWriters(p)
	s := maxreg.Size(p)
	if s == 0 {
		return 0
	}
	return s + lockBytes(p)
}

// Create allocates a register on each of nodes (2f+1 distinct memory nodes) with a, formats
// it (Format) and returns the replicas' addresses, which Open takes.
func Create(ctx context.Context, m farmem.Memory, a *alloc.Allocator, nodes []farmem.NodeID, p maxreg.Params) ([]farmem.Addr, error) {
	size := Size(p)
	if size == 0 {
		return nil, fmt.Errorf("%w: %+v", ErrBadParams, p)
	}
	addrs := make([]farmem.Addr, len(nodes))
	for i, n := range nodes {
		var err error
		if addrs[i], err = a.AllocOn(ctx, n, size, 64); err != nil {
			return nil, fmt.Errorf("swarm: allocating %d bytes on %v: %w", size, n, err)
		}
	}
	return addrs, Format(ctx, m, addrs, p)
}

// Format lays out an empty register with p at addrs (Size(p) bytes each, 64-byte aligned, on
// distinct memory nodes, an odd number): the timestamp-lock words zeroed with atomics (they
// are only ever written by atomics), then the replicated In-n-Out register
// (maxreg.FormatReplicated).
func Format(ctx context.Context, m farmem.Memory, addrs []farmem.Addr, p maxreg.Params) error {
	p = withWriters(p)
	base := maxreg.Size(p)
	if base == 0 {
		return fmt.Errorf("%w: %+v", ErrBadParams, p)
	}
	b := new(farmem.Batch)
	for _, a := range addrs {
		for w := range uint64(p.Writers) {
			b.MaskedCAS(a+farmem.Addr(base+8*w), 0, 0, 0, ^uint64(0))
			if len(b.Ops) == farmem.MaxBatchOps {
				if err := m.Do(ctx, b); err != nil {
					return fmt.Errorf("swarm: format: %w", err)
				}
				b = new(farmem.Batch)
			}
		}
	}
	if len(b.Ops) > 0 {
		if err := m.Do(ctx, b); err != nil {
			return fmt.Errorf("swarm: format: %w", err)
		}
	}
	return maxreg.FormatReplicated(ctx, m, addrs, p)
}

// Open returns m's handle on the register at addrs (maxreg.OpenReplicated's round trips).
func Open(ctx context.Context, m farmem.Memory, addrs []farmem.Addr, opts Options) (*Register, error) {
	rep, err := maxreg.OpenReplicated(ctx, m, addrs, maxreg.ReplicatedOptions{Refresher: opts.Refresher, EarlyReuse: opts.EarlyReuse, Lanes: opts.Lanes})
	if err != nil {
		return nil, fmt.Errorf("swarm: open: %w", err)
	}
	p := rep.Params()
	base := maxreg.Size(p)
	r := &Register{m: m, rt: m.Runtime(), rep: rep, n: len(addrs), maj: rep.Quorum(), id: rep.Writer(), p: p,
		lockCache: map[farmem.ClientID][]uint64{}}
	for _, a := range addrs {
		r.locks = append(r.locks, a+farmem.Addr(base))
	}
	return r, nil
}

// Stats returns the handle's counters.
func (r *Register) Stats() Stats {
	s := r.stats
	s.MaxLockRounds = r.lockRounds.Load()
	s.MaxWriteLockRounds = r.maxWLock
	return s
}

// Replicated returns the handle's max register (for its counters and caches).
func (r *Register) Replicated() *maxreg.Replicated { return r.rep }

// Close releases the handle (no verb). Idempotent.
func (r *Register) Close() error {
	r.closed = true
	return r.rep.Close()
}

// Write writes value (at most Params.ValueSize bytes): the paper's WRITE.
//
// Its tuple w = (guessed timestamp, this writer, GUESSED, value) is written to the max
// register M while M is read, in one round trip (maxreg.Replicated.WriteRead). If what the read
// returned is w itself, the guess was fresh: the write is done, and its VERIFIED bit is set in
// the background (Fast, one round trip). Otherwise (Stale) the larger tuple m the read
// returned has been written back to a majority (the write-back the proof of the read bound
// needs and the authors' code skips: zero to two round trips), the clock's guesses are raised
// above m, and the writer tries to lock w's timestamp in write mode: if that succeeds, no
// reader did or ever will return w, and the value is written again with a fresh timestamp
// above m, VERIFIED (Unpublished, one more round trip); if it fails, a reader pinned w as
// fresh and the write is done (Pinned). An error leaves the write's outcome unknown.
func (r *Register) Write(ctx context.Context, value []byte) error {
	return r.write(ctx, value, 0)
}

// write is Write; with ceiling above 0, it does not re-execute above a tuple whose timestamp
// is at least ceiling (see WriteBelow).
func (r *Register) write(ctx context.Context, value []byte, ceiling uint64) error {
	if r.closed {
		return ErrClosed
	}
	// With per-node lanes the node's clients write one at a time: the lane's latch is held
	// from the first batch to the rewrite, so the writer's (the node's) writes are sequential.
	release, err := r.rep.HoldLane(ctx)
	if err != nil {
		return fmt.Errorf("swarm: write: %w", err)
	}
	defer release()
	if ceiling > 0 && r.rep.LastTS() >= ceiling {
		// Another client of the node wrote a final tuple (WriteFinal) since WriteBelow
		// looked: the lane's next timestamp would be above the ceiling. Decided under the
		// lane, as WriteBelow decides for a client's own final tuples.
		if err := r.refuseAbove(ctx, ceiling, true); !errors.Is(err, errBelow) {
			return err
		}
	}
	guess := r.rep.Ticks() + r.skew
	// The first batch also reads this writer's own lock words, so that a TRYLOCK on the slow
	// path starts from their current values (one round) rather than a stale cache.
	var lockBufs [][]byte
	if int(r.id) <= r.p.Writers && r.id > 0 {
		lockBufs = make([][]byte, r.n)
	}
	extra := func(i int, b *farmem.Batch) {
		if lockBufs != nil {
			lockBufs[i] = make([]byte, 8)
			b.Read(r.lockAddr(i, r.id), lockBufs[i])
		}
	}
	var (
		w, m maxreg.Tag
		done []bool
		wb   *maxreg.WriteBack
	)
	if r.rep.OwnWord() {
		w, m, done, wb, err = r.rep.WriteReadDeferred(ctx, value, false, guess, extra)
	} else {
		w, m, done, err = r.rep.WriteReadWith(ctx, value, false, guess, extra)
	}
	for i, ok := range done {
		if ok && lockBufs != nil {
			r.raiseLock(r.id, i, binary.LittleEndian.Uint64(lockBufs[i]))
		}
	}
	if w != 0 && lockBufs != nil {
		r.noteGuess(w.TS())
	}
	if err != nil {
		return fmt.Errorf("swarm: write: %w", err)
	}
	if m <= w {
		r.rep.Mark(w)
		r.stats.Writes++
		r.stats.Fast++
		return nil
	}
	r.stats.Stale++
	if wb != nil && !wb.Fresh() {
		// m's lease ran out: its buffers may be reused, so the read is completed apart.
		if m, err = wb.Finish(ctx); err != nil {
			return fmt.Errorf("swarm: write: %w", err)
		}
		wb = nil
	}
	ok, err := r.tryLock(ctx, r.id, w.TS(), modeWrite, wb)
	if err != nil {
		return fmt.Errorf("swarm: write: %w", err)
	}
	if ok && wb != nil {
		// Usually no round trip: the lock's first round carried the write-back, and the
		// replicas that left the lock's loop in it hold m.
		if m, err = wb.Finish(ctx); err != nil {
			return fmt.Errorf("swarm: write: %w", err)
		}
	}
	if m.TS() >= w.TS() {
		r.skew += m.TS() - w.TS() + 1
	}
	if !ok {
		r.stats.Writes++
		r.stats.Pinned++
		return nil
	}
	if ceiling > 0 && m.TS() >= ceiling {
		// w is unpublished (the lock is won: no reader did or will return it) and the
		// write is not re-executed above m.
		return ErrCeiling
	}
	if _, err := r.rep.WriteAbove(ctx, value, true, m.TS()+1); err != nil {
		return fmt.Errorf("swarm: write: %w", err)
	}
	r.stats.Writes++
	r.stats.Unpublished++
	return nil
}

// seenTuple is a tuple a read saw, with its value.
type seenTuple struct {
	tag maxreg.Tag
	val []byte
}

// Read returns the register's value (nil if never written): the paper's READ.
//
// It reads M (maxreg.Replicated.Read, which writes back what it returns) until one of: the
// tuple read is VERIFIED (returned; one round trip in the common case); it is GUESSED and the
// same tuple was read in an earlier iteration, so its timestamp was fresh, and locking that
// timestamp in read mode succeeds, so its writer never re-executes it (returned, and marked
// VERIFIED in the background); or a second, different tuple of a writer already seen is read,
// so that writer's earlier write has completed (the earlier value is returned). The loop ends
// within 2n+1 iterations for n writers (the package doc derives it).
func (r *Register) Read(ctx context.Context) ([]byte, error) {
	if r.closed {
		return nil, ErrClosed
	}
	var seen map[farmem.ClientID]seenTuple
	for it := uint64(1); ; it++ {
		r.stats.MaxReadIterations = max(r.stats.MaxReadIterations, it)
		m, val, err := r.rep.Read(ctx)
		if err != nil {
			return nil, fmt.Errorf("swarm: read: %w", err)
		}
		if m.IsZero() {
			r.stats.Reads++
			r.stats.Empty++
			return nil, nil
		}
		if m.Verified() {
			r.stats.Reads++
			r.stats.Verified++
			return val, nil
		}
		c := m.Client()
		if s, ok := seen[c]; ok {
			if s.tag != m {
				r.stats.Reads++
				r.stats.Second++
				return s.val, nil
			}
			ok, err := r.tryLock(ctx, c, m.TS(), modeRead, nil)
			if err != nil {
				return nil, fmt.Errorf("swarm: read: %w", err)
			}
			if ok {
				r.rep.Mark(m)
				r.stats.Reads++
				r.stats.Locked++
				return val, nil
			}
			r.stats.ReadLockFailed++
		}
		if seen == nil {
			seen = map[farmem.ClientID]seenTuple{}
		}
		seen[c] = seenTuple{tag: m, val: val}
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("swarm: read: %w", err)
		}
	}
}

// errLock wraps a TRYLOCK that could not reach a majority.
var errLock = errors.New("swarm: timestamp lock")
