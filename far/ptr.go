package far

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/farmem/farmem/alloc"
	"github.com/farmem/farmem/ds/qlock"
	"github.com/farmem/farmem/farmem"
)

// Mode is how a Ptr keeps its value linearizable. See the package doc for the layouts and
// costs.
type Mode uint8

const (
	// Word: the value is encoded in one aligned 8-byte word written only with atomics, so T's
	// encoding must be at most 8 bytes. Load, Store and CompareAndSwap are one verb each;
	// Update is a CAS loop.
	Word Mode = iota + 1
	// SingleWriter: one client (the owner, see Ptr.Own) stores; any client loads. The value
	// lives in a record framed by two copies of a version; a store writes the trailing
	// version, the value and the leading version in one batch, and a load reads the record in
	// one batch (one Read where the client's Memory reads in address order, three elsewhere),
	// again if the two copies disagree (a torn read). See the package doc, "Single-writer
	// loads".
	SingleWriter
	// OutOfPlace: the value lives in an immutable block; a cell word holds the block's address
	// and is only ever changed by CAS. Store writes a new block and CASes the cell in one batch
	// to the cell's node; Load reads the cell, then the block (wait-free).
	// Replaced blocks are retired through the allocator's deferred free.
	OutOfPlace
	// Locked: OutOfPlace blocks behind a far MCS lock (ds/qlock) for read-modify-write: Update
	// takes the lock, reads, writes a new block and swaps the cell with a CAS from the block it
	// read (the fence that stops a holder whose lock was reset), and releases. Loads take no
	// lock (as OutOfPlace).
	Locked
)

// String names the mode as the package doc does ("word", "single-writer", "out-of-place",
// "locked").
func (m Mode) String() string {
	switch m {
	case Word:
		return "word"
	case SingleWriter:
		return "single-writer"
	case OutOfPlace:
		return "out-of-place"
	case Locked:
		return "locked"
	}
	return fmt.Sprintf("mode(%d)", uint8(m))
}

// lockedCell is the offset of a Locked pointer's cell: the lock entry comes first.
const lockedCell = qlock.EntrySize

// PtrOptions configure NewPtr.
type PtrOptions[T any] struct {
	// Mode is the pointer's mode (default Word when T encodes in at most 8 bytes, OutOfPlace
	// otherwise).
	Mode Mode
	// Node is the memory node the pointer and its blocks live on (default 0: the client
	// allocator's placement). Out-of-place blocks are always allocated on the pointer's node,
	// so that a store is one batch to one node.
	Node farmem.NodeID
	// Codec encodes T (default Binary[T]()).
	Codec Codec[T]
}

// Ptr is a typed far pointer: the address of a value of T in far memory, in one of the Modes.
// It is a value (address, mode, codec): copy it freely, store its Addr in far memory, and
// rebuild it with PtrAt. Its methods take the calling goroutine's Client. The zero Ptr is nil.
type Ptr[T any] struct {
	a     farmem.Addr
	mode  Mode
	size  int          // codec.Size(), kept to spare an interface call per operation
	codec intoCodec[T] // the program's codec, with DecodeInto (byValue if it had none)
}

// NewPtr allocates a pointer holding init and returns it. Costs: one round trip (the
// pointer's words and, out of place, its first block, written in one batch to its node;
// plus the allocator's chunk claims, amortised). The creator of a SingleWriter pointer owns
// it.
func NewPtr[T any](ctx context.Context, c *Client, init T, opts PtrOptions[T]) (Ptr[T], error) {
	codec, mode, err := ptrSetup(opts.Codec, opts.Mode)
	if err != nil {
		return Ptr[T]{}, err
	}
	n := codec.Size()
	var p Ptr[T]
	p.mode, p.codec, p.size = mode, withInto(codec), n
	switch mode {
	case Word:
		a, err := c.alloc(ctx, opts.Node, 8)
		if err != nil {
			return p, err
		}
		buf := c.scratch(8)
		clear(buf)
		codec.Encode(buf, init)
		if err := c.m.Write(ctx, a, buf); err != nil {
			_ = c.al.Free(a, 8)
			return p, err
		}
		p.a = a
	case SingleWriter:
		size := uint64(swRecordSize(n))
		a, err := c.alloc(ctx, opts.Node, size)
		if err != nil {
			return p, err
		}
		buf := c.scratch(int(size))
		codec.Encode(buf[8:8+n], init)
		swSeal(buf, n, 0)
		if err := c.m.Write(ctx, a, buf); err != nil {
			_ = c.al.Free(a, size)
			return p, err
		}
		p.a = a
		c.owned[a] = 0
	case OutOfPlace, Locked:
		head := uint64(8)
		if mode == Locked {
			head = lockedCell + 8
		}
		a, err := c.alloc(ctx, opts.Node, head)
		if err != nil {
			return p, err
		}
		blk, err := c.alloc(ctx, a.Node(), uint64(n))
		if err != nil {
			_ = c.al.Free(a, head)
			return p, err
		}
		buf := c.scratch(int(head) + n)
		clear(buf[:head])
		binary.LittleEndian.PutUint64(buf[head-8:head], uint64(blk))
		codec.Encode(buf[head:], init)
		b := c.batch()
		b.Write(blk, buf[head:])
		b.Write(a, buf[:head])
		if err := c.m.Do(ctx, b); err != nil {
			_ = c.al.Free(blk, uint64(n))
			_ = c.al.Free(a, head)
			return p, err
		}
		p.a = a
		c.remember(p.cell(), blk)
	}
	return p, nil
}

// PtrAt returns the pointer of the given mode at a, for an address read from far memory or
// passed between processes; codec nil means Binary[T](). It does not touch far memory, so it
// cannot check that a holds such a pointer.
func PtrAt[T any](a farmem.Addr, mode Mode, codec Codec[T]) (Ptr[T], error) {
	codec, mode, err := ptrSetup(codec, mode)
	if err != nil {
		return Ptr[T]{}, err
	}
	if a == 0 {
		return Ptr[T]{}, ErrNil
	}
	if a.Offset()%8 != 0 {
		return Ptr[T]{}, fmt.Errorf("far: pointer at %v: %w", a, farmem.ErrMisaligned)
	}
	return Ptr[T]{a: a, mode: mode, size: codec.Size(), codec: withInto(codec)}, nil
}

func ptrSetup[T any](codec Codec[T], mode Mode) (Codec[T], Mode, error) {
	if _, err := CheckType[T](); err != nil {
		return nil, 0, err
	}
	if codec == nil {
		var err error
		if codec, err = Binary[T](); err != nil {
			return nil, 0, err
		}
	}
	n := codec.Size()
	if n <= 0 || n > farmem.MaxOpBytes-8 || (mode == SingleWriter && swRecordSize(n) > farmem.MaxOpBytes) {
		return nil, 0, fmt.Errorf("far: codec size %d: %w", n, ErrType)
	}
	if mode == 0 {
		mode = OutOfPlace
		if n <= 8 {
			mode = Word
		}
	}
	switch mode {
	case Word:
		if n > 8 {
			return nil, 0, fmt.Errorf("far: %d-byte value in Word mode (at most 8): %w", n, ErrType)
		}
	case SingleWriter, OutOfPlace, Locked:
	default:
		return nil, 0, fmt.Errorf("far: %v: %w", mode, ErrMode)
	}
	return codec, mode, nil
}

// Addr returns the pointer's address (for Locked and OutOfPlace, of its cell and lock; for
// SingleWriter, of its record; for Word, of the word).
func (p Ptr[T]) Addr() farmem.Addr { return p.a }

// Mode returns the pointer's mode.
func (p Ptr[T]) Mode() Mode { return p.mode }

// IsNil reports whether p is the zero Ptr.
func (p Ptr[T]) IsNil() bool { return p.a == 0 }

// Codec returns the pointer's codec.
func (p Ptr[T]) Codec() Codec[T] {
	if p.codec == nil {
		return nil
	}
	return unwrapInto(p.codec)
}

func (p Ptr[T]) cell() farmem.Addr {
	if p.mode == Locked {
		return p.a.Add(lockedCell)
	}
	return p.a
}

// Load returns the value, in WordLoadRoundTrips, SingleWriterLoadRoundTrips (plus one per torn
// read), OutOfPlaceLoadRoundTrips or LockedLoadRoundTrips (no lock), plus the allocator's pin
// when the client's epoch announcement is older than its Refresh. It allocates nothing once
// the client's scratch buffer has grown (with Binary's composite codec, nothing once its pool
// is warm). For a T of more than a few words, LoadInto costs less.
func (p Ptr[T]) Load(ctx context.Context, c *Client) (v T, err error) {
	if p.mode != SingleWriter || p.a == 0 {
		return p.loadOther(ctx, c)
	}
	if !c.ordered {
		err = p.loadBatched(ctx, c, noescape(&v))
		return v, err
	}
	// As LoadInto, decoding into the result.
	n := p.size
	rec := c.scratch(swRecordSize(n))
	for {
		if err = c.m.Read(ctx, p.a, rec); err != nil {
			return v, err
		}
		if swValid(rec) {
			p.codec.DecodeInto(rec[8:8+n], noescape(&v))
			return v, nil
		}
		c.stats.TornRetries++
	}
}

// LoadInto is Load that sets *dst (left as it was on error), with the codec's DecodeInto when
// it has one (DecoderInto): the fields are written in place, with none of the copies of
// returning a large T by value. dst does not escape: a variable of the caller's stays on its
// stack. Costs and linearizability as Load. This is the cheapest typed load of a
// SingleWriter pointer: one Read of the record, the check, the decode.
func (p Ptr[T]) LoadInto(ctx context.Context, c *Client, dst *T) error {
	if p.mode != SingleWriter || p.a == 0 {
		v, err := p.loadOther(ctx, c)
		if err == nil {
			*dst = v
		}
		return err
	}
	if !c.ordered {
		return p.loadBatched(ctx, c, noescape(dst))
	}
	// The single-writer load on a Memory that reads in address order, the hot path: one Read
	// of the record, again while it is torn.
	n := p.size
	rec := c.scratch(swRecordSize(n))
	for {
		if err := c.m.Read(ctx, p.a, rec); err != nil {
			return err
		}
		if swValid(rec) {
			p.codec.DecodeInto(rec[8:8+n], noescape(dst))
			return nil
		}
		c.stats.TornRetries++
	}
}

// loadBatched is the single-writer load on a Memory that does not read in address order:
// the record read as H, the value and T, three Reads in one batch, again while it is torn,
// and the value decoded from it in place into *dst, which the caller has hidden from escape
// analysis.
func (p Ptr[T]) loadBatched(ctx context.Context, c *Client, dst *T) error {
	n := p.size
	rec := c.scratch(swRecordSize(n))
	for {
		b := c.batch()
		swReads(b, p.a, rec, false)
		if err := c.m.Do(ctx, b); err != nil {
			return err
		}
		if swValid(rec) {
			p.codec.DecodeInto(rec[8:8+n], dst)
			return nil
		}
		c.stats.TornRetries++
	}
}

// loadOther is Load in the modes other than SingleWriter.
func (p Ptr[T]) loadOther(ctx context.Context, c *Client) (T, error) {
	var zero T
	if p.a == 0 {
		return zero, ErrNil
	}
	if p.mode == Word {
		buf := c.scratch(8)
		if err := c.m.Read(ctx, p.a, buf); err != nil {
			return zero, err
		}
		return p.codec.Decode(buf), nil
	}
	for {
		if err := c.al.Pin(ctx); err != nil {
			return zero, err
		}
		_, v, err := p.readBlock(ctx, c, 0)
		uerr := c.al.Unpin()
		if err != nil {
			return zero, err
		}
		if errors.Is(uerr, alloc.ErrPinExpired) {
			continue // the block may have been reused under us
		}
		if uerr != nil {
			return zero, uerr
		}
		return v, nil
	}
}

// readBlock reads the cell (unless blk is already known) and the block it names; the caller
// is pinned.
func (p Ptr[T]) readBlock(ctx context.Context, c *Client, blk farmem.Addr) (farmem.Addr, T, error) {
	var zero T
	n := p.size
	buf := c.scratch(8 + n)
	cell := p.cell()
	if blk == 0 {
		if err := c.m.Read(ctx, cell, buf[:8]); err != nil {
			return 0, zero, err
		}
		blk = farmem.Addr(binary.LittleEndian.Uint64(buf[:8]))
		if blk == 0 {
			return 0, zero, fmt.Errorf("far: pointer %v: cell is empty: %w", p.a, ErrNil)
		}
	}
	if err := c.m.Read(ctx, blk, buf[8:8+n]); err != nil {
		return 0, zero, err
	}
	c.remember(cell, blk)
	return blk, p.codec.Decode(buf[8 : 8+n]), nil
}

// Store sets the value, in the mode's StoreRoundTrips constant: Word swaps the word;
// SingleWriter writes in one batch (only the owner may store, ErrNotOwner otherwise);
// OutOfPlace writes the new block and CASes the cell in one batch, adding StaleStoreRoundTrips
// when the cell no longer holds the block this client last saw there, and one per store by
// another client that lands in between; Locked is Update without reading the old block.
func (p Ptr[T]) Store(ctx context.Context, c *Client, v T) error {
	if p.a == 0 {
		return ErrNil
	}
	n := p.size
	switch p.mode {
	case Word:
		buf := c.scratch(8)
		clear(buf)
		p.codec.Encode(buf, v)
		_, err := c.m.MaskedCAS(ctx, p.a, 0, 0, binary.LittleEndian.Uint64(buf), ^uint64(0))
		return err
	case SingleWriter:
		s, ok := c.owned[p.a]
		if !ok {
			return fmt.Errorf("far: store to %v: %w", p.a, ErrNotOwner)
		}
		rec := c.scratch(swRecordSize(n))
		p.codec.Encode(rec[8:8+n], v)
		swSeal(rec, n, s+1)
		end := len(rec) - 8
		// T, then the value, then H: a reader that copies the record in address order
		// reads H first and T last, the reverse of this order (package doc).
		b := c.batch()
		b.Write(p.a.Add(uint64(end)), rec[end:])
		b.Write(p.a.Add(8), rec[8:end])
		b.Write(p.a, rec[:8])
		// Whatever the outcome, the next store uses a new version, so a store that failed half
		// way (H and T left unequal) is repaired by the next one.
		c.owned[p.a] = s + 1
		return c.m.Do(ctx, b)
	case OutOfPlace:
		return p.storeOutOfPlace(ctx, c, v)
	default:
		_, err := p.lockedUpdate(ctx, c, func(T) T { return v }, false)
		return err
	}
}

func (p Ptr[T]) storeOutOfPlace(ctx context.Context, c *Client, v T) error {
	n := p.size
	if err := c.al.Pin(ctx); err != nil {
		return err
	}
	defer func() { _ = c.al.Unpin() }() // a store reads no block: an expired pin is harmless
	blk, err := c.alloc(ctx, p.a.Node(), uint64(n))
	if err != nil {
		return err
	}
	buf := c.scratch(n)
	p.codec.Encode(buf, v)
	cell := p.cell()
	old := c.seen[cell]
	written := false
	for {
		b := c.batch()
		if !written {
			b.Write(blk, buf)
		}
		i := b.CAS(cell, uint64(old), uint64(blk))
		if err := c.m.Do(ctx, b); err != nil {
			if !written && !errors.Is(err, farmem.ErrNodeDown) && ctx.Err() == nil {
				_ = c.al.Free(blk, uint64(n)) // refused unapplied: never published
			}
			return err // the outcome may be unknown: the block may be published, keep it
		}
		written = true
		prev, _ := b.Result(i)
		if farmem.Addr(prev) == old {
			break
		}
		c.stats.CASRetries++
		old = farmem.Addr(prev)
		if old == 0 {
			return fmt.Errorf("far: pointer %v: cell is empty: %w", p.a, ErrNil)
		}
	}
	c.remember(cell, blk)
	if old != 0 {
		return c.al.Retire(ctx, old, uint64(n))
	}
	return nil
}

// CompareAndSwap sets the value to new if it is old, comparing encodings (so for floats, bit
// patterns: -0 differs from +0, and a NaN equals the same NaN). Word mode only (ErrMode
// otherwise): one CAS, WordStoreRoundTrips.
func (p Ptr[T]) CompareAndSwap(ctx context.Context, c *Client, old, new T) (bool, error) {
	if p.a == 0 {
		return false, ErrNil
	}
	if p.mode != Word {
		return false, fmt.Errorf("far: CompareAndSwap on a %v pointer: %w", p.mode, ErrMode)
	}
	buf := c.scratch(16)
	clear(buf)
	p.codec.Encode(buf[0:8], old)
	p.codec.Encode(buf[8:16], new)
	o := binary.LittleEndian.Uint64(buf[0:8])
	prev, err := c.m.CAS(ctx, p.a, o, binary.LittleEndian.Uint64(buf[8:16]))
	return err == nil && prev == o, err
}

// Update applies fn to the value atomically and returns the new value. fn may run several
// times (it must have no side effects beyond its result). Costs, uncontended, are the mode's
// UpdateRoundTrips constant (SingleWriter: owner only); under contention Word adds one round
// trip per lost CAS, OutOfPlace two, and Locked waits in the lock's queue instead.
// Word and OutOfPlace updates are lock-free; Locked ones wait in the lock's FIFO queue.
func (p Ptr[T]) Update(ctx context.Context, c *Client, fn func(T) T) (T, error) {
	var zero T
	if p.a == 0 {
		return zero, ErrNil
	}
	switch p.mode {
	case Word:
		buf := c.scratch(16)
		if err := c.m.Read(ctx, p.a, buf[0:8]); err != nil {
			return zero, err
		}
		cur := binary.LittleEndian.Uint64(buf[0:8])
		for {
			nv := fn(p.codec.Decode(buf[0:8]))
			clear(buf[8:16])
			p.codec.Encode(buf[8:16], nv)
			prev, err := c.m.CAS(ctx, p.a, cur, binary.LittleEndian.Uint64(buf[8:16]))
			if err != nil {
				return zero, err
			}
			if prev == cur {
				return nv, nil
			}
			c.stats.CASRetries++
			cur = prev
			binary.LittleEndian.PutUint64(buf[0:8], cur)
		}
	case SingleWriter:
		if _, ok := c.owned[p.a]; !ok {
			return zero, fmt.Errorf("far: update of %v: %w", p.a, ErrNotOwner)
		}
		v, err := p.Load(ctx, c)
		if err != nil {
			return zero, err
		}
		nv := fn(v)
		return nv, p.Store(ctx, c, nv)
	case OutOfPlace:
		return p.updateOutOfPlace(ctx, c, fn)
	default:
		return p.lockedUpdate(ctx, c, fn, true)
	}
}

func (p Ptr[T]) updateOutOfPlace(ctx context.Context, c *Client, fn func(T) T) (T, error) {
	var zero T
	n := p.size
	if err := c.al.Pin(ctx); err != nil {
		return zero, err
	}
	defer func() { _ = c.al.Unpin() }()
	cell := p.cell()
	var nblk, blk farmem.Addr
	for {
		var cur T
		var err error
		if blk, cur, err = p.readBlock(ctx, c, blk); err != nil {
			if nblk != 0 {
				_ = c.al.Free(nblk, uint64(n))
			}
			return zero, err
		}
		nv := fn(cur)
		if nblk == 0 {
			if nblk, err = c.alloc(ctx, p.a.Node(), uint64(n)); err != nil {
				return zero, err
			}
		}
		buf := c.scratch(n)
		p.codec.Encode(buf, nv)
		b := c.batch()
		b.Write(nblk, buf)
		i := b.CAS(cell, uint64(blk), uint64(nblk))
		if err := c.m.Do(ctx, b); err != nil {
			return zero, err // the outcome may be unknown: keep the block
		}
		prev, _ := b.Result(i)
		if farmem.Addr(prev) == blk {
			c.remember(cell, nblk)
			return nv, c.al.Retire(ctx, blk, uint64(n))
		}
		c.stats.CASRetries++
		blk = farmem.Addr(prev)
		if blk == 0 {
			return zero, fmt.Errorf("far: pointer %v: cell is empty: %w", p.a, ErrNil)
		}
	}
}

// lockedUpdate runs fn under the pointer's far lock. The new block replaces the old one with a
// CAS from the cell value read under the lock: if the lock was reset while this client held
// it (it was paused past the lock's lease), the CAS fails whenever another client wrote
// meanwhile, and the update runs again.
func (p Ptr[T]) lockedUpdate(ctx context.Context, c *Client, fn func(T) T, readOld bool) (T, error) {
	var zero T
	n := p.size
	lk, err := c.locker()
	if err != nil {
		return zero, err
	}
	cell := p.cell()
	var nblk farmem.Addr
	for {
		acq, _, err := lk.Lock(ctx, p.a)
		if err != nil {
			return zero, err
		}
		nv, blk, swapped, err := p.lockedSection(ctx, c, fn, readOld, &nblk)
		rerr := acq.Release(ctx, 0, 0)
		if err != nil {
			return zero, err
		}
		if swapped {
			// The CAS fenced the write: it took effect whatever Release says (a reset lock, or
			// a node that went down after the swap; waiters then reset the lock by its lease).
			c.remember(cell, nblk)
			return nv, c.al.Retire(ctx, blk, uint64(n))
		}
		c.stats.Fenced++
		if rerr != nil && !errors.Is(rerr, qlock.ErrReset) {
			return zero, rerr
		}
	}
}

// lockedSection is the critical section of a Locked update, pinned.
func (p Ptr[T]) lockedSection(ctx context.Context, c *Client, fn func(T) T, readOld bool, nblk *farmem.Addr) (T, farmem.Addr, bool, error) {
	var zero T
	n := p.size
	if err := c.al.Pin(ctx); err != nil {
		return zero, 0, false, err
	}
	defer func() { _ = c.al.Unpin() }()
	cell := p.cell()
	var blk farmem.Addr
	var cur T
	if readOld {
		var err error
		if blk, cur, err = p.readBlock(ctx, c, 0); err != nil {
			return zero, 0, false, err
		}
	} else {
		buf := c.scratch(8)
		if err := c.m.Read(ctx, cell, buf); err != nil {
			return zero, 0, false, err
		}
		blk = farmem.Addr(binary.LittleEndian.Uint64(buf))
		if blk == 0 {
			return zero, 0, false, fmt.Errorf("far: pointer %v: cell is empty: %w", p.a, ErrNil)
		}
	}
	nv := fn(cur)
	if *nblk == 0 {
		a, err := c.alloc(ctx, p.a.Node(), uint64(n))
		if err != nil {
			return zero, 0, false, err
		}
		*nblk = a
	}
	buf := c.scratch(n)
	p.codec.Encode(buf, nv)
	b := c.batch()
	b.Write(*nblk, buf)
	i := b.CAS(cell, uint64(blk), uint64(*nblk))
	if err := c.m.Do(ctx, b); err != nil {
		return zero, 0, false, err
	}
	prev, _ := b.Result(i)
	return nv, blk, farmem.Addr(prev) == blk, nil
}

// Own makes c the owner of a SingleWriter pointer (ErrMode for other modes): it reads the
// record's two version words (one round trip) and continues from the larger, so that a store
// left half done by the previous owner is overwritten with a version never used before. Ownership is the program's discipline, not a lock: at most
// one client may own a pointer at a time, and a hand-over must be ordered by the program
// (the old owner's last Store returns before the new owner's Own). Two owners storing at once
// break the version protocol and loads may then return a torn value.
func (p Ptr[T]) Own(ctx context.Context, c *Client) error {
	if p.a == 0 {
		return ErrNil
	}
	if p.mode != SingleWriter {
		return fmt.Errorf("far: Own of a %v pointer: %w", p.mode, ErrMode)
	}
	rec := c.scratch(swRecordSize(p.size))
	end := len(rec) - 8
	b := c.batch()
	b.Read(p.a, rec[:8])
	b.Read(p.a.Add(uint64(end)), rec[end:])
	if err := c.m.Do(ctx, b); err != nil {
		return err
	}
	c.owned[p.a] = max(binary.LittleEndian.Uint64(rec[:8]), binary.LittleEndian.Uint64(rec[end:]))
	return nil
}

// Disown ends c's ownership of a SingleWriter pointer (no verb).
func (p Ptr[T]) Disown(c *Client) { delete(c.owned, p.a) }

// Free retires the pointer and its current block through the allocator's deferred free (no
// round trip for Word and SingleWriter while the client's announcement is live; one Read of
// the cell for OutOfPlace and Locked). The caller must make sure no client uses it afterwards.
func (p Ptr[T]) Free(ctx context.Context, c *Client) error {
	if p.a == 0 {
		return ErrNil
	}
	n := uint64(p.size)
	switch p.mode {
	case Word:
		return c.al.Retire(ctx, p.a, 8)
	case SingleWriter:
		delete(c.owned, p.a)
		return c.al.Retire(ctx, p.a, uint64(swRecordSize(p.size)))
	}
	head := uint64(8)
	if p.mode == Locked {
		head = lockedCell + 8
	}
	buf := c.scratch(8)
	if err := c.m.Read(ctx, p.cell(), buf); err != nil {
		return err
	}
	delete(c.seen, p.cell())
	if blk := farmem.Addr(binary.LittleEndian.Uint64(buf)); blk != 0 {
		if err := c.al.Retire(ctx, blk, n); err != nil {
			return err
		}
	}
	return c.al.Retire(ctx, p.a, head)
}

// maxLoadMany is how many pointers one batch of LoadMany reads (at most three ops each: a
// single-writer record read as H, value, T).
const maxLoadMany = farmem.MaxBatchOps / 3

// LoadMany loads every pointer of ps into out (len(out) must be at least len(ps)). Pointers
// of every mode and on any nodes may be mixed; their reads go out together, so the call costs
// LoadManyRoundTrips when no pointer is OutOfPlace or Locked and LoadManyIndirectRoundTrips
// otherwise, plus one per round of torn single-writer reads, per farmem.MaxBatchOps/3 pointers.
func LoadMany[T any](ctx context.Context, c *Client, ps []Ptr[T], out []T) error {
	if len(out) < len(ps) {
		return fmt.Errorf("far: LoadMany: %d pointers into %d values: %w", len(ps), len(out), farmem.ErrInvalid)
	}
	for len(ps) > maxLoadMany {
		if err := LoadMany(ctx, c, ps[:maxLoadMany], out); err != nil {
			return err
		}
		ps, out = ps[maxLoadMany:], out[maxLoadMany:]
	}
	if len(ps) == 0 {
		return nil
	}
	stride := 16
	indirect := false
	for _, p := range ps {
		if p.a == 0 {
			return ErrNil
		}
		stride = max(stride, 16+p.size)
		if p.mode == SingleWriter {
			stride = max(stride, swRecordSize(p.size))
		}
		indirect = indirect || p.mode == OutOfPlace || p.mode == Locked
	}
	stride = (stride + 7) &^ 7
	if indirect {
		if err := c.al.Pin(ctx); err != nil {
			return err
		}
	}
	err := loadMany(ctx, c, ps, out, stride)
	if indirect {
		uerr := c.al.Unpin()
		if err == nil && errors.Is(uerr, alloc.ErrPinExpired) {
			return LoadMany(ctx, c, ps, out) // a block may have been reused under us
		}
		if err == nil {
			err = uerr
		}
	}
	return err
}

// loadMany is LoadMany of at most maxLoadMany pointers, pinned if any is indirect.
func loadMany[T any](ctx context.Context, c *Client, ps []Ptr[T], out []T, stride int) error {
	buf := c.scratch(len(ps) * stride)
	slot := func(i int) []byte { return buf[i*stride : (i+1)*stride] }
	// pending[i]: 0 done; 1 first pass (every pointer); 2 the block of an indirect pointer
	// (its address in the slot's first word); 3 a single-writer pointer to read again.
	pending := make([]uint8, len(ps))
	for i := range pending {
		pending[i] = 1
	}
	for {
		b := c.batch()
		for i, p := range ps {
			s, n := slot(i), p.size
			switch {
			case pending[i] == 0:
			case p.mode == Word:
				b.Read(p.a, s[16:24])
			case p.mode == SingleWriter:
				swReads(b, p.a, s[:swRecordSize(n)], c.ordered)
			case pending[i] == 1:
				b.Read(p.cell(), s[0:8])
			default:
				b.Read(farmem.Addr(binary.LittleEndian.Uint64(s[0:8])), s[16:16+n])
			}
		}
		if len(b.Ops) == 0 {
			return nil
		}
		if err := c.m.Do(ctx, b); err != nil {
			return err
		}
		for i, p := range ps {
			s, n := slot(i), p.size
			switch {
			case pending[i] == 0:
			case p.mode == Word:
				out[i], pending[i] = p.codec.Decode(s[16:24]), 0
			case p.mode == SingleWriter:
				if swValid(s[:swRecordSize(n)]) {
					out[i], pending[i] = p.codec.Decode(s[8:8+n]), 0
				} else {
					c.stats.TornRetries++
					pending[i] = 3
				}
			case pending[i] == 1:
				blk := farmem.Addr(binary.LittleEndian.Uint64(s[0:8]))
				if blk == 0 {
					return fmt.Errorf("far: pointer %v: cell is empty: %w", p.a, ErrNil)
				}
				pending[i] = 2
			default:
				c.remember(p.cell(), farmem.Addr(binary.LittleEndian.Uint64(s[0:8])))
				out[i], pending[i] = p.codec.Decode(s[16:16+n]), 0
			}
		}
	}
}
