package race_test

import (
	"context"
	"encoding/binary"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/farmem/farmem/ds/ptrsync"
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

// cachingPair returns two handles with address caches of entries on one table, the second having
// inserted key(1) with val(1, 40).
func cachingPair(t *testing.T, entries int) (r, w *client) {
	e := newEnv(t, local.Options{}, race.Params{Groups: 8})
	opts := race.Options{Invalidate: true, AddressCache: entries}
	r, w = e.open(t, 0, opts), e.open(t, 1, opts)
	require.NoError(t, w.tab.Insert(context.Background(), key(1), val(1, 40)))
	return r, w
}

// searcher returns a check that r's Search of k finds the value want in rt round trips.
func searcher(t *testing.T, r *client, k []byte) func(want, rt uint64, msg string) {
	return func(want, rt uint64, msg string) {
		t.Helper()
		var v []byte
		var err error
		require.Equal(t, rt, rtts(r, func() { v, err = r.tab.Search(context.Background(), k) }), msg)
		require.NoError(t, err, msg)
		require.Equal(t, want, unval(v), msg)
	}
}

// TestAddressCacheSearch: with Options.AddressCache, a Search of a key the handle found before
// reads its block alone (one round trip, counted as a hit); another client's Update or Delete
// makes the entry stale, which the next Search finds (one round trip) before it reads the slot
// as usual and keeps the new entry; the handle's own write drops the entry; the writers'
// invalidation costs no round trip.
func TestAddressCacheSearch(t *testing.T) {
	ctx := context.Background()
	r, w := cachingPair(t, 100)
	search := searcher(t, r, key(1))
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

	require.Equal(t, uint64(race.CachedUpdateRoundTrips), rtts(w, func() { require.NoError(t, w.tab.Update(ctx, key(1), val(2, 40))) }),
		"invalidation rides in the update's round trips (the writer's entry is its insert's)")
	search(2, race.CachedSearchRoundTrips+race.SearchRoundTrips, "a replaced block: the stale entry, then the slot")
	require.Equal(t, uint64(1), r.tab.Stats().CacheStale)
	search(2, race.CachedSearchRoundTrips, "the new entry")

	// The handle's own update keeps the entry of the block it published.
	require.NoError(t, r.tab.Update(ctx, key(1), val(3, 40)))
	search(3, race.CachedSearchRoundTrips, "after its own update")

	require.Equal(t, uint64(race.CachedDeleteRoundTrips-1+race.DeleteRoundTrips), rtts(w, func() { require.NoError(t, w.tab.Delete(ctx, key(1))) }),
		"the writer's entry went stale with the reader's update")
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

// TestAddressCacheChange: an Update or Delete of a key the handle's address cache holds reads
// the slot's word and the block's head in its first round trip (the Update's new block written
// in it too) and invalidates the old block in the CAS's batch: CachedUpdateRoundTrips and
// CachedDeleteRoundTrips, the replaced block's valid word set. A stale entry costs that round
// trip before the usual lookup; a deleted key's ends in ErrNotFound.
func TestAddressCacheChange(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, local.Options{}, race.Params{Groups: 8})
	opts := race.Options{Invalidate: true, AddressCache: 100}
	c := e.open(t, 0, opts)
	o := e.open(t, 1, opts)
	p := e.open(t, 2, race.Options{})
	require.NoError(t, c.tab.Insert(ctx, key(1), val(1, 40)))
	// o's first insert loads the directory and takes the allocator's first chunk.
	require.NoError(t, o.tab.Insert(ctx, key(2), val(2, 40)))

	// entry returns the key's current slot word (as SearchEntry finds it) and asserts its value.
	entry := func(want uint64) race.Slot {
		t.Helper()
		v, ent, err := p.tab.SearchEntry(ctx, key(1))
		require.NoError(t, err)
		require.Equal(t, want, unval(v))
		return ent.Word
	}
	validWord := func(w race.Slot) uint64 {
		t.Helper()
		var b [8]byte
		require.NoError(t, p.m.Read(ctx, w.Addr().Add(race.ValidOffset), b[:]))
		return binary.LittleEndian.Uint64(b[:])
	}
	update := func(h *client, v, rt uint64, msg string) {
		t.Helper()
		old := entry(v - 1)
		require.Equal(t, rt, rtts(h, func() { require.NoError(t, h.tab.Update(ctx, key(1), val(v, 40))) }), msg)
		require.NotEqual(t, old, entry(v), msg)
		require.NotZero(t, validWord(old), "%s: the replaced block is invalid", msg)
	}
	update(c, 2, race.CachedUpdateRoundTrips, "the insert's entry")
	update(c, 3, race.CachedUpdateRoundTrips, "the entry of its own update")
	require.Equal(t, uint64(2), c.tab.Stats().ChangeHits)
	require.Equal(t, uint64(2), c.tab.Stats().Straight, "updates through entries take the straight path")
	update(o, 4, race.UpdateRoundTrips, "another handle, with no entry")
	require.Zero(t, o.tab.Stats().Straight, "an update with no entry takes the general path")
	update(c, 5, race.CachedUpdateRoundTrips-1+race.UpdateRoundTrips, "a stale entry's round trip, then the lookup")
	require.Equal(t, uint64(1), c.tab.Stats().ChangeStale)
	require.Equal(t, uint64(1), c.tab.Stats().StraightHandovers, "the stale entry's update went on in the general loop")
	update(c, 6, race.CachedUpdateRoundTrips, "the lookup's entry")
	require.Equal(t, uint64(4), c.tab.Stats().Straight)
	require.Equal(t, uint64(1), c.tab.Stats().StraightHandovers)

	old := entry(6)
	require.Equal(t, uint64(race.CachedDeleteRoundTrips), rtts(c, func() { require.NoError(t, c.tab.Delete(ctx, key(1))) }))
	require.NotZero(t, validWord(old), "the deleted block is invalid")
	_, err := p.tab.Search(ctx, key(1))
	require.ErrorIs(t, err, race.ErrNotFound)

	// Another handle's delete leaves c's entry stale.
	require.NoError(t, o.tab.Insert(ctx, key(1), val(7, 40)))
	_, err = c.tab.Search(ctx, key(1))
	require.NoError(t, err)
	require.NoError(t, o.tab.Delete(ctx, key(1)))
	require.Equal(t, uint64(race.CachedDeleteRoundTrips-1+race.AbsentRoundTrips), rtts(c, func() {
		require.ErrorIs(t, c.tab.Delete(ctx, key(1)), race.ErrNotFound)
	}), "a stale entry's round trip, then the lookup finds nothing")
	require.Equal(t, uint64(2), c.tab.Stats().ChangeStale)
}

// TestStraightUpdateLosesCAS: an Update through its key's entry (the straight path) whose CAS
// another handle's change beats. Over a newer block of the key, the synchronizer's continuation
// confirms it and CASes again: the update commits, with one failed CAS and no hand-over. Over a
// slot a delete emptied, the commit step retries and the change goes back to the general loop,
// which looks the key up again and finds it gone. The verbs are the general path's: the failed
// CAS costs its round trip and the winner's block read, the retry a lookup.
func TestStraightUpdateLosesCAS(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, local.Options{}, race.Params{Groups: 8})
	sync := ptrsync.NewOptimistic()
	opts := race.Options{Invalidate: true, AddressCache: 100}
	o := e.open(t, 1, opts)
	p := e.open(t, 2, race.Options{})
	// beat, when set, runs (once) before the next verb of c's that holds a CAS.
	var beat func()
	copts := opts
	copts.Sync = sync
	c := e.openWith(t, 0, copts, func(m farmem.Memory) farmem.Memory {
		return &farmemtest.Interposer{Memory: m, Before: func(_ context.Context, v farmemtest.Verb) {
			if beat == nil {
				return
			}
			for _, op := range v.Batch.Ops {
				if op.Kind == farmem.OpCAS {
					f := beat
					beat = nil
					f()
					return
				}
			}
		}}
	})
	require.NoError(t, c.tab.Insert(ctx, key(1), val(1, 40)))
	require.NoError(t, o.tab.Insert(ctx, key(2), val(2, 40)))
	value := func() uint64 {
		t.Helper()
		v, err := p.tab.Search(ctx, key(1))
		require.NoError(t, err)
		return unval(v)
	}

	st, ss := c.tab.Stats(), sync.Stats()
	beat = func() { require.NoError(t, o.tab.Update(ctx, key(1), val(2, 40))) }
	rt := rtts(c, func() { require.NoError(t, c.tab.Update(ctx, key(1), val(3, 40))) })
	require.Nil(t, beat, "the update made no CAS")
	require.Equal(t, uint64(3), value(), "the straight update committed over the newer block")
	require.Equal(t, uint64(race.CachedUpdateRoundTrips+2), rt, "the lost CAS's round trip, the winner's block read, the CAS")
	d, sd := c.tab.Stats(), sync.Stats().Sub(ss)
	require.Equal(t, st.Straight+1, d.Straight)
	require.Equal(t, st.StraightHandovers, d.StraightHandovers, "the synchronizer's continuation committed: no hand-over")
	require.Equal(t, st.Conflicts+1, d.Conflicts)
	require.Equal(t, ptrsync.Stats{Commits: 1, Optimistic: 1, CASes: 2, FailedCAS: 1}, sd)

	st, ss = d, sync.Stats()
	beat = func() { require.NoError(t, o.tab.Delete(ctx, key(1))) }
	rt = rtts(c, func() { require.ErrorIs(t, c.tab.Update(ctx, key(1), val(4, 40)), race.ErrNotFound) })
	require.Nil(t, beat, "the update made no CAS")
	require.Equal(t, uint64(race.CachedUpdateRoundTrips+race.AbsentRoundTrips), rt, "the lost CAS, then a lookup that finds nothing")
	d, sd = c.tab.Stats(), sync.Stats().Sub(ss)
	require.Equal(t, st.Straight+1, d.Straight)
	require.Equal(t, st.StraightHandovers+1, d.StraightHandovers, "the retry went on in the general loop")
	require.Equal(t, ptrsync.Stats{Commits: 1, Retries: 1, CASes: 1, FailedCAS: 1}, sd)
	_, err := p.tab.Search(ctx, key(1))
	require.ErrorIs(t, err, race.ErrNotFound)
}

// TestAddressCacheVolatile: a key another handle keeps updating makes the reader's entry stale
// twice, after which the entry is volatile: Searches and the reader's own Update take the
// lookup (CacheSkips) with no wasted round trip; once the writer stops, two lookups that find
// the entry's block unchanged make it usable again, and the Search reads the block alone.
func TestAddressCacheVolatile(t *testing.T) {
	ctx := context.Background()
	r, w := cachingPair(t, 100)
	search := searcher(t, r, key(1))
	write := func(h *client, v uint64) {
		t.Helper()
		require.NoError(t, h.tab.Update(ctx, key(1), val(v, 40)))
	}
	stale := race.CachedSearchRoundTrips + race.SearchRoundTrips
	search(1, race.SearchRoundTrips, "no entry yet")
	search(1, race.CachedSearchRoundTrips, "a fresh entry")
	write(w, 2)
	search(2, uint64(stale), "the first miss")
	write(w, 3)
	search(3, uint64(stale), "the second miss")
	require.Equal(t, uint64(2), r.tab.Stats().CacheStale)
	require.Zero(t, r.tab.Stats().CacheSkips)
	for v := uint64(4); v < 7; v++ {
		write(w, v)
		search(v, race.SearchRoundTrips, "a volatile entry: the lookup alone")
	}
	require.Equal(t, uint64(3), r.tab.Stats().CacheSkips)
	require.Equal(t, uint64(2), r.tab.Stats().CacheStale, "no read wasted on a volatile entry")
	require.Equal(t, uint64(race.UpdateRoundTrips), rtts(r, func() { write(r, 7) }),
		"the reader's own update skips its volatile entry too")
	require.Equal(t, uint64(4), r.tab.Stats().CacheSkips)
	require.Zero(t, r.tab.Stats().ChangeStale+r.tab.Stats().ChangeHits)
	// The writer stopped: each lookup that finds the entry's block takes a miss back. The
	// count was at its cap (3); the update's lookup found the block the last search kept (2),
	// the next search finds the update's (1), and the entry is used again.
	search(7, race.SearchRoundTrips, "still volatile")
	search(7, race.CachedSearchRoundTrips, "quiet again: the block alone")
	require.Equal(t, uint64(5), r.tab.Stats().CacheSkips)
	require.Equal(t, uint64(race.CachedUpdateRoundTrips), rtts(r, func() { write(r, 8) }), "and the update through it")
}

// TestAddressCacheStaleRate: a handle whose looks through its entries find the blocks
// replaced more often than not stops using every entry, even fresh ones (CacheSkips), and
// takes them up again once its lookups find the blocks unchanged: over 64 keys another
// handle updated, the first ~44 Searches pay a stale entry's round trip, the rest the lookup
// alone; with the writer gone, about 15 lookups bring the rate back, and the rest of the pass,
// and the next, read every block alone.
func TestAddressCacheStaleRate(t *testing.T) {
	ctx := context.Background()
	r, w := cachingPair(t, 1<<12) // no key of the 65 evicts another
	const n = 64
	for i := range uint64(n) {
		require.NoError(t, w.tab.Insert(ctx, key(100+i), val(i, 40)))
	}
	pass := func(v uint64) (rt uint64) {
		t.Helper()
		for i := range uint64(n) {
			rt += rtts(r, func() {
				got, err := r.tab.Search(ctx, key(100+i))
				require.NoError(t, err)
				require.Equal(t, v+i, unval(got))
			})
		}
		return rt
	}
	require.Equal(t, uint64(n*race.SearchRoundTrips), pass(0), "no entries yet")
	for i := range uint64(n) {
		require.NoError(t, w.tab.Update(ctx, key(100+i), val(1000+i, 40)))
	}
	rt := pass(1000)
	st := r.tab.Stats()
	require.Equal(t, uint64(n), st.CacheStale+st.CacheSkips)
	require.InDelta(t, 44, st.CacheStale, 1, "stale looks until the rate passes one half")
	require.Equal(t, st.CacheStale*(race.CachedSearchRoundTrips+race.SearchRoundTrips)+st.CacheSkips*race.SearchRoundTrips, rt)
	// The lookups that replaced the unused entries saw them stale too: 64 stale observations
	// leave the rate at about 1-(63/64)^64 = 0.63, and the quiet pass's lookups, finding
	// every block unchanged, bring it under one half in about 15.
	rt = pass(1000)
	skips := r.tab.Stats().CacheSkips - st.CacheSkips
	require.InDelta(t, 15, skips, 2, "entries left unused while the rate is high")
	require.Equal(t, skips*race.SearchRoundTrips+(n-skips)*race.CachedSearchRoundTrips, rt)
	require.Equal(t, uint64(n*race.CachedSearchRoundTrips), pass(1000), "quiet: every block read alone")
}

// TestAddressCacheNeedsInvalidate: Open refuses a cache without Invalidate, and one of an
// invalid size (why every writer must invalidate: TestCachedReadOfReusedBlock).
func TestAddressCacheNeedsInvalidate(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, local.Options{}, race.Params{Groups: 8})
	e0 := e.open(t, 0, race.Options{})
	for _, o := range []race.Options{{AddressCache: 10}, {Invalidate: true, AddressCache: -1}, {Invalidate: true, AddressCache: race.MaxAddressCache + 1}} {
		_, err := race.Open(ctx, e0.m, e0.a, e.root, o)
		require.ErrorIs(t, err, farmem.ErrInvalid, "%+v", o)
	}
}

// TestLinearizableAddressCache is TestLinearizableRegions with every client keeping a small
// address cache (so that entries are evicted too) and invalidating: searches and updates
// answered through the cache, stale entries and splits mix under tearing and jitter, with a client dying in the middle
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
	require.NotZero(t, all.ChangeHits, "no update was spared its lookup")
	require.NotZero(t, all.ChangeStale, "no update met a stale entry")
}

// TestCachedReadOfReusedBlock: a cached read (SearchCached, whose check the handles' caches
// share) that meets its block being reused never returns the replaced value, wherever the
// reuse's writes land among its reads. The cached block A is replaced (and so invalidated),
// then its address is rewritten for the same key with another stamp, word by word in ascending
// order, as a reusing writer does, and that block is published in the same slot with the same
// word as A's (same address, size and fingerprint). With the slot and the block on different
// memory nodes, the reader's read of the slot may come after the publication while its reads of
// the block's valid word and then the block (same node, in order) meet the rewrite anywhere:
// every interleaving in which the writer writes its first p words just before the reader's
// j-th word read and then pauses is replayed on the reader's batch, with the slot read showing
// A's word, and each must be refused. Two ways to fail it: read the valid word within the
// block read (p = 3 landing between the reader's second and third word reads passes A's
// checksum and stamp with the new block's clear valid word), or leave A's valid word clear, as
// a writer without Options.Invalidate does (then a rewrite that has not reached the reader yet
// passes). With both on one node the read reads no valid word: the slot, read first, showed A's
// word, so A was committed then, and the same interleavings (the rewrite begun after the slot's
// read) may pass A itself, never anything else.
func TestCachedReadOfReusedBlock(t *testing.T) {
	for _, careless := range []bool{false, true} {
		accepted, _ := cachedReadsOfReuse(t, careless, true)
		if careless {
			require.NotZero(t, accepted, "a replaced block left valid was never taken")
		} else {
			require.Zero(t, accepted, "a replaced block was taken")
		}
	}
	accepted, replays := cachedReadsOfReuse(t, false, false)
	require.NotZero(t, accepted, "one node: A, read before the rewrite reached it, was never taken")
	require.Less(t, accepted, replays, "one node: a rewrite that reached the reader was never refused")
}

// cachedReadsOfReuse replays TestCachedReadOfReusedBlock's interleavings on a key whose slot
// and block are on different memory nodes (apart) or on one, with A's valid word left clear if
// careless, and returns how many of them the cached read accepted, and how many it replayed.
func cachedReadsOfReuse(t *testing.T, careless, apart bool) (accepted, replays int) {
	ctx := context.Background()
	e := newEnv(t, local.Options{Shape: local.Shape{MemoryNodes: 2}}, race.Params{Groups: 8})
	// The writer's blocks go to one memory node, the table's slots being where they are: one of
	// the two nodes gives what apart asks.
	var w *client
	var kk []byte
	for i, n := range e.f.Topology().MemoryNodes() {
		e.ao.Nodes = []farmem.NodeID{n}
		c := e.open(t, 1, race.Options{Invalidate: true})
		k := key(uint64(i))
		require.NoError(t, c.tab.Insert(ctx, k, val(1, 40)))
		loc, err := c.tab.Locate(ctx, k)
		require.NoError(t, err)
		if (loc.Slot.Node() != loc.Block.Node()) == apart {
			w, kk = c, k
			break
		}
	}
	e.ao.Nodes = nil
	require.NotNil(t, w, "no placement with the slot and block apart=%v", apart)

	// The batch's reads: the slot, (apart) the valid word, the block.
	nops, blk := 2, 1
	if apart {
		nops, blk = 3, 2
	}
	var armed bool
	var replay func(ops []farmem.Op)
	r := e.openWith(t, 0, race.Options{}, func(m farmem.Memory) farmem.Memory {
		return &farmemtest.Interposer{Memory: m, After: func(_ context.Context, v farmemtest.Verb, _ uint64, err error) {
			if armed && err == nil && len(v.Batch.Ops) == nops {
				replay(v.Batch.Ops)
			}
		}}
	})
	_, entA, err := r.tab.SearchEntry(ctx, kk)
	require.NoError(t, err)
	require.NoError(t, w.tab.Update(ctx, kk, val(2, 40)))

	a := entA.Word.Addr()
	img := race.BlockImage(a, kk, val(3, 40), entA.Stamp+1)
	words := len(img) / 8 // the writer's; the reader reads the slot word's whole Units
	le := binary.LittleEndian
	require.Zero(t, le.Uint64(img[race.ValidOffset:]), "the new block's valid word is clear")
	// The reader's word reads of the block's node, in order: (apart) the valid word, then the
	// block's.
	var order []int
	if apart {
		order = append(order, race.ValidOffset/8)
	}
	for k := range int(entA.Word.Size()) / 8 {
		order = append(order, k)
	}
	for j0 := range order {
		for p := 1; p <= words; p++ {
			replay = func(ops []farmem.Op) {
				le.PutUint64(ops[0].Buf, uint64(entA.Word)) // the slot, read before the block's node
				mem := append([]byte(nil), ops[blk].Buf...) // A, replaced
				if careless {
					clear(mem[race.ValidOffset : race.ValidOffset+8])
				}
				read := func(j, k int) []byte {
					if j >= j0 && k < p {
						return img[8*k : 8*k+8]
					}
					return mem[8*k : 8*k+8]
				}
				for j, k := range order {
					if apart && j == 0 {
						copy(ops[1].Buf, read(0, k))
						continue
					}
					copy(ops[blk].Buf[8*k:], read(j, k))
				}
			}
			armed = true
			v, ok, err := r.tab.SearchCached(ctx, kk, entA)
			armed = false
			require.NoError(t, err)
			replays++
			if ok {
				require.Equal(t, uint64(1), unval(v), "only A can pass for A")
				accepted++
			}
		}
	}
	require.Positive(t, replays)
	return accepted, replays
}
