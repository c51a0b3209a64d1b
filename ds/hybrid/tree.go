package hybrid

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/farmem/farmem/alloc"
	"github.com/farmem/farmem/ds/ptrsync"
	"github.com/farmem/farmem/farmem"
	"github.com/farmem/farmem/farmem/localcost"
)

// Params fix a tree's layout at Create.
type Params struct {
	// LeafSlots is the number of key/value slots of a leaf (default 64: a 1,104-byte leaf;
	// at least 4, at most 256).
	LeafSlots int
	// BlockValues makes values byte strings of up to MaxValue bytes, each in an immutable block
	// that the leaf's value word points to (swapped by CAS), used with GetBytes, InsertBytes
	// and UpdateBytes; without it values are 8-byte words stored in the leaf.
	BlockValues bool
	// LockEntries, with BlockValues, gives the tree a lock table of that many entries (a power
	// of two, at most MaxLockEntries; DefaultLockEntries is sensible) on each memory node, so
	// that a lock-based synchronizer (Options.Sync) can order the swaps of its value words; 0
	// makes none (the tree then takes only the optimistic protocol).
	LockEntries int
}

func (p *Params) setDefaults() error {
	if p.LeafSlots == 0 {
		p.LeafSlots = DefaultLeafSlots
	}
	if p.LeafSlots < 4 || p.LeafSlots > 256 {
		return fmt.Errorf("hybrid: LeafSlots %d outside [4, 256]: %w", p.LeafSlots, farmem.ErrInvalid)
	}
	return nil
}

// DefaultLeafSlots is the default leaf size in slots (1,104 bytes; the paper's leaves are
// "1 KB", the artifact's 1,088 bytes with 65 slots).
const DefaultLeafSlots = 64

// Options configure one handle.
type Options struct {
	// Cache is the compute node's radix cache (see OpenCaches); nil caches nothing.
	Cache *Cache
	// Lease bounds how long an SMO may hold a leaf exclusive before another client may finish
	// it (default 50ms of fabric time), and how long an inserter waits on another's tentative
	// slot of the same key before removing it. It assumes clocks within it.
	Lease time.Duration
	// Sync, for a tree with BlockValues, makes UpdateBytes's swap of the value word (nil: the
	// tree's own optimistic CAS loop). A synchronizer with lock entries (LockSize > 0: ds/cider's
	// CIDER, MCS or spinlock) needs the tree's lock table (Params.LockEntries) and finds each
	// key's entry there; ptrsync.Optimistic needs none. Inserts, deletes and SMOs keep the
	// tree's own protocol. It belongs to this handle.
	Sync ptrsync.Synchronizer
	// PinBudget is how long an update through Sync may stay pinned before it looks again
	// (before a CAS, never after one); it must be below the allocator's lease minus its refresh
	// (default DefaultPinBudget, for alloc's default 1s lease).
	PinBudget time.Duration
}

// DefaultLease is Options.Lease's default.
const DefaultLease = 50 * time.Millisecond

// Stats count a handle's work beyond the verbs (which farmem.Stats counts).
type Stats struct {
	// Gets, Inserts, Updates and Deletes count calls (the Bytes variants included).
	Gets, Inserts, Updates, Deletes uint64
	// Backtracks: leaves found dead or out of range, whose parent was read again.
	Backtracks uint64
	// SpearBackoffs: IDUs whose FAA found an SMO holding the leaf (undone, then waited).
	SpearBackoffs uint64
	// DrainReads: re-reads of a Spear word while an SMO waited for in-flight IDUs to leave.
	DrainReads uint64
	// SMOWaitReads: re-reads of a leaf's Spear and SMO words by IDUs waiting for an SMO.
	SMOWaitReads uint64
	// Splits, Compactions: leaf SMOs this handle ran; Helps: SMOs of others it finished.
	Splits, Compactions, Helps uint64
	// PrefixSplits: new internal nodes put above a node or leaf whose prefix differs.
	PrefixSplits uint64
	// NewLeaves: leaves hung on an internal node for a new 7-byte prefix.
	NewLeaves uint64
	// Growths: node type changes (4 -> 16 -> 48 -> 256) this handle made.
	Growths uint64
	// RevMismatches: children whose reverse pointer did not name the slot they were reached by.
	RevMismatches uint64
	// TentativeWaits: re-reads while another inserter of the same key was undecided.
	TentativeWaits uint64
	// CachedScans: scans answered in one round from the cached nodes' leaves; ScanFallbacks:
	// scans whose cached leaves showed a change (dead, or a gap), which then walked the tree.
	CachedScans, ScanFallbacks uint64
}

// Tree is one client's handle on a tree. It belongs to one goroutine.
type Tree struct {
	m      farmem.Memory
	a      *alloc.Allocator
	rt     farmem.Runtime
	root   farmem.Addr
	node0  farmem.Addr // the root node
	s      int         // leaf slots
	blocks bool        // values are blocks behind pointer words
	cache  *Cache
	lease  time.Duration
	st     Stats
	lc     localcost.Price // the price of a cache access (localcost.go)

	sync      ptrsync.Synchronizer // Options.Sync (nil: the optimistic loop)
	locks     *lockTable           // the lock table, when sync takes lock entries
	pinBudget time.Duration
}

// Create builds an empty tree (a root block and an empty root node, type 4, depth 0) and
// returns its root address. Cost: 1 round trip plus the allocator's.
func Create(ctx context.Context, m farmem.Memory, a *alloc.Allocator, p Params) (farmem.Addr, error) {
	if err := p.setDefaults(); err != nil {
		return 0, err
	}
	root, err := a.Alloc(ctx, rootBlockSize, 64)
	if err != nil {
		return 0, fmt.Errorf("hybrid: create: root: %w", err)
	}
	n0, err := a.AllocOn(ctx, root.Node(), nodeSize, 64)
	if err != nil {
		return 0, fmt.Errorf("hybrid: create: root node: %w", err)
	}
	ent, err := packEntry(0, kindNode, n0)
	if err != nil {
		return 0, err
	}
	rb := make([]byte, rootBlockSize)
	le.PutUint64(rb[rootMagicOff:], rootMagic)
	le.PutUint64(rb[rootSlotsOff:], uint64(p.LeafSlots))
	le.PutUint64(rb[rootNodeOff:], uint64(n0))
	le.PutUint64(rb[rootEntryOff:], ent)
	if p.BlockValues {
		le.PutUint64(rb[rootFlagsOff:], flagBlocks)
	}
	var b farmem.Batch
	if p.LockEntries != 0 {
		if !p.BlockValues {
			return 0, fmt.Errorf("hybrid: LockEntries without BlockValues (8-byte values are written in place): %w", farmem.ErrInvalid)
		}
		dir, err := createLocks(ctx, m, a, p.LockEntries, &b)
		if err != nil {
			return 0, err
		}
		le.PutUint64(rb[rootLocksOff:], uint64(dir))
	}
	b.Write(n0, encodeNode(uint64(root.Add(rootEntryOff)), 0, 0, false, 0, nil))
	b.Write(root, rb)
	if err := m.Do(ctx, &b); err != nil {
		return 0, fmt.Errorf("hybrid: create: %w", err)
	}
	return root, nil
}

// Open returns client m's handle on the tree at root, allocating with a (m's allocator).
// Cost: 1 round trip (the root block).
func Open(ctx context.Context, m farmem.Memory, a *alloc.Allocator, root farmem.Addr, opts Options) (*Tree, error) {
	if opts.Lease == 0 {
		opts.Lease = DefaultLease
	}
	if opts.Lease < 0 {
		return nil, fmt.Errorf("hybrid: negative lease: %w", farmem.ErrInvalid)
	}
	rb := make([]byte, rootBlockSize)
	if err := m.Read(ctx, root, rb); err != nil {
		return nil, fmt.Errorf("hybrid: open: %w", err)
	}
	s := int(le.Uint64(rb[rootSlotsOff:]))
	if le.Uint64(rb[rootMagicOff:]) != rootMagic || s < 4 || s > 256 {
		return nil, fmt.Errorf("%w: no tree root at %v", ErrCorrupt, root)
	}
	t := &Tree{m: m, a: a, rt: m.Runtime(), root: root, node0: farmem.Addr(le.Uint64(rb[rootNodeOff:])),
		s: s, blocks: le.Uint64(rb[rootFlagsOff:])&flagBlocks != 0, cache: opts.Cache, lease: opts.Lease,
		lc: localcost.Of(m), sync: opts.Sync, pinBudget: opts.PinBudget}
	if t.pinBudget == 0 {
		t.pinBudget = DefaultPinBudget
	}
	if t.sync == nil {
		return t, nil
	}
	if !t.blocks || t.pinBudget < 0 {
		return nil, fmt.Errorf("hybrid: Options.Sync on a tree without BlockValues, or a negative PinBudget: %w", farmem.ErrInvalid)
	}
	if n := t.sync.LockSize(); n > 0 {
		dir := farmem.Addr(le.Uint64(rb[rootLocksOff:]))
		if dir == 0 || n > LockEntrySize {
			return nil, fmt.Errorf("hybrid: the synchronizer needs %d-byte lock entries and the tree has no lock table of them (Params.LockEntries): %w", n, farmem.ErrInvalid)
		}
		lt, err := openLocks(ctx, m, dir)
		if err != nil {
			return nil, err
		}
		t.locks = lt
	}
	return t, nil
}

// Close releases the handle (not the client or its allocator). It is idempotent.
func (t *Tree) Close() error { return nil }

// Stats returns the handle's counters.
func (t *Tree) Stats() Stats { return t.st }

// LeafSlots returns the tree's leaf size in slots.
func (t *Tree) LeafSlots() int { return t.s }

// readNode reads the node a child word names: 24 + 8*cap(type) bytes, and the rest if its
// header shows a larger type (a stale word, repaired by an unsignaled CAS when from is known).
func (t *Tree) readNode(ctx context.Context, a farmem.Addr, typ int, from farmem.Addr, fromWord uint64) (*node, error) {
	buf := make([]byte, nodeBytes(typ))
	if err := t.m.Read(ctx, a, buf); err != nil {
		return nil, err
	}
	meta := le.Uint64(buf[nMetaOff:])
	if real := int(meta & metaTypeMask); real > typ && real < numTypes {
		more := make([]byte, nodeBytes(real)-len(buf))
		if err := t.m.Read(ctx, a.Add(uint64(len(buf))), more); err != nil {
			return nil, err
		}
		buf = append(buf, more...)
		if from != 0 {
			var b farmem.Batch
			b.Unsignaled(b.CAS(from, fromWord, withType(fromWord, real)))
			t.m.Post(ctx, &b)
		}
	}
	n, err := decodeNode(a, buf)
	if err != nil {
		return nil, err
	}
	if n.typ < typ { // a stale word cannot name a larger type than the node has
		return nil, fmt.Errorf("%w: node %v type %d below its word's %d", ErrCorrupt, a, n.typ, typ)
	}
	return n, nil
}

// rootNode reads the root node fresh.
func (t *Tree) rootNode(ctx context.Context) (*node, error) {
	n, err := t.readNode(ctx, t.node0, 0, 0, 0)
	if err != nil {
		return nil, err
	}
	t.cachePut(n)
	return n, nil
}

// loc is where a descent for a key ended.
type loc struct {
	parent *node // the node whose slot names the child (never nil)
	fresh  bool  // parent was read from far memory in this descent
	idx    int   // the child's slot in parent, -1: parent has none for the key
	entry  uint64
	child  *node // a child node whose prefix differs from the key's (prefix mismatch)
}

func (l loc) slot() farmem.Addr { return l.parent.slotAddr(l.idx) }

// walk is a descent's starting point: nil starts from the cache (else the root); with
// refresh, start is read again first.
type walk struct {
	start   *node
	refresh bool
	waits   int
}

// backtrack makes the next descent re-read parent first (the paper's backtracking: one hop
// back to the special node, not a restart from the root).
func (w *walk) backtrack(parent *node) { w.start, w.refresh = parent, true }

// descend walks from w's start to the leaf slot for k.
func (t *Tree) descend(ctx context.Context, k uint64, w *walk) (loc, error) {
	var n *node
	fresh := false
	switch {
	case w.start != nil && w.refresh:
		var err error
		if n, err = t.readNode(ctx, w.start.addr, w.start.typ, 0, 0); err != nil {
			return loc{}, err
		}
		t.cachePut(n)
		fresh, w.refresh = true, false
	case w.start != nil:
		n = w.start
	default:
		if n = t.cacheLookup(k); n == nil {
			var err error
			if n, err = t.rootNode(ctx); err != nil {
				return loc{}, err
			}
			fresh = true
		}
	}
	for {
		i := n.route(k)
		if i < 0 {
			if !fresh {
				var err error
				if n, err = t.readNode(ctx, n.addr, n.typ, 0, 0); err != nil {
					return loc{}, err
				}
				t.cachePut(n)
				fresh = true
				continue
			}
			return loc{parent: n, fresh: true, idx: -1}, nil
		}
		e := n.slots[i]
		if entIsLeaf(e) {
			return loc{parent: n, fresh: fresh, idx: i, entry: e}, nil
		}
		c, err := t.readNode(ctx, entAddr(e), entType(e), n.slotAddr(i), e)
		if err != nil {
			return loc{}, err
		}
		if c.depth <= n.depth || c.prefix != k&prefixMask(c.depth) {
			if !fresh {
				if n, err = t.readNode(ctx, n.addr, n.typ, 0, 0); err != nil {
					return loc{}, err
				}
				t.cachePut(n)
				fresh = true
				continue
			}
			return loc{parent: n, fresh: true, idx: i, entry: e, child: c}, nil
		}
		if c.rev != uint64(n.slotAddr(i)) {
			t.st.RevMismatches++
			if fresh { // repair the hint
				var b farmem.Batch
				b.Unsignaled(b.CAS(c.addr.Add(nRevOff), c.rev, uint64(n.slotAddr(i))))
				t.m.Post(ctx, &b)
			}
		}
		t.cachePut(c)
		n, fresh = c, true
	}
}

// checkLeafRev counts a leaf whose reverse pointer does not name the slot it was reached by:
// the cached parent is dropped (it is refreshed on the next miss), and a fresh parent repairs
// the hint with an unsignaled CAS.
func (t *Tree) checkLeafRev(ctx context.Context, l loc, lf *leaf) {
	if lf.rev == uint64(l.slot()) {
		return
	}
	t.st.RevMismatches++
	if !l.fresh {
		t.cache.drop(l.parent)
		return
	}
	var b farmem.Batch
	b.Unsignaled(b.CAS(entAddr(l.entry).Add(lRevOff), lf.rev, uint64(l.slot())))
	t.m.Post(ctx, &b)
}

// inRange reports whether k is in the leaf's [min, max).
func (lf *leaf) inRange(k uint64) bool { return k >= lf.min && k < lf.max }

// release posts the unsignaled FAA that gives back an IDU's Spear count.
func (t *Tree) release(ctx context.Context, l farmem.Addr) {
	var b farmem.Batch
	b.Unsignaled(b.FAA(l.Add(lSpearOff), ^uint64(0)))
	t.m.Post(ctx, &b)
}

// backoff sleeps before a retry: 1µs doubling to 64µs with the attempt count.
func (t *Tree) backoff(ctx context.Context, n int) error {
	return t.rt.Sleep(ctx, time.Microsecond<<min(n, 6))
}

// leafTrouble handles a leaf that is dead or does not cover k; it reports whether the caller
// should retry (after w was set to backtrack), or false if the leaf hangs from an ordinary
// node and k's 7-byte prefix is not the leaf's (the key is absent, or needs a prefix split).
func (t *Tree) leafTrouble(ctx context.Context, k uint64, l loc, lf *leaf, w *walk) (retry bool, err error) {
	if spearIsDead(lf.spear) {
		t.st.Backtracks++
		if l.fresh {
			// The parent, just read, still names a dead leaf: its SMO is publishing.
			if err := t.awaitSMO(ctx, entAddr(l.entry), l.parent); err != nil {
				return false, err
			}
		}
		w.backtrack(l.parent)
		return true, nil
	}
	if lf.inRange(k) {
		return false, nil
	}
	if l.parent.special || !l.fresh {
		t.st.Backtracks++
		if l.fresh {
			w.waits++
			if err := t.backoff(ctx, w.waits); err != nil {
				return false, err
			}
		}
		w.backtrack(l.parent)
		return true, nil
	}
	return false, nil
}

var errRetry = errors.New("hybrid: retry")

// Get returns k's value. Warm cache: 1 round trip (the leaf's head and keys, then its values,
// in one ordered batch).
func (t *Tree) Get(ctx context.Context, key []byte) (uint64, error) {
	k, err := decodeKey(key)
	if err != nil {
		return 0, err
	}
	if t.blocks {
		return 0, errBlockMode("Get")
	}
	return t.get(ctx, k)
}

// get returns k's value word.
func (t *Tree) get(ctx context.Context, k uint64) (uint64, error) {
	t.st.Gets++
	var w walk
	head := make([]byte, leafValsOff(t.s))
	tail := make([]byte, leafSize(t.s)-leafValsOff(t.s))
	var lf leaf
	for {
		l, err := t.descend(ctx, k, &w)
		if err != nil {
			return 0, fmt.Errorf("hybrid: get: %w", err)
		}
		if l.child != nil || l.idx < 0 {
			return 0, ErrNotFound
		}
		la := entAddr(l.entry)
		var b farmem.Batch
		b.Read(la, head)
		b.Read(la.Add(uint64(leafValsOff(t.s))), tail)
		if err := t.m.Do(ctx, &b); err != nil {
			return 0, fmt.Errorf("hybrid: get: %w", err)
		}
		decodeLeafHead(head, t.s, &lf)
		decodeLeafTail(tail, t.s, &lf)
		if lf.front != lf.rear {
			return 0, fmt.Errorf("%w: leaf %v versions %d/%d", ErrCorrupt, la, lf.front, lf.rear)
		}
		retry, err := t.leafTrouble(ctx, k, l, &lf, &w)
		if err != nil {
			return 0, fmt.Errorf("hybrid: get: %w", err)
		}
		if retry {
			continue
		}
		if !lf.inRange(k) {
			return 0, ErrNotFound
		}
		t.checkLeafRev(ctx, l, &lf)
		if i := lf.find(k); i >= 0 {
			return lf.vals[i], nil
		}
		return 0, ErrNotFound
	}
}

// idu is the first round trip of Insert, Update and Delete: the leaf's Spear FAA and its head
// and keys in one ordered batch. On success the caller holds one Spear count and must release
// it. It returns ok=false with no count held when the caller must report the key absent
// (Update, Delete), or when it must create a leaf or split a prefix (Insert: l says where).
func (t *Tree) idu(ctx context.Context, k uint64, w *walk, head []byte, lf *leaf, x *extra) (l loc, ok bool, err error) {
	for {
		l, err = t.descend(ctx, k, w)
		if err != nil {
			return l, false, err
		}
		if l.child != nil || l.idx < 0 {
			return l, false, nil
		}
		la := entAddr(l.entry)
		var b farmem.Batch
		b.FAA(la.Add(lSpearOff), spearOne)
		b.Read(la, head)
		if x != nil && x.tail != nil {
			b.Read(la.Add(uint64(leafValsOff(t.s))), x.tail)
		}
		if x != nil && x.img != nil && !x.written {
			b.Write(x.block, x.img)
		}
		if err := t.m.Do(ctx, &b); err != nil {
			// The FAA may have applied: give it back (unsignaled; a lost one is the limit
			// stated for clients that fail inside an IDU).
			if _, ferr := b.Result(0); ferr == nil {
				t.release(ctx, la)
			}
			return l, false, err
		}
		prev, _ := b.Result(0)
		if x != nil {
			x.written = x.img != nil
			if x.tail != nil {
				decodeLeafTail(x.tail, t.s, lf)
			}
		}
		decodeLeafHead(head, t.s, lf)
		if spearExclusive(prev) || spearIsDead(prev) {
			t.release(ctx, la)
			t.st.SpearBackoffs++
			if spearIsDead(prev) {
				retry, err := t.leafTrouble(ctx, k, l, lf, w)
				if err != nil || !retry {
					return l, false, err
				}
				continue
			}
			if err := t.awaitSMO(ctx, la, l.parent); err != nil {
				return l, false, err
			}
			w.backtrack(l.parent)
			continue
		}
		retry, err := t.leafTrouble(ctx, k, l, lf, w)
		if err != nil {
			t.release(ctx, la)
			return l, false, err
		}
		if retry {
			t.release(ctx, la)
			continue
		}
		if !lf.inRange(k) {
			// A leaf of another 7-byte prefix under an ordinary node: Insert splits the
			// prefix while holding this count (so no SMO moves the leaf meanwhile).
			return l, false, nil
		}
		t.checkLeafRev(ctx, l, lf)
		return l, true, nil
	}
}

// Update stores v as k's value. Warm cache: 2 round trips (the Spear FAA with the head and
// keys; the value's WRITE, with the release FAA unsignaled behind it). It returns only once
// the WRITE has landed.
func (t *Tree) Update(ctx context.Context, key []byte, v uint64) error {
	k, err := decodeKey(key)
	if err != nil {
		return err
	}
	if t.blocks {
		return errBlockMode("Update")
	}
	t.st.Updates++
	la, i, _, err := t.enterKey(ctx, k, nil, "update")
	if err != nil {
		return err
	}
	var b farmem.Batch
	b.Write(leafValAddr(la, t.s, i), le.AppendUint64(nil, v))
	b.Unsignaled(b.FAA(la.Add(lSpearOff), ^uint64(0)))
	if err := t.m.Do(ctx, &b); err != nil {
		return fmt.Errorf("hybrid: update: %w", err)
	}
	return nil
}

// enterKey is the first round trip of an update or delete of k (op names it in errors): the
// leaf's Spear FAA with its head and keys (and, with x, the rest of the leaf). It returns the
// leaf's address, k's slot and the leaf as read, with the Spear count held; if k is absent it
// gives the count back and returns ErrNotFound.
func (t *Tree) enterKey(ctx context.Context, k uint64, x *extra, op string) (farmem.Addr, int, *leaf, error) {
	var w walk
	head := make([]byte, leafValsOff(t.s))
	lf := new(leaf)
	l, ok, err := t.idu(ctx, k, &w, head, lf, x)
	if err != nil {
		return 0, -1, nil, fmt.Errorf("hybrid: %s: %w", op, err)
	}
	if !ok {
		if l.idx >= 0 && l.child == nil {
			t.release(ctx, entAddr(l.entry))
		}
		return 0, -1, nil, ErrNotFound
	}
	la := entAddr(l.entry)
	i := lf.find(k)
	if i < 0 {
		t.release(ctx, la)
		return 0, -1, nil, ErrNotFound
	}
	return la, i, lf, nil
}

// Delete removes k. Warm cache: 2 round trips (the Spear FAA with the head and keys; the CAS
// of the key word to a tombstone, with the release FAA unsignaled behind it). The slot is not
// reused until an SMO rewrites the leaf under an exclusive Spear.
func (t *Tree) Delete(ctx context.Context, key []byte) error {
	k, err := decodeKey(key)
	if err != nil {
		return err
	}
	t.st.Deletes++
	if t.blocks {
		return t.deleteBlock(ctx, k)
	}
	la, i, _, err := t.enterKey(ctx, k, nil, "delete")
	if err != nil {
		return err
	}
	var b farmem.Batch
	b.CAS(leafKeyAddr(la, i), k, tombstone)
	b.Unsignaled(b.FAA(la.Add(lSpearOff), ^uint64(0)))
	if err := t.m.Do(ctx, &b); err != nil {
		return fmt.Errorf("hybrid: delete: %w", err)
	}
	if prev, _ := b.Result(0); prev != k {
		return ErrNotFound // another delete won: it took effect first
	}
	return nil
}
