package race_test

import (
	"context"
	"encoding/binary"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/farmem/farmem/ds/race"
	"github.com/farmem/farmem/farmem"
	"github.com/farmem/farmem/farmem/farmemtest"
	"github.com/farmem/farmem/farmem/local"
)

// rtts returns the round trips c's memory made while f ran.
func rtts(c *client, f func()) uint64 {
	before := c.m.Stats()
	f()
	return c.m.Stats().Sub(before).RoundTrips
}

// TestAddressCacheSearch: with Options.AddressCache, a Search of a key the handle found before
// reads its block alone (one round trip, counted as a hit); another client's Update or Delete
// makes the entry stale, which the next Search finds (one round trip) before it reads the slot
// as usual and keeps the new entry; the handle's own write drops the entry; the writers'
// invalidation costs no round trip.
func TestAddressCacheSearch(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, local.Options{}, race.Params{Groups: 8})
	opts := race.Options{Invalidate: true, AddressCache: 100}
	r := e.open(t, 0, opts)
	w := e.open(t, 1, opts)
	require.NoError(t, w.tab.Insert(ctx, key(1), val(1, 40)))

	search := func(want uint64, rt uint64, msg string) {
		t.Helper()
		var v []byte
		var err error
		require.Equal(t, rt, rtts(r, func() { v, err = r.tab.Search(ctx, key(1)) }), msg)
		require.NoError(t, err, msg)
		require.Equal(t, want, unval(v), msg)
	}
	search(1, race.SearchRoundTrips, "the first search reads the slot")
	search(1, race.CachedSearchRoundTrips, "the second reads the block alone")
	buf := make([]byte, 0, 64)
	require.Equal(t, uint64(race.CachedSearchRoundTrips), rtts(r, func() {
		got, err := r.tab.AppendSearch(ctx, buf, key(1))
		require.NoError(t, err)
		require.Equal(t, uint64(1), unval(got))
	}))
	st := r.tab.Stats()
	require.Equal(t, uint64(2), st.CacheHits)
	require.Zero(t, st.CacheStale)

	require.Equal(t, uint64(race.UpdateRoundTrips), rtts(w, func() { require.NoError(t, w.tab.Update(ctx, key(1), val(2, 40))) }),
		"invalidation rides in the update's round trips")
	search(2, race.CachedSearchRoundTrips+race.SearchRoundTrips, "a replaced block: the stale entry, then the slot")
	require.Equal(t, uint64(1), r.tab.Stats().CacheStale)
	search(2, race.CachedSearchRoundTrips, "the new entry")

	// The handle's own update keeps the entry of the block it published.
	require.NoError(t, r.tab.Update(ctx, key(1), val(3, 40)))
	search(3, race.CachedSearchRoundTrips, "after its own update")

	require.Equal(t, uint64(race.DeleteRoundTrips), rtts(w, func() { require.NoError(t, w.tab.Delete(ctx, key(1))) }))
	require.Equal(t, uint64(race.CachedSearchRoundTrips+race.SearchAbsentRoundTrips), rtts(r, func() {
		_, err := r.tab.Search(ctx, key(1))
		require.ErrorIs(t, err, race.ErrNotFound)
	}), "a deleted key: the stale entry, then the buckets")
	require.Equal(t, uint64(2), r.tab.Stats().CacheStale)

	// Another key never takes a key's entry.
	require.NoError(t, w.tab.Insert(ctx, key(2), val(5, 40)))
	_, err := r.tab.Search(ctx, key(3))
	require.ErrorIs(t, err, race.ErrNotFound)
}

// TestAddressCacheNeedsInvalidate: Open refuses a cache without Invalidate; and the reason: a
// writer that does not invalidate the block it replaces leaves a cached reader reading it.
func TestAddressCacheNeedsInvalidate(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, local.Options{}, race.Params{Groups: 8})
	e0 := e.open(t, 0, race.Options{})
	for _, o := range []race.Options{{AddressCache: 10}, {Invalidate: true, AddressCache: -1}, {Invalidate: true, AddressCache: race.MaxAddressCache + 1}} {
		_, err := race.Open(ctx, e0.m, e0.a, e.root, o)
		require.ErrorIs(t, err, farmem.ErrInvalid, "%+v", o)
	}

	r := e.open(t, 0, race.Options{Invalidate: true, AddressCache: 16})
	careless := e.open(t, 1, race.Options{})
	require.NoError(t, careless.tab.Insert(ctx, key(1), val(1, 40)))
	_, err := r.tab.Search(ctx, key(1))
	require.NoError(t, err)
	require.NoError(t, careless.tab.Update(ctx, key(1), val(2, 40)))
	v, err := r.tab.Search(ctx, key(1))
	require.NoError(t, err)
	require.Equal(t, uint64(1), unval(v), "a writer without Invalidate: the cached reader reads the replaced value")
}

// TestLinearizableAddressCache is TestLinearizableRegions with every client keeping a small
// address cache (so that entries are evicted too) and invalidating: searches answered from the
// cache, stale entries and splits mix under tearing and jitter, with a client dying in the middle
// of a split in one run; the histories must be linearizable.
func TestLinearizableAddressCache(t *testing.T) {
	w := regionLoad
	w.Search, w.Insert, w.Update = 55, 20, 15
	w.Ops = 1500 * stressScale()
	opts := race.Options{Invalidate: true, AddressCache: 64}
	var all race.Stats
	for _, step := range []int{0, 2} {
		n := 6
		if step > 0 {
			n, w.Ops = 4, 400*stressScale()
		}
		r := runSplitsOpts(t, w, n, step, false, regionSplit, regions, opts)
		t.Logf("dead at step %d: splits %d; %+v", step, r.splits, r.stats)
		require.NoError(t, r.verdict, "dead at step %d", step)
		require.GreaterOrEqual(t, r.splits, uint64(2), "dead at step %d", step)
		all = addStats(all, r.stats)
	}
	require.NotZero(t, all.CacheHits, "no search was answered from a cache")
	require.NotZero(t, all.CacheStale, "no search met a stale entry")
}

// TestCachedReadOfReusedBlock: a cached read (SearchCached, whose check the handles' caches
// share) that meets its block being reused never returns the replaced value, wherever the
// reuse's writes land among its reads. The cached block A is replaced (and so invalidated),
// then its address is rewritten for the same key with another stamp, word by word in ascending
// order, as a reusing writer does: every interleaving in which that writer writes its first p
// words just before the reader's j-th word read and then pauses is replayed on the reader's
// batch (the valid word, then the block), and each must be refused. Reading the valid word
// within the block read instead, p = 3 landing between the reader's second and third word reads
// passes A's checksum and stamp with the new block's clear valid word.
func TestCachedReadOfReusedBlock(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, local.Options{}, race.Params{Groups: 8})
	w := e.open(t, 1, race.Options{Invalidate: true})
	require.NoError(t, w.tab.Insert(ctx, key(1), val(1, 40)))

	var armed bool
	var replay func(valid, blk []byte)
	r := e.openWith(t, 0, race.Options{}, func(m farmem.Memory) farmem.Memory {
		return &farmemtest.Interposer{Memory: m, After: func(_ context.Context, v farmemtest.Verb, _ uint64, err error) {
			if armed && err == nil && len(v.Batch.Ops) == 2 {
				replay(v.Batch.Ops[0].Buf, v.Batch.Ops[1].Buf)
			}
		}}
	})
	_, entA, err := r.tab.SearchEntry(ctx, key(1))
	require.NoError(t, err)
	require.NoError(t, w.tab.Update(ctx, key(1), val(2, 40)))

	a := entA.Word.Addr()
	img := race.BlockImage(a, key(1), val(3, 40), entA.Stamp+1)
	words := len(img) / 8 // the writer's; the reader reads the slot word's whole Units
	le := binary.LittleEndian
	// The reader's word reads in order: the valid word, then the block's words.
	order := []int{race.ValidOffset / 8}
	for k := range int(entA.Word.Size()) / 8 {
		order = append(order, k)
	}
	cases := 0
	for j0 := range order {
		for p := 1; p <= words; p++ {
			replay = func(valid, blk []byte) {
				mem := append([]byte(nil), blk...) // A, replaced: its valid word set
				read := func(j, k int) []byte {
					if j >= j0 && k < p {
						return img[8*k : 8*k+8]
					}
					return mem[8*k : 8*k+8]
				}
				copy(valid, read(0, race.ValidOffset/8))
				for j, k := range order[1:] {
					copy(blk[8*k:], read(j+1, k))
				}
			}
			armed = true
			v, ok, err := r.tab.SearchCached(ctx, key(1), entA)
			armed = false
			require.NoError(t, err)
			require.False(t, ok, "writer's first %d words before read %d: accepted %x", p, j0, v)
			cases++
		}
	}
	require.Equal(t, len(order)*words, cases)
	require.Zero(t, le.Uint64(img[race.ValidOffset:]), "the new block's valid word is clear")
}
