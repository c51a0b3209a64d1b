package kvstore

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"

	"github.com/farmem/farmem/ds/hybrid"
	"github.com/farmem/farmem/farmem"
	"github.com/farmem/farmem/farmem/nodestate"
)

// Hybrid is Dolphin's hybrid ART/B+ tree (package ds/hybrid) as the store's index, with values
// in blocks (hybrid.Params.BlockValues) and one radix cache per compute node (its node state).
// Keys are exactly 8 bytes, big-endian, nonzero and below 2^63 (bench's binary64 keys): any
// other key fails with an error wrapping farmem.ErrInvalid. Values are at most hybrid.MaxValue
// bytes. It is ordered: Store.Scan walks the tree (hybrid.Tree.ScanBytes: one round trip per
// node and leaf reached, then the blocks), each key reported as a Get within the scan would.
// Round trips with a warm cache: Get 2, Insert 3, Update 2, Delete 2 (see the package doc).
//
// The value words, CAS-swapped pointers to the values' blocks, are the kind's contended far
// pointers: Options.Sync makes their swaps (hybrid.Options.Sync). Optimistic keeps the tree's
// own CAS loop; CIDER, MCS and Spin order the swaps of each key under its entry in the tree's
// lock table (hashed by the key, Hybrid.LockEntries per memory node, made at creation), as the
// CIDER paper does for SMART's leaf pointers. Inserts, deletes and SMOs keep the tree's own
// protocol. See hybrid_sync.go for the costs and how the lock composes with the tree.
type Hybrid struct {
	// LeafSlots is the tree's leaf size in slots (0: hybrid.DefaultLeafSlots), at creation.
	LeafSlots int
	// LockEntries is the size of the tree's lock table per memory node, at creation (0:
	// hybrid.DefaultLockEntries; a power of two).
	LockEntries int
	// CacheBytes is each compute node's radix cache budget (0: none).
	CacheBytes int64
	// Options configure each handle (the store sets Cache).
	Options hybrid.Options
}

// Name implements IndexKind: "hybrid".
func (Hybrid) Name() string { return "hybrid" }

// Limits implements IndexKind: 8-byte keys, values up to hybrid.MaxValue bytes.
func (Hybrid) Limits() Limits {
	return Limits{MaxKey: hybrid.KeyLen, MaxKV: hybrid.KeyLen + hybrid.MaxValue}
}

// Methods implements NodeKind: the radix caches register no handler.
func (Hybrid) Methods() farmem.MethodOwner { return farmem.OwnerHybrid }

// OpenNode implements NodeKind: the node's radix cache.
func (h Hybrid) OpenNode(ctx context.Context, env *nodestate.Env) (nodestate.State, error) {
	return hybrid.NewCache(h.CacheBytes), nil
}

// Create implements IndexKind.
func (h Hybrid) Create(ctx context.Context, c IndexEnv) (farmem.Addr, error) {
	locks := h.LockEntries
	if locks == 0 {
		locks = hybrid.DefaultLockEntries
	}
	return hybrid.Create(ctx, c.Memory, c.Alloc, hybrid.Params{LeafSlots: h.LeafSlots, BlockValues: true, LockEntries: locks})
}

// Open implements IndexKind.
func (h Hybrid) Open(ctx context.Context, c IndexEnv, root farmem.Addr) (Index, error) {
	o := h.Options
	if cache, ok := c.Node.(*hybrid.Cache); ok {
		o.Cache = cache
	}
	o.Sync = hybridSync(c.Sync)
	t, err := hybrid.Open(ctx, c.Memory, c.Alloc, root, o)
	if err != nil {
		return nil, err
	}
	return &hybridIndex{t: t}, nil
}

// hybridIndex adapts a hybrid.Tree to Index.
type hybridIndex struct {
	t *hybrid.Tree
}

// mapHybrid turns hybrid's answers into the store's sentinels.
func mapHybrid(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, hybrid.ErrNotFound):
		return ErrNotFound
	case errors.Is(err, hybrid.ErrExists):
		return ErrExists
	case errors.Is(err, hybrid.ErrKey):
		return fmt.Errorf("%w: %w", farmem.ErrInvalid, err)
	}
	return err
}

func (x *hybridIndex) Get(ctx context.Context, key []byte) ([]byte, error) {
	v, err := x.t.GetBytes(ctx, key)
	return v, mapHybrid(err)
}

// hybridBusyTries bounds the attempts of an insert whose leaf's structural change could not
// drain the leaf's in-flight writers within half the tree's lease (hybrid.ErrBusy: nothing was
// inserted and the leaf was left usable). One writer descheduled that long, on a busy machine,
// fails one attempt; a leaf that a dead client's count holds fails them all, and the insert
// fails with ErrBusy after hybridBusyTries drains (200 ms at the default 50 ms lease). Each
// failed attempt leaves its unpublished value block allocated, as a failed insert did before.
const hybridBusyTries = 8

func (x *hybridIndex) Insert(ctx context.Context, key, value []byte) error {
	var err error
	for range hybridBusyTries {
		err = x.t.InsertBytes(ctx, key, value)
		if !errors.Is(err, hybrid.ErrBusy) || ctx.Err() != nil {
			break
		}
	}
	return mapHybrid(err)
}

func (x *hybridIndex) Update(ctx context.Context, key, value []byte) error {
	return mapHybrid(x.t.UpdateBytes(ctx, key, value))
}

func (x *hybridIndex) Delete(ctx context.Context, key []byte) error {
	return mapHybrid(x.t.Delete(ctx, key))
}

// Scan implements OrderedIndex. Bounds of other lengths than 8 bytes are mapped to the 8-byte
// keys they admit in byte order: a shorter bound is padded with zeros, a longer one rounds up
// past its first 8 bytes.
func (x *hybridIndex) Scan(ctx context.Context, from, to []byte, limit int) ([]Pair, error) {
	lo, hi := scanBound(from), uint64(hybrid.MaxKey+1)
	if to != nil {
		hi = min(scanBound(to), hi)
	}
	if lo >= hi {
		return nil, nil
	}
	ps, err := x.t.ScanBytes(ctx, lo, hi, limit)
	if err != nil {
		return nil, mapHybrid(err)
	}
	out := make([]Pair, len(ps))
	for i, p := range ps {
		out[i] = Pair{Key: binary.BigEndian.AppendUint64(nil, p.Key), Value: p.Value}
	}
	return out, nil
}

// scanBound returns the smallest 8-byte key (as an integer, saturating at 2^64-1) at or above
// bound in byte order.
func scanBound(bound []byte) uint64 {
	var b [8]byte
	copy(b[:], bound)
	v := binary.BigEndian.Uint64(b[:])
	if len(bound) > 8 && v < math.MaxUint64 {
		v++
	}
	return v
}

func (x *hybridIndex) Close() error { return x.t.Close() }

// Tree returns the hybrid tree behind the handle (for Audit and Stats).
func (x *hybridIndex) Tree() *hybrid.Tree { return x.t }
