package hybrid_test

import (
	"context"
	"encoding/binary"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/farmem/farmem/ds/hybrid"
	"github.com/farmem/farmem/farmem"
	"github.com/farmem/farmem/farmem/farmemtest"
	"github.com/farmem/farmem/farmem/local"
)

// Each test here reproduces a defect of the authors' code (or of the paper's protocol as
// written) and shows that it does not happen here.

// isValueWrite reports whether v is an Update's second batch: a value's WRITE and the release.
func isValueWrite(v farmemtest.Verb) bool {
	ops := v.Batch.Ops
	return !v.Single && len(ops) == 2 && ops[0].Kind == farmem.OpWrite && len(ops[0].Buf) == 8 && ops[1].Kind == farmem.OpFAA
}

// The artifact posts an update's WRITE unsignaled and returns at once: another client may then
// read the old value. Here an update returns after its WRITE completed (it is signaled), so
// with a 1ms fabric latency a read that starts after the update returns sees the new value.
func TestUpdateReturnsAfterWriteLanded(t *testing.T) {
	e := newEnv(t, local.Options{Latency: time.Millisecond}, hybrid.Params{LeafSlots: 8})
	var signaled, seen atomic.Int32
	a := e.openWith(t, 0, hybrid.Options{}, func(m farmem.Memory) farmem.Memory {
		return &farmemtest.Interposer{Memory: m, Before: func(_ context.Context, v farmemtest.Verb) {
			if isValueWrite(v) {
				seen.Add(1)
				if !v.Batch.Ops[0].Unsignaled && !v.Posted {
					signaled.Add(1)
				}
			}
		}}
	})
	b := e.open(t, 1, hybrid.Options{})
	ctx := context.Background()
	require.NoError(t, a.tree.Insert(ctx, key(5), 1))
	for v := uint64(2); v < 12; v++ {
		require.NoError(t, a.tree.Update(ctx, key(5), v))
		got, err := b.tree.Get(ctx, key(5))
		require.NoError(t, err)
		require.Equal(t, v, got, "a read after the update returned saw an older value")
	}
	require.Equal(t, int32(10), seen.Load())
	require.Equal(t, int32(10), signaled.Load(), "the value's WRITE must be awaited")
}

// The artifact splits a leaf by sorting its key array alone (values stay in their slots) and
// keeps three quarters in the old leaf. Here values move with their keys, the split is at the
// median, and the fences meet at the split key.
func TestSplitMovesValuesAtMedian(t *testing.T) {
	e := newEnv(t, local.Options{}, hybrid.Params{LeafSlots: 8})
	c := e.open(t, 0, hybrid.Options{})
	ctx := context.Background()
	const p = 0x0102030405060700
	order := []uint64{0x90, 0x10, 0xf0, 0x30, 0x70, 0x50, 0xd0, 0xb0} // not sorted: slot order differs from key order
	for _, k := range order {
		require.NoError(t, c.tree.Insert(ctx, key(p|k), 1000+k))
	}
	census := audit(t, c)
	require.Len(t, census.Leaves, 1)
	require.NoError(t, c.tree.Insert(ctx, key(p|0x20), 1000+0x20)) // full: split, then insert
	census = audit(t, c)
	require.Len(t, census.Leaves, 2)
	require.Equal(t, 1, census.Special)
	l1, l2 := census.Leaves[0], census.Leaves[1]
	// Eight keys split four and four at the median (0x90); the ninth then joins the lower half.
	require.Equal(t, []uint64{p | 0x10, p | 0x20, p | 0x30, p | 0x50, p | 0x70}, l1.Keys)
	require.Equal(t, []uint64{p | 0x90, p | 0xb0, p | 0xd0, p | 0xf0}, l2.Keys)
	require.Equal(t, uint64(p), l1.Min)
	require.Equal(t, uint64(p|0x90), l1.Max, "fence: the split key")
	require.Equal(t, l1.Max, l2.Min)
	require.Equal(t, uint64(p+256), l2.Max)
	for _, l := range census.Leaves {
		for i, k := range l.Keys {
			require.Equal(t, 1000+k&0xff, l.Values[i], "key %#x kept its value", k)
		}
	}
	for _, k := range append(order, 0x20) {
		v, err := c.tree.Get(ctx, key(p|k))
		require.NoError(t, err)
		require.Equal(t, 1000+k, v)
	}
	require.Equal(t, uint64(1), c.tree.Stats().Splits)
}

// The artifact's search stops at the first empty key slot, so a key behind a hole (a deleted
// slot, or a slot an inserter skipped) is reported missing. Here every slot is searched: a key
// behind tombstones is found, and so is one an inserter put in slot 1 with slot 0 empty.
func TestSearchPastHoles(t *testing.T) {
	e := newEnv(t, local.Options{}, hybrid.Params{LeafSlots: 8})
	ctx := context.Background()
	c := e.open(t, 0, hybrid.Options{})
	const p = 0x0a0b0c0d0e0f1000
	for k := uint64(1); k <= 3; k++ {
		require.NoError(t, c.tree.Insert(ctx, key(p|k), k))
	}
	require.NoError(t, c.tree.Delete(ctx, key(p|1)))
	require.NoError(t, c.tree.Delete(ctx, key(p|2)))
	v, err := c.tree.Get(ctx, key(p|3))
	require.NoError(t, err)
	require.Equal(t, uint64(3), v)
	require.NoError(t, c.tree.Update(ctx, key(p|3), 33))
	require.NoError(t, c.tree.Delete(ctx, key(p|3)))

	// A fresh leaf whose slot 0 an inserter believes taken: it CASes slot 1.
	const q = 0x0a0b0c0d0e0f2000
	require.NoError(t, c.tree.Insert(ctx, key(q|1), 1))
	require.NoError(t, c.tree.Delete(ctx, key(q|1))) // slot 0: a tombstone
	var casAt, leafAt atomic.Uint64
	skew := e.openWith(t, 1, hybrid.Options{}, func(m farmem.Memory) farmem.Memory {
		return &farmemtest.Interposer{Memory: m,
			After: func(_ context.Context, v farmemtest.Verb, _ uint64, err error) {
				ops := v.Batch.Ops
				if err == nil && len(ops) == 2 && ops[0].Kind == farmem.OpFAA && ops[1].Kind == farmem.OpRead {
					binary.LittleEndian.PutUint64(ops[1].Buf[72+8:], 1<<63) // slot 1 looks taken
					leafAt.Store(uint64(ops[1].Addr))
				}
				if err == nil && len(ops) == 2 && ops[0].Kind == farmem.OpCAS && ops[1].Kind == farmem.OpRead {
					casAt.Store(uint64(ops[0].Addr))
				}
			}}
	})
	require.NoError(t, skew.tree.Insert(ctx, key(q|2), 2))
	require.Equal(t, uint64(72+16), casAt.Load()-leafAt.Load(), "the inserter skipped slot 1 for slot 2")
	v, err = c.tree.Get(ctx, key(q|2))
	require.NoError(t, err, "a key behind an empty slot is found")
	require.Equal(t, uint64(2), v)
}

// The paper's insert CASes the key into its slot, then writes the value: in between, a reader
// finds the key with an empty (or a previous occupant's) value. Here the key word carries the
// tentative bit until the value is written, and readers ignore it.
func TestInsertInvisibleBeforeValue(t *testing.T) {
	e := newEnv(t, local.Options{}, hybrid.Params{LeafSlots: 8})
	ctx := context.Background()
	paused, resume := make(chan struct{}), make(chan struct{})
	var once sync.Once
	a := e.openWith(t, 0, hybrid.Options{}, func(m farmem.Memory) farmem.Memory {
		return &farmemtest.Interposer{Memory: m, Before: func(_ context.Context, v farmemtest.Verb) {
			ops := v.Batch.Ops
			if len(ops) == 3 && ops[0].Kind == farmem.OpWrite && ops[1].Kind == farmem.OpCAS {
				once.Do(func() { close(paused); <-resume }) // between the tentative CAS and the value
			}
		}}
	})
	b := e.open(t, 1, hybrid.Options{})
	const k = 0x0505050505050501
	require.NoError(t, a.tree.Insert(ctx, key(k+1), 7)) // the leaf exists: the next insert takes the 3-round-trip path
	done := make(chan error, 1)
	go func() { done <- a.tree.Insert(ctx, key(k), 42) }()
	<-paused
	for range 5 {
		_, err := b.tree.Get(ctx, key(k))
		require.ErrorIs(t, err, hybrid.ErrNotFound, "the key showed before its value")
		require.ErrorIs(t, b.tree.Update(ctx, key(k), 9), hybrid.ErrNotFound)
	}
	close(resume)
	require.NoError(t, <-done)
	v, err := b.tree.Get(ctx, key(k))
	require.NoError(t, err)
	require.Equal(t, uint64(42), v)
}

// With deletes clearing slots and inserts reusing them under a shared Spear, an update that
// read the leaf before a delete and a re-insert lands its WRITE on the new key's value (ABA).
// Here a delete CASes a tombstone and slots are reused only by an SMO under an exclusive
// Spear, so the late WRITE lands on a dead slot and the new key keeps its value.
func TestNoSlotReuseABA(t *testing.T) {
	e := newEnv(t, local.Options{}, hybrid.Params{LeafSlots: 8})
	ctx := context.Background()
	paused, resume := make(chan struct{}), make(chan struct{})
	var once sync.Once
	a := e.openWith(t, 0, hybrid.Options{}, func(m farmem.Memory) farmem.Memory {
		return &farmemtest.Interposer{Memory: m, Before: func(_ context.Context, v farmemtest.Verb) {
			if isValueWrite(v) {
				once.Do(func() { close(paused); <-resume })
			}
		}}
	})
	b := e.open(t, 1, hybrid.Options{})
	const x, y = 0x0606060606060601, 0x0606060606060602
	require.NoError(t, b.tree.Insert(ctx, key(x), 1))
	done := make(chan error, 1)
	go func() { done <- a.tree.Update(ctx, key(x), 666) }() // reads the leaf, then pauses
	<-paused
	require.NoError(t, b.tree.Delete(ctx, key(x)))
	require.NoError(t, b.tree.Insert(ctx, key(y), 2))
	close(resume)
	require.NoError(t, <-done) // linearized before the delete
	v, err := b.tree.Get(ctx, key(y))
	require.NoError(t, err)
	require.Equal(t, uint64(2), v, "the late update overwrote another key's value")
	_, err = b.tree.Get(ctx, key(x))
	require.ErrorIs(t, err, hybrid.ErrNotFound)
	census := audit(t, b)
	require.Equal(t, 1, census.Keys)
	require.Equal(t, 1, census.Tombstones)
}

// The artifact compares a failed insert CAS's result against the wrong byte order, so two
// concurrent inserts of one key can both land. Here exactly one insert of a key succeeds and
// the leaf holds it once, also while splits run.
func TestConcurrentInsertsOfOneKey(t *testing.T) {
	e := newEnv(t, local.Options{Shape: local.Shape{ComputeNodes: 2}, Tearing: true, Jitter: 5 * time.Microsecond}, hybrid.Params{LeafSlots: 8})
	ctx := context.Background()
	const n = 6
	cs := make([]*client, n)
	for i := range cs {
		cs[i] = e.open(t, i, hybrid.Options{Cache: hybrid.NewCache(1 << 16)})
	}
	const p = 0x0707070707070700
	for k := uint64(1); k <= 40; k++ {
		var ok, exists atomic.Int32
		var wg sync.WaitGroup
		for i, c := range cs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				switch err := c.tree.Insert(ctx, key(p|k), uint64(i)); err {
				case nil:
					ok.Add(1)
				case hybrid.ErrExists:
					exists.Add(1)
				default:
					t.Errorf("insert: %v", err)
				}
			}()
		}
		wg.Wait()
		require.Equal(t, int32(1), ok.Load(), "key %d: exactly one insert wins", k)
		require.Equal(t, int32(n-1), exists.Load())
	}
	census := audit(t, cs[0]) // fails on a key held twice
	require.Equal(t, 40, census.Keys)
	require.Zero(t, census.Tentative)
	require.Positive(t, len(census.Leaves), 1)
}

// The artifact's special node holds at most 16 leaves (it asserts). Here it grows through the
// node types like any node: 256 keys of one prefix in 8-slot leaves need more than 16.
func TestSpecialNodeGrowsPast16(t *testing.T) {
	e := newEnv(t, local.Options{}, hybrid.Params{LeafSlots: 8})
	c := e.open(t, 0, hybrid.Options{Cache: hybrid.NewCache(1 << 20)})
	ctx := context.Background()
	const p = 0x0909090909090900
	for i := uint64(0); i < 256; i++ {
		k := p | (i*151)&0xff // scrambled order
		if k == p {
			k = p | 0xff
		}
		if err := c.tree.Insert(ctx, key(k), k); err != nil {
			require.ErrorIs(t, err, hybrid.ErrExists)
		}
	}
	census := audit(t, c)
	require.Equal(t, 1, census.Special)
	require.Greater(t, len(census.Leaves), 16)
	require.Equal(t, 1, census.SpecialTypes[2]+census.SpecialTypes[3], "the special node is a 48 or a 256: %v", census.SpecialTypes)
	require.Positive(t, c.tree.Stats().Growths)
	for i := uint64(1); i < 256; i++ {
		v, err := c.tree.Get(ctx, key(p|i))
		require.NoError(t, err)
		require.Equal(t, p|i, v)
	}
}
