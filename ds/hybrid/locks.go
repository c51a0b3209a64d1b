package hybrid

import (
	"context"
	"errors"
	"fmt"
	"math/bits"
	"time"

	"github.com/farmem/farmem/alloc"
	"github.com/farmem/farmem/ds/ptrsync"
	"github.com/farmem/farmem/farmem"
)

// Lock table (Params.LockEntries): the lock entries of the value words of a tree with
// Params.BlockValues, for a lock-based synchronizer (Options.Sync). Leaves keep no entry per
// slot (an SMO copies slots into new leaves, and a leaf's layout is fixed), so, as the CIDER
// paper does for SMART's leaf pointers, the entries are a table hashed by the key: one table
// of LockEntries entries (LockEntrySize bytes each, zero when free) on each memory node, key k's
// entry on node mix(k) mod n at index (mix(k) / n) mod LockEntries. The root block's word at
// rootLocksOff names a directory block: word 0 the node count n and log2(LockEntries) << 32,
// then the n tables' addresses.

// LockEntrySize is the size of a lock-table entry: the far MCS lock's (ds/qlock.EntrySize),
// which also holds the spinlock's word.
const LockEntrySize = 16

// DefaultLockEntries is a sensible Params.LockEntries: 4,096 entries (64 KiB) per memory node.
const DefaultLockEntries = 4096

// MaxLockEntries bounds Params.LockEntries (64 MiB per memory node).
const MaxLockEntries = 1 << 22

const rootLocksOff = 40 // the lock directory's address, 0 for none

// lockTable is a handle's copy of the directory.
type lockTable struct {
	tables []farmem.Addr
	shift  uint // log2(entries)
}

// entry returns key k's lock entry (nil without a table: a synchronizer with no lock entries).
func (lt *lockTable) entry(k uint64) farmem.Addr {
	if lt == nil {
		return 0
	}
	h := mixKey(k)
	n := uint64(len(lt.tables))
	j := h % n
	i := (h / n) & (1<<lt.shift - 1)
	return lt.tables[j].Add(i * LockEntrySize)
}

// mixKey is SplitMix64's finalizer, a bijection: keys close together land far apart.
func mixKey(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ x>>30) * 0xbf58476d1ce4e5b9
	x = (x ^ x>>27) * 0x94d049bb133111eb
	return x ^ x>>31
}

// createLocks allocates a zeroed table on each memory node and the directory, adding their
// writes to b (which the caller runs before publishing the root). It returns the directory's
// address.
func createLocks(ctx context.Context, m farmem.Memory, a *alloc.Allocator, entries int, b *farmem.Batch) (farmem.Addr, error) {
	if entries <= 0 || entries > MaxLockEntries || entries&(entries-1) != 0 {
		return 0, fmt.Errorf("hybrid: LockEntries %d: want a power of two up to %d: %w", entries, MaxLockEntries, farmem.ErrInvalid)
	}
	nodes := m.Topology().MemoryNodes()
	dir, err := a.Alloc(ctx, uint64(8*(1+len(nodes))), 8)
	if err != nil {
		return 0, fmt.Errorf("hybrid: create: lock directory: %w", err)
	}
	img := make([]byte, 8*(1+len(nodes)))
	le.PutUint64(img, uint64(len(nodes))|uint64(bits.TrailingZeros(uint(entries)))<<32)
	size := uint64(entries) * LockEntrySize
	zero := make([]byte, size)
	for i, n := range nodes {
		tab, err := a.AllocOn(ctx, n, size, 64)
		if err != nil {
			return 0, fmt.Errorf("hybrid: create: lock table on %v: %w", n, err)
		}
		b.Write(tab, zero)
		le.PutUint64(img[8*(1+i):], uint64(tab))
	}
	b.Write(dir, img)
	return dir, nil
}

// openLocks reads the directory at dir (one round trip).
func openLocks(ctx context.Context, m farmem.Memory, dir farmem.Addr) (*lockTable, error) {
	var hdr [8]byte
	if err := m.Read(ctx, dir, hdr[:]); err != nil {
		return nil, fmt.Errorf("hybrid: open: lock directory: %w", err)
	}
	h := le.Uint64(hdr[:])
	n, shift := int(uint32(h)), uint(h>>32)
	if n <= 0 || n > 256 || shift > 22 {
		return nil, fmt.Errorf("%w: lock directory %v header %#x", ErrCorrupt, dir, h)
	}
	buf := make([]byte, 8*n)
	if err := m.Read(ctx, dir.Add(8), buf); err != nil {
		return nil, fmt.Errorf("hybrid: open: lock directory: %w", err)
	}
	lt := &lockTable{tables: make([]farmem.Addr, n), shift: shift}
	for i := range lt.tables {
		lt.tables[i] = farmem.Addr(le.Uint64(buf[8*i:]))
	}
	return lt, nil
}

// valueChange is one attempt at swapping a value word through the synchronizer: the
// ptrsync.Target an UpdateBytes hands Commit while it holds the leaf's Spear count. Its lock
// entry is shared by hashing (ptrsync.SharedLock): while the count is held no SMO can copy the
// leaf, and a slot keeps its key until an SMO (a delete leaves a tombstone), so every nonzero
// word the value word holds names a block of the key, and Same is free.
type valueChange struct {
	t        *Tree
	ptr      farmem.Addr // the value word
	lock     farmem.Addr
	old      uint64
	deadline farmem.Time
	x        *extra
	v        []byte
	p        uint64 // the new block's word, 0 until made
}

func (c *valueChange) Kind() ptrsync.Kind    { return ptrsync.Update }
func (c *valueChange) Pointer() farmem.Addr  { return c.ptr }
func (c *valueChange) Lock() farmem.Addr     { return c.lock }
func (c *valueChange) LockBytes() []byte     { return nil }
func (c *valueChange) Old() uint64           { return c.old }
func (c *valueChange) Deadline() farmem.Time { return c.deadline }
func (c *valueChange) Memory() farmem.Memory { return c.t.m }
func (c *valueChange) SharedLock()           {}

// Same implements ptrsync.Target: every nonzero word of the value word names a block of the
// key while the Spear count is held (see valueChange).
func (c *valueChange) Same(_ context.Context, w uint64) (bool, error) { return w != 0, nil }

// Install implements ptrsync.Target: the new block's write, if not done yet (a deferred write:
// the block is allocated on the value word's memory node, so the write and the CAS go in one
// ordered batch, one round trip), and the CAS of the value word.
func (c *valueChange) Install(ctx context.Context, exp uint64) (uint64, uint64, error) {
	var b farmem.Batch
	if c.x.block == 0 {
		words := uint64(1 + (len(c.v)+7)/8)
		a, err := c.t.a.AllocOn(ctx, c.ptr.Node(), 8*words, 8)
		if err != nil {
			return 0, 0, err
		}
		p, err := packBlock(a, words)
		if err != nil {
			_ = c.t.a.Free(a, 8*words)
			return 0, 0, err
		}
		img := make([]byte, 8*words)
		le.PutUint64(img, uint64(len(c.v)))
		copy(img[8:], c.v)
		c.x.block, c.x.img, c.p = a, img, p
	}
	if !c.x.written {
		if c.x.block.Node() != c.ptr.Node() {
			// A block made early on another node: its write must land before the CAS.
			if err := c.t.m.Write(ctx, c.x.block, c.x.img); err != nil {
				return 0, 0, fmt.Errorf("hybrid: update: %w", err)
			}
		} else {
			b.Write(c.x.block, c.x.img)
		}
		c.x.written = true
	}
	j := b.CAS(c.ptr, exp, c.p)
	if err := c.t.m.Do(ctx, &b); err != nil {
		return 0, 0, fmt.Errorf("hybrid: update: %w", err)
	}
	prev, _ := b.Result(j)
	return prev, c.p, nil
}

// maxSyncAttempts bounds the lookups of one UpdateBytes through a synchronizer; an attempt
// repeats only after another client changed the pointer or the lock was reset.
const maxSyncAttempts = 1000

// updateSync is UpdateBytes through Options.Sync: the tree's own lookup (the Spear FAA with the
// leaf's head, keys and values in one round trip, the new block written with it unless the
// plan defers it), then the value word's CAS as the synchronizer makes it, under the key's
// lock-table entry, the Spear count held throughout; the release posted unsignaled after it.
// Committed retires the replaced block; Combined frees the update's own block if it was made
// (it was never published); Retry looks the key up again (a delete or another client's change
// came first, the lock was reset, or the pin ran past its budget).
func (t *Tree) updateSync(ctx context.Context, k uint64, v []byte) error {
	plan := t.sync.Plan(ptrsync.Update, k)
	x := &extra{tail: make([]byte, leafSize(t.s)-leafValsOff(t.s))}
	var p uint64
	if !plan.DeferWrite {
		nx, np, err := t.newBlock(ctx, v)
		if err != nil {
			return err
		}
		nx.tail, x, p = x.tail, nx, np
	}
	published := false
	var err error
	for attempt := 0; ; attempt++ {
		if attempt == maxSyncAttempts {
			err = fmt.Errorf("hybrid: update: no progress after %d attempts: %w", attempt, ErrCorrupt)
			break
		}
		var res ptrsync.Result
		var done bool
		err = t.pinned(ctx, func() error {
			at := t.rt.Now()
			la, i, lf, err := t.enterKey(ctx, k, x, "update")
			if err != nil {
				return err
			}
			defer t.release(ctx, la)
			old := lf.vals[i]
			if old == 0 {
				return ErrNotFound // a delete cleared the value after we read the key
			}
			c := &valueChange{t: t, ptr: leafValAddr(la, t.s, i), lock: t.locks.entry(k), old: old,
				deadline: at.Add(t.pinBudget), x: x, v: v, p: p}
			res, err = t.sync.Commit(ctx, c)
			p = c.p
			if err != nil {
				return err
			}
			switch res.Outcome {
			case ptrsync.Committed:
				published, done = true, true
				t.retire(ctx, res.Replaced)
			case ptrsync.Combined:
				done = true
			}
			return nil
		})
		if err != nil || done {
			break
		}
	}
	if !published && x.block != 0 && (err == nil || errors.Is(err, ErrNotFound)) {
		_ = t.a.Free(x.block, uint64(len(x.img))) // never published
	}
	return err
}

// DefaultPinBudget is Options.PinBudget's default.
const DefaultPinBudget = 250 * time.Millisecond
