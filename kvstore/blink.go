package kvstore

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/farmem/farmem/ds/blink"
	"github.com/farmem/farmem/ds/selcc"
	"github.com/farmem/farmem/farmem"
	"github.com/farmem/farmem/farmem/nodestate"
)

// Blink is SELCC's B-link tree (package ds/blink) as the store's index: nodes are SELCC global
// cache lines cached coherently on each compute node (one selcc.Cluster over the fabric, opened
// by the store's first OpenNode and closed by its last node state's Close), any byte keys up to
// LineSize/16 bytes, values inline. It is ordered: Store.Scan walks the leaf level.
//
// Durability: by default every line an operation dirtied is written back to far memory when
// its guard is released, before the operation returns (selcc.WriteBackOnRelease), so an
// acknowledged write survives its compute node's crash. FastWriteBack selects selcc.WriteBack,
// the paper's mode: a write to a line the node holds exclusively costs no round trip, but the
// newest copy of a line may live only in one compute node's cache, and that node's crash loses
// the acknowledged writes it held (possibly the tree's shape with them: new lines that never
// left its cache).
//
// Recovery while the store runs: a compute node that crashes is repaired by the survivors, one
// line at a time, as their operations meet its holds (package ds/blink, Recovery: they wait the
// fabric's down timeout once, then remove its holds from that line's word with one READ and one
// CAS and read the line from far memory, where the default durability put every write it
// acknowledged). Its clients' operations in flight have unknown outcomes; no acknowledged
// write is lost. A client that crashes alone hands its SELCC latches to its node, and its
// later operations fail with an error wrapping selcc.ErrClientDown and farmem.ErrNodeDown.
// Liveness is the fabric's: a node it reports down is taken as gone for good (fail-stop). A
// client or node that is only paused is waited for, never repaired: the allocator's lease,
// which the store's other kinds rely on to go past a paused client (its reads are discarded
// when it resumes), cannot fence a SELCC holder, which on resuming would write its cached line
// back over a newer one, and this kind takes no epoch pins. So a paused holder's peers retry
// (the operation fails with farmem.ErrNodeDown after selcc.Options.ReplyTimeout if it is silent
// that long) and go on once it runs again. With FastWriteBack a crashed node's dirty lines are
// lost (see above). Costs: nothing on the path of an operation that meets no dead holder.
//
// Round trips with a warm cache on one compute node: Get and Scan 0; Insert, Update, Delete 1
// (the leaf's write-back; 0 with FastWriteBack); each line missed or held by a peer costs what
// package selcc documents.
//
// Use a *Blink (its node states share the cluster through it), one store at a time.
type Blink struct {
	// LineSize is the bytes of a node (0: 4096, which takes YCSB's default 1,000-byte records).
	LineSize int
	// Frames is each compute node's cache size in lines (0: 128, half a MiB at 4 KiB lines,
	// which fits the default 1 MiB shared area).
	Frames int
	// FastWriteBack selects selcc.WriteBack (see the type's doc): faster, and not crash-safe.
	FastWriteBack bool
	// Options are the rest of the cluster's options; LineSize, Frames and Durability above
	// override theirs.
	Options selcc.Options

	mu      sync.Mutex
	cluster *selcc.Cluster
	refs    int
}

func (b *Blink) options() selcc.Options {
	o := b.Options
	o.LineSize, o.Frames = b.LineSize, b.Frames
	if o.LineSize == 0 {
		o.LineSize = 4096
	}
	if o.Frames == 0 {
		o.Frames = 128
	}
	o.Durability = selcc.WriteBackOnRelease
	if b.FastWriteBack {
		o.Durability = selcc.WriteBack
	}
	return o
}

// Name implements IndexKind: "blink".
func (*Blink) Name() string { return "blink" }

// Limits implements IndexKind: blink.Limits of the line size.
func (b *Blink) Limits() Limits {
	mk, mkv := blink.Limits(b.options().LineSize)
	return Limits{MaxKey: mk, MaxKV: mkv}
}

// Methods implements NodeKind: the cluster's invalidation handlers are SELCC's.
func (*Blink) Methods() farmem.MethodOwner { return farmem.OwnerSELCC }

// blinkNode is one compute node's reference on the kind's cluster.
type blinkNode struct {
	b    *Blink
	c    *selcc.Cluster
	once sync.Once
}

// OpenNode implements NodeKind: the first call opens the SELCC cluster on every compute node
// the fabric hosts; each returns a reference on it.
func (b *Blink) OpenNode(ctx context.Context, env *nodestate.Env) (nodestate.State, error) {
	b.mu.Lock()
	c := b.cluster
	b.mu.Unlock()
	if c == nil {
		var err error
		if c, err = selcc.Open(ctx, env.Fabric, b.options()); err != nil {
			return nil, fmt.Errorf("kvstore: blink: %w", err)
		}
	}
	b.mu.Lock()
	b.cluster = c
	b.refs++
	b.mu.Unlock()
	return &blinkNode{b: b, c: c}, nil
}

// Close drops the node's reference; the last one closes the cluster (writing every dirty line
// back). It is idempotent.
func (n *blinkNode) Close() error {
	var err error
	n.once.Do(func() {
		n.b.mu.Lock()
		n.b.refs--
		last := n.b.refs == 0
		if last {
			n.b.cluster = nil
		}
		n.b.mu.Unlock()
		if last {
			err = n.c.Close()
		}
	})
	return err
}

// Create implements IndexKind: an empty tree (one line), through the cluster the store's node
// states opened.
func (b *Blink) Create(ctx context.Context, c IndexEnv) (farmem.Addr, error) {
	b.mu.Lock()
	cl := b.cluster
	b.mu.Unlock()
	if cl == nil {
		return 0, fmt.Errorf("kvstore: blink: no SELCC cluster open (create through a store): %w", farmem.ErrInvalid)
	}
	client, err := cl.Client(ctx, c.Memory)
	if err != nil {
		return 0, err
	}
	root, err := blink.Create(ctx, cl, client, c.Alloc)
	return farmem.Addr(root), err
}

// Open implements IndexKind.
func (b *Blink) Open(ctx context.Context, c IndexEnv, root farmem.Addr) (Index, error) {
	n, ok := c.Node.(*blinkNode)
	if !ok {
		return nil, fmt.Errorf("kvstore: blink: no node state: %w", farmem.ErrInvalid)
	}
	client, err := n.c.Client(ctx, c.Memory)
	if err != nil {
		return nil, err
	}
	t, err := blink.Open(n.c, client, c.Alloc, selcc.GCL(root))
	if err != nil {
		return nil, err
	}
	return &blinkIndex{t: t}, nil
}

// blinkIndex adapts a blink.Tree to OrderedIndex.
type blinkIndex struct {
	t *blink.Tree
}

func mapBlink(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, blink.ErrNotFound):
		return ErrNotFound
	case errors.Is(err, blink.ErrExists):
		return ErrExists
	}
	return err
}

func (x *blinkIndex) Get(ctx context.Context, key []byte) ([]byte, error) {
	v, err := x.t.Get(ctx, key)
	return v, mapBlink(err)
}

func (x *blinkIndex) Insert(ctx context.Context, key, value []byte) error {
	return mapBlink(x.t.Insert(ctx, key, value))
}

func (x *blinkIndex) Update(ctx context.Context, key, value []byte) error {
	return mapBlink(x.t.Update(ctx, key, value))
}

func (x *blinkIndex) Delete(ctx context.Context, key []byte) error {
	return mapBlink(x.t.Delete(ctx, key))
}

// Scan implements OrderedIndex (blink.Tree.Scan: per-key linearizable).
func (x *blinkIndex) Scan(ctx context.Context, from, to []byte, limit int) ([]Pair, error) {
	ps, err := x.t.Scan(ctx, from, to, limit)
	if err != nil {
		return nil, mapBlink(err)
	}
	out := make([]Pair, len(ps))
	for i, p := range ps {
		out[i] = Pair{Key: p.Key, Value: p.Value}
	}
	return out, nil
}

func (x *blinkIndex) Close() error { return x.t.Close() }

// Tree returns the B-link tree behind the handle (for its Stats).
func (x *blinkIndex) Tree() *blink.Tree { return x.t }
