package smart

import (
	"context"
	"errors"
	"fmt"
	"math/bits"
	"slices"
	"time"

	"github.com/farmem/farmem/alloc"
	"github.com/farmem/farmem/farmem"
	"github.com/farmem/farmem/farmem/localcost"
)

// Errors, each wrapped with %w.
var (
	ErrNotFound = errors.New("smart: key not found")
	ErrExists   = errors.New("smart: key exists")
	ErrParams   = errors.New("smart: bad parameters")
)

const rootMagic = 0x534d4152_54415254 // "SMARTART"

// Root block (64 bytes): 0 magic, 8 the root node's address (depth 0; it never moves).
const rootBlock = 64

// Create allocates an empty tree (its root block and root node) and returns the root block's
// address.
func Create(ctx context.Context, m farmem.Memory, a *alloc.Allocator) (farmem.Addr, error) {
	rn, err := a.Alloc(ctx, nodeBytes, 64)
	if err != nil {
		return 0, err
	}
	rb, err := a.Alloc(ctx, rootBlock, 64)
	if err != nil {
		return 0, err
	}
	b := make([]byte, rootBlock)
	le.PutUint64(b, rootMagic)
	le.PutUint64(b[8:], uint64(rn))
	var bt farmem.Batch
	bt.Write(rn, encodeNode(0, 0, nil))
	bt.Write(rb, b)
	if err := m.Do(ctx, &bt); err != nil {
		return 0, err
	}
	return rb, nil
}

// Options configure a handle.
type Options struct {
	// Cache is the compute node's radix cache (nil caches nothing).
	Cache *Cache
}

// Stats count a handle's work beyond the verbs.
type Stats struct {
	Gets, Inserts, Updates, Deletes, Scans uint64
	// LockRetries: leaf lock CASes that found the leaf locked.
	LockRetries uint64
	// Refreshes: cached nodes read again (a copy missed a key or named a dead leaf).
	Refreshes uint64
	// Splits: nodes put above a leaf or node whose prefix a new key left.
	Splits uint64
}

// Tree is one client's handle (one goroutine's).
type Tree struct {
	m     farmem.Memory
	a     *alloc.Allocator
	root  farmem.Addr // the root node
	cache *Cache
	me    uint64
	st    Stats
	lc    localcost.Price // the price of a cache access (localcost.go)
}

// Open returns a handle on the tree whose root block is root.
func Open(ctx context.Context, m farmem.Memory, a *alloc.Allocator, root farmem.Addr, o Options) (*Tree, error) {
	b := make([]byte, 16)
	if err := m.Read(ctx, root, b); err != nil {
		return nil, err
	}
	if le.Uint64(b) != rootMagic {
		return nil, fmt.Errorf("%w: no tree at %v", ErrParams, root)
	}
	return &Tree{m: m, a: a, root: farmem.Addr(le.Uint64(b[8:])), cache: o.Cache, me: uint64(m.Info().ID) + 1,
		lc: localcost.Of(m)}, nil
}

// Close is a no-op (the Memory and allocator are the caller's). It is idempotent.
func (t *Tree) Close() error { return nil }

// Stats returns the handle's counters.
func (t *Tree) Stats() Stats { return t.st }

// readNode reads the node at a, sized to the class kind names (a child word's kind), and the
// whole node if that class's last slot is filled (the node grew past a word not yet brought up
// to date).
func (t *Tree) readNode(ctx context.Context, a farmem.Addr, kind int) (*node, error) {
	b := make([]byte, nodeHeader+8*classSlots(kind))
	if err := t.m.Read(ctx, a, b); err != nil {
		return nil, err
	}
	n := decodeNode(a, b)
	if n.partial() {
		b = make([]byte, nodeBytes)
		if err := t.m.Read(ctx, a, b); err != nil {
			return nil, err
		}
		n = decodeNode(a, b)
	}
	return n, nil
}

func (t *Tree) readRoot(ctx context.Context) (*node, error) {
	return t.readNode(ctx, t.root, kindWhole)
}

// reread reads n again at the given kind, keeping what n knows of its parent's slot.
func (t *Tree) reread(ctx context.Context, n *node, kind int) (*node, error) {
	f, err := t.readNode(ctx, n.addr, kind)
	if err != nil {
		return nil, err
	}
	f.from, f.fromWord = n.from, n.fromWord
	return f, nil
}

// refresh reads n again (a cached copy that cannot be trusted) and caches the copy.
func (t *Tree) refresh(ctx context.Context, n *node) (*node, error) {
	t.st.Refreshes++
	f, err := t.reread(ctx, n, kindOf(n.count()+1))
	if err != nil {
		return nil, err
	}
	t.cachePut(f)
	return f, nil
}

// readChild reads the node that n's slot at names by word w: once, sized to the class w
// records. If the node had outgrown that class (read whole, a second read), the word in n's
// copy is brought up to date and the copy cached again, so this compute node's next read
// through it is a single one.
func (t *Tree) readChild(ctx context.Context, n *node, at int, w uint64) (*node, error) {
	c, err := t.readNode(ctx, wordAddr(w), wordKind(w))
	if err != nil {
		return nil, err
	}
	c.from, c.fromWord = n.slotAddr(at), w
	if k := kindOf(c.count()); k > wordKind(w) {
		t.cachePut(n.with(at, withKind(w, k)))
	}
	return c, nil
}

// recordClass brings the word in n's parent's slot up to date once n holds count children
// (SMART records a node's type in its parent's entry when the node changes type): a CAS, a
// round trip, paid by the insert that takes a node into a larger class, retried while the
// slot still names n with a smaller class. A slot that no longer names n (a node was put
// above it) is left alone: readers through it read n whole until its next growth. It returns
// n's copy knowing the word it wrote (for the cache), and updates the parent's cached copy.
func (t *Tree) recordClass(ctx context.Context, n *node, count int) (*node, error) {
	want := kindOf(count)
	if n.from == 0 || wordKind(n.fromWord) >= want {
		return n, nil
	}
	w := n.fromWord
	for wordAddr(w) == n.addr && wordKind(w) < want {
		prev, err := t.m.CAS(ctx, n.from, w, withKind(w, want))
		if err != nil {
			return n, err
		}
		if prev == w {
			if p := t.cacheLookupAt(n.prefix, n.depth-1); p != nil && p.addr <= n.from && n.from < p.addr+nodeBytes {
				if i := int(n.from-p.addr-nodeHeader) / 8; i < len(p.slots) && p.slots[i] == w {
					t.cachePut(p.with(i, withKind(w, want)))
				}
			}
			c := *n
			c.fromWord = withKind(w, want)
			return &c, nil
		}
		w = prev
	}
	return n, nil
}

// leafRead is a leaf's key, value and dead flag.
type leafRead struct {
	key, value uint64
	dead       bool
}

func (t *Tree) readLeaf(ctx context.Context, a farmem.Addr) (leafRead, error) {
	b := make([]byte, leafBytes-leafKey)
	if err := t.m.Read(ctx, a+leafKey, b); err != nil {
		return leafRead{}, err
	}
	return leafRead{key: le.Uint64(b), value: le.Uint64(b[8:]), dead: le.Uint64(b[16:]) != 0}, nil
}

// start returns the deepest cached node on k's path (cached true) or the root read.
func (t *Tree) start(ctx context.Context, k uint64) (*node, bool, error) {
	if n := t.cacheLookup(k); n != nil {
		return n, true, nil
	}
	n, err := t.readRoot(ctx)
	if err != nil {
		return nil, false, err
	}
	t.cachePut(n)
	return n, false, nil
}

// findLeaf walks to k's live leaf: its address and read. A missing key returns ErrNotFound
// (only from fresh reads: a cached copy is read again first).
func (t *Tree) findLeaf(ctx context.Context, k uint64) (farmem.Addr, leafRead, error) {
	n, cached, err := t.start(ctx, k)
	if err != nil {
		return 0, leafRead{}, err
	}
	for {
		w, at, _ := n.find(keyByte(k, n.depth))
		switch {
		case w == 0:
		case wordKind(w) == kindLeaf:
			lr, err := t.readLeaf(ctx, wordAddr(w))
			if err != nil {
				return 0, leafRead{}, err
			}
			if lr.key == k && !lr.dead {
				return wordAddr(w), lr, nil
			}
		default:
			c, err := t.readChild(ctx, n, at, w)
			if err != nil {
				return 0, leafRead{}, err
			}
			if c.prefix == k&prefixMask(c.depth) {
				t.cachePut(c)
				n, cached = c, false
				continue
			}
		}
		if !cached {
			return 0, leafRead{}, fmt.Errorf("%w: %#x", ErrNotFound, k)
		}
		if n, err = t.refresh(ctx, n); err != nil {
			return 0, leafRead{}, err
		}
		cached = false
	}
}

// Get returns k's value: the leaf's read with a warm cache (GetRoundTrips).
func (t *Tree) Get(ctx context.Context, k uint64) (uint64, error) {
	t.st.Gets++
	_, lr, err := t.findLeaf(ctx, k)
	return lr.value, err
}

// lock takes a leaf's lock word by CAS (a retry per round trip; after 16 in a row, waits of
// 1µs doubling to 32µs between tries).
func (t *Tree) lock(ctx context.Context, a farmem.Addr) error {
	wait := time.Microsecond
	for tries := 0; ; tries++ {
		prev, err := t.m.CAS(ctx, a, 0, t.me)
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

func (t *Tree) unlockAsync(ctx context.Context, a farmem.Addr) {
	var b farmem.Batch
	b.Unsignaled(b.CAS(a, t.me, 0))
	t.m.Post(ctx, &b)
}

// lockedLeaf returns k's live leaf locked: located through the cache (no round trip when
// warm), the lock CAS, the leaf's read. A leaf found dead or another key's sends the walk to
// fresh reads.
func (t *Tree) lockedLeaf(ctx context.Context, k uint64) (farmem.Addr, error) {
	n, cached, err := t.start(ctx, k)
	if err != nil {
		return 0, err
	}
	for {
		w, at, _ := n.find(keyByte(k, n.depth))
		switch {
		case w == 0:
		case wordKind(w) == kindLeaf:
			a := wordAddr(w)
			if err := t.lock(ctx, a); err != nil {
				return 0, err
			}
			lr, err := t.readLeaf(ctx, a)
			if err != nil {
				return 0, err
			}
			if lr.key == k && !lr.dead {
				return a, nil
			}
			t.unlockAsync(ctx, a)
		default:
			c, err := t.readChild(ctx, n, at, w)
			if err != nil {
				return 0, err
			}
			if c.prefix == k&prefixMask(c.depth) {
				t.cachePut(c)
				n, cached = c, false
				continue
			}
		}
		if !cached {
			return 0, fmt.Errorf("%w: %#x", ErrNotFound, k)
		}
		if n, err = t.refresh(ctx, n); err != nil {
			return 0, err
		}
		cached = false
	}
}

// Update sets present key k's value: the leaf's lock CAS, its read, then the value's write
// with the release (UpdateRoundTrips).
func (t *Tree) Update(ctx context.Context, k, v uint64) error {
	t.st.Updates++
	a, err := t.lockedLeaf(ctx, k)
	if err != nil {
		return err
	}
	var b farmem.Batch
	b.Write(a+16, le.AppendUint64(nil, v))
	b.CAS(a, t.me, 0)
	return t.m.Do(ctx, &b)
}

// Delete removes present key k: the leaf's lock CAS, its read, then its dead flag's write
// with the release (DeleteRoundTrips). The dead leaf stays in its slot until an insert of the
// key replaces it.
func (t *Tree) Delete(ctx context.Context, k uint64) error {
	t.st.Deletes++
	a, err := t.lockedLeaf(ctx, k)
	if err != nil {
		return err
	}
	var b farmem.Batch
	b.Write(a+24, le.AppendUint64(nil, 1))
	b.CAS(a, t.me, 0)
	return t.m.Do(ctx, &b)
}

// Insert adds absent key k: with the key's last node cached, the node read again (a copy is
// not trusted for absence), then the new leaf's write with the slot's CAS in one batch
// (InsertRoundTrips). A key whose prefix leaves a child's gets a new node above that child.
func (t *Tree) Insert(ctx context.Context, k, v uint64) error {
	t.st.Inserts++
	n, cached, err := t.start(ctx, k)
	if err != nil {
		return err
	}
	if cached {
		if n, err = t.refresh(ctx, n); err != nil {
			return err
		}
		t.st.Refreshes--
	}
	for {
		p := keyByte(k, n.depth)
		w, at, empty := n.find(p)
		if w == 0 {
			if empty < 0 {
				if len(n.slots) == nodeSlots {
					return fmt.Errorf("smart: node %v full", n.addr)
				}
				if n, err = t.reread(ctx, n, kindWhole); err != nil { // the slots past those read
					return err
				}
				continue
			}
			la, err := t.a.Alloc(ctx, leafBytes, 64)
			if err != nil {
				return err
			}
			nw := word(la, kindLeaf, p)
			prev, err := t.publish(ctx, []blockWrite{{la, encodeLeaf(k, v)}}, n.slotAddr(empty), 0, nw)
			if err != nil {
				return err
			}
			n = n.with(empty, prev)
			if prev == 0 {
				n, err = t.recordClass(ctx, n.with(empty, nw), empty+1) // slots fill in order
				t.cachePut(n)
				return err
			}
			continue // lost the slot: look again (the leaf block is leaked)
		}
		if wordKind(w) == kindLeaf {
			lr, err := t.readLeaf(ctx, wordAddr(w))
			if err != nil {
				return err
			}
			if lr.key == k {
				if !lr.dead {
					return fmt.Errorf("%w: %#x", ErrExists, k)
				}
				// Replace the dead leaf.
				la, err := t.a.Alloc(ctx, leafBytes, 64)
				if err != nil {
					return err
				}
				nw := word(la, kindLeaf, p)
				prev, err := t.publish(ctx, []blockWrite{{la, encodeLeaf(k, v)}}, n.slotAddr(at), w, nw)
				if err != nil {
					return err
				}
				if prev == w {
					t.cachePut(n.with(at, nw))
					return nil
				}
				if n, err = t.reread(ctx, n, kindWhole); err != nil {
					return err
				}
				continue
			}
			ok, err := t.splitAbove(ctx, n, at, w, lr.key, k, v)
			if err != nil || ok {
				return err
			}
			if n, err = t.reread(ctx, n, kindWhole); err != nil {
				return err
			}
			continue
		}
		c, err := t.readChild(ctx, n, at, w)
		if err != nil {
			return err
		}
		if c.prefix == k&prefixMask(c.depth) {
			t.cachePut(c)
			n = c
			continue
		}
		ok, err := t.splitAbove(ctx, n, at, w, c.prefix, k, v)
		if err != nil || ok {
			return err
		}
		if n, err = t.reread(ctx, n, kindWhole); err != nil {
			return err
		}
	}
}

// splitAbove puts a new node between n's slot at (holding child word w, whose keys start with
// other's bytes) and that child, at the first byte where k leaves other, holding the child and
// a new leaf for k; it reports false if the slot's CAS lost (the caller reads n again).
func (t *Tree) splitAbove(ctx context.Context, n *node, at int, w, other, k, v uint64) (bool, error) {
	d := bits.LeadingZeros64(other^k) / 8
	if d <= n.depth || d > 7 {
		return false, fmt.Errorf("smart: bad split of %#x and %#x at depth %d under %d", other, k, d, n.depth)
	}
	t.st.Splits++
	la, err := t.a.Alloc(ctx, leafBytes, 64)
	if err != nil {
		return false, err
	}
	na, err := t.a.Alloc(ctx, nodeBytes, 64)
	if err != nil {
		return false, err
	}
	children := []uint64{withPartial(w, keyByte(other, d)), word(la, kindLeaf, keyByte(k, d))}
	nw := word(na, kindOf(len(children)), keyByte(k, n.depth))
	prev, err := t.publish(ctx, []blockWrite{{la, encodeLeaf(k, v)}, {na, encodeNode(d, k&prefixMask(d), children)}}, n.slotAddr(at), w, nw)
	return prev == w, err
}

// blockWrite is a new block's contents.
type blockWrite struct {
	a farmem.Addr
	b []byte
}

// publish writes new blocks and then CASes slot from old to new, returning the word found: one
// ordered batch when every block is on the slot's memory node, else the writes (one batch,
// nodes in parallel) and then the CAS, a round trip each (blocks are allocated where the
// client's allocator places them, spreading leaves over the memory nodes as SMART's allocator
// does).
func (t *Tree) publish(ctx context.Context, ws []blockWrite, slot farmem.Addr, old, new uint64) (uint64, error) {
	var b farmem.Batch
	same := true
	for _, w := range ws {
		b.Write(w.a, w.b)
		same = same && w.a.Node() == slot.Node()
	}
	if !same {
		if err := t.m.Do(ctx, &b); err != nil {
			return 0, err
		}
		b.Reset()
	}
	i := b.CAS(slot, old, new)
	if err := t.m.Do(ctx, &b); err != nil {
		return 0, err
	}
	prev, _ := b.Result(i)
	return prev, nil
}

// Pair is a key and its value.
type Pair struct{ Key, Value uint64 }

// Scan returns up to limit pairs (0: no limit) with from <= key < to, in key order: the
// deepest cached node whose prefix the whole range shares is read again, then each level of
// nodes in the range in one batch, then every leaf in the range in one batch: one READ per key
// (SMART's scan; a round trip per level below the start, plus the leaves). Not atomic: each
// key's report is what a Get at the instant its leaf was read would return.
func (t *Tree) Scan(ctx context.Context, from, to uint64, limit int) ([]Pair, error) {
	t.st.Scans++
	if to <= from {
		return nil, nil
	}
	common := min(bits.LeadingZeros64(from^(to-1))/8, 7)
	var level []*node
	if c := t.cacheLookupAt(from, common); c != nil {
		f, err := t.readNode(ctx, c.addr, kindOf(c.count()+1))
		if err != nil {
			return nil, err
		}
		level = []*node{f}
	} else {
		r, err := t.readRoot(ctx)
		if err != nil {
			return nil, err
		}
		level = []*node{r}
	}
	var leaves []farmem.Addr
	for len(level) > 0 {
		var next []farmem.Addr
		var kinds []int
		for _, n := range level {
			shift := 56 - 8*n.depth
			for _, w := range n.slots {
				if w == 0 {
					continue
				}
				lo := n.prefix | uint64(wordPartial(w))<<shift
				hi := lo | (uint64(1)<<shift - 1)
				if hi < from || lo >= to {
					continue
				}
				if wordKind(w) == kindLeaf {
					leaves = append(leaves, wordAddr(w))
				} else {
					next = append(next, wordAddr(w))
					kinds = append(kinds, wordKind(w))
				}
			}
		}
		if len(next) == 0 {
			break
		}
		bufs := make([][]byte, len(next))
		var b farmem.Batch
		for i, a := range next {
			bufs[i] = make([]byte, nodeHeader+8*classSlots(kinds[i]))
			b.Read(a, bufs[i])
		}
		if err := t.m.Do(ctx, &b); err != nil {
			return nil, err
		}
		level = level[:0]
		for i, a := range next {
			n := decodeNode(a, bufs[i])
			if n.partial() {
				var err error
				if n, err = t.readNode(ctx, a, kindWhole); err != nil {
					return nil, err
				}
			}
			level = append(level, n)
		}
	}
	if len(leaves) == 0 {
		return nil, nil
	}
	bufs := make([][]byte, len(leaves))
	var b farmem.Batch
	for i, a := range leaves {
		bufs[i] = make([]byte, leafBytes-leafKey)
		b.Read(a+leafKey, bufs[i])
	}
	if err := t.m.Do(ctx, &b); err != nil {
		return nil, err
	}
	out := make([]Pair, 0, len(leaves))
	for _, buf := range bufs {
		k := le.Uint64(buf)
		if k < from || k >= to || le.Uint64(buf[16:]) != 0 {
			continue
		}
		out = append(out, Pair{Key: k, Value: le.Uint64(buf[8:])})
	}
	slices.SortFunc(out, func(a, b Pair) int {
		switch {
		case a.Key < b.Key:
			return -1
		case a.Key > b.Key:
			return 1
		}
		return 0
	})
	if limit > 0 && len(out) > limit {
		out = out[:limit]
	}
	return out, nil
}
