package ptrarray_test

import (
	"context"
	"encoding/binary"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/farmem/farmem/alloc"
	"github.com/farmem/farmem/bench/ptrarray"
	"github.com/farmem/farmem/ds/ptrsync"
	"github.com/farmem/farmem/farmem"
	"github.com/farmem/farmem/farmem/local"
)

// FuzzDecode: the decoders of what the array reads from far memory (roots, blocks, pointer
// words) never panic, and accept only what their encoders write.
func FuzzDecode(f *testing.F) {
	root := make([]byte, 48)
	binary.LittleEndian.PutUint64(root, 0x41525450_6d726166)
	f.Add(root, uint64(0), uint64(1))
	f.Add([]byte{}, uint64(7), uint64(0))
	f.Add(make([]byte, 24), ^uint64(0), uint64(3))
	f.Fuzz(func(t *testing.T, b []byte, w, k uint64) {
		if keys, bases, err := ptrarray.DecodeRoot(b); err == nil {
			require.Positive(t, keys)
			require.NotEmpty(t, bases)
		}
		if v, err := ptrarray.DecodeBlock(b, k); err == nil {
			require.LessOrEqual(t, len(v), len(b))
			require.Equal(t, k, binary.LittleEndian.Uint64(b))
		}
		p := ptrarray.Pointer(w)
		if q, err := ptrarray.MakePointer(p.Addr(), p.Size()); err == nil {
			require.Equal(t, p.Addr(), q.Addr())
			require.Equal(t, p.Size(), q.Size())
		}
	})
}

func TestPointerRoundTrip(t *testing.T) {
	a := farmem.MakeAddr(3, 1<<40)
	p, err := ptrarray.MakePointer(a, 40)
	require.NoError(t, err)
	require.Equal(t, a, p.Addr())
	require.Equal(t, uint64(48), p.Size(), "sizes round up to 16 bytes")
	for _, bad := range []struct {
		a    farmem.Addr
		size uint64
	}{{farmem.MakeAddr(256, 0), 16}, {farmem.MakeAddr(1, 8), 16}, {farmem.MakeAddr(1, 16<<40), 16}, {a, 0}, {a, 1 << 21}} {
		_, err := ptrarray.MakePointer(bad.a, bad.size)
		require.ErrorIs(t, err, farmem.ErrInvalid, "%v %d", bad.a, bad.size)
	}
}

// open formats a local fabric of the given memory nodes, creates an array of keys and opens a
// handle on it with s (nil: the default).
func open(t *testing.T, nodes int, keys uint64, s ptrsync.Synchronizer) (farmem.Memory, *ptrarray.Array, error) {
	t.Helper()
	ctx := context.Background()
	f, err := local.New(local.Options{Shape: local.Shape{MemoryNodes: nodes, MemorySize: 8 << 20}, Strict: true})
	require.NoError(t, err)
	m, err := f.Open(ctx, f.Topology().ComputeNodes()[0])
	require.NoError(t, err)
	require.NoError(t, alloc.FormatAll(ctx, m, alloc.FormatOptions{}))
	// A long lease and refresh: an announcement older than Refresh (10 ms by default) costs
	// the next Pin a round trip, which a slow, loaded machine would add to the counts the
	// tests assert.
	a, err := alloc.New(ctx, m, alloc.Options{Lease: 10 * time.Second, Refresh: time.Second})
	require.NoError(t, err)
	t.Cleanup(func() {
		_ = a.Close()
		_ = m.Close()
		require.Zero(t, f.Violations(), "strict-mode violations")
		_ = f.Close()
	})
	root, err := ptrarray.Create(ctx, m, a, ptrarray.Params{Keys: keys})
	require.NoError(t, err)
	arr, err := ptrarray.Open(ctx, m, a, root, ptrarray.Options{Sync: s})
	return m, arr, err
}

func val(v uint64) []byte { return binary.LittleEndian.AppendUint64(nil, v) }

// TestFewKeysManyNodes: an array with fewer keys than nodes works, and keys spread over them.
func TestFewKeysManyNodes(t *testing.T) {
	_, arr, err := open(t, 4, 2, nil)
	require.NoError(t, err)
	ctx := context.Background()
	require.NoError(t, arr.Insert(ctx, 1, val(5)))
	v, err := arr.Search(ctx, 1)
	require.NoError(t, err)
	require.Equal(t, val(5), v)
	require.NotEqual(t, arr.Record(0).Node(), arr.Record(1).Node())
	require.ErrorIs(t, arr.Insert(ctx, 2, val(1)), ptrarray.ErrKeyRange)
	require.ErrorIs(t, arr.Update(ctx, 0, val(1)), ptrarray.ErrNotFound)
	require.ErrorIs(t, arr.Insert(ctx, 1, val(6)), ptrarray.ErrExists)
}

// planned is an Optimistic commit behind a fixed plan, recording what each Commit was handed.
type planned struct {
	ptrsync.Optimistic
	lockSize int
	plan     ptrsync.Plan
	entries  [][]byte
	lock     []farmem.Addr
}

func (p *planned) LockSize() int { return p.lockSize }
func (p *planned) Plan(k ptrsync.Kind, key uint64) ptrsync.Plan {
	p.Optimistic.Plan(k, key)
	return p.plan
}
func (p *planned) Commit(ctx context.Context, t ptrsync.Target) (ptrsync.Result, error) {
	p.entries = append(p.entries, append([]byte(nil), t.LockBytes()...))
	p.lock = append(p.lock, t.Lock())
	return p.Optimistic.Commit(ctx, t)
}

// TestTargetAndPlan: the Target names the record's lock entry; a prefetch reads it with the
// pointer (the same round trip: an update costs the same), a deferred write moves the block
// write into Install (the same again: the write rides in the CAS's batch); a search and a
// further insert cost their constants; a synchronizer wanting more lock entry than a record
// keeps is refused.
func TestTargetAndPlan(t *testing.T) {
	ctx := context.Background()
	for _, plan := range []ptrsync.Plan{{}, {Prefetch: true}, {DeferWrite: true}, {DeferWrite: true, Prefetch: true}} {
		p := &planned{lockSize: 16, plan: plan}
		m, arr, err := open(t, 2, 8, p)
		require.NoError(t, err)
		require.NoError(t, arr.Insert(ctx, 3, val(1)))
		// A lock word left in the entry, as a synchronizer would leave it.
		_, err = m.CAS(ctx, arr.Record(3), 0, 0xabc)
		require.NoError(t, err)
		before := m.Stats()
		require.NoError(t, arr.Update(ctx, 3, val(2)))
		d := m.Stats().Sub(before)
		require.Equal(t, uint64(ptrarray.UpdateRoundTrips), d.RoundTrips, "%+v: %v", plan, d)
		require.Equal(t, []farmem.Addr{arr.Record(3)}, p.lock)
		if plan.Prefetch {
			require.Len(t, p.entries[0], 16)
			require.Equal(t, uint64(0xabc), binary.LittleEndian.Uint64(p.entries[0]), "the prefetched entry")
		} else {
			require.Empty(t, p.entries[0], "an entry handed over without a prefetch")
		}
		before = m.Stats()
		v, err := arr.Search(ctx, 3)
		require.NoError(t, err)
		require.Equal(t, val(2), v)
		require.Equal(t, uint64(ptrarray.SearchRoundTrips), m.Stats().Sub(before).RoundTrips, "search")
		before = m.Stats()
		require.NoError(t, arr.Insert(ctx, 4, val(4)))
		require.Equal(t, uint64(ptrarray.InsertRoundTrips), m.Stats().Sub(before).RoundTrips, "insert")
	}
	_, _, err := open(t, 1, 4, &planned{lockSize: 24})
	require.ErrorIs(t, err, farmem.ErrInvalid)
}
