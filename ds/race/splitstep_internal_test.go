package race

import (
	"context"
	"encoding/binary"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/farmem/farmem/alloc"
	"github.com/farmem/farmem/farmem"
	"github.com/farmem/farmem/farmem/farmemtest"
	"github.com/farmem/farmem/farmem/local"
	"github.com/farmem/farmem/internal/dstest"
)

// stepRoundTrips is what a step moving a region costs uncontended, both halves on one memory
// node: the lock's CAS with the header area's read, the freeze, the heads of its committed
// blocks, the copies with the bit, the release with the unlock (the bit has a round trip of
// its own when the halves are on two nodes).
const stepRoundTrips = 5

// TestRegionSplitRoundTrips stops a table's first split (layout version 4, eight regions) half
// way, then asserts exact round trips: a step moving a region; and, from a fresh handle, a
// Search of each key: 2 when the old half owns it, 1 more when one or both of its regions
// moved (the new half's buckets), and 1 more for the first such search (the child word, then
// cached).
func TestRegionSplitRoundTrips(t *testing.T) {
	ctx := context.Background()
	// The allocator's lease refreshed every second: a pin never renews it inside a measured
	// operation (as TestRoundTrips' allocators).
	_, m, a, _, tab := regionTable(t, local.Options{Shape: local.Shape{MemorySize: 16 << 20}, Strict: true})
	keys := insertUntil(t, tab, "key-%d", []byte("v"), 1000, func() bool { return tab.stats.Moves >= 3 })
	require.Zero(t, tab.stats.Splits, "the split ended")
	st := tab.pending
	require.NotZero(t, st)

	before := m.Stats()
	held, more, err := tab.stepSplit(ctx, st, stepOne, nil, false, 0)
	require.NoError(t, err)
	require.True(t, held && more)
	require.Equal(t, uint64(4), tab.stats.Moves)
	d := m.Stats().Sub(before)
	t.Logf("step: %d round trips, %d verbs", d.RoundTrips, d.TotalVerbs())
	require.Equal(t, uint64(stepRoundTrips), d.RoundTrips, "a step")

	b, err := Open(ctx, m, a, tab.root, Options{})
	require.NoError(t, err)
	hb := make([]byte, lookupHeaderLen)
	require.NoError(t, m.Read(ctx, st, hb))
	hdr, move := binary.LittleEndian.Uint64(hb), binary.LittleEndian.Uint64(hb[stMoveOff:])
	seen := map[ownership]int{}
	hopped := false
	for _, k := range keys {
		op := b.newOp(k)
		if b.subtableFor(op.k.h1) != st {
			continue
		}
		kr := b.keyRegions(op)
		o := owner(hdr, move, op.k.h1, kr[0], kr[1])
		want := uint64(SearchRoundTrips)
		if o != ownsAll {
			want++
			if !hopped {
				want++ // the child word, once
				hopped = true
			}
		}
		before := m.Stats()
		v, err := b.Search(ctx, k)
		require.NoError(t, err, "key %s", k)
		require.Equal(t, "v", string(v))
		require.Equal(t, want, m.Stats().Sub(before).RoundTrips, "search of %s (%v)", k, o)
		seen[o]++
	}
	t.Logf("keys by ownership (all %d, moved %d, mixed %d)", seen[ownsAll], seen[ownsMoved], seen[ownsMixed])
	require.NotZero(t, seen[ownsAll])
	require.NotZero(t, seen[ownsMoved])
	require.NotZero(t, seen[ownsMixed])
	require.Equal(t, uint64(seen[ownsMixed]), b.stats.MixedReads)
}

// TestRegionSplitForeignHalf: a new half whose unmoved region holds neither unborn words nor
// copies (as an empty subtable written over it would) makes the step that moves that region
// fail with ErrCorrupt and release the lock, rather than leave the lock held and retry forever.
func TestRegionSplitForeignHalf(t *testing.T) {
	ctx := context.Background()
	tab, m := localTable(t, Params{Groups: 4, SlotsPerBucket: 4})
	insertUntil(t, tab, "key-%d", []byte("v"), 1000, func() bool { return tab.stats.Moves >= 1 })
	st := tab.pending
	s, err := tab.readSubtable(ctx, st, false)
	require.NoError(t, err)
	d := headerDepth(s.hdr)
	s1 := unpackAddr(s.child[d])
	// Empty every unmoved region of the half, as a fresh subtable would be.
	for r := range uint(tab.geo.regions()) {
		if moveBits(s.move)>>r&1 == 1 {
			continue
		}
		lo, hi := tab.geo.regionSlots(r)
		require.NoError(t, m.Write(ctx, tab.geo.slotAddr(s1, lo), make([]byte, 8*(hi-lo))))
	}
	var lastErr error
	for range 8 {
		_, _, err := tab.stepSplit(ctx, st, stepOne, nil, false, 0)
		if err != nil {
			lastErr = err
			break
		}
	}
	require.ErrorIs(t, lastErr, ErrCorrupt)
	var lb [8]byte
	require.NoError(t, m.Read(ctx, st.Add(stLockOff), lb[:]))
	require.Zero(t, binary.LittleEndian.Uint64(lb[:]), "split lock left held")
}

// TestPurgeLostHalf: a memory node holding the new half of a split in progress (and nothing
// else of the table's index) restarts empty and is adopted; Purge replaces the half with one
// the split can go on into, reporting it lost, and ends the split. Then every key not on the
// lost node is found, inserts go on, and Audit passes.
func TestPurgeLostHalf(t *testing.T) {
	ctx := context.Background()
	// Small nodes and large values: the first node fills, and later subtables and blocks go
	// to the second.
	f, m, a, root, tab := regionTable(t, local.Options{Shape: local.Shape{MemoryNodes: 2, MemorySize: 2 << 20}})
	// Insert until a split in progress has its new half alone on a node other than the
	// allocator's home and the root's (and with a region moved).
	var keys [][]byte
	var st, s1 farmem.Addr
	for i := 0; st == 0; i++ {
		require.Less(t, i, 20000, "no split with its new half alone on another node")
		k := fmt.Appendf(nil, "key-%d", i)
		require.NoError(t, tab.Insert(ctx, k, make([]byte, 600)))
		keys = append(keys, k)
		if tab.pending == 0 {
			continue
		}
		s, err := tab.readSubtable(ctx, tab.pending, false)
		require.NoError(t, err)
		if !s.splitting() || moveBits(s.move) == 0 {
			continue
		}
		c := unpackAddr(s.child[headerDepth(s.hdr)])
		if c.Node() != a.Home() && c.Node() != root.Node() && tab.pending.Node() != c.Node() && unpackAddr(tab.dirWord).Node() != c.Node() {
			st, s1 = tab.pending, c
		}
	}
	lostNode := s1.Node()
	require.NoError(t, f.Restart(lostNode))
	require.NoError(t, f.Adopt(ctx, lostNode))
	require.NoError(t, alloc.Reformat(ctx, m, a.Home(), lostNode))
	rep, err := tab.Purge(ctx, lostNode)
	require.NoError(t, err)
	require.Len(t, rep.Subtables, 1)
	require.Equal(t, s1, rep.Subtables[0].Addr)
	t.Logf("purged: %d entries, %d subtables", len(rep.Entries), len(rep.Subtables))
	// Purge ended the split, into the replacement.
	require.Equal(t, 1, rep.Finished)
	s, err := tab.readSubtable(ctx, st, false)
	require.NoError(t, err)
	require.False(t, s.splitting(), "the split of %v was left half done", st)
	for i := range 200 {
		k := fmt.Appendf(nil, "more-%d", i)
		require.NoError(t, tab.Insert(ctx, k, []byte("v")))
		keys = append(keys, k)
	}
	lost := 0
	for _, k := range keys {
		if _, err := tab.Search(ctx, k); err != nil {
			require.ErrorIs(t, err, ErrNotFound, "key %s", k)
			lost++
		}
	}
	census, err := tab.Audit(ctx)
	require.NoError(t, err)
	require.Zero(t, census.Frozen)
	t.Logf("%d keys of %d not found (on the lost node or moved into the lost half)", lost, len(keys))
}

// TestPurgeLostOldHalf: a memory node holding the old half of a split in progress (and not
// its new half, nor the root, directory or allocator home) restarts empty and is adopted.
//
//   - split half done: the new half, reachable only through the lost half's child word, is
//     lost with its keys; every key Search no longer finds is covered by the report (its
//     block was on the node, or a lost subtable's depth and suffix cover its hash), the keys
//     moved into the new half among them.
//   - split published, its tail not run (the holder stopped after moving the old header):
//     the new half stays in the directory with its keys, and Purge clears its parent lock,
//     which only the lost half's split would have cleared (it fails without that).
//
// Both end with no split in progress and a clean Audit.
func TestPurgeLostOldHalf(t *testing.T) {
	for _, published := range []bool{false, true} {
		t.Run(fmt.Sprintf("published=%v", published), func(t *testing.T) { purgeLostOldHalf(t, published) })
	}
}

func purgeLostOldHalf(t *testing.T, published bool) {
	ctx := context.Background()
	f, m, a, root, tab := regionTable(t, local.Options{Shape: local.Shape{MemoryNodes: 3, MemorySize: 4 << 20}})
	mns := f.Topology().MemoryNodes()
	require.Equal(t, mns[0], a.Home())
	// Two more handles, placing everything they allocate on the second memory node (the one
	// that restarts) and on the third: the first splits the table onto the second, the other
	// then begins splits of those subtables, whose new halves land on the third.
	open := func(node farmem.NodeID) *Table { // (directories still go to the root's node)
		mx, err := f.Open(ctx, f.Topology().ComputeNodes()[0])
		require.NoError(t, err)
		t.Cleanup(func() { _ = mx.Close() })
		o := dstest.AllocOptions
		o.Nodes = []farmem.NodeID{node, root.Node()}
		if (mx.Info().ID-1)%2 == 1 { // the client's preferred node is Nodes[(id-1) % 2]
			o.Nodes[0], o.Nodes[1] = o.Nodes[1], o.Nodes[0]
		}
		ax, err := alloc.New(ctx, mx, o)
		require.NoError(t, err)
		tx, err := Open(ctx, mx, ax, root, Options{})
		require.NoError(t, err)
		return tx
	}
	onLost, onThird := open(mns[1]), open(mns[2])
	keys := insertUntil(t, onLost, "a-%d", []byte("on the lost node"), 5000, func() bool { return onLost.stats.Splits >= 3 })
	_, err := onLost.FinishSplits(ctx)
	require.NoError(t, err)
	var st, s1 farmem.Addr
	for i := 0; st == 0; i++ {
		require.Less(t, i, 5000, "no split of a subtable on the lost node")
		k := fmt.Appendf(nil, "b-%d", i)
		require.NoError(t, onThird.Insert(ctx, k, []byte("on the third node")))
		keys = append(keys, k)
		if p := onThird.pending; p != 0 && p.Node() == mns[1] {
			s, err := onThird.readSubtable(ctx, p, false)
			require.NoError(t, err)
			if s.splitting() && moveBits(s.move) != 0 {
				st, s1 = p, unpackAddr(s.child[headerDepth(s.hdr)])
			}
		}
	}
	require.Equal(t, mns[2], s1.Node())
	require.NotEqual(t, mns[1], root.Node())
	require.NoError(t, tab.refreshAll(ctx))
	require.NotEqual(t, mns[1], unpackAddr(tab.dirWord).Node())
	lostNode := st.Node()
	// Where every key is, and which of them the new half holds (with a block elsewhere).
	locs := make(map[string]Location)
	inHalf := 0
	for _, k := range keys {
		loc, err := tab.Locate(ctx, k)
		require.NoError(t, err)
		locs[string(k)] = loc
		if loc.Subtable == s1 && loc.Block.Node() != lostNode {
			inHalf++
		}
	}
	require.NotZero(t, inHalf, "no key moved into the new half")
	s, err := tab.readSubtable(ctx, st, false)
	require.NoError(t, err)
	d, suffix := headerDepth(s.hdr), headerSuffix(s.hdr)
	if published {
		// Every region, the directory and the old header, as the split's end does, but not
		// its tail: the new half keeps its parent lock.
		sm := takeSplitMem(&tab.geo)
		word, held, s, _, err := tab.lockStep(ctx, st, sm)
		require.NoError(t, err)
		require.True(t, held)
		for rest := tab.geo.allRegions() &^ moveBits(s.move); rest != 0; rest = tab.geo.allRegions() &^ moveBits(s.move) {
			require.NoError(t, tab.moveRegion(ctx, s, s1, lowestBit(rest), &word, sm, false))
		}
		require.NoError(t, tab.publishAndDeepen(ctx, st, s1, d, suffix, &word))
		require.NoError(t, tab.unlock(ctx, st.Add(stLockOff), word))
		giveSplitMem(sm)
	}
	require.NoError(t, f.Restart(lostNode))
	require.NoError(t, f.Adopt(ctx, lostNode))
	require.NoError(t, alloc.Reformat(ctx, m, a.Home(), lostNode))
	rep, err := tab.Purge(ctx, lostNode)
	require.NoError(t, err)
	var lostSt *LostSubtable
	for i := range rep.Subtables {
		if rep.Subtables[i].Addr == st {
			lostSt = &rep.Subtables[i]
		}
	}
	require.NotNil(t, lostSt, "the old half is reported lost")
	covered := func(k []byte) bool {
		h1 := tab.newOp(k).k.h1
		for _, ls := range rep.Subtables {
			if h1&(1<<ls.Depth-1) == ls.Suffix {
				return true
			}
		}
		return false
	}
	lostHalf, foundHalf := 0, 0
	for _, k := range keys {
		loc := locs[string(k)]
		v, err := tab.Search(ctx, k)
		if err != nil {
			require.ErrorIs(t, err, ErrNotFound, "key %s", k)
			require.True(t, loc.Block.Node() == lostNode || covered(k), "key %s (slot in %v, block %v) lost, unreported", k, loc.Subtable, loc.Block)
			if loc.Subtable == s1 && loc.Block.Node() != lostNode {
				lostHalf++
			}
			continue
		}
		require.NotEmpty(t, v)
		if loc.Subtable == s1 {
			foundHalf++
		}
	}
	if published {
		require.Equal(t, d+1, lostSt.Depth)
		require.Zero(t, lostHalf, "keys of the published half lost")
		require.Equal(t, inHalf, foundHalf)
		var lb [8]byte
		require.NoError(t, m.Read(ctx, s1.Add(stLockOff), lb[:]))
		require.Zero(t, binary.LittleEndian.Uint64(lb[:]), "the published half keeps its parent lock")
	} else {
		require.Equal(t, d, lostSt.Depth)
		require.Equal(t, inHalf, lostHalf, "keys moved into the new half")
	}
	for i := range 300 {
		require.NoError(t, tab.Insert(ctx, fmt.Appendf(nil, "more-%d", i), []byte("v")))
	}
	census, err := tab.Audit(ctx)
	require.NoError(t, err)
	require.Zero(t, census.Frozen)
	t.Logf("%d keys of the new half lost, %d found; %d entries and %d subtables reported", lostHalf, foundHalf, len(rep.Entries), len(rep.Subtables))
}

// TestInsertRetractsBesideFrozenRegion: an insert whose re-read after its tentative CAS finds
// a slot of its other bucket frozen (a region split freezing the other bucket's region, not its
// own) retracts its tentative slot before it waits: the split will not drop it, and the
// insert's next try would otherwise meet its own tentative slot as a competitor and remove it,
// after waiting out its lease when it lies lower (Stats.Kills counts that).
func TestInsertRetractsBesideFrozenRegion(t *testing.T) {
	ctx := context.Background()
	f, m, _, root, tab := regionTable(t, local.Options{})
	m2, err := f.Open(ctx, f.Topology().ComputeNodes()[0])
	require.NoError(t, err)
	t.Cleanup(func() { _ = m2.Close() })
	a2, err := alloc.New(ctx, m2, dstest.AllocOptions)
	require.NoError(t, err)
	var hook func(v farmemtest.Verb)
	ip := &farmemtest.Interposer{Memory: m2, Before: func(_ context.Context, v farmemtest.Verb) {
		if hook != nil {
			hook(v)
		}
	}}
	tab2, err := Open(ctx, ip, a2, root, Options{})
	require.NoError(t, err)
	// A key whose two buckets lie in two regions.
	var key []byte
	var op *opState
	for i := 0; ; i++ {
		key = fmt.Appendf(nil, "key-%d", i)
		op = tab2.newOp(key)
		if r := tab2.keyRegions(op); r[0] != r[1] {
			break
		}
	}
	st := unpackAddr(tab.dir[0])
	froze := false
	hook = func(v farmemtest.Verb) {
		for _, o := range v.Batch.Ops {
			if o.Kind != farmem.OpCAS || o.Cmp != 0 || Slot(o.Swap)&SlotTentative == 0 {
				continue
			}
			i := (uint64(o.Addr) - uint64(tab.geo.slotAddr(st, 0))) / 8
			// Freeze a slot of the other bucket, as a split moving that region would.
			other := op.ranges[0]
			if i >= op.ranges[0] && i < op.ranges[0]+2*tab.geo.perB {
				other = op.ranges[1]
			}
			_, err := m.MaskedCAS(ctx, tab.geo.slotAddr(st, other+2*tab.geo.perB-1), 0, 0, uint64(SlotFrozen), uint64(SlotFrozen))
			require.NoError(t, err)
			hook, froze = nil, true
		}
	}
	require.NoError(t, tab2.Insert(ctx, key, []byte("v")))
	require.True(t, froze, "no tentative CAS seen")
	require.Zero(t, tab2.stats.Kills, "the insert removed its own tentative slot")
	got, err := tab.Search(ctx, key)
	require.NoError(t, err)
	require.Equal(t, "v", string(got))
	census, err := tab.Audit(ctx)
	require.NoError(t, err)
	require.Zero(t, census.Tentative)
	require.Zero(t, census.Frozen)
}

// TestDeferredBeginStaysInPartition: a split begin a handle deferred (the subtable's lock was
// busy) is not made by its next insert into another partition, which a proxy may have taken
// over meanwhile (kvstore's FlexKV: no split may begin under a proxy); an insert into the same
// partition makes it.
func TestDeferredBeginStaysInPartition(t *testing.T) {
	ctx := context.Background()
	tab, _ := localTable(t, Params{Groups: 8, InitialDepth: 1})
	keyIn := func(p uint64, from int) ([]byte, int) {
		for i := from; ; i++ {
			k := fmt.Appendf(nil, "key-%d", i)
			if tab.newOp(k).k.h1&1 == p {
				return k, i + 1
			}
		}
	}
	st0 := unpackAddr(tab.dir[0])
	s, err := tab.readSubtable(ctx, st0, false)
	require.NoError(t, err)
	defer0 := func() { tab.pending, tab.pendingBegin, tab.pendingHdr = st0, true, s.hdr }
	defer0()
	k, next := keyIn(1, 0)
	require.NoError(t, tab.Insert(ctx, k, []byte("v")))
	require.Zero(t, tab.stats.Begins, "a split of partition 0 began in an insert into partition 1")
	require.Zero(t, tab.pending)
	defer0()
	k, _ = keyIn(0, next)
	require.NoError(t, tab.Insert(ctx, k, []byte("v")))
	require.Equal(t, uint64(1), tab.stats.Begins, "the insert into partition 0 begins it")
}

// regionTable creates a table of 8 bucket groups split region by region on a fresh local
// fabric of lo (closed at cleanup), formatted, and opens it on the first compute node's memory
// with an allocator of dstest.AllocOptions; it returns them all, the table's root too.
func regionTable(t *testing.T, lo local.Options) (*local.Fabric, farmem.Memory, *alloc.Allocator, farmem.Addr, *Table) {
	t.Helper()
	ctx := context.Background()
	f, err := local.New(lo)
	require.NoError(t, err)
	t.Cleanup(func() { _ = f.Close() })
	m, err := f.Open(ctx, f.Topology().ComputeNodes()[0])
	require.NoError(t, err)
	require.NoError(t, alloc.FormatAll(ctx, m, alloc.FormatOptions{}))
	a, err := alloc.New(ctx, m, dstest.AllocOptions)
	require.NoError(t, err)
	root, err := Create(ctx, m, a, Params{Groups: 8})
	require.NoError(t, err)
	tab, err := Open(ctx, m, a, root, Options{})
	require.NoError(t, err)
	return f, m, a, root, tab
}

// insertUntil inserts keys named by format (with their index) holding value into tab until
// done reports true, failing the test after limit of them, and returns the keys inserted.
func insertUntil(t *testing.T, tab *Table, format string, value []byte, limit int, done func() bool) [][]byte {
	t.Helper()
	var keys [][]byte
	for i := 0; !done(); i++ {
		require.Less(t, i, limit, "the condition never held")
		k := fmt.Appendf(nil, format, i)
		require.NoError(t, tab.Insert(context.Background(), k, value))
		keys = append(keys, k)
	}
	return keys
}
