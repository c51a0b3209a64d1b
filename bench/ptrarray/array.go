package ptrarray

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"github.com/farmem/farmem/alloc"
	"github.com/farmem/farmem/ds/ptrsync"
	"github.com/farmem/farmem/ds/qlock"
	"github.com/farmem/farmem/farmem"
)

// Errors of the pointer array. Operations also return the transport's errors wrapped
// (farmem.ErrNodeDown, a context's error): such an operation may or may not have taken effect.
var (
	// ErrNotFound: Search, Update or Delete of a key the array does not hold.
	ErrNotFound = errors.New("ptrarray: key not found")
	// ErrExists: Insert of a key the array holds.
	ErrExists = errors.New("ptrarray: key exists")
	// ErrKeyRange: a key at or beyond the array's size.
	ErrKeyRange = fmt.Errorf("ptrarray: key out of range: %w", farmem.ErrInvalid)
	// ErrTooLarge: a value longer than MaxValue.
	ErrTooLarge = fmt.Errorf("ptrarray: value too large: %w", farmem.ErrInvalid)
	// ErrBadRoot: the address given to Open holds no pointer array.
	ErrBadRoot = fmt.Errorf("ptrarray: bad pointer array root: %w", farmem.ErrInvalid)
	// ErrCorrupt: a KV block that does not hold its key.
	ErrCorrupt = errors.New("ptrarray: corrupt block")
)

// Layout of the pointer array (see the package doc).
const (
	// RecordSize is the size of one key's record: its lock entry and its data pointer.
	RecordSize = qlock.EntrySize + 8
	recPtr     = qlock.EntrySize
	// MaxValue is the longest value (a block is at most 0xffff 16-byte units).
	MaxValue = 0xffff*16 - blockHeader
	// blockHeader is a KV block's key and value length.
	blockHeader = 16

	arrayMagic   = 0x41525450_6d726166 // "farmPTRA", little-endian
	arrayVersion = 1
	rootHeader   = 32
	maxShards    = 4096
)

// Params lay out a pointer array.
type Params struct {
	// Keys is the number of keys (0..Keys-1), one data pointer each.
	Keys uint64
	// Nodes are the memory nodes the records are spread over, key k on Nodes[k%len(Nodes)]
	// (default: every memory node). A key's KV blocks are allocated on its record's node.
	Nodes []farmem.NodeID
}

// Create builds an empty pointer array in far memory with a's allocator and returns its root
// address: one zeroed run of records per node, and the root (on Nodes[0]).
func Create(ctx context.Context, m farmem.Memory, a *alloc.Allocator, p Params) (farmem.Addr, error) {
	if len(p.Nodes) == 0 {
		p.Nodes = m.Topology().MemoryNodes()
	}
	if p.Keys == 0 || len(p.Nodes) == 0 || len(p.Nodes) > maxShards {
		return 0, fmt.Errorf("ptrarray: pointer array of %d keys on %d nodes: %w", p.Keys, len(p.Nodes), farmem.ErrInvalid)
	}
	s := uint64(len(p.Nodes))
	root := make([]byte, rootHeader+8*s)
	le := binary.LittleEndian
	le.PutUint64(root[0:], arrayMagic)
	le.PutUint64(root[8:], arrayVersion|s<<8)
	le.PutUint64(root[16:], p.Keys)
	for i, n := range p.Nodes {
		count := uint64(1) // a node with no key still gets a record, so every base is valid
		if uint64(i) < p.Keys {
			count = (p.Keys - uint64(i) + s - 1) / s
		}
		size := count * RecordSize
		base, err := a.AllocOn(ctx, n, size, 64)
		if err != nil {
			return 0, fmt.Errorf("ptrarray: records on %v: %w", n, err)
		}
		if err := zero(ctx, m, base, size); err != nil {
			return 0, err
		}
		le.PutUint64(root[rootHeader+8*i:], uint64(base))
	}
	le.PutUint64(root[24:], rootSum(root))
	addr, err := a.AllocOn(ctx, p.Nodes[0], uint64(len(root)), 64)
	if err != nil {
		return 0, fmt.Errorf("ptrarray: root: %w", err)
	}
	if err := m.Write(ctx, addr, root); err != nil {
		return 0, fmt.Errorf("ptrarray: write root: %w", err)
	}
	return addr, nil
}

// rootSum is the checksum of a root with its checksum word ignored.
func rootSum(root []byte) uint64 {
	h := uint64(0x9e3779b97f4a7c15)
	for i := 0; i+8 <= len(root); i += 8 {
		if i == 24 {
			continue
		}
		h = (h ^ binary.LittleEndian.Uint64(root[i:])) * 0xbf58476d1ce4e5b9
		h ^= h >> 29
	}
	return h
}

// zero writes size zero bytes at a, in batches of writes of at most 1 MiB.
func zero(ctx context.Context, m farmem.Memory, a farmem.Addr, size uint64) error {
	const piece = 1 << 20
	buf := make([]byte, min(size, piece))
	for off := uint64(0); off < size; {
		var b farmem.Batch
		for ; off < size && len(b.Ops) < 64; off += piece {
			b.Write(a.Add(off), buf[:min(piece, size-off)])
		}
		if err := m.Do(ctx, &b); err != nil {
			return fmt.Errorf("ptrarray: clear records: %w", err)
		}
	}
	return nil
}

// DecodeRoot validates a root's bytes and returns its key count and the base of each node's
// records. It never panics.
func DecodeRoot(b []byte) (keys uint64, bases []farmem.Addr, err error) {
	le := binary.LittleEndian
	if len(b) < rootHeader || le.Uint64(b) != arrayMagic || le.Uint64(b[8:])&0xff != arrayVersion {
		return 0, nil, ErrBadRoot
	}
	s := le.Uint64(b[8:]) >> 8
	if s == 0 || s > maxShards || uint64(len(b)) < rootHeader+8*s {
		return 0, nil, ErrBadRoot
	}
	b = b[:rootHeader+8*s]
	if le.Uint64(b[24:]) != rootSum(b) {
		return 0, nil, ErrBadRoot
	}
	keys = le.Uint64(b[16:])
	if keys == 0 {
		return 0, nil, ErrBadRoot
	}
	bases = make([]farmem.Addr, s)
	for i := range bases {
		bases[i] = farmem.Addr(le.Uint64(b[rootHeader+8*i:]))
		if bases[i] == 0 || bases[i].Offset()%8 != 0 {
			return 0, nil, ErrBadRoot
		}
	}
	return keys, bases, nil
}

// Options configure a client's handle on a pointer array.
type Options struct {
	// Sync makes the pointer changes of Update and Delete (default a new ptrsync.Optimistic).
	Sync ptrsync.Synchronizer
	// PinBudget is how long an operation may stay pinned before it re-pins (before a CAS, never
	// after one); it must stay below the allocator's lease minus its refresh and the clock skew
	// (default 250ms, for alloc's default 1s lease).
	PinBudget time.Duration
}

// Stats count one handle's operations.
type Stats struct {
	Searches, Inserts, Updates, Deletes uint64
	// Reads counts reads of a data pointer (the first round trip of every operation but
	// Insert, and the rereads after a Retry); Repins operations that outran PinBudget.
	Reads, Repins uint64
}

// Array is one client's handle on a pointer array (the CIDER paper's micro-benchmark): key k's
// data pointer names an out-of-place KV block, changed by a CAS through the synchronizer. Like
// the client's farmem.Memory and alloc.Allocator it belongs to one goroutine.
type Array struct {
	m     farmem.Memory
	a     *alloc.Allocator
	rt    farmem.Runtime
	sync  ptrsync.Synchronizer
	opts  Options
	keys  uint64
	bases []farmem.Addr
	pinAt farmem.Time
	stats Stats
}

// Open returns client m's handle on the array at root: one round trip (the root).
func Open(ctx context.Context, m farmem.Memory, a *alloc.Allocator, root farmem.Addr, opts Options) (*Array, error) {
	if a == nil {
		return nil, fmt.Errorf("ptrarray: array without an allocator: %w", farmem.ErrInvalid)
	}
	if opts.Sync == nil {
		opts.Sync = ptrsync.NewOptimistic()
	}
	if opts.PinBudget == 0 {
		opts.PinBudget = 250 * time.Millisecond
	}
	if opts.PinBudget < 0 {
		return nil, fmt.Errorf("ptrarray: pin budget %v: %w", opts.PinBudget, farmem.ErrInvalid)
	}
	if n := opts.Sync.LockSize(); n < 0 || n > recPtr || n%8 != 0 {
		return nil, fmt.Errorf("ptrarray: a synchronizer wanting %d bytes of lock entry (a record keeps %d): %w", n, recPtr, farmem.ErrInvalid)
	}
	buf := make([]byte, rootHeader+8*maxShards)
	if err := m.Read(ctx, root, buf[:rootHeader]); err != nil {
		return nil, fmt.Errorf("ptrarray: open %v: %w", root, err)
	}
	s := binary.LittleEndian.Uint64(buf[8:]) >> 8
	if s == 0 || s > maxShards {
		return nil, ErrBadRoot
	}
	if err := m.Read(ctx, root.Add(rootHeader), buf[rootHeader:rootHeader+8*s]); err != nil {
		return nil, fmt.Errorf("ptrarray: open %v: %w", root, err)
	}
	keys, bases, err := DecodeRoot(buf[:rootHeader+8*s])
	if err != nil {
		return nil, err
	}
	return &Array{m: m, a: a, rt: m.Runtime(), sync: opts.Sync, opts: opts, keys: keys, bases: bases}, nil
}

// Keys returns the number of keys.
func (r *Array) Keys() uint64 { return r.keys }

// Stats returns the handle's counters.
func (r *Array) Stats() Stats { return r.stats }

// Sync returns the handle's synchronizer.
func (r *Array) Sync() ptrsync.Synchronizer { return r.sync }

// Record returns the address of key k's record (its lock entry; the data pointer follows).
func (r *Array) Record(k uint64) farmem.Addr {
	s := uint64(len(r.bases))
	return r.bases[k%s].Add(k / s * RecordSize)
}

func (r *Array) check(k uint64, v []byte) error {
	if k >= r.keys {
		return fmt.Errorf("ptrarray: key %d of %d: %w", k, r.keys, ErrKeyRange)
	}
	if len(v) > MaxValue {
		return fmt.Errorf("ptrarray: value of %d bytes: %w", len(v), ErrTooLarge)
	}
	return nil
}

func (r *Array) pin(ctx context.Context) error {
	if err := r.a.Pin(ctx); err != nil {
		return fmt.Errorf("ptrarray: pin: %w", err)
	}
	r.pinAt = r.rt.Now()
	return nil
}

// fresh re-pins an operation that has been pinned longer than its budget, before it acts on
// what it read; it reports false if it did (the caller must read again).
func (r *Array) fresh(ctx context.Context) (bool, error) {
	if r.rt.Now().Sub(r.pinAt) <= r.opts.PinBudget {
		return true, nil
	}
	r.stats.Repins++
	_ = r.a.Unpin()
	return false, r.pin(ctx)
}

// block is a KV block an operation writes: key, value length, value, padding to 8 bytes.
type block struct {
	addr    farmem.Addr
	bytes   []byte
	size    uint64
	ptr     Pointer // the data pointer naming it
	written bool
	visible bool
}

func encodeBlock(k uint64, v []byte) []byte {
	b := make([]byte, blockHeader+(len(v)+7)&^7)
	binary.LittleEndian.PutUint64(b, k)
	binary.LittleEndian.PutUint64(b[8:], uint64(len(v)))
	copy(b[blockHeader:], v)
	return b
}

// DecodeBlock returns the value of a KV block of key k, or ErrCorrupt. It never panics.
func DecodeBlock(b []byte, k uint64) ([]byte, error) {
	if len(b) < blockHeader || binary.LittleEndian.Uint64(b) != k {
		return nil, ErrCorrupt
	}
	n := binary.LittleEndian.Uint64(b[8:])
	if n > uint64(len(b)-blockHeader) {
		return nil, ErrCorrupt
	}
	return b[blockHeader : blockHeader+n], nil
}

// newBlock allocates and encodes (but does not write) a block of k and v on node n, and packs
// the pointer that will name it.
func (r *Array) newBlock(ctx context.Context, n farmem.NodeID, k uint64, v []byte) (*block, error) {
	bytes := encodeBlock(k, v)
	size := uint64(len(bytes))
	a, err := r.a.AllocOn(ctx, n, size, 16)
	if err != nil {
		return nil, fmt.Errorf("ptrarray: allocate KV block: %w", err)
	}
	nb := &block{addr: a, bytes: bytes, size: size}
	if nb.ptr, err = MakePointer(a, size); err != nil {
		r.drop(nb)
		return nil, err
	}
	return nb, nil
}

// drop gives back a block the operation will not publish.
func (r *Array) drop(nb *block) {
	if nb != nil && !nb.visible {
		_ = r.a.Free(nb.addr, nb.size)
	}
}

// retire hands back the block a replaced pointer named.
func (r *Array) retire(ctx context.Context, w uint64) {
	if w == 0 {
		return
	}
	p := Pointer(w)
	// Retire fails only when the allocator is closed or the home node is down: the block is
	// then leaked, which is safe.
	_ = r.a.Retire(ctx, p.Addr(), p.Size())
}

// Pointer is a data pointer word: 0 (no key), or a KV block's size in 16-byte units (16 bits)
// << 48 | its memory node (8 bits) << 40 | its offset in 16-byte units (40 bits).
type Pointer uint64

// MakePointer packs the address and allocated size of a block, or reports that they do not fit.
func MakePointer(a farmem.Addr, size uint64) (Pointer, error) {
	n, off := uint64(a.Node()), a.Offset()
	units := (size + 15) / 16
	if n == 0 || n > 0xff || off%16 != 0 || off>>4 >= 1<<40 || units == 0 || units > 0xffff {
		return 0, fmt.Errorf("ptrarray: block %v of %d bytes does not fit a data pointer: %w", a, size, farmem.ErrInvalid)
	}
	return Pointer(units<<48 | n<<40 | off>>4), nil
}

// Addr returns the block's address.
func (p Pointer) Addr() farmem.Addr {
	return farmem.MakeAddr(farmem.NodeID(p>>40&0xff), uint64(p&(1<<40-1))<<4)
}

// Size returns the block's allocated size.
func (p Pointer) Size() uint64 { return uint64(p>>48) * 16 }

// Search returns the value of key k, or ErrNotFound: the pointer, then the block (2 round
// trips).
func (r *Array) Search(ctx context.Context, k uint64) ([]byte, error) {
	if err := r.check(k, nil); err != nil {
		return nil, err
	}
	r.stats.Searches++
	rec := r.Record(k)
	for {
		if err := r.pin(ctx); err != nil {
			return nil, err
		}
		v, err := r.search(ctx, k, rec)
		if uerr := r.a.Unpin(); uerr != nil && errors.Is(uerr, alloc.ErrPinExpired) {
			continue // paused past the allocator's lease: the block may have been reused
		}
		return v, err
	}
}

func (r *Array) search(ctx context.Context, k uint64, rec farmem.Addr) ([]byte, error) {
	w, err := r.readPtr(ctx, rec, nil, nil)
	if err != nil {
		return nil, err
	}
	if w == 0 {
		return nil, ErrNotFound
	}
	p := Pointer(w)
	buf := make([]byte, p.Size())
	if err := r.m.Read(ctx, p.Addr(), buf); err != nil {
		return nil, fmt.Errorf("ptrarray: read block: %w", err)
	}
	v, err := DecodeBlock(buf, k)
	if err != nil {
		return nil, fmt.Errorf("ptrarray: block %v of key %d: %w", p.Addr(), k, err)
	}
	return v, nil
}

// readPtr reads k's data pointer, after the ops of pre (in the same batch). With entry (Size
// of the lock entry), it reads the whole record and copies the lock entry into entry.
func (r *Array) readPtr(ctx context.Context, rec farmem.Addr, pre *farmem.Batch, entry []byte) (uint64, error) {
	if pre == nil {
		pre = &farmem.Batch{}
	}
	var buf [RecordSize]byte
	if entry != nil {
		pre.Read(rec, buf[:])
	} else {
		pre.Read(rec.Add(recPtr), buf[recPtr:])
	}
	r.stats.Reads++
	if err := r.m.Do(ctx, pre); err != nil {
		return 0, fmt.Errorf("ptrarray: read pointer: %w", err)
	}
	copy(entry, buf[:recPtr])
	return binary.LittleEndian.Uint64(buf[recPtr:]), nil
}

// arrayOp is one update or delete of key k, presented to the synchronizer as its Target.
type arrayOp struct {
	r    *Array
	kind ptrsync.Kind
	key  uint64
	rec  farmem.Addr
	old  uint64
	nb   *block
	lock []byte // the lock entry as read with the pointer, if the plan asked for it
}

func (o *arrayOp) Kind() ptrsync.Kind    { return o.kind }
func (o *arrayOp) LockBytes() []byte     { return o.lock }
func (o *arrayOp) Pointer() farmem.Addr  { return o.rec.Add(recPtr) }
func (o *arrayOp) Lock() farmem.Addr     { return o.rec }
func (o *arrayOp) Old() uint64           { return o.old }
func (o *arrayOp) Deadline() farmem.Time { return o.r.pinAt.Add(o.r.opts.PinBudget) }
func (o *arrayOp) Memory() farmem.Memory { return o.r.m }

// Same: every block a key's pointer names is that key's (the pointer is the key's own), so any
// nonzero word will do.
func (o *arrayOp) Same(context.Context, uint64) (bool, error) { return true, nil }

// Install writes the block, if not yet, and CASes the pointer in one batch: the block is on the
// pointer's node, so the CAS lands after the write (one round trip).
func (o *arrayOp) Install(ctx context.Context, expected uint64) (uint64, uint64, error) {
	var b farmem.Batch
	nw := uint64(0)
	if o.kind == ptrsync.Update {
		nw = uint64(o.nb.ptr)
		if !o.nb.written {
			b.Write(o.nb.addr, o.nb.bytes)
		}
	}
	i := b.CAS(o.Pointer(), expected, nw)
	if err := o.r.m.Do(ctx, &b); err != nil {
		return 0, 0, fmt.Errorf("ptrarray: CAS pointer of key %d: %w", o.key, err)
	}
	if o.nb != nil {
		o.nb.written = true
	}
	prev, _ := b.Result(i)
	if prev == expected && o.nb != nil {
		o.nb.visible = true
	}
	return prev, nw, nil
}

// Insert stores v under key k if the array does not hold k, else returns ErrExists: the block
// write and a CAS of the empty pointer, in one batch (one round trip). Inserts never take a
// lock, whatever the synchronizer.
func (r *Array) Insert(ctx context.Context, k uint64, v []byte) error {
	if err := r.check(k, v); err != nil {
		return err
	}
	r.stats.Inserts++
	if err := r.pin(ctx); err != nil {
		return err
	}
	defer r.a.Unpin()
	rec := r.Record(k)
	nb, err := r.newBlock(ctx, rec.Node(), k, v)
	if err != nil {
		return err
	}
	var b farmem.Batch
	b.Write(nb.addr, nb.bytes)
	i := b.CAS(rec.Add(recPtr), 0, uint64(nb.ptr))
	if err := r.m.Do(ctx, &b); err != nil {
		return fmt.Errorf("ptrarray: insert key %d: %w", k, err) // unknown: the block may be in place
	}
	if prev, _ := b.Result(i); prev != 0 {
		r.drop(nb)
		return ErrExists
	}
	return nil
}

// Update replaces the value of key k, or returns ErrNotFound. The pointer change is the
// synchronizer's; see the package doc for the round trips of each.
func (r *Array) Update(ctx context.Context, k uint64, v []byte) error {
	if err := r.check(k, v); err != nil {
		return err
	}
	r.stats.Updates++
	return r.change(ctx, ptrsync.Update, k, v)
}

// Delete removes key k, or returns ErrNotFound. The pointer change is the synchronizer's.
func (r *Array) Delete(ctx context.Context, k uint64) error {
	if err := r.check(k, nil); err != nil {
		return err
	}
	r.stats.Deletes++
	return r.change(ctx, ptrsync.Delete, k, nil)
}

// maxAttempts bounds the pointer reads of one operation, so that a broken synchronizer gives an
// error rather than a hang.
const maxAttempts = 1 << 20

func (r *Array) change(ctx context.Context, kind ptrsync.Kind, k uint64, v []byte) error {
	if err := r.pin(ctx); err != nil {
		return err
	}
	defer r.a.Unpin()
	plan := r.sync.Plan(kind, k)
	op := &arrayOp{r: r, kind: kind, key: k, rec: r.Record(k)}
	if plan.Prefetch {
		op.lock = make([]byte, recPtr)
	}
	pre := &farmem.Batch{}
	if kind == ptrsync.Update {
		nb, err := r.newBlock(ctx, op.rec.Node(), k, v)
		if err != nil {
			return err
		}
		op.nb = nb
		if !plan.DeferWrite {
			pre.Write(nb.addr, nb.bytes)
		}
	}
	for range maxAttempts {
		old, err := r.readPtr(ctx, op.rec, pre, op.lock)
		if err != nil {
			r.drop(op.nb)
			return err
		}
		if op.nb != nil && pre != nil && len(pre.Ops) > 1 {
			op.nb.written = true
		}
		pre = nil
		if old == 0 {
			r.drop(op.nb)
			return ErrNotFound
		}
		if ok, err := r.fresh(ctx); err != nil || !ok {
			if err != nil {
				r.drop(op.nb)
				return err
			}
			continue
		}
		op.old = old
		res, err := r.sync.Commit(ctx, op)
		if err != nil {
			// Unknown outcome: the new block may be in place; it is leaked rather than freed.
			return err
		}
		switch res.Outcome {
		case ptrsync.Committed:
			r.retire(ctx, res.Replaced)
			return nil
		case ptrsync.Combined:
			r.drop(op.nb)
			return nil
		}
	}
	r.drop(op.nb)
	return fmt.Errorf("ptrarray: %v of key %d: no progress after %d attempts: %w", kind, k, maxAttempts, ErrCorrupt)
}

// Load fills keys [from, to) of an array nobody uses yet with value(k): it allocates the
// blocks, writes them (adjacent blocks in one write) and then the records, with plain writes
// (so only on records no atomic has touched; see farmem's strict mode). It is the bulk loader
// of experiments; Insert is the way to add keys to an array in use.
func (r *Array) Load(ctx context.Context, from, to uint64, value func(k uint64) []byte) error {
	if from > to || to > r.keys {
		return fmt.Errorf("ptrarray: load [%d, %d) of %d keys: %w", from, to, r.keys, ErrKeyRange)
	}
	s := uint64(len(r.bases))
	for shard := range s {
		first := from + (shard+s-from%s)%s // the first key of this shard at or after from
		if first >= to {
			continue
		}
		n := (to - first + s - 1) / s
		recs := make([]byte, n*RecordSize)
		node := r.bases[shard].Node()
		var w writer
		for i := range n {
			k := first + i*s
			v := value(k)
			if err := r.check(k, v); err != nil {
				return err
			}
			nb, err := r.newBlock(ctx, node, k, v)
			if err != nil {
				return err
			}
			binary.LittleEndian.PutUint64(recs[i*RecordSize+recPtr:], uint64(nb.ptr))
			if err := w.add(ctx, r.m, nb.addr, nb.bytes); err != nil {
				return err
			}
		}
		if err := w.flush(ctx, r.m); err != nil {
			return err
		}
		base := r.Record(first)
		for off := uint64(0); off < uint64(len(recs)); off += 1 << 20 {
			if err := w.add(ctx, r.m, base.Add(off), recs[off:min(off+1<<20, uint64(len(recs)))]); err != nil {
				return err
			}
		}
		if err := w.flush(ctx, r.m); err != nil {
			return err
		}
	}
	return nil
}

// writer coalesces writes to adjacent addresses and posts them in batches.
type writer struct {
	b     farmem.Batch
	start farmem.Addr
	buf   []byte
}

func (w *writer) add(ctx context.Context, m farmem.Memory, a farmem.Addr, p []byte) error {
	if len(w.buf) > 0 && a == w.start.Add(uint64(len(w.buf))) && len(w.buf)+len(p) <= 1<<20 {
		w.buf = append(w.buf, p...)
		return nil
	}
	if len(w.buf) > 0 {
		w.b.Write(w.start, w.buf)
		if len(w.b.Ops) >= 256 {
			if err := w.post(ctx, m); err != nil {
				return err
			}
		}
	}
	w.start, w.buf = a, append([]byte(nil), p...)
	return nil
}

func (w *writer) flush(ctx context.Context, m farmem.Memory) error {
	if len(w.buf) > 0 {
		w.b.Write(w.start, w.buf)
		w.buf = nil
	}
	return w.post(ctx, m)
}

func (w *writer) post(ctx context.Context, m farmem.Memory) error {
	if len(w.b.Ops) == 0 {
		return nil
	}
	err := m.Do(ctx, &w.b)
	w.b = farmem.Batch{}
	if err != nil {
		return fmt.Errorf("ptrarray: load: %w", err)
	}
	return nil
}
