package race

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/bits"
	"time"

	"github.com/farmem/farmem/alloc"
	"github.com/farmem/farmem/ds/ptrsync"
	"github.com/farmem/farmem/farmem"
	"github.com/farmem/farmem/farmem/replmem"
)

// Errors of the table. Operations also return the transport's errors (farmem.ErrNodeDown, a
// context's error, ...) wrapped: such an operation may or may not have taken effect.
var (
	// ErrNotFound: Search, Update or Delete of a key the table does not hold.
	ErrNotFound = errors.New("race: key not found")
	// ErrExists: Insert of a key the table already holds.
	ErrExists = errors.New("race: key exists")
	// ErrTooLarge: a key and value that do not fit one KV block (see MaxKV and MaxKey).
	ErrTooLarge = fmt.Errorf("race: too large: %w", farmem.ErrInvalid)
	// ErrPointerRange: an address a slot or directory entry cannot hold: a memory node id above
	// MaxPointerNode, an offset at or beyond MaxPointerOffset, or one not Unit-aligned. Place the
	// table on nodes that fit.
	ErrPointerRange = fmt.Errorf("race: address does not fit a packed pointer: %w", farmem.ErrInvalid)
	// ErrBadRoot: the address given to Open does not hold a table root this package wrote.
	ErrBadRoot = fmt.Errorf("race: bad table root: %w", farmem.ErrInvalid)
	// ErrCorrupt: a KV block that fails validation (a torn or reused block), or a table state no
	// correct client leaves behind. Operations retry past transient cases; they return it only
	// when it persists.
	ErrCorrupt = errors.New("race: corrupt block or table")
	// ErrFull: a subtable at the table's MaxDepth has no room for the key.
	ErrFull = fmt.Errorf("race: subtable at maximum depth is full: %w", farmem.ErrNoSpace)
)

// Options configure one client's handle on a table.
type Options struct {
	// Sync makes the final pointer change of Update and Delete (default a new
	// ptrsync.Optimistic; see the package doc for what the table adds to ptrsync's contract).
	// It belongs to this handle.
	Sync ptrsync.Synchronizer
	// Lease is the lease of split and directory locks, and how long an insert's tentative slot
	// is protected from other inserters of the same key (default 200ms of fabric time). A
	// client that holds a lock past its lease is taken as dead and its work is taken over.
	Lease time.Duration
	// ClockSkew bounds the difference between clients' fabric clocks and the time a verb takes
	// to land (default 1ms): a lease is trusted until ClockSkew before its end and taken as
	// expired only ClockSkew after it.
	ClockSkew time.Duration
	// PinBudget is how long an operation may stay pinned before it re-pins (before a CAS, never
	// after one). It must be below the allocator's Lease minus its Refresh minus ClockSkew, so
	// that no block the operation read can have been reused when it CASes (default 250ms, for
	// alloc's default 1s lease).
	PinBudget time.Duration
	// Backoff is the first pause when waiting for another client (a split, a competing insert);
	// pauses double up to 1ms, or up to 64µs (or Backoff, if longer) when waiting for a split
	// (default 2µs).
	Backoff time.Duration
	// DeleteLease, when positive, makes Delete leave a tombstone instead of an empty slot: no
	// Insert reuses the slot until DeleteLease·(1+DriftBound) plus ClockSkew after the delete
	// (FlexKV's T_lease, 200ms in the paper), so that a slot address cached by any client less
	// than DeleteLease ago names the key's slot or a tombstone, never another key's. Every
	// client respects a tombstone whatever its own options (the reuse time is in the word).
	DeleteLease time.Duration
	// Invalidate makes Update and Delete set the valid word of the block they replace before
	// their CAS (see the package doc, "Proxying and address caches"): needed by any client of a table that
	// address caches read. It adds no round trip uncontended.
	Invalidate bool
	// AddressCache, when positive, gives the handle an address cache of that many entries
	// (rounded up to a power of 2, at least 2, at most MaxAddressCache; 32 bytes each, in sets
	// of two, allocated at the first operation that finds or commits a key): per key, the
	// committed slot word, the slot and the block's stamp its last Search found or its last
	// Insert or Update committed, so that the next Search of the key reads the slot's word and
	// the block, one round trip instead of two, with no pin, and the next Update or Delete
	// (its slot and block on one memory node) skips the lookup, two round trips instead of
	// three (see the package doc, "Proxying and address caches"). It needs Invalidate,
	// on this handle (Open refuses it without, farmem.ErrInvalid) and on every other client
	// that writes the table: a writer that does not invalidate lets cached reads return the
	// value it replaced. A replicated table (Params.Replicas or IndexReplicas above 1) keeps
	// no cache. The handle's own Update of a key keeps the entry of the block its CAS
	// published (an update combined into another client's, whose block is never published,
	// leaves none); its Delete drops the key's entry. Entries that keep going stale are left
	// unused, and so is the whole cache while most of the handle's looks find their blocks
	// replaced (a write-heavy workload with many clients): the operations then cost what
	// they would without a cache (Stats.CacheSkips).
	AddressCache int
	// Health, for a replicated table, is the replicas' suspicion shared by the handles of one
	// compute node (replmem.Options.Health): made once by whoever opens them (a store makes one
	// per compute node) and given to each, so that a hung or cut-off replica costs the node one
	// down timeout per probe period rather than one per handle. Nil gives each handle its own.
	// An unreplicated table ignores it.
	Health *replmem.Health
}

// DriftBound is the relative clock drift a delete lease allows for (FlexKV's δ = 10⁻⁴).
const DriftBound = 1e-4

func (o *Options) setDefaults() error {
	if o.Sync == nil {
		o.Sync = ptrsync.NewOptimistic()
	}
	if o.Lease == 0 {
		o.Lease = 200 * time.Millisecond
	}
	if o.ClockSkew == 0 {
		o.ClockSkew = time.Millisecond
	}
	if o.PinBudget == 0 {
		o.PinBudget = 250 * time.Millisecond
	}
	if o.Backoff == 0 {
		o.Backoff = 2 * time.Microsecond
	}
	if o.AddressCache < 0 || o.AddressCache > MaxAddressCache || (o.AddressCache > 0 && !o.Invalidate) {
		return fmt.Errorf("race: address cache of %d entries (Invalidate %v): it needs Invalidate and at most %d: %w", o.AddressCache, o.Invalidate, MaxAddressCache, farmem.ErrInvalid)
	}
	if o.Lease < 0 || o.ClockSkew < 0 || o.PinBudget < 0 || o.Backoff < 0 || o.DeleteLease < 0 || o.Lease <= 2*o.ClockSkew {
		return fmt.Errorf("race: options %+v: %w", *o, farmem.ErrInvalid)
	}
	return nil
}

// maxBackoff caps the pause between two polls of another client's progress.
const maxBackoff = time.Millisecond

// maxAttempts bounds the lookups of one operation: far more than contention ever needs, so that
// a table corrupted beyond what the protocol allows gives ErrCorrupt rather than a hang.
const maxAttempts = 1 << 20

// Stats count one handle's work.
type Stats struct {
	// Searches, Inserts, Updates and Deletes count operations that returned, whatever the result.
	Searches, Inserts, Updates, Deletes uint64
	// Lookups counts reads of a key's candidate buckets (the first round trip of every
	// operation, repeated on retries).
	Lookups uint64
	// Refreshes counts directory entries re-read because a subtable's header did not cover the
	// key (a stale directory cache); DirReloads counts whole directories read after a doubling.
	Refreshes, DirReloads uint64
	// Walks counts subtables read while following child words because the directory, even
	// refreshed, named an ancestor of the subtable holding the key.
	Walks uint64
	// BadBlocks counts KV blocks that failed validation (checksum or length).
	BadBlocks uint64
	// BackupReads counts KV blocks read from a backup copy (Params.Replicas) because their
	// primary's memory node was down.
	BackupReads uint64
	// Conflicts counts CASes on slots that found another word, and Kills the tentative slots of
	// other inserters of the same key this client removed.
	Conflicts, Kills uint64
	// Splits counts subtable splits this client completed, Recoveries the split and directory
	// locks it took over from a client whose lease had expired, SplitWaits the waits for another
	// client's split, and Doublings the directory doublings it made.
	Splits, Recoveries, SplitWaits, Doublings uint64
	// Begins counts the splits of a layout version 4 table (moved region by region) this
	// client began, Moves the regions it moved, Hops the lookups that read a split's new half
	// through its parent's move word, and MixedReads those of them that read a key with one
	// region moved in both halves (a Search).
	Begins, Moves, Hops, MixedReads uint64
	// Repins counts operations that re-pinned because they ran past PinBudget, and PinExpired
	// unpins that found the allocator lease expired anyway.
	Repins, PinExpired uint64
	// CacheHits counts Searches answered through the address cache (Options.AddressCache) in
	// one round trip, and CacheStale the entries a Search found stale (the block replaced,
	// reused, or unreadable) and read the slot instead.
	CacheHits, CacheStale uint64
	// CacheSkips counts Searches, Updates and Deletes that had an address-cache entry for
	// their key but looked it up instead because the entry is volatile (its looks kept
	// finding the key's block replaced by other clients) or the handle's looks through its
	// entries found more stale blocks than not (see the package doc, "Proxying and address
	// caches").
	CacheSkips uint64
	// ChangeHits counts Updates and Deletes whose address-cache entry spared the lookup
	// (CachedUpdateRoundTrips), and ChangeStale those whose entry was stale and that looked
	// the key up after its round trip.
	ChangeHits, ChangeStale uint64
	// Straight counts Updates through an address-cache entry that took the straight path (a
	// synchronizer that lets the table make a lock-free commit's first step itself, see the
	// package doc's "Update"), and StraightHandovers those of them that went on in the general
	// loop: the entry was stale, or the first commit step did not commit.
	Straight, StraightHandovers uint64
	// SearchStraight counts Searches that took the straight path after the address cache
	// (searchStraight: one function for the common lookup, in a subtable that owns the key
	// outright), and SearchHandovers those of them that went on in the general path: a
	// pending adoption, a view not owned outright, a block that failed validation. Both count
	// pinned sections: a Search whose pin's lease ran out pins again and counts again.
	SearchStraight, SearchHandovers uint64
}

// Table is one client's handle on a table in far memory. Like the client's farmem.Memory and
// alloc.Allocator, it belongs to one goroutine; every client opens its own handle on the same
// root, and the handles share nothing but far memory.
type Table struct {
	m        farmem.Memory
	a        allocator
	rt       farmem.Runtime
	id       farmem.ClientID
	root     farmem.Addr
	p        Params
	version  int // the root's layout version: the format of the blocks the handle writes
	geo      geometry
	opts     Options
	sync     ptrsync.Synchronizer
	lockSize int // sync.LockSize()
	// straight is sync if it lets an Update make its first commit step itself (updateStraight).
	straight ptrsync.Straight

	// The directory cache: the root's directory word when read, and the entries.
	dirWord uint64
	dir     []uint64
	// adoptions is the fabric's adoption count when the directory was cached (purge.go);
	// restarts is m's count (nil on transports without restarts), asserted once at Open.
	adoptions uint64
	restarts  farmem.Restarts

	pinAt  farmem.Time
	pinned bool
	stamps uint64 // blocks made (stamp)
	stats  Stats
	closed bool
	rootB  [8]byte
	scr    *scratch
	pf     prefetcher // m's, if it offers the hint (prefetch.go)

	// memNodes are the fabric's memory nodes, ascending (replicas' placement).
	memNodes []farmem.NodeID

	// A block reserved for the next directory doubling (reserveDir), and its size.
	spareDir     farmem.Addr
	spareDirSize uint64

	// kids caches new halves of splits in progress (childOf), kidNext its next victim.
	kids    [4]kid
	kidNext int
	// pending is a subtable whose split (layout version 4) this handle's inserts step before
	// returning (afterInsert); pendingBegin asks the next step to begin it, if its header is
	// still pendingHdr.
	pending      farmem.Addr
	pendingBegin bool
	pendingHdr   uint64

	// ac is the address cache (Options.AddressCache; acache.go).
	ac addrCache
}

// Create builds an empty table in far memory with a's allocator and returns its root address,
// which clients pass to Open. It writes the initial subtables and directory, then the root, so
// the root is valid once Create returns. Cost: 1 round trip for the subtables and directory (a
// batch), 1 for the root, plus the allocator's chunk claims.
func Create(ctx context.Context, m farmem.Memory, a *alloc.Allocator, p Params) (farmem.Addr, error) {
	if err := p.setDefaults(); err != nil {
		return 0, err
	}
	if p.IndexReplicas > 1 {
		rm, ra, err := replicate(m, a, p.IndexReplicas, 0, 0, nil)
		if err != nil {
			return 0, err
		}
		return create(ctx, rm, ra, p)
	}
	return create(ctx, m, a, p)
}

// create is Create on memory m with allocator a (a replicated view and its allocator for a
// replicated table).
func create(ctx context.Context, m farmem.Memory, a allocator, p Params) (farmem.Addr, error) {
	geo := newGeometry(uint64(p.Groups), uint64(p.SlotsPerBucket), uint64(p.MetaSize))
	n := uint64(1) << p.InitialDepth
	dirSize := max(n*8, Unit)
	dirAddr, err := a.Alloc(ctx, dirSize, Unit)
	if err != nil {
		return 0, fmt.Errorf("race: create: directory: %w", err)
	}
	dirPacked, err := packAddr(dirAddr)
	if err != nil {
		return 0, err
	}
	dir := make([]byte, dirSize)
	var b farmem.Batch
	for i := range n {
		st, err := a.Alloc(ctx, geo.size, Unit)
		if err != nil {
			return 0, fmt.Errorf("race: create: subtable %d: %w", i, err)
		}
		sp, err := packAddr(st)
		if err != nil {
			return 0, err
		}
		b.Write(st, subtableImage(&geo, headerWord(uint(p.InitialDepth), i), 0, 0))
		binary.LittleEndian.PutUint64(dir[8*i:], entryWord(sp, uint(p.InitialDepth)))
	}
	b.Write(dirAddr, dir)
	if err := doChunked(ctx, m, &b); err != nil {
		return 0, fmt.Errorf("race: create: write subtables: %w", err)
	}
	root, err := a.Alloc(ctx, RootSize, Unit)
	if err != nil {
		return 0, fmt.Errorf("race: create: root: %w", err)
	}
	rb := encodeRootConst(p)
	binary.LittleEndian.PutUint64(rb[rootDirOff:], entryWord(dirPacked, uint(p.InitialDepth)))
	if err := m.Write(ctx, root, rb); err != nil {
		return 0, fmt.Errorf("race: create: write root: %w", err)
	}
	return root, nil
}

// subtableImage returns the bytes of a fresh subtable: its header, lock and parent words; child
// words, slots and metadata zero.
func subtableImage(geo *geometry, header, lock, parent uint64) []byte {
	b := make([]byte, geo.size)
	le := binary.LittleEndian
	le.PutUint64(b[stHeaderOff:], header)
	le.PutUint64(b[stLockOff:], lock)
	le.PutUint64(b[stParentOff:], parent)
	return b
}

// doChunked runs a batch, split into batches of at most farmem.MaxBatchOps ops.
func doChunked(ctx context.Context, m farmem.Memory, b *farmem.Batch) error {
	if len(b.Ops) <= farmem.MaxBatchOps {
		return m.Do(ctx, b)
	}
	for i := 0; i < len(b.Ops); i += farmem.MaxBatchOps {
		part := farmem.Batch{Ops: b.Ops[i:min(i+farmem.MaxBatchOps, len(b.Ops))]}
		if err := m.Do(ctx, &part); err != nil {
			return err
		}
	}
	return nil
}

// Open returns client m's handle on the table at root, allocating KV blocks and subtables with
// a (m's allocator). It reads the root and the directory: 2 round trips.
func Open(ctx context.Context, m farmem.Memory, a *alloc.Allocator, root farmem.Addr, opts Options) (*Table, error) {
	if err := opts.setDefaults(); err != nil {
		return nil, err
	}
	if a == nil {
		return nil, fmt.Errorf("race: open without an allocator: %w", farmem.ErrInvalid)
	}
	var ta allocator = a
	if r := indexReplicas(root); r > 1 {
		if _, ok := opts.Sync.(*ptrsync.Optimistic); !ok {
			return nil, fmt.Errorf("race: a replicated table needs the optimistic synchronizer, not %T: %w", opts.Sync, farmem.ErrInvalid)
		}
		rm, ra, err := replicate(m, a, r, 0, opts.ClockSkew, opts.Health)
		if err != nil {
			return nil, err
		}
		m, ta = rm, ra
	}
	t := &Table{m: m, a: ta, rt: m.Runtime(), id: m.Info().ID, root: root, opts: opts, sync: opts.Sync, lockSize: opts.Sync.LockSize(),
		scr: new(scratch), adoptions: adoptionsOf(m)}
	t.pf, _ = m.(prefetcher)
	t.restarts, _ = m.(farmem.Restarts)
	t.straight, _ = opts.Sync.(ptrsync.Straight)
	// A directory replaced by a doubling is retired: read the root and then the directory
	// pinned, so the one the root names cannot be reused before it is read.
	if err := t.pin(ctx); err != nil {
		return nil, err
	}
	defer t.unpin()
	buf := make([]byte, RootSize)
	if err := m.Read(ctx, root, buf); err != nil {
		return nil, fmt.Errorf("race: open %v: %w", root, err)
	}
	r, err := DecodeRoot(buf)
	if err != nil {
		return nil, fmt.Errorf("race: open %v: %w", root, err)
	}
	t.p, t.version = r.Params, r.Version
	t.memNodes = m.Topology().MemoryNodes()
	if rm := t.Replicated(); rm != nil {
		t.memNodes = []farmem.NodeID{rm.Virtual()}
	}
	t.geo = newGeometry(uint64(t.p.Groups), uint64(t.p.SlotsPerBucket), uint64(t.p.MetaSize))
	if opts.AddressCache > 0 && indexReplicas(root) <= 1 && !t.replicated() {
		t.ac.size = max(2, 1<<bits.Len(uint(opts.AddressCache-1)))
	}
	if t.lockSize < 0 || t.lockSize > t.p.MetaSize || t.lockSize%8 != 0 {
		return nil, fmt.Errorf("race: synchronizer needs %d bytes of metadata per slot, the table keeps %d: %w",
			t.lockSize, t.p.MetaSize, farmem.ErrInvalid)
	}
	if err := t.loadDir(ctx, binary.LittleEndian.Uint64(buf[rootDirOff:])); err != nil {
		return nil, err
	}
	return t, nil
}

// Close releases the handle and frees the directory block it kept for a doubling, if any. It is
// idempotent; operations after it fail with farmem.ErrClosed.
// The client's Memory and Allocator stay open (they are the caller's).
func (t *Table) Close() error {
	if !t.closed {
		t.dropSpareDir()
	}
	t.closed = true
	return nil
}

// Root returns the table's root address.
func (t *Table) Root() farmem.Addr { return t.root }

// Params returns the table's layout parameters.
func (t *Table) Params() Params { return t.p }

// Stats returns the handle's counters.
func (t *Table) Stats() Stats { return t.stats }

// Info is the table-wide state recorded in its root.
type Info struct {
	Root
}

// Info reads the table's root: its directory, global depth and the split and doubling counts.
// One round trip.
func (t *Table) Info(ctx context.Context) (Info, error) {
	buf := make([]byte, RootSize)
	if err := t.m.Read(ctx, t.root, buf); err != nil {
		return Info{}, fmt.Errorf("race: info: %w", err)
	}
	r, err := DecodeRoot(buf)
	return Info{r}, err
}

// loadDir reads the whole directory the root word w names into the cache: one round trip.
func (t *Table) loadDir(ctx context.Context, w uint64) error {
	gd := entryDepth(w)
	if gd > uint(t.p.MaxDepth) || unpackAddr(w) == 0 {
		return fmt.Errorf("race: root directory word %#x: %w", w, ErrCorrupt)
	}
	buf := make([]byte, 8<<gd)
	if err := t.m.Read(context.WithoutCancel(ctx), unpackAddr(w), buf); err != nil {
		return fmt.Errorf("race: read directory: %w", err)
	}
	dir := make([]uint64, 1<<gd)
	for i := range dir {
		dir[i] = binary.LittleEndian.Uint64(buf[8*i:])
	}
	t.dirWord, t.dir = w, dir
	t.stats.DirReloads++
	return nil
}

// subtableFor returns the subtable the cached directory names for a key with first hash h1.
func (t *Table) subtableFor(h1 uint64) farmem.Addr {
	return unpackAddr(t.dir[h1&uint64(len(t.dir)-1)])
}

// refresh re-reads the directory entry for h1 together with the root's directory word (one
// round trip), and the whole directory if it was replaced by a doubling (a second one).
func (t *Table) refresh(ctx context.Context, h1 uint64) error {
	t.stats.Refreshes++
	i := h1 & uint64(len(t.dir)-1)
	var eb [8]byte
	var b farmem.Batch
	b.Read(t.root.Add(rootDirOff), t.rootB[:])
	b.Read(unpackAddr(t.dirWord).Add(8*i), eb[:])
	if err := t.m.Do(ctx, &b); err != nil {
		return fmt.Errorf("race: refresh directory: %w", err)
	}
	if w := binary.LittleEndian.Uint64(t.rootB[:]); w != t.dirWord {
		return t.loadDir(ctx, w)
	}
	t.dir[i] = binary.LittleEndian.Uint64(eb[:])
	return nil
}

// usable reports whether the handle may run an operation.
func (t *Table) usable() error {
	if t.closed {
		return fmt.Errorf("race: table handle closed: %w", farmem.ErrClosed)
	}
	return nil
}

// pin starts an operation's pinned section: one clock reading serves the allocator's pin and
// the section's start (pinAt).
func (t *Table) pin(ctx context.Context) error {
	now := t.rt.Now()
	if err := t.a.PinAt(ctx, now); err != nil {
		return fmt.Errorf("race: pin: %w", err)
	}
	t.pinAt, t.pinned = now, true
	return nil
}

// pinRead starts the pinned section of an operation that never CASes on what it read (a
// Search) with no clock reading: alloc.Allocator.PinCoarse, whose Unpin reads the clock and
// reports a lease that ran out, which makes the operation read again (see PinCoarse for the
// tolerance). pinAt is then a lower bound of the section's start.
func (t *Table) pinRead(ctx context.Context) error {
	at, err := t.a.PinCoarse(ctx)
	if err != nil {
		return fmt.Errorf("race: pin: %w", err)
	}
	t.pinAt, t.pinned = at, true
	return nil
}

// unpin ends it; it reports whether the allocator's lease held throughout.
func (t *Table) unpin() bool {
	if !t.pinned {
		return true
	}
	t.pinned = false
	if err := t.a.Unpin(); err != nil {
		t.stats.PinExpired++
		return false
	}
	return true
}

// unpinSeen is unpin for a section whose last access was followed by a clock reading of the
// allocator's (a successful Retire): alloc.Allocator.UnpinSeen, with no reading of its own.
func (t *Table) unpinSeen() bool {
	if !t.pinned {
		return true
	}
	t.pinned = false
	if err := t.a.UnpinSeen(); err != nil {
		t.stats.PinExpired++
		return false
	}
	return true
}

// fresh is called before a CAS that depends on blocks op read while pinned: if the operation
// has been pinned longer than PinBudget it re-pins, forgets what it learnt about blocks (a
// word's block may be reused once unpinned), and reports false; the caller must look again
// before any CAS. An Insert or Update that re-pins also writes its unpublished KV block again
// with that look (one more write of the block, only on a re-pin), so a block is always
// written within the pinned section whose CAS publishes it and reaches every replica that
// answered during that section: Repopulate relies on it (a replica reachable before it began
// receives every block published a pin budget plus the clock skew later, and its second walk,
// that far behind the first, copies those published before).
//
// Its clock reading is the allocator's too (alloc.Allocator.NoteClock), so that a section
// whose last check is this one can end with unpinSeen.
func (t *Table) fresh(ctx context.Context, op *opState) (bool, error) {
	now := t.rt.Now()
	t.a.NoteClock(now)
	if now.Sub(t.pinAt) <= t.opts.PinBudget {
		return true, nil
	}
	t.stats.Repins++
	t.unpin()
	op.forget()
	return false, t.pin(ctx)
}

// freshIf is fresh when check is set, and reports true otherwise.
func (t *Table) freshIf(ctx context.Context, op *opState, check bool) (bool, error) {
	if !check {
		return true, nil
	}
	return t.fresh(ctx, op)
}

// retire hands back the block a replaced slot word pointed at. It reports whether the
// allocator read the clock for it (then after every access before it: see unpinSeen).
func (t *Table) retire(ctx context.Context, s Slot) bool { return t.retireAt(ctx, s, 0) }

// retireAt is retire with the clock reading at, taken before the unlink while the section was
// within its budget (ptrsync.Result's CheckedAt), in place of the allocator's fresh reading
// after it (alloc.Allocator.RetireAt): the same bound makes the unlink's CAS safe. 0 reads
// afresh; a replicated table's symmetric blocks always do.
func (t *Table) retireAt(ctx context.Context, s Slot, at farmem.Time) bool {
	if s.Empty() {
		return false
	}
	// Retire fails only when the allocator is closed or the home node is down; the block is
	// then leaked, which is safe.
	var err error
	switch {
	case t.replicated():
		err = t.a.RetireSymmetric(ctx, alloc.SymOffset(s.Addr().Offset()), s.Size())
	case at != 0:
		err = t.a.RetireAt(ctx, s.Addr(), s.Size(), at)
	default:
		err = t.a.Retire(ctx, s.Addr(), s.Size())
	}
	return err == nil
}

// sleep pauses for the current backoff and doubles it.
func (t *Table) sleep(ctx context.Context, d *time.Duration) error {
	if *d == 0 {
		*d = t.opts.Backoff
	}
	if err := t.rt.Sleep(ctx, *d); err != nil {
		return err
	}
	*d = min(2**d, maxBackoff)
	return nil
}
