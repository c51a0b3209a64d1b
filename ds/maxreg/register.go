package maxreg

import (
	"context"
	"encoding/binary"
	"fmt"

	"github.com/farmem/farmem/alloc"
	"github.com/farmem/farmem/farmem"
)

// Options configure a handle.
type Options struct {
	// Refresher, if set, writes the in-place copy after each of this handle's installed writes
	// (and after each read that had to chase a pointer) in the background, on the Refresher's
	// own client, from a goroutine started with Runtime.Go. If nil, the handle posts that
	// write unsignaled on its own client instead (fire-and-forget: no round trip, applied before
	// the handle's next verb to the node).
	Refresher *Refresher
	// OutOfPlaceOnly makes the handle never write the in-place copy: the paper's pure
	// out-of-place baseline (its §7.4). Reads by any handle then chase the pointer unless
	// another handle refreshed the copy.
	OutOfPlaceOnly bool
}

// Stats are a handle's counters.
type Stats struct {
	// Writes counts Write calls that returned nil; Absorbed those of them that found a larger
	// tag in their metadata word (installing nothing); CASRetries the extra CASes after a
	// metadata CAS lost to another writer of the same word.
	Writes, Absorbed, CASRetries uint64
	// Reads counts reads that returned a value; Empty those that found the register empty;
	// InPlace those answered by the in-place copy (one round trip); Torn and Stale the reads
	// (attempts) that found the in-place copy failing its hash or naming another write; Chased
	// the reads answered from an out-of-place buffer (two round trips); Retries the attempts
	// that found the buffer already reused by its writer and started over.
	Reads, Empty, InPlace, Torn, Stale, Chased, Retries uint64
	// Refreshes counts in-place refreshes this handle asked for.
	Refreshes uint64
}

// Register is one client's handle on a register: it belongs to that client's goroutine.
type Register struct {
	m      farmem.Memory
	rt     farmem.Runtime
	addr   farmem.Addr
	l      layout
	h      header
	seed   uint64
	id     farmem.ClientID
	writer bool
	word   farmem.Addr // this writer's metadata word
	cached Tag         // the last value seen in that word (a lower bound of it)
	last   uint64      // this writer's last timestamp
	slotTS []uint64    // per slot of its lane, the timestamp whose record the writer last put there
	opts   Options

	b      *farmem.Batch
	rec    []byte // the record being written
	buf    []byte // metadata words and the in-place record, read whole
	slot   []byte // an out-of-place record
	stats  Stats
	closed bool
}

// Create allocates a register on memory node node with a and formats it (see Format). It
// costs alloc's round trips (usually none) plus FormatRoundTrips.
func Create(ctx context.Context, m farmem.Memory, a *alloc.Allocator, node farmem.NodeID, p Params) (farmem.Addr, error) {
	p, err := p.withDefaults()
	if err != nil {
		return 0, err
	}
	addr, err := a.AllocOn(ctx, node, layoutOf(p).size, 64)
	if err != nil {
		return 0, fmt.Errorf("maxreg: allocating %d bytes: %w", layoutOf(p).size, err)
	}
	if err := Format(ctx, m, addr, p); err != nil {
		return 0, err
	}
	return addr, nil
}

// Format lays out an empty register with p in the Size(p) bytes at addr (64-byte aligned): the
// header without its magic, zeroed records, metadata words zeroed with atomics (a masked CAS
// that always matches, so a word ever used by atomics is never plainly written), then the
// magic. The batches go to one node in order, so a register whose magic reads is whole. Its
// timestamps count from the fabric time of the call, and its hash seed takes a random nonce
// from the client's runtime. FormatRoundTrips, for registers under 16 MiB and 4,000 words.
func Format(ctx context.Context, m farmem.Memory, addr farmem.Addr, p Params) error {
	p, err := p.withDefaults()
	if err != nil {
		return err
	}
	rt := m.Runtime()
	return format(ctx, m, addr, header{p: p, base: rt.Now(), nonce: rt.Rand().Uint64()})
}

// format lays out an empty register with header h at addr (see Format).
func format(ctx context.Context, m farmem.Memory, addr farmem.Addr, h header) error {
	if addr%64 != 0 {
		return fmt.Errorf("maxreg: register address %v not 64-byte aligned: %w", addr, farmem.ErrMisaligned)
	}
	p := h.p
	l := layoutOf(p)
	hb := make([]byte, hdrSize)
	h.encode(hb, false)
	var b farmem.Batch
	flush := func() error {
		if len(b.Ops) == 0 {
			return nil
		}
		err := m.Do(ctx, &b)
		b = farmem.Batch{}
		return err
	}
	b.Write(addr, hb)
	zero := make([]byte, min(l.size-l.inOff, farmem.MaxOpBytes))
	for off := l.inOff; off < l.size; off += uint64(len(zero)) {
		b.Write(addr+farmem.Addr(off), zero[:min(uint64(len(zero)), l.size-off)])
		if len(b.Ops) == farmem.MaxBatchOps-1 {
			if err := flush(); err != nil {
				return fmt.Errorf("maxreg: format: %w", err)
			}
		}
	}
	for w := range uint64(p.Words) {
		b.MaskedCAS(addr+farmem.Addr(metaOff+8*w), 0, 0, 0, ^uint64(0))
		if len(b.Ops) == farmem.MaxBatchOps-1 {
			if err := flush(); err != nil {
				return fmt.Errorf("maxreg: format: %w", err)
			}
		}
	}
	mg := make([]byte, 8)
	binary.LittleEndian.PutUint64(mg, magic)
	b.Write(addr, mg)
	if err := flush(); err != nil {
		return fmt.Errorf("maxreg: format: %w", err)
	}
	return nil
}

// Open returns m's handle on the register at addr: it reads the header, then the metadata
// words and, if m's client has a writer lane, the identity word of each of its buffers, so that
// its timestamps continue above every one an earlier client of its id left there. One handle
// per client per register. OpenRoundTrips.
func Open(ctx context.Context, m farmem.Memory, addr farmem.Addr, opts Options) (*Register, error) {
	hb := make([]byte, hdrUsed)
	if err := m.Read(ctx, addr, hb); err != nil {
		return nil, fmt.Errorf("maxreg: open %v: %w", addr, err)
	}
	h, err := decodeHeader(hb)
	if err != nil {
		return nil, fmt.Errorf("maxreg: open %v: %w", addr, err)
	}
	if h.p.PerNode {
		return nil, fmt.Errorf("maxreg: open %v: %w: per-node lanes are a replicated register's (OpenReplicated)", addr, ErrBadParams)
	}
	l := layoutOf(h.p)
	r := &Register{m: m, rt: m.Runtime(), addr: addr, l: l, h: h, seed: hashSeed ^ h.nonce,
		id: m.Info().ID, opts: opts, b: new(farmem.Batch)}
	r.writer = r.id >= 1 && int(r.id) <= h.p.Writers
	wi := wordOf(m.Topology(), r.id, h.p.Words)
	r.word = addr + farmem.Addr(metaOff+8*wi)
	r.alloc()
	var b farmem.Batch
	b.Read(addr+metaOff, r.buf)
	var ids [][]byte
	r.slotTS = make([]uint64, h.p.Slots)
	if r.writer {
		lane := l.slotOff(MakeTag(0, r.id, false))
		for s := range uint64(h.p.Slots) {
			w := make([]byte, 8)
			b.Read(addr+farmem.Addr(lane+s*l.recSize+16), w)
			ids = append(ids, w)
		}
	}
	if err := m.Do(ctx, &b); err != nil {
		return nil, fmt.Errorf("maxreg: open %v: %w", addr, err)
	}
	r.cached = Tag(binary.LittleEndian.Uint64(r.buf[8*wi:]))
	for w := range h.p.Words {
		if t := Tag(binary.LittleEndian.Uint64(r.buf[8*w:])); t.Client() == r.id {
			r.last = max(r.last, t.TS())
		}
	}
	for s, w := range ids {
		if t := Tag(binary.LittleEndian.Uint64(w)); t.Client() == r.id {
			r.last = max(r.last, t.TS())
			r.slotTS[s] = t.TS()
		}
	}
	return r, nil
}

// wordOf returns the metadata word the client with id updates: its rank mod words, the rank
// numbering clients with compute nodes interleaved (slot s of compute node c, of n, has rank
// s*n + c-1). On one compute node that is (id-1) mod words. Plain id mod words would put slot s
// of every compute node on one word whenever words divides ClientsPerNode (64 by default), so
// that k = 16 or 64 would still share words among the first clients of each node (measured on
// the simulator while choosing k: only 52-64% of the writes took one round trip with 16 writers
// on two nodes and 64 words). Only the writer uses the mapping: readers take the maximum of
// every word, and a shared word stays correct (the CAS loop), only slower.
func wordOf(t *farmem.Topology, id farmem.ClientID, words int) uint64 {
	rank := uint64(id)
	if per, n := uint64(t.ClientsPerNode), uint64(len(t.ComputeNodes())); id > 0 && per > 0 && n > 0 {
		i := uint64(id) - 1
		rank = (i%per)*n + i/per
	}
	return rank % uint64(words)
}

// alloc gives the handle fresh buffers: at open, and after a verb that may still be in flight
// (its context ended) owns the old ones.
func (r *Register) alloc() {
	r.b = new(farmem.Batch)
	r.rec = make([]byte, r.l.recSize)
	r.buf = make([]byte, 8*uint64(r.h.p.Words)+r.l.recSize)
	r.slot = make([]byte, r.l.recSize)
}

// Addr returns the register's address.
func (r *Register) Addr() farmem.Addr { return r.addr }

// Params returns the register's parameters.
func (r *Register) Params() Params { return r.h.p }

// Stats returns the handle's counters.
func (r *Register) Stats() Stats { return r.stats }

// Close releases the handle (no verb). It is idempotent; later calls fail with ErrClosed.
func (r *Register) Close() error {
	r.closed = true
	return nil
}

// ticks returns the fabric clock in the register's ticks since its creation (0 before it).
func (r *Register) ticks() uint64 {
	d := r.rt.Now().Sub(r.h.base)
	if d < 0 {
		return 0
	}
	return uint64(d / r.h.p.Tick)
}

// Write stamps value with the client's next timestamp, VERIFIED, and raises the register to
// it; see WriteFlag. It returns the tag it wrote.
func (r *Register) Write(ctx context.Context, value []byte) (Tag, error) {
	return r.WriteFlag(ctx, value, true)
}

// WriteFlag is Write with the VERIFIED bit given: a protocol above (Safe-Guess) writes
// GUESSED tags and verifies them later with Verify.
//
// The timestamp is the first one at least max(last+1, now) (now the fabric clock in ticks)
// that takes the slot after the previous write's: strictly increasing per client whatever the
// clock does. One batch to the register's node writes the record (value, length, the tag's
// identity, and their hash) into that out-of-place slot and then CASes the client's metadata
// word from the value last seen there to the new tag; the node applies them in order, so a
// reader that sees the tag finds the record whole. A CAS that finds a different word retries
// with it, one round trip each, until the word holds the tag or a larger one (absorbed). Then
// the in-place copy is refreshed in the background (Options.Refresher). WriteRoundTrips,
// plus CASRetryRoundTrips per lost CAS; no verb if the word was already known to hold a
// larger tag. An error leaves the write's outcome unknown.
func (r *Register) WriteFlag(ctx context.Context, value []byte, verified bool) (Tag, error) {
	if r.closed {
		return 0, ErrClosed
	}
	if len(value) > r.h.p.ValueSize {
		return 0, fmt.Errorf("%w: %d bytes, at most %d", ErrValueSize, len(value), r.h.p.ValueSize)
	}
	if !r.writer {
		return 0, fmt.Errorf("%w: client %d, lanes for 1..%d", ErrNotWriter, r.id, r.h.p.Writers)
	}
	ts := nextStamp(r.last, r.ticks(), uint64(r.h.p.Slots))
	if ts > MaxTS {
		return 0, ErrExhausted
	}
	r.last = ts
	t := MakeTag(ts, r.id, verified)
	if r.cached >= t {
		r.stats.Writes++
		r.stats.Absorbed++
		return t, nil
	}
	rec := sealRecord(r.rec, r.seed, t, value)
	r.slotTS[ts%uint64(r.h.p.Slots)] = ts
	b := r.b
	b.Reset()
	b.Write(r.addr+farmem.Addr(r.l.slotOff(t)), rec)
	ci := b.CAS(r.word, uint64(r.cached), uint64(t))
	if err := r.m.Do(ctx, b); err != nil {
		r.alloc()
		return t, fmt.Errorf("maxreg: write: %w", err)
	}
	prev, _ := b.Result(ci)
	installed, err := r.settle(ctx, t, Tag(prev))
	if err != nil {
		return t, err
	}
	r.stats.Writes++
	if !installed {
		r.stats.Absorbed++
		return t, nil
	}
	r.refresh(t, rec)
	return t, nil
}

// settle finishes the MAX of t into the client's word after a CAS expecting r.cached found
// prev: installed if prev was r.cached, absorbed once the word holds a larger tag, else CAS
// again from what was found (each failure strictly raises the expected value, so the loop ends).
func (r *Register) settle(ctx context.Context, t, prev Tag) (bool, error) {
	for {
		if prev == r.cached {
			r.cached = t
			return true, nil
		}
		r.cached = prev
		if prev >= t {
			return false, nil
		}
		r.stats.CASRetries++
		p, err := r.m.CAS(ctx, r.word, uint64(r.cached), uint64(t))
		if err != nil {
			return false, fmt.Errorf("maxreg: write: %w", err)
		}
		prev = Tag(p)
	}
}

// Verify raises the client's own tag t (from WriteFlag with verified false) to VERIFIED: a CAS
// of the metadata word, no data, since the in-place copy and the buffer are bound to the
// identity, not the flag. Absorbed (no effect, no error) if the word already holds a larger
// tag. t must be one of the handle's last Params.Slots writes whose buffer was not reused
// since (ErrReused otherwise: installing it would point readers at another write's record).
// VerifyRoundTrips, plus CASRetryRoundTrips per lost CAS.
func (r *Register) Verify(ctx context.Context, t Tag) error {
	if r.closed {
		return ErrClosed
	}
	if t.Client() != r.id || !r.writer {
		return fmt.Errorf("%w: tag of client %d verified by client %d", ErrNotWriter, t.Client(), r.id)
	}
	if t.TS() == 0 || r.slotTS[t.TS()%uint64(r.h.p.Slots)] != t.TS() {
		return fmt.Errorf("%w: %v", ErrReused, t)
	}
	v := t | VerifiedBit
	if r.cached >= v {
		return nil
	}
	p, err := r.m.CAS(ctx, r.word, uint64(r.cached), uint64(v))
	if err != nil {
		return fmt.Errorf("maxreg: verify: %w", err)
	}
	_, err = r.settle(ctx, v, Tag(p))
	return err
}

// refresh asks for the in-place copy to become rec (the sealed record of t).
func (r *Register) refresh(t Tag, rec []byte) {
	if r.opts.OutOfPlaceOnly {
		return
	}
	r.stats.Refreshes++
	cp := append([]byte(nil), rec...)
	in := r.addr + farmem.Addr(r.l.inOff)
	if f := r.opts.Refresher; f != nil {
		f.enqueue(in, t, cp)
		return
	}
	b := new(farmem.Batch)
	b.Unsignaled(b.Write(in, cp))
	r.m.Post(context.Background(), b)
}

// Read returns the register's tag and value (a new slice), or the zero Tag and nil if it is
// empty. See AppendRead.
func (r *Register) Read(ctx context.Context) (Tag, []byte, error) {
	return r.AppendRead(ctx, nil)
}

// AppendRead reads the register and appends its value to dst.
//
// One Read fetches the k metadata words and the in-place record; the register's tag is the
// largest word. If the in-place record names that tag's write (the identity: timestamp and
// client) and its hash holds, its value is returned: ReadRoundTrips. Otherwise (torn by a
// concurrent refresh, or stale) the tag's out-of-place buffer is read and returned if it still
// names the tag: ReadChaseRoundTrips, and the in-place copy is refreshed in the background. A
// buffer already reused by its writer (who completed Params.Slots more writes meanwhile, the
// last of them begun) fails its check, and the read starts over; the value returned is always
// the one written with the tag returned. Any write that completed before the read began is at
// most the tag returned, and so is any read that completed before it began.
func (r *Register) AppendRead(ctx context.Context, dst []byte) (Tag, []byte, error) {
	if r.closed {
		return 0, dst, ErrClosed
	}
	le := binary.LittleEndian
	words := uint64(r.h.p.Words)
	for {
		if err := r.m.Read(ctx, r.addr+metaOff, r.buf); err != nil {
			r.alloc()
			return 0, dst, fmt.Errorf("maxreg: read: %w", err)
		}
		var top Tag
		for w := range words {
			top = max(top, Tag(le.Uint64(r.buf[8*w:])))
		}
		if top == 0 {
			r.stats.Reads++
			r.stats.Empty++
			return 0, dst, nil
		}
		id, v, err := openRecord(r.buf[8*words:], r.seed, r.h.p.ValueSize)
		switch {
		case err == nil && id == top.identity():
			r.stats.Reads++
			r.stats.InPlace++
			return top, append(dst, v...), nil
		case err == nil:
			r.stats.Stale++
		default:
			r.stats.Torn++
		}
		if err := r.m.Read(ctx, r.addr+farmem.Addr(r.l.slotOff(top)), r.slot); err != nil {
			r.alloc()
			return 0, dst, fmt.Errorf("maxreg: read: %w", err)
		}
		id, v, err = openRecord(r.slot, r.seed, r.h.p.ValueSize)
		if err == nil && id == top.identity() {
			r.stats.Reads++
			r.stats.Chased++
			r.refresh(top, r.slot[:recHeader+len(v)])
			return top, append(dst, v...), nil
		}
		r.stats.Retries++
		if err := ctx.Err(); err != nil {
			return 0, dst, fmt.Errorf("maxreg: read: %w", err)
		}
	}
}
