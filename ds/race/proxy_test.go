package race_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/farmem/farmem/ds/race"
	"github.com/farmem/farmem/farmem"
	"github.com/farmem/farmem/farmem/local"
)

// TestAddressCache: an entry from SearchEntry reads the value in one round trip; an Update
// under Options.Invalidate makes it stale with no extra round trip; so does a Delete; a block
// reused at the same address is told apart by its stamp.
func TestAddressCache(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, local.Options{}, race.Params{Groups: 8})
	c := e.open(t, 0, race.Options{Invalidate: true})
	r := e.open(t, 1, race.Options{})
	require.NoError(t, c.tab.Insert(ctx, key(1), val(1, 40)))

	v, ent, err := r.tab.SearchEntry(ctx, key(1))
	require.NoError(t, err)
	require.Equal(t, uint64(1), unval(v))
	require.True(t, ent.Word.Committed())
	require.NotZero(t, ent.Slot)

	before := r.m.Stats()
	v, ok, err := r.tab.SearchCached(ctx, key(1), ent)
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, uint64(1), unval(v))
	require.Equal(t, uint64(1), r.m.Stats().Sub(before).RoundTrips, "an address-cache hit is one round trip")

	// Another key never matches the entry.
	_, ok, err = r.tab.SearchCached(ctx, key(2), ent)
	require.NoError(t, err)
	require.False(t, ok)

	before = c.m.Stats()
	require.NoError(t, c.tab.Update(ctx, key(1), val(2, 40)))
	require.Equal(t, uint64(race.UpdateRoundTrips), c.m.Stats().Sub(before).RoundTrips, "invalidation rides in the update's round trips")
	_, ok, err = r.tab.SearchCached(ctx, key(1), ent)
	require.NoError(t, err)
	require.False(t, ok, "the replaced block is invalid")

	v, ent, err = r.tab.SearchEntry(ctx, key(1))
	require.NoError(t, err)
	require.Equal(t, uint64(2), unval(v))
	require.NoError(t, c.tab.Delete(ctx, key(1)))
	_, ok, err = r.tab.SearchCached(ctx, key(1), ent)
	require.NoError(t, err)
	require.False(t, ok, "a deleted key's block is invalid")

	// A block reused at the same address, for the same key, valid: another stamp.
	stale := ent
	stale.Stamp++
	require.NoError(t, c.tab.Insert(ctx, key(1), val(3, 40)))
	_, ent2, err := r.tab.SearchEntry(ctx, key(1))
	require.NoError(t, err)
	stale.Word = ent2.Word
	_, ok, err = r.tab.SearchCached(ctx, key(1), stale)
	require.NoError(t, err)
	require.False(t, ok, "another stamp at the address is another block")
	_, ok, err = r.tab.SearchCached(ctx, key(1), ent2)
	require.NoError(t, err)
	require.True(t, ok)
}

// TestDeleteLease: a delete under a lease leaves a tombstone that no insert reuses before the
// lease (with drift and skew) has run out, and that inserts reuse afterwards.
func TestDeleteLease(t *testing.T) {
	ctx := context.Background()
	// One bucket group of one slot per bucket: three slots, so a key's candidates are few.
	e := newEnv(t, local.Options{}, race.Params{Groups: 1, SlotsPerBucket: 1, MaxDepth: 1})
	const lease = 300 * time.Millisecond
	c := e.open(t, 0, race.Options{DeleteLease: lease})
	var keys [][]byte
	for i := range uint64(64) {
		if err := c.tab.Insert(ctx, key(i), val(i, 8)); err == nil {
			keys = append(keys, key(i))
		}
	}
	require.NotEmpty(t, keys)
	// Delete every key: each slot becomes a tombstone.
	start := c.m.Runtime().Now()
	for _, k := range keys {
		require.NoError(t, c.tab.Delete(ctx, k))
	}
	census := audit(t, c, true)
	require.Zero(t, census.Keys)
	// While the lease runs, no slot is free: an insert of a new key finds the subtable full at
	// its maximum depth.
	err := c.tab.Insert(ctx, key(1000), val(1, 8))
	if c.m.Runtime().Now().Sub(start) < lease {
		require.ErrorIs(t, err, race.ErrFull, "a tombstone under its lease is not reused")
	}
	require.NoError(t, c.m.Runtime().Sleep(ctx, lease+10*time.Millisecond))
	require.NoError(t, c.tab.Insert(ctx, key(1000), val(1, 8)), "the lease has run out")
	got, err := c.tab.Search(ctx, key(1000))
	require.NoError(t, err)
	require.Equal(t, uint64(1), unval(got))
}

// TestTombstoneWord: the tombstone's encoding.
func TestTombstoneWord(t *testing.T) {
	at := farmem.Time(1_700_000_000_123_456_789)
	w := race.MakeTombstone(at)
	require.True(t, w.Tombstone())
	require.True(t, w.Empty())
	require.False(t, w.Committed())
	require.GreaterOrEqual(t, int64(w.ReusableAt()), int64(at))
	require.Less(t, int64(w.ReusableAt()-at), int64(1<<16))
	require.False(t, race.Slot(0).Tombstone())
	require.True(t, (w | race.SlotFrozen).Tombstone())
}

// TestResolve: a slot-resolved lookup names the key's slot and word, and writes the new block
// in its first round trip.
func TestResolve(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, local.Options{}, race.Params{Groups: 8, InitialDepth: 2})
	c := e.open(t, 0, race.Options{})
	l := c.tab.Layout()
	require.Equal(t, 4, l.Partitions())
	require.NoError(t, c.tab.Insert(ctx, key(7), val(7, 16)))
	before := c.m.Stats()
	r, err := c.tab.Resolve(ctx, key(7), val(8, 16))
	require.NoError(t, err)
	require.Equal(t, uint64(2), c.m.Stats().Sub(before).RoundTrips, "write ∥ buckets, then the key's block")
	require.GreaterOrEqual(t, r.Key, 0)
	require.True(t, r.New.Committed())
	pl := l.Place(key(7))
	require.Equal(t, pl.Candidates, r.Index)
	require.True(t, l.Covers(r.Header, pl.H1))
	require.Equal(t, pl.FP, r.Words[r.Key].Fingerprint())
	require.NoError(t, c.tab.FreeBlock(r.New))

	parts, err := race.ReadPartition(ctx, c.m, c.tab.Root(), l.PartitionOf(key(7)))
	require.NoError(t, err)
	require.Len(t, parts, 1)
	require.Equal(t, r.Subtable, parts[0].Addr)
	require.Equal(t, r.Words[r.Key], parts[0].Words[r.Index[r.Key]])
	_, err = race.ReadPartition(ctx, c.m, c.tab.Root(), 4)
	require.ErrorIs(t, err, farmem.ErrInvalid)
}

// TestReplicatedBlocks: with Params.Replicas every KV block is written to that many memory
// nodes at one offset, in the round trip that writes it (the costs do not change), every copy
// valid for its own address and holding the same pair; readers use the primary.
func TestReplicatedBlocks(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, local.Options{Shape: local.Shape{MemoryNodes: 3, ComputeNodes: 1, MemorySize: 32 << 20}}, race.Params{Groups: 8, Replicas: 3})
	c := e.open(t, 0, race.Options{})
	require.Equal(t, 3, c.tab.Params().Replicas)
	for i := range uint64(20) {
		require.NoError(t, c.tab.Insert(ctx, key(i), val(i, 40)))
	}
	before := c.m.Stats()
	require.NoError(t, c.tab.Update(ctx, key(3), val(33, 40)))
	d := c.m.Stats().Sub(before)
	require.Equal(t, uint64(race.UpdateRoundTrips), d.RoundTrips, "the copies ride in the block's round trip")
	require.Equal(t, uint64(3), d.Verbs[farmem.TargetMemory][farmem.OpWrite], "three copies of the new block")
	nodes := e.f.Topology().MemoryNodes()
	for i := range uint64(20) {
		want := i
		if i == 3 {
			want = 33
		}
		_, ent, err := c.tab.SearchEntry(ctx, key(i))
		require.NoError(t, err)
		seen := map[farmem.NodeID]bool{}
		for _, n := range nodes {
			a := farmem.MakeAddr(n, ent.Word.Addr().Offset())
			b := make([]byte, ent.Word.Size())
			require.NoError(t, c.m.Read(ctx, a, b))
			blk, err := race.DecodeBlock(a, b)
			require.NoError(t, err, "key %d on %v", i, n)
			require.Equal(t, key(i), blk.Key)
			require.Equal(t, want, unval(blk.Value))
			require.Equal(t, ent.Stamp, blk.Stamp)
			seen[n] = true
		}
		require.Len(t, seen, 3)
	}
	// Deletes and updates retire all copies through the symmetric area; the table stays sound.
	for i := range uint64(20) {
		require.NoError(t, c.tab.Delete(ctx, key(i)))
	}
	census := audit(t, c, true)
	require.Zero(t, census.Keys)
}

// TestFinishSplits: a split moved region by region stops half done when its client stops
// inserting; ReadPartition refuses its partition (the new half, in no directory entry yet,
// holds some of its keys) until FinishSplits ends it, and then returns every key.
func TestFinishSplits(t *testing.T) {
	e := newEnv(t, local.Options{}, race.Params{Groups: 8, InitialDepth: 1})
	c := e.open(t, 0, race.Options{})
	ctx := context.Background()
	var n uint64
	for ; c.tab.Stats().Moves < 2; n++ {
		require.Less(t, n, uint64(5000), "no split began")
		require.NoError(t, c.tab.Insert(ctx, key(n), val(n, 8)))
	}
	require.Equal(t, 1, audit(t, c, true).Moving)
	busy := 0
	for p := range 2 {
		if _, err := race.ReadPartition(ctx, c.m, e.root, p); err != nil {
			require.ErrorIs(t, err, race.ErrBusy)
			busy++
		}
	}
	require.Equal(t, 1, busy, "partitions refused with a split in progress")

	ended, err := c.tab.FinishSplits(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, ended)
	census := audit(t, c, true)
	require.Zero(t, census.Moving)
	require.Equal(t, int(n), census.Keys)
	keys := 0
	for p := range 2 {
		subs, err := race.ReadPartition(ctx, c.m, e.root, p)
		require.NoError(t, err, "partition %d", p)
		for _, s := range subs {
			for _, w := range s.Words {
				if w.Committed() {
					keys++
				}
			}
		}
	}
	require.Equal(t, int(n), keys, "keys in the partitions read")
	for i := range n {
		v, err := c.tab.Search(ctx, key(i))
		require.NoError(t, err)
		require.Equal(t, i, unval(v))
	}
	ended, err = c.tab.FinishSplits(ctx)
	require.NoError(t, err)
	require.Zero(t, ended)
}
