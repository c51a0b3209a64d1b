package spacecheck_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/farmem/farmem/alloc"
	"github.com/farmem/farmem/cxl"
	"github.com/farmem/farmem/ds/race"
	"github.com/farmem/farmem/farmem"
	"github.com/farmem/farmem/farmem/local"
	"github.com/farmem/farmem/kvstore"
)

// noSpaceAlloc are allocator options for the fill tests: short refresh and scan periods, so
// that retired blocks come back within a few operations.
var noSpaceAlloc = alloc.Options{Lease: time.Second, Refresh: time.Millisecond, ScanInterval: time.Millisecond}

// fillOptions are the store options of the fill tests: small subtables (8 bucket groups), so
// that the table splits and doubles its directory many times before far memory runs out, and
// 16 KiB chunks.
func fillOptions() kvstore.Options {
	return kvstore.Options{
		Alloc:  noSpaceAlloc,
		Index:  kvstore.Race{Params: race.Params{Groups: 8}},
		Format: alloc.FormatOptions{ChunkSize: 16 << 10},
	}
}

// fillValue is the value every fill writes: 100 bytes.
var fillValue = val(7, 100)

// giveUpAfter is how many inserts in a row must fail with ErrNoSpace before a fill stops.
const giveUpAfter = 32

// fillStore inserts keys from base on until giveUpAfter inserts in a row fail with ErrNoSpace
// (any other error fails the test), and returns the keys it inserted.
func fillStore(t *testing.T, s *kvstore.Store, base uint64) []uint64 {
	t.Helper()
	ctx := context.Background()
	var keys []uint64
	misses := 0
	for k := base; misses < giveUpAfter; k++ {
		err := s.Insert(ctx, key(k), fillValue)
		switch {
		case err == nil:
			keys = append(keys, k)
			misses = 0
		case errors.Is(err, kvstore.ErrNoSpace):
			misses++
		default:
			require.NoError(t, err, "insert of key %d", k)
		}
	}
	return keys
}

// auditStore opens the store's RACE table on a client of its own and audits it.
func auditStore(t *testing.T, f farmem.Fabric, s *kvstore.Store) race.Census {
	t.Helper()
	ctx := context.Background()
	m, err := f.Open(ctx, f.Hosted()[0])
	require.NoError(t, err)
	defer m.Close()
	a, err := alloc.New(ctx, m, noSpaceAlloc)
	require.NoError(t, err)
	defer a.Close()
	tab, err := race.Open(ctx, m, a, s.Descriptor().Roots[0], race.Options{})
	require.NoError(t, err)
	defer tab.Close()
	c, err := tab.Audit(ctx)
	require.NoError(t, err)
	return c
}

// fillEmptyFill fills the store on f until it is out of far memory, checks every key, deletes
// every key, and fills it again with other keys: every key is deletable, the table's audit
// finds no frozen slot after each phase, and the second fill holds within 10% of the first.
// refuse, if set, makes the store's allocators refuse what the test says (set once the store
// exists). It returns the store and the keys each fill held.
func fillEmptyFill(t *testing.T, f farmem.Fabric, refuse func(size uint64) error) (s *kvstore.Store, first, second int) {
	t.Helper()
	ctx := context.Background()
	var armed atomic.Bool
	o := fillOptions()
	if refuse != nil {
		o.Alloc.Admit = func(size uint64) error {
			if armed.Load() {
				return refuse(size)
			}
			return nil
		}
	}
	s = openStore(t, f, o)
	armed.Store(true)

	keys1 := fillStore(t, s, 0)
	require.NotEmpty(t, keys1)
	for _, k := range keys1 {
		v, err := s.Get(ctx, key(k))
		require.NoError(t, err, "key %d", k)
		require.Equal(t, fillValue, v)
	}
	c := auditStore(t, f, s)
	splits := c.Subtables
	require.Zero(t, c.Frozen, "frozen slots after the first fill")
	require.Equal(t, len(keys1), c.Keys)

	for _, k := range keys1 {
		require.NoError(t, s.Delete(ctx, key(k)), "delete of key %d", k)
	}
	c = auditStore(t, f, s)
	require.Zero(t, c.Frozen, "frozen slots after deleting every key")
	require.Zero(t, c.Keys)

	// Right after the deletes, with no wait, an insert finds room: the store reclaims what the
	// deletes retired.
	require.NoError(t, s.Insert(ctx, key(3<<32), fillValue), "the first insert after emptying")
	require.NoError(t, s.Delete(ctx, key(3<<32)))
	keys2 := fillStore(t, s, 1<<32) // other keys: other buckets fill, other subtables split
	c = auditStore(t, f, s)
	t.Logf("subtables: %d after the first fill, %d after the second, depths %v", splits, c.Subtables, c.Depths)
	require.Zero(t, c.Frozen, "frozen slots after the second fill")
	require.Equal(t, len(keys2), c.Keys)
	for _, k := range keys2 {
		require.NoError(t, s.Delete(ctx, key(k)), "delete of key %d", k)
	}
	require.InDelta(t, len(keys1), len(keys2), 0.1*float64(len(keys1)),
		"first fill %d keys, second %d", len(keys1), len(keys2))
	t.Logf("first fill %d keys, second %d", len(keys1), len(keys2))
	return s, len(keys1), len(keys2)
}

// refuseSplits refuses every allocation larger than a KV block of the fill: RACE's subtables
// and doubled directories, the allocations of a split.
func refuseSplits(size uint64) error {
	if size > 1024 {
		return fmt.Errorf("test: no allocation of %d bytes", size)
	}
	return nil
}

// TestNoSpaceLocal: a 4 MiB local fabric filled, emptied and filled again (see fillEmptyFill).
func TestNoSpaceLocal(t *testing.T) {
	t.Parallel()
	f := newLocal(t, local.Options{Shape: local.Shape{MemoryNodes: 1, ComputeNodes: 1, MemorySize: 512 << 10}})
	fillEmptyFill(t, f, nil)
}

// TestNoSpaceCXL: the same on a cxl region.
func TestNoSpaceCXL(t *testing.T) {
	t.Parallel()
	fillEmptyFill(t, newCXLFabric(t), nil)
}

// newCXLFabric attaches to a new one-node cxl region of 512 KiB in a temporary file.
func newCXLFabric(t *testing.T) farmem.Fabric {
	t.Helper()
	r, err := cxl.CreateTemp("", "kvstore-nospace-*", cxl.Options{Shape: cxl.Shape{MemoryNodes: 1, MemorySize: 512 << 10, ComputeNodes: 2}})
	require.NoError(t, err)
	t.Cleanup(func() { _ = r.Close() })
	f, err := r.Attach(cxl.OpenOptions{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = f.Close() })
	return f
}

// TestNoSpaceAtSplit: every split fails at its allocation step (the allocator refuses its
// subtable), so the fills stop at what the table's first subtable holds; each failed split
// leaves the table as usable as before (no frozen slot, every key deletable), and once the
// allocator admits splits again the table grows past that. On local and on cxl.
func TestNoSpaceAtSplit(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		fabric func(t *testing.T) farmem.Fabric
	}{
		{"local", func(t *testing.T) farmem.Fabric {
			return newLocal(t, local.Options{Shape: local.Shape{MemoryNodes: 1, ComputeNodes: 1, MemorySize: 512 << 10}})
		}},
		{"cxl", newCXLFabric},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var refusing atomic.Bool
			refusing.Store(true)
			f := tc.fabric(t)
			s, first, _ := fillEmptyFill(t, f, func(size uint64) error {
				if refusing.Load() {
					return refuseSplits(size)
				}
				return nil
			})
			refusing.Store(false)
			more := fillStore(t, s, 2<<32)
			require.Greater(t, len(more), 2*first, "splits work again")
			c := auditStore(t, f, s)
			require.Zero(t, c.Frozen)
			require.Equal(t, len(more), c.Keys)
			require.Greater(t, c.Subtables, 1)
			ctx := context.Background()
			for _, k := range more {
				require.NoError(t, s.Delete(ctx, key(k)))
			}
		})
	}
}

// TestNoSpaceConcurrent: four goroutines fill the store, each through a session of its own (four
// clients, whatever the scheduler does), delete every key through the pool (each mostly keys
// other clients inserted) and fill it again: blocks one client allocated and another freed come
// back (the store gathers its clients' free memory into the one that ran out), so the second
// fill holds within 10% of the first, with no frozen slot.
func TestNoSpaceConcurrent(t *testing.T) {
	t.Parallel()
	f := newLocal(t, local.Options{Shape: local.Shape{MemoryNodes: 1, ComputeNodes: 1, MemorySize: 512 << 10}})
	s := openStore(t, f, fillOptions())
	ctx := context.Background()
	const goroutines = 4
	fill := func(base uint64) []uint64 {
		var mu sync.Mutex
		var keys []uint64
		var next atomic.Uint64
		next.Store(base)
		errs := make([]error, goroutines)
		var wg, ready sync.WaitGroup
		ready.Add(goroutines)
		for g := range goroutines {
			wg.Add(1)
			go func() {
				defer wg.Done()
				// Each goroutine holds a session of its own, all of them taken before any
				// insert: four clients allocate, whatever the scheduler makes of the inserts.
				ss, err := s.Session(ctx)
				ready.Done()
				if err != nil {
					errs[g] = err
					return
				}
				defer ss.Close()
				ready.Wait()
				for misses := 0; misses < giveUpAfter; {
					k := next.Add(1)
					err := ss.Insert(ctx, key(k), fillValue)
					switch {
					case err == nil:
						mu.Lock()
						keys = append(keys, k)
						mu.Unlock()
						misses = 0
					case errors.Is(err, kvstore.ErrNoSpace):
						misses++
					default:
						errs[g] = err
						return
					}
				}
			}()
		}
		wg.Wait()
		require.NoError(t, errors.Join(errs...))
		return keys
	}
	deleteAll := func(keys []uint64) {
		errs := make([]error, goroutines)
		var wg sync.WaitGroup
		for g := range goroutines {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := g; i < len(keys); i += goroutines {
					if err := s.Delete(ctx, key(keys[len(keys)-1-i])); err != nil {
						errs[g] = fmt.Errorf("delete of key %d: %w", keys[len(keys)-1-i], err)
						return
					}
				}
			}()
		}
		wg.Wait()
		require.NoError(t, errors.Join(errs...))
	}
	keys1 := fill(0)
	require.GreaterOrEqual(t, s.Clients(), goroutines, "a client per goroutine")
	deleteAll(keys1)
	c := auditStore(t, f, s)
	require.Zero(t, c.Frozen)
	require.Zero(t, c.Keys)
	keys2 := fill(1 << 32)
	c = auditStore(t, f, s)
	require.Zero(t, c.Frozen)
	require.Equal(t, len(keys2), c.Keys)
	require.InDelta(t, len(keys1), len(keys2), 0.1*float64(len(keys1)),
		"first fill %d keys, second %d", len(keys1), len(keys2))
	t.Logf("%d clients: first fill %d keys, second %d", s.Clients(), len(keys1), len(keys2))
	deleteAll(keys2)
}
