package sherman

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/farmem/farmem/alloc"
	"github.com/farmem/farmem/farmem"
	"github.com/farmem/farmem/farmem/localcost"
)

// Errors. Each is wrapped with %w.
var (
	// ErrNotFound: Get, Update or Delete of an absent key.
	ErrNotFound = errors.New("sherman: key not found")
	// ErrExists: Insert of a present key.
	ErrExists = errors.New("sherman: key exists")
	// ErrKey: a key the codec cannot store.
	ErrKey = errors.New("sherman: bad key")
	// ErrParams: bad Params, or a root block that is not a tree's (or another codec's).
	ErrParams = errors.New("sherman: bad parameters")
)

// DefaultNodeSize is Params.NodeSize's default: 1 KB nodes, as the Dolphin paper's evaluation
// gives every B+ tree (61 entries of 8-byte keys and values per leaf).
const DefaultNodeSize = 1024

// Params fix a tree's geometry at Create.
type Params struct {
	// Codec stores keys (Fixed8 if zero).
	Codec Codec
	// NodeSize is every node's bytes (DefaultNodeSize if zero; a multiple of 64, room for at
	// least 4 entries).
	NodeSize int
	// EntryVersions gives each leaf entry the room of Sherman's two per-entry version bytes
	// (its LeafEntry is a 4-bit front version, the key, the value and a 4-bit rear version,
	// packed: 18 bytes for 8-byte keys, so a 1 KB leaf holds 54 entries, Sherman's
	// kLeafCardinality, where 61 fit without them). The bytes are reserved, not used: the
	// node's checksum detects torn reads here. It changes only how many keys a leaf holds,
	// and so how many leaves and parents a tree of N keys has.
	EntryVersions bool
}

func (p *Params) setDefaults() error {
	if p.Codec == (Codec{}) {
		p.Codec = Fixed8()
	}
	if p.NodeSize == 0 {
		p.NodeSize = DefaultNodeSize
	}
	if err := p.Codec.check(); err != nil {
		return err
	}
	if l := newLayout(p.Codec, p.NodeSize, p.EntryVersions); p.NodeSize%64 != 0 || p.NodeSize > 1<<16 || l.innerCap < 4 || l.leafCap < 4 {
		return fmt.Errorf("%w: node size %d for key width %d", ErrParams, p.NodeSize, p.Codec.Width)
	}
	return nil
}

// Root block layout: 0 magic, 8 width, 16 fixed length, 24 max length, 32 node size, 40 the
// root node's address (CAS only), 48 1 if leaf entries reserve version bytes.
const (
	rootMagic   = 0x5348524d_4e425431 // "SHRMNBT1"
	rootBlock   = 64
	offRootPtr  = 40
	offVersions = 48
)

// Create allocates an empty tree (a root block and one empty leaf) and returns the root
// block's address.
func Create(ctx context.Context, m farmem.Memory, a *alloc.Allocator, p Params) (farmem.Addr, error) {
	if err := p.setDefaults(); err != nil {
		return 0, err
	}
	l := newLayout(p.Codec, p.NodeSize, p.EntryVersions)
	leaf, err := a.Alloc(ctx, uint64(l.size), 64)
	if err != nil {
		return 0, err
	}
	root, err := a.Alloc(ctx, rootBlock, 64)
	if err != nil {
		return 0, err
	}
	rb := make([]byte, rootBlock)
	le.PutUint64(rb[0:], rootMagic)
	le.PutUint64(rb[8:], uint64(p.Codec.Width))
	le.PutUint64(rb[16:], uint64(p.Codec.Fixed))
	le.PutUint64(rb[24:], uint64(p.Codec.MaxLen))
	le.PutUint64(rb[32:], uint64(p.NodeSize))
	le.PutUint64(rb[offRootPtr:], uint64(leaf))
	if p.EntryVersions {
		le.PutUint64(rb[offVersions:], 1)
	}
	var b farmem.Batch
	b.Write(leaf, l.encode(&node{}))
	b.Write(root, rb)
	if err := m.Do(ctx, &b); err != nil {
		return 0, err
	}
	return root, nil
}

// Options configure a handle.
type Options struct {
	// Cache is the compute node's cache of internal nodes (nil caches nothing).
	Cache *Cache
	// Locks is the compute node's local lock table (Sherman's hierarchical lock; nil: every
	// writer retries the remote CAS alone).
	Locks *LockTable
	// LatchOffset is where in the client's slice of its compute node's region the handle
	// keeps its latch word (the local lock's; an aligned word, default 0).
	LatchOffset uint64
}

// Stats count a handle's work beyond the verbs (which farmem.Stats counts).
type Stats struct {
	// Gets, Inserts, Updates, Deletes and Scans count calls.
	Gets, Inserts, Updates, Deletes, Scans uint64
	// LockRetries: lock CASes that found the node locked.
	LockRetries uint64
	// LocalWaits: lock acquisitions queued behind a local holder; Handovers of those that
	// were handed the remote lock (no CAS).
	LocalWaits, Handovers uint64
	// TornReads: node reads whose checksum failed (a concurrent write), read again.
	TornReads uint64
	// SiblingHops: walks sent right past a node's high fence (a split the walk's copy missed).
	SiblingHops uint64
	// Splits of leaves and internal nodes; RootGrowths new roots.
	Splits, RootGrowths uint64
}

// Tree is one client's handle: one goroutine's, with its own farmem.Memory and allocator.
type Tree struct {
	m     farmem.Memory
	a     *alloc.Allocator
	root  farmem.Addr
	l     layout
	cache *Cache
	me    uint64 // lock word value while this handle's compute node holds a lock
	locks *LockTable
	latch farmem.Addr // this handle's latch word (with locks)
	seq   uint64      // its last wait's ticket
	st    Stats
	lc    localcost.Price // the price of a cache access (localcost.go)
}

// Open returns a handle on the tree whose root block is root.
func Open(ctx context.Context, m farmem.Memory, a *alloc.Allocator, root farmem.Addr, o Options) (*Tree, error) {
	rb := make([]byte, rootBlock)
	if err := m.Read(ctx, root, rb); err != nil {
		return nil, err
	}
	if le.Uint64(rb) != rootMagic {
		return nil, fmt.Errorf("%w: no tree at %v", ErrParams, root)
	}
	c := Codec{Width: int(le.Uint64(rb[8:])), Fixed: int(le.Uint64(rb[16:])), MaxLen: int(le.Uint64(rb[24:]))}
	p := Params{Codec: c, NodeSize: int(le.Uint64(rb[32:])), EntryVersions: le.Uint64(rb[offVersions:]) == 1}
	if err := p.setDefaults(); err != nil {
		return nil, err
	}
	t := &Tree{m: m, a: a, root: root, l: newLayout(c, p.NodeSize, p.EntryVersions), cache: o.Cache, me: uint64(m.Info().Node) + 1, locks: o.Locks,
		lc: localcost.Of(m)}
	if o.Locks != nil {
		info := m.Info()
		if o.LatchOffset%8 != 0 || o.LatchOffset+8 > info.SliceSize {
			return nil, fmt.Errorf("%w: latch offset %d in a %d-byte slice", ErrParams, o.LatchOffset, info.SliceSize)
		}
		t.latch = info.Slice + farmem.Addr(o.LatchOffset)
	}
	return t, nil
}

// Close releases nothing the handle does not own (its Memory and allocator are the caller's).
// It is idempotent.
func (t *Tree) Close() error { return nil }

// Stats returns the handle's counters.
func (t *Tree) Stats() Stats { return t.st }

// Codec returns the tree's key codec.
func (t *Tree) Codec() Codec { return t.l.codec }

// LeafCapacity returns a leaf's entries.
func (t *Tree) LeafCapacity() int { return t.l.leafCap }

// read reads and decodes the node at a, again while torn.
func (t *Tree) read(ctx context.Context, a farmem.Addr) (*node, error) {
	buf := make([]byte, t.l.size)
	for {
		if err := t.m.Read(ctx, a, buf); err != nil {
			return nil, err
		}
		if n, ok := t.parse(a, buf); ok {
			return n, nil
		}
	}
}

// parse decodes a node read, counting a torn one (false).
func (t *Tree) parse(a farmem.Addr, buf []byte) (*node, bool) {
	if sound(buf) {
		if n, ok := t.l.decode(a, buf); ok {
			return n, true
		}
	}
	t.st.TornReads++
	return nil, false
}

func (t *Tree) rootPtr(ctx context.Context) (farmem.Addr, error) {
	var w [8]byte
	if err := t.m.Read(ctx, t.root+offRootPtr, w[:]); err != nil {
		return 0, err
	}
	return farmem.Addr(le.Uint64(w[:])), nil
}

// errShort: the tree has no level as high as asked (the root is lower).
var errShort = errors.New("sherman: tree shorter than the level")

// locate returns the address of a node at level lvl that covers k or lies left of it on its
// level (the caller reads it and goes right), and the cached copy it came through (nil if
// none). With a warm cache a leaf costs no round trip.
func (t *Tree) locate(ctx context.Context, k []byte, lvl int, useCache bool) (farmem.Addr, *node, error) {
	var cur farmem.Addr
	c := t.cacheLookup(k, lvl, useCache)
	if c != nil {
		if c.level == lvl {
			return c.addr, nil, nil
		}
		if c.level == lvl+1 {
			return c.child(k), c, nil
		}
		cur = c.child(k)
	} else {
		r, err := t.walkRoot(ctx, false)
		if err != nil {
			return 0, nil, err
		}
		cur = r
	}
	fromRoot := c == nil
	for {
		n, err := t.read(ctx, cur)
		if err != nil {
			return 0, nil, err
		}
		if fromRoot && n.high != nil && t.cache.knowsRoot() {
			// The root address the cache kept is no longer the root's (a root has no high
			// fence): another compute node grew the tree. Read the root pointer again.
			if cur, err = t.walkRoot(ctx, true); err != nil {
				return 0, nil, err
			}
			fromRoot = false
			continue
		}
		fromRoot = false
		if n.level < lvl {
			return 0, nil, errShort
		}
		if n.beyond(k) && n.sibling != 0 {
			t.st.SiblingHops++
			cur = n.sibling
			continue
		}
		if n.level == lvl {
			return cur, nil, nil
		}
		t.cachePut(n)
		if n.level == lvl+1 {
			return n.child(k), nil, nil
		}
		cur = n.child(k)
	}
}

func (t *Tree) cacheLookup(k []byte, lvl int, useCache bool) *node {
	if !useCache || t.cache == nil {
		return nil
	}
	c := t.cache.lookup(k)
	if c == nil {
		if t.caching() {
			t.chargeLocal(0)
		}
		return nil
	}
	t.chargeLocal(len(c.raw))
	if c.level < lvl {
		return nil
	}
	return c
}

// leafFor reads the leaf holding k's range: from the located address, right by siblings. A
// leaf whose low fence is above k (only a corrupt cached copy could send there) restarts the
// walk from the root.
func (t *Tree) leafFor(ctx context.Context, k []byte) (*node, error) {
	useCache := true
	for {
		a, via, err := t.locate(ctx, k, 0, useCache)
		if err != nil {
			return nil, err
		}
		for {
			n, err := t.read(ctx, a)
			if err != nil {
				return nil, err
			}
			if n.beyond(k) && n.sibling != 0 && !t.cache.restarts(via) {
				t.st.SiblingHops++
				t.cache.drop(via, t.l.codec.Width)
				a = n.sibling
				continue
			}
			if !n.covers(k) {
				t.cache.drop(via, t.l.codec.Width)
				useCache = false
				break
			}
			return n, nil
		}
	}
}

// Get returns k's value: one leaf read with a warm cache (GetRoundTrips).
func (t *Tree) Get(ctx context.Context, k []byte) (uint64, error) {
	if err := t.l.codec.valid(k); err != nil {
		return 0, err
	}
	t.st.Gets++
	n, err := t.leafFor(ctx, k)
	if err != nil {
		return 0, err
	}
	i, eq := n.search(k)
	if !eq {
		return 0, fmt.Errorf("%w: %x", ErrNotFound, k)
	}
	return n.vals[i], nil
}

// lock takes the node's lock word by CAS, retrying while another holds it (each retry a round
// trip; after 16 in a row it waits 1µs doubling to 32µs between tries).
func (t *Tree) lock(ctx context.Context, a farmem.Addr) error {
	if t.locks != nil {
		handed, err := t.localAcquire(ctx, a)
		if err != nil || handed {
			return err
		}
	}
	wait := time.Microsecond
	for tries := 0; ; tries++ {
		prev, err := t.m.CAS(ctx, a+offLock, 0, t.me)
		if err != nil {
			return err
		}
		if prev == 0 {
			return nil
		}
		t.st.LockRetries++
		if tries >= 16 {
			if err := t.m.Runtime().Sleep(ctx, wait); err != nil {
				return err
			}
			wait = min(2*wait, 32*time.Microsecond)
		}
	}
}

// unlockAsync releases a node's lock unchanged: an unsignaled CAS (applied before this
// client's next verb to the node), or a hand-over to a local waiter.
func (t *Tree) unlockAsync(ctx context.Context, a farmem.Addr) error {
	return t.release(ctx, a, &farmem.Batch{}, false)
}

// lockedLeaf returns k's leaf read under its lock (lock CAS, then the read: two round trips
// with a warm cache). A leaf past whose high fence k lies is released and its sibling taken.
func (t *Tree) lockedLeaf(ctx context.Context, k []byte) (*node, error) {
	return t.lockedAt(ctx, k, 0)
}

// lockedAt returns the node of level lvl covering k, read under its lock.
func (t *Tree) lockedAt(ctx context.Context, k []byte, lvl int) (*node, error) {
	useCache := true
	for {
		a, via, err := t.locate(ctx, k, lvl, useCache)
		if err != nil {
			return nil, err
		}
		for {
			if err := t.lock(ctx, a); err != nil {
				return nil, err
			}
			n, err := t.read(ctx, a)
			if err != nil {
				return nil, err
			}
			if n.beyond(k) && n.sibling != 0 && !t.cache.restarts(via) {
				t.st.SiblingHops++
				t.cache.drop(via, t.l.codec.Width)
				if err := t.unlockAsync(ctx, a); err != nil {
					return nil, err
				}
				a = n.sibling
				continue
			}
			if !n.covers(k) || n.level != lvl {
				t.cache.drop(via, t.l.codec.Width)
				if err := t.unlockAsync(ctx, a); err != nil {
					return nil, err
				}
				useCache = false
				break
			}
			if lvl > 0 && t.cache != nil && !t.cache.cachesWrites() {
				// Sherman files every internal page its walks read: a separator's insertion
				// reads the parent (its copy before the insertion).
				if c, ok := t.l.decode(a, n.raw); ok {
					t.cachePut(c)
				}
			}
			return n, nil
		}
	}
}

// writeUnlock writes n's body (all but the lock word) and releases its lock: one batch, one
// round trip (the write applies before the release).
func (t *Tree) writeUnlock(ctx context.Context, n *node) error {
	buf := t.l.encode(n)
	var b farmem.Batch
	b.Write(n.addr+offSum, buf[offSum:])
	return t.release(ctx, n.addr, &b, true)
}

// lockedSlot checks k, counts the operation in count, locks and reads k's leaf, and returns
// it with k's slot (where k is or would go). When k's presence is not want, it releases the
// lock (unsignaled) and returns ErrNotFound or ErrExists (AbsentRoundTrips).
func (t *Tree) lockedSlot(ctx context.Context, k []byte, want bool, count *uint64) (*node, int, error) {
	if err := t.l.codec.valid(k); err != nil {
		return nil, 0, err
	}
	*count++
	n, err := t.lockedLeaf(ctx, k)
	if err != nil {
		return nil, 0, err
	}
	i, eq := n.search(k)
	if eq != want {
		if err := t.unlockAsync(ctx, n.addr); err != nil {
			return nil, 0, err
		}
		if want {
			return nil, 0, fmt.Errorf("%w: %x", ErrNotFound, k)
		}
		return nil, 0, fmt.Errorf("%w: %x", ErrExists, k)
	}
	return n, i, nil
}

// Update sets present key k's value: lock CAS, leaf read, then the value and checksum writes
// with the release in one batch (UpdateRoundTrips).
func (t *Tree) Update(ctx context.Context, k []byte, v uint64) error {
	n, i, err := t.lockedSlot(ctx, k, true, &t.st.Updates)
	if err != nil {
		return err
	}
	n.vals[i] = v
	buf := t.l.encode(n)
	off := t.l.valueOff(i)
	var b farmem.Batch
	b.Write(n.addr+farmem.Addr(off), buf[off:off+8])
	b.Write(n.addr+offSum, buf[offSum:offSum+8])
	return t.release(ctx, n.addr, &b, true)
}

// Insert adds absent key k: lock CAS, leaf read, the leaf's write with the release
// (InsertRoundTrips), or a split when the insert fills the leaf (Sherman's rule: a leaf holds at
// most its capacity less one entry, an internal node its room less one separator).
func (t *Tree) Insert(ctx context.Context, k []byte, v uint64) error {
	n, i, err := t.lockedSlot(ctx, k, false, &t.st.Inserts)
	if err != nil {
		return err
	}
	n.keys = slices.Insert(n.keys, i, bytes.Clone(k))
	n.vals = slices.Insert(n.vals, i, v)
	if len(n.keys) < t.l.leafCap { // Sherman splits a leaf that reaches kLeafCardinality
		return t.writeUnlock(ctx, n)
	}
	return t.split(ctx, n)
}

// Delete removes present key k: lock CAS, leaf read, the leaf's write with the release
// (DeleteRoundTrips). Leaves are never merged.
func (t *Tree) Delete(ctx context.Context, k []byte) error {
	n, i, err := t.lockedSlot(ctx, k, true, &t.st.Deletes)
	if err != nil {
		return err
	}
	n.keys = slices.Delete(n.keys, i, i+1)
	n.vals = slices.Delete(n.vals, i, i+1)
	return t.writeUnlock(ctx, n)
}

// split halves locked, overfull node n: the upper half to a new node (written first), then n
// with its new high fence and sibling pointer and the release; then the separator is posted
// one level up (a new root if n was the root).
func (t *Tree) split(ctx context.Context, n *node) error {
	t.st.Splits++
	m := len(n.keys) / 2
	right := &node{level: n.level, high: n.high, sibling: n.sibling}
	var sep []byte
	if n.leaf() {
		sep = n.keys[m]
		right.keys, right.vals = slices.Clone(n.keys[m:]), slices.Clone(n.vals[m:])
		n.keys, n.vals = n.keys[:m], n.vals[:m]
	} else {
		sep = n.keys[m]
		right.keys, right.vals = slices.Clone(n.keys[m+1:]), slices.Clone(n.vals[m+1:])
		n.keys, n.vals = n.keys[:m], n.vals[:m+1]
	}
	right.low = sep
	ra, err := t.a.Alloc(ctx, uint64(t.l.size), 64)
	if err != nil {
		_ = t.unlockAsync(ctx, n.addr)
		return err
	}
	right.addr = ra
	if err := t.m.Write(ctx, ra, t.l.encode(right)); err != nil {
		_ = t.unlockAsync(ctx, n.addr)
		return err
	}
	n.high, n.sibling = sep, ra
	if err := t.writeUnlock(ctx, n); err != nil {
		return err
	}
	if !n.leaf() && t.cache.cachesWrites() {
		n.raw = nil // changed since read
		t.cachePut(n)
		t.cachePut(right)
	}
	return t.post(ctx, n.level+1, n.addr, sep, ra)
}

// post adds separator sep naming child right (split from left) at level lvl.
func (t *Tree) post(ctx context.Context, lvl int, left farmem.Addr, sep []byte, right farmem.Addr) error {
	for {
		r, err := t.rootPtr(ctx)
		if err != nil {
			return err
		}
		if r == left { // left was the root: grow a new one above it
			nr := &node{level: lvl, keys: [][]byte{sep}, vals: []uint64{uint64(left), uint64(right)}}
			a, err := t.a.Alloc(ctx, uint64(t.l.size), 64)
			if err != nil {
				return err
			}
			nr.addr = a
			if err := t.m.Write(ctx, a, t.l.encode(nr)); err != nil {
				return err
			}
			prev, err := t.m.CAS(ctx, t.root+offRootPtr, uint64(left), uint64(a))
			if err != nil {
				return err
			}
			if prev == uint64(left) {
				t.st.RootGrowths++
				t.cache.newRoot(a)
				if t.cache.cachesWrites() {
					t.cachePut(nr)
				}
				return nil
			}
			continue // another split of left grew the root first (the block is leaked)
		}
		p, err := t.lockedAt(ctx, sep, lvl)
		if errors.Is(err, errShort) {
			continue // the root is being grown above left's level
		}
		if err != nil {
			return err
		}
		i, _ := p.search(sep)
		p.keys = slices.Insert(p.keys, i, bytes.Clone(sep))
		p.vals = slices.Insert(p.vals, i+1, uint64(right))
		if len(p.keys) < t.l.innerCap { // and an internal node that reaches kInternalCardinality
			if err := t.writeUnlock(ctx, p); err != nil {
				return err
			}
			if t.cache.cachesWrites() {
				p.raw = nil // changed since read
				t.cachePut(p)
			}
			return nil
		}
		return t.split(ctx, p)
	}
}

// cachePut caches internal node n with its page (encoded again if n changed since read).
func (t *Tree) cachePut(n *node) {
	if t.cache == nil || n.leaf() || (t.cache.parents && n.level != 1) {
		return
	}
	if len(n.raw) != t.l.size {
		n.raw = t.l.encode(n)
	}
	t.cache.put(n, t.l.codec.Width, t.m.Runtime().Rand())
	if t.caching() {
		t.chargeLocal(len(n.raw))
	}
}
