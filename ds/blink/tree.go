package blink

import (
	"bytes"
	"context"
	"errors"
	"fmt"

	"github.com/farmem/farmem/alloc"
	"github.com/farmem/farmem/ds/selcc"
	"github.com/farmem/farmem/farmem"
)

// Errors the tree returns (wrapped).
var (
	// ErrNotFound: Get, Update or Delete of an absent key.
	ErrNotFound = errors.New("blink: key not found")
	// ErrExists: Insert of a present key.
	ErrExists = errors.New("blink: key exists")
	// ErrKey: a key or value outside the tree's Limits (also wraps farmem.ErrInvalid).
	ErrKey = errors.New("blink: key or value size")
	// ErrCorrupt: a line that does not hold a node.
	ErrCorrupt = errors.New("blink: corrupt node")
)

// Limits returns the longest key and the largest len(key)+len(value) a tree on lines of
// lineSize bytes accepts: keys up to lineSize/16 bytes, an entry (4 bytes of lengths, key,
// value) up to a third of what a line holds besides a header and two high keys, so that both
// halves of a node that overflowed by one entry always fit a line. A 4 KiB line takes keys up
// to 256 bytes and key+value up to 1,186 bytes (YCSB's 1,000-byte records); a 2 KiB line
// 128 and 582.
func Limits(lineSize int) (maxKey, maxKV int) {
	maxKey = min(lineSize/16, infLen-1)
	maxKV = (lineSize-hdrSize-2*maxKey)/3 - 4
	return maxKey, maxKV
}

// Tree is one client's handle on a B-link tree. Like its selcc.Client it belongs to one
// goroutine at a time.
type Tree struct {
	cl     *selcc.Client
	a      *alloc.Allocator
	root   selcc.GCL
	line   int
	maxKey int
	maxKV  int
	buf    []byte
	closed bool
	stats  Stats
	down   map[farmem.ComputeID]farmem.Time // compute nodes seen down, and since when (repairdown.go)
}

// Stats count one handle's structural events.
type Stats struct {
	// Splits counts nodes this handle split (a root split counts one).
	Splits uint64
	// MovesRight counts walks sent to a right sibling because a node's high key was at or
	// below the key sought: a split had moved the key right since the parent was read.
	MovesRight uint64
	// Repairs counts holds of crashed compute nodes this handle removed from lines it wanted
	// (see the package doc's Recovery).
	Repairs uint64
}

// Stats returns the handle's counters.
func (t *Tree) Stats() Stats { return t.stats }

// Create allocates and formats an empty tree's root line (an empty leaf with an infinite high
// key) and returns it; c is the cluster cl belongs to. The root line never moves: a root split
// copies its halves into two new lines and makes the root an internal node over them.
func Create(ctx context.Context, c *selcc.Cluster, cl *selcc.Client, a *alloc.Allocator) (selcc.GCL, error) {
	g, err := cl.Alloc(ctx, a)
	if err != nil {
		return 0, err
	}
	t := &Tree{cl: cl, line: c.Options().LineSize}
	t.buf = make([]byte, t.line)
	if err := t.writeNew(ctx, g, &node{inf: true}); err != nil {
		return 0, err
	}
	return g, nil
}

// Open returns cl's handle on the tree rooted at root (no round trip).
func Open(c *selcc.Cluster, cl *selcc.Client, a *alloc.Allocator, root selcc.GCL) (*Tree, error) {
	if cl == nil || a == nil || root == 0 {
		return nil, fmt.Errorf("blink: open: %w", farmem.ErrInvalid)
	}
	line := c.Options().LineSize
	mk, mkv := Limits(line)
	return &Tree{cl: cl, a: a, root: root, line: line, maxKey: mk, maxKV: mkv, buf: make([]byte, line)}, nil
}

// Root returns the tree's root line.
func (t *Tree) Root() selcc.GCL { return t.root }

// Close forgets the handle (the client's cache keeps its lines). It is idempotent.
func (t *Tree) Close() error { t.closed = true; return nil }

func (t *Tree) check(key []byte, value []byte, withValue bool) error {
	if t.closed {
		return fmt.Errorf("blink: %w", farmem.ErrClosed)
	}
	if len(key) == 0 || len(key) > t.maxKey || (withValue && len(key)+len(value) > t.maxKV) {
		return fmt.Errorf("%w: key %d bytes, value %d (max key %d, key+value %d): %w",
			ErrKey, len(key), len(value), t.maxKey, t.maxKV, farmem.ErrInvalid)
	}
	return nil
}

// lock takes g shared or exclusive and decodes its node.
func (t *Tree) lock(ctx context.Context, g selcc.GCL, excl bool) (*selcc.Guard, *node, error) {
	gd, err := t.guard(ctx, g, excl)
	if err != nil {
		return nil, nil, err
	}
	if err := gd.Read(ctx, 0, t.buf); err != nil {
		return nil, nil, errors.Join(err, gd.Unlock(ctx))
	}
	n, err := decode(t.buf)
	if err != nil {
		return nil, nil, errors.Join(fmt.Errorf("%v: %w", g, err), gd.Unlock(ctx))
	}
	return gd, n, nil
}

// store encodes n into the guard's line.
func (t *Tree) store(ctx context.Context, gd *selcc.Guard, n *node) error {
	if n.size() > t.line {
		return fmt.Errorf("blink: node of %d bytes over a %d-byte line: %w", n.size(), t.line, ErrCorrupt)
	}
	k := n.encode(t.buf)
	return gd.Write(ctx, 0, t.buf[:k])
}

// writeNew writes n into a fresh line g (no other client knows it yet) and releases it.
func (t *Tree) writeNew(ctx context.Context, g selcc.GCL, n *node) error {
	gd, err := t.cl.Lock(ctx, g)
	if err != nil {
		return err
	}
	err = t.store(ctx, gd, n)
	return errors.Join(err, gd.Unlock(ctx))
}

// descend returns the node at level target whose range covers key, locked (exclusively if
// excl). It takes one line at a time: a node is released before its child or right sibling is
// taken, and a node whose high key is at or below key sends the walk right (a split moved the
// key there), so no reader waits for a split to finish.
func (t *Tree) descend(ctx context.Context, key []byte, target uint8, excl bool) (*selcc.Guard, *node, error) {
	g, lvl := t.root, -1
	for {
		gd, n, err := t.lock(ctx, g, excl && lvl == int(target))
		if err != nil {
			return nil, nil, err
		}
		switch {
		case n.level < target:
			return nil, nil, errors.Join(fmt.Errorf("blink: %v at level %d under level %d: %w", g, n.level, target, ErrCorrupt), gd.Unlock(ctx))
		case !n.covers(key):
			if n.right == 0 {
				return nil, nil, errors.Join(fmt.Errorf("blink: %v: finite high key, no sibling: %w", g, ErrCorrupt), gd.Unlock(ctx))
			}
			g, lvl = selcc.GCL(n.right), int(n.level)
			t.stats.MovesRight++
		case n.level == target:
			if !excl || gd.Exclusive() {
				return gd, n, nil
			}
			lvl = int(n.level) // the same line again, exclusively
		default:
			g, lvl = selcc.GCL(n.child(key)), int(n.level)-1
		}
		if err := gd.Unlock(ctx); err != nil {
			return nil, nil, err
		}
	}
}

// Get returns key's value. Round trips: 0 when every node on the path is cached; one per
// missed node otherwise.
func (t *Tree) Get(ctx context.Context, key []byte) ([]byte, error) {
	if err := t.check(key, nil, false); err != nil {
		return nil, err
	}
	gd, n, err := t.descend(ctx, key, 0, false)
	if err != nil {
		return nil, err
	}
	if err := gd.Unlock(ctx); err != nil {
		return nil, err
	}
	i, ok := n.find(key)
	if !ok {
		return nil, fmt.Errorf("%q: %w", key, ErrNotFound)
	}
	return n.vals[i], nil
}

// Insert adds key with value; ErrExists if present.
func (t *Tree) Insert(ctx context.Context, key, value []byte) error { return t.put(ctx, key, value, 1) }

// Update replaces key's value; ErrNotFound if absent.
func (t *Tree) Update(ctx context.Context, key, value []byte) error { return t.put(ctx, key, value, 2) }

// Upsert sets key's value whether or not it is present.
func (t *Tree) Upsert(ctx context.Context, key, value []byte) error { return t.put(ctx, key, value, 3) }

// put writes key's value in its leaf under the leaf's exclusive guard (mode 1 insert, 2
// update, 3 either), splitting the leaf if it overflows.
func (t *Tree) put(ctx context.Context, key, value []byte, mode int) error {
	if err := t.check(key, value, true); err != nil {
		return err
	}
	gd, n, err := t.descend(ctx, key, 0, true)
	if err != nil {
		return err
	}
	i, ok := n.find(key)
	switch {
	case ok && mode == 1:
		return errors.Join(fmt.Errorf("%q: %w", key, ErrExists), gd.Unlock(ctx))
	case !ok && mode == 2:
		return errors.Join(fmt.Errorf("%q: %w", key, ErrNotFound), gd.Unlock(ctx))
	case ok && n.voff != nil && len(value) == len(n.vals[i]):
		// In place: only the value's bytes change (and only they are dirty).
		err := gd.Write(ctx, n.voff[i], value)
		return errors.Join(err, gd.Unlock(ctx))
	case ok:
		n.vals[i] = bytes.Clone(value)
	default:
		n.keys = append(n.keys[:i], append([][]byte{bytes.Clone(key)}, n.keys[i:]...)...)
		n.vals = append(n.vals[:i], append([][]byte{bytes.Clone(value)}, n.vals[i:]...)...)
	}
	return t.commit(ctx, gd, n)
}

// commit stores n (exclusively held by gd) and releases it, splitting it first if it
// overflows its line and posting the separator one level up.
func (t *Tree) commit(ctx context.Context, gd *selcc.Guard, n *node) error {
	if n.size() <= t.line {
		err := t.store(ctx, gd, n)
		return errors.Join(err, gd.Unlock(ctx))
	}
	if gd.GCL() == t.root {
		return t.splitRoot(ctx, gd, n)
	}
	rg, err := t.cl.Alloc(ctx, t.a)
	if err != nil { // nothing changed yet
		return errors.Join(err, gd.Unlock(ctx))
	}
	r, sep := n.split()
	t.stats.Splits++
	sep = bytes.Clone(sep)
	n.right = uint64(rg)
	// The right half reaches far memory before the left half points at it.
	if err := t.writeNew(ctx, rg, r); err != nil {
		return errors.Join(err, gd.Unlock(ctx))
	}
	err = t.store(ctx, gd, n)
	if err = errors.Join(err, gd.Unlock(ctx)); err != nil {
		return err
	}
	// The split is complete and the tree valid without the separator (readers move right);
	// posting it only shortens their walk, so a lack of memory there does not fail the write.
	if err := t.post(ctx, n.level+1, sep, rg); err != nil && !errors.Is(err, farmem.ErrNoSpace) {
		return err
	}
	return nil
}

// post inserts the separator sep with right child rg into the level-lvl node covering sep.
func (t *Tree) post(ctx context.Context, lvl uint8, sep []byte, rg selcc.GCL) error {
	gd, p, err := t.descend(ctx, sep, lvl, true)
	if err != nil {
		return err
	}
	i, ok := p.find(sep)
	if ok {
		return errors.Join(fmt.Errorf("blink: separator %q posted twice: %w", sep, ErrCorrupt), gd.Unlock(ctx))
	}
	p.keys = append(p.keys[:i], append([][]byte{sep}, p.keys[i:]...)...)
	p.kids = append(p.kids[:i+1], append([]uint64{uint64(rg)}, p.kids[i+1:]...)...)
	return t.commit(ctx, gd, p)
}

// splitRoot splits the overfull root n in place: its halves go to two new lines and the root
// becomes an internal node one level up over them, so the root's address never changes.
func (t *Tree) splitRoot(ctx context.Context, gd *selcc.Guard, n *node) error {
	lg, err := t.cl.Alloc(ctx, t.a)
	if err != nil {
		return errors.Join(err, gd.Unlock(ctx))
	}
	rg, err := t.cl.Alloc(ctx, t.a)
	if err != nil {
		return errors.Join(err, gd.Unlock(ctx))
	}
	r, sep := n.split()
	t.stats.Splits++
	n.right = uint64(rg)
	if err := t.writeNew(ctx, rg, r); err != nil {
		return errors.Join(err, gd.Unlock(ctx))
	}
	if err := t.writeNew(ctx, lg, n); err != nil {
		return errors.Join(err, gd.Unlock(ctx))
	}
	root := &node{level: n.level + 1, inf: true, keys: [][]byte{bytes.Clone(sep)}, kids: []uint64{uint64(lg), uint64(rg)}}
	err = t.store(ctx, gd, root)
	return errors.Join(err, gd.Unlock(ctx))
}

// Delete removes key; ErrNotFound if absent. Nodes are never merged (an emptied leaf stays in
// the sibling chain).
func (t *Tree) Delete(ctx context.Context, key []byte) error {
	if err := t.check(key, nil, false); err != nil {
		return err
	}
	gd, n, err := t.descend(ctx, key, 0, true)
	if err != nil {
		return err
	}
	i, ok := n.find(key)
	if !ok {
		return errors.Join(fmt.Errorf("%q: %w", key, ErrNotFound), gd.Unlock(ctx))
	}
	n.keys = append(n.keys[:i], n.keys[i+1:]...)
	n.vals = append(n.vals[:i], n.vals[i+1:]...)
	return t.commit(ctx, gd, n)
}

// Pair is a key and its value.
type Pair struct {
	Key, Value []byte
}

// Scan returns the pairs with keys in [from, to) in ascending order, at most limit (<= 0: no
// limit); an empty from starts at the first key, a nil to has no bound. It reads one leaf at a
// time under a shared guard and follows the sibling pointers; after a leaf it continues from
// that leaf's high key, so a key a concurrent split moved right is not reported twice. Each
// key's report is what a Get at the instant its leaf was read would return (per-key
// linearizable, not a snapshot).
func (t *Tree) Scan(ctx context.Context, from, to []byte, limit int) ([]Pair, error) {
	if t.closed {
		return nil, fmt.Errorf("blink: %w", farmem.ErrClosed)
	}
	if to != nil && bytes.Compare(from, to) >= 0 {
		return nil, nil
	}
	cur := bytes.Clone(from)
	gd, n, err := t.descend(ctx, cur, 0, false)
	if err != nil {
		return nil, err
	}
	var out []Pair
	for {
		if err := gd.Unlock(ctx); err != nil {
			return nil, err
		}
		i, _ := n.find(cur)
		for ; i < len(n.keys); i++ {
			if to != nil && bytes.Compare(n.keys[i], to) >= 0 {
				return out, nil
			}
			out = append(out, Pair{Key: n.keys[i], Value: n.vals[i]})
			if limit > 0 && len(out) >= limit {
				return out, nil
			}
		}
		if n.inf || n.right == 0 || (to != nil && bytes.Compare(n.high, to) >= 0) {
			return out, nil
		}
		cur = n.high
		if gd, n, err = t.lock(ctx, selcc.GCL(n.right), false); err != nil {
			return nil, err
		}
	}
}
