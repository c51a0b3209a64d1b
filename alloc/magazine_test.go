package alloc

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/farmem/farmem/farmem"
	"github.com/farmem/farmem/farmem/local"
)

// magBlocks returns the blocks in the magazines of a's arenas.
func magBlocks(a *Allocator) map[farmem.Addr]bool {
	out := map[farmem.Addr]bool{}
	for _, n := range a.nodes {
		for _, m := range a.arenas[n].mag {
			for _, off := range m {
				out[farmem.MakeAddr(n, off)] = true
			}
		}
	}
	return out
}

// A lone writer that replaces its blocks (allocate, retire the old one, one pinned section
// per update) reuses them through the magazine: no block is handed out while it is live,
// the heap stops growing once the backlog scans run, and the magazine is what they feed.
func TestMagazineLoneWriter(t *testing.T) {
	ctx := context.Background()
	c := epochCluster(t)
	w, _ := c.allocator(t, 0, Options{Lease: time.Hour, Refresh: time.Minute})

	const keys = 64
	live := map[farmem.Addr]int{} // block -> key
	cur := make([]farmem.Addr, keys)
	for k := range keys {
		p, err := w.Alloc(ctx, 200, 64)
		require.NoError(t, err)
		require.NotContains(t, live, p)
		live[p], cur[k] = k, p
	}
	fromMag := 0
	var chunksAfterWarmup uint64
	for i := range 40 * scanBacklog {
		k := i % keys
		require.NoError(t, w.Pin(ctx))
		var top farmem.Addr // the block the magazine would hand out
		if m := w.arenas[w.order[0]].mag[classOf(200)]; len(m) > 0 {
			top = farmem.MakeAddr(w.order[0], m[len(m)-1])
		}
		p, err := w.Alloc(ctx, 200, 64)
		require.NoError(t, err)
		if _, ok := live[p]; ok || p.Offset()%64 != 0 {
			t.Fatalf("update %d: %v handed out while live, or not aligned as asked", i, p)
		}
		if p == top {
			fromMag++
		}
		require.NoError(t, w.Retire(ctx, cur[k], 200))
		delete(live, cur[k])
		live[p], cur[k] = k, p
		require.NoError(t, w.Unpin())
		if i == 10*scanBacklog {
			chunksAfterWarmup = w.Stats().Chunks
		}
	}
	require.Greater(t, fromMag, 20*scanBacklog, "most updates reuse a block through the magazine")
	require.Equal(t, chunksAfterWarmup, w.Stats().Chunks, "the steady state claims no chunk")
	require.Less(t, w.Stats().Pending, 4*scanBacklog)
}

// A block in the magazine is only ever one the epochs allow: blocks retired while another
// client is pinned stay out of it (and are never handed out) until that client leaves, and
// blocks retired in the writer's own current section stay out until the section ends.
func TestMagazineRespectsEpochs(t *testing.T) {
	ctx := context.Background()
	c := epochCluster(t)
	long := Options{Lease: time.Hour, Refresh: time.Minute}
	w, _ := c.allocator(t, 0, long)
	r, _ := c.allocator(t, 1, long)

	// Blocks retired while r is pinned.
	require.NoError(t, r.Pin(ctx))
	held := map[farmem.Addr]bool{}
	for range 3 * scanBacklog {
		require.NoError(t, w.Pin(ctx))
		p, err := w.Alloc(ctx, 64, 0)
		require.NoError(t, err)
		if held[p] {
			t.Fatalf("%v, which r may still read, was handed out", p)
		}
		require.NoError(t, w.Retire(ctx, p, 64))
		held[p] = true
		require.NoError(t, w.Unpin())
	}
	_, err := w.scan(ctx)
	require.NoError(t, err)
	for p := range magBlocks(w) {
		require.NotContains(t, held, p, "in the magazine while r is pinned")
	}
	// The writer's own section: what it retires in it stays out of the magazine.
	require.NoError(t, r.Unpin())
	require.NoError(t, r.Quiesce(ctx))
	require.NoError(t, w.Pin(ctx))
	mine, err := w.Alloc(ctx, 64, 0)
	require.NoError(t, err)
	require.NoError(t, w.Retire(ctx, mine, 64))
	n, err := w.scan(ctx)
	require.NoError(t, err)
	require.Equal(t, len(held), n, "r gone: the blocks of ended sections")
	mag := magBlocks(w)
	require.NotContains(t, mag, mine, "retired in the current section")
	for p := range held {
		require.Contains(t, mag, p)
	}
	// Each comes back once.
	seen := map[farmem.Addr]bool{}
	for range len(held) {
		p, err := w.Alloc(ctx, 64, 0)
		require.NoError(t, err)
		require.NotEqual(t, mine, p)
		require.False(t, seen[p], "handed out twice")
		require.True(t, held[p], "the magazine first")
		seen[p] = true
	}
	require.Empty(t, magBlocks(w))
	require.NoError(t, w.Unpin())
}

// Blocks in the magazine count as free for coalescing: a chunk whose blocks all came back
// through it is rebuilt for another size class and given back to the node's pool, and a
// misaligned block at the top of the magazine is not handed out to an aligned request.
func TestMagazineCoalesces(t *testing.T) {
	ctx := context.Background()
	c := epochCluster(t)
	w, _ := c.allocator(t, 0, Options{Lease: time.Hour, Refresh: time.Minute})
	const size = 48 // 48-byte blocks: every other one is 32-aligned, one in four 64-aligned
	ar := w.arenas[w.order[0]]
	var ps []farmem.Addr
	for range 4 * ar.chunk / size {
		p, err := w.Alloc(ctx, size, 0)
		require.NoError(t, err)
		ps = append(ps, p)
	}
	for _, p := range ps {
		require.NoError(t, w.Retire(ctx, p, size))
	}
	n, err := w.Reclaim(ctx)
	require.NoError(t, err)
	require.Equal(t, len(ps), n)
	// Reclaim coalesced what it made reusable: whole chunks left the magazine and the lists.
	st := w.Stats()
	require.GreaterOrEqual(t, st.Coalesced, uint64(3))
	require.Empty(t, magBlocks(w), "settled before the pass")
	require.GreaterOrEqual(t, st.Pooled, uint64(2), "whole chunks beyond one went to the pool")

	// Aligned requests skip a misaligned magazine top.
	var more []farmem.Addr
	for range 8 {
		p, err := w.Alloc(ctx, size, 0)
		require.NoError(t, err)
		more = append(more, p)
	}
	for _, p := range more {
		require.NoError(t, w.Retire(ctx, p, size))
	}
	_, err = w.scan(ctx)
	require.NoError(t, err)
	require.Len(t, magBlocks(w), len(more))
	for range 4 {
		p, err := w.Alloc(ctx, size, 64)
		require.NoError(t, err)
		require.Zero(t, p.Offset()%64)
	}
}

// Close hands the magazine's blocks over with the free blocks, and Absorb moves them: none is
// lost and none is held twice.
func TestMagazineHandedOver(t *testing.T) {
	ctx := context.Background()
	c := handoverCluster(t)
	a, m := c.allocator(t, 0, Options{Lease: time.Hour, Refresh: time.Minute})
	var ps []farmem.Addr
	for range 100 {
		p, err := a.Alloc(ctx, 128, 0)
		require.NoError(t, err)
		ps = append(ps, p)
	}
	for _, p := range ps[:50] {
		require.NoError(t, a.Retire(ctx, p, 128))
	}
	_, err := a.scan(ctx)
	require.NoError(t, err)
	require.Len(t, magBlocks(a), 50)

	// Absorb: the magazine's blocks become b's free blocks.
	b, _ := c.allocator(t, 1, Options{})
	require.NoError(t, b.Absorb(a))
	require.Empty(t, magBlocks(a))
	got := map[farmem.Addr]bool{}
	for range 50 {
		p, err := b.Alloc(ctx, 128, 0)
		require.NoError(t, err)
		require.False(t, got[p], "handed out twice")
		got[p] = true
	}
	for _, p := range ps[:50] {
		require.True(t, got[p], "absorbed")
	}

	// Close: the magazine's blocks are in the record, and the successor reuses them.
	for _, p := range ps[50:] {
		require.NoError(t, a.Retire(ctx, p, 128))
	}
	_, err = a.scan(ctx)
	require.NoError(t, err)
	require.Len(t, magBlocks(a), 50)
	m2 := c.successor(t, a, m)
	chunks := c.bumps(t, m2) // Close may claim a chunk to store its record in
	a2, err := New(ctx, m2, Options{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = a2.Close() })
	require.NoError(t, a2.Adopted().Err)
	got = map[farmem.Addr]bool{}
	for range 50 {
		p, err := a2.Alloc(ctx, 128, 0)
		require.NoError(t, err)
		require.False(t, got[p], "handed out twice")
		got[p] = true
	}
	back := 0
	for _, p := range ps[50:] {
		if got[p] {
			back++
		}
	}
	// The record itself is stored in some of the blocks it describes; the rest come back.
	require.GreaterOrEqual(t, back, 40, "the magazine's blocks were handed over")
	require.Equal(t, chunks, c.bumps(t, m2), "no chunk claimed by the successor: the handed-over blocks sufficed")
}

// A scan honours a live announcement in every slot of the table, wherever it is among empty
// ones (the scan tests eight empty slots at once), the last slots of a table whose size is no
// multiple of eight included.
func TestScanSeesEverySlot(t *testing.T) {
	ctx := context.Background()
	c := newCluster(t, local.Options{Shape: local.Shape{MemoryNodes: 1, MemorySize: 4 << 20, ComputeNodes: 1, ClientsPerNode: 16}},
		FormatOptions{ChunkSize: 16 << 10, MaxClients: 11})
	w, m := c.allocator(t, 0, Options{Lease: time.Hour, Refresh: time.Minute})
	require.Equal(t, 11, w.slots)
	for slot := range w.slots {
		if slot+1 == int(w.id) {
			continue
		}
		p, err := w.Alloc(ctx, 64, 0)
		require.NoError(t, err)
		g := globalEpoch(t, m, w)
		// Another client, pinned before the unlink and behind the global epoch: it could
		// reach p, and the epoch may not advance past it.
		require.Positive(t, g)
		word := encodeSlot(g-1, c.f.Runtime().Now().Add(time.Hour))
		at := w.tableAddr.Add(8 * uint64(slot))
		_, err = m.CAS(ctx, at, 0, word)
		require.NoError(t, err)
		require.NoError(t, w.Retire(ctx, p, 64))
		n, err := w.scan(ctx)
		require.NoError(t, err)
		require.Zero(t, n, "slot %d holds the block back", slot+1)
		require.Equal(t, g, globalEpoch(t, m, w), "slot %d holds the epoch back", slot+1)
		_, err = m.CAS(ctx, at, word, 0)
		require.NoError(t, err)
		n, err = w.scan(ctx)
		require.NoError(t, err)
		require.Equal(t, 1, n, "slot %d withdrawn", slot+1)
	}
}

// fits, Retire's inlined test, accepts exactly the blocks check accepts.
func TestFitsIsCheck(t *testing.T) {
	st := &Stats{}
	for _, ar := range []*arena{
		newArena("n", false, farmem.MakeAddr(1, offBump), 0x10000, 0x50000, 0x4000, st),
		newArena("sym", true, farmem.MakeAddr(1, offSymBump), 0x8000, 0x8000, 0x4000, st), // empty
	} {
		edges := []uint64{0, 1, 15, 16, 17, 0x2000, 0x2001, 0x4000, 0x8000, 0x10000, 0x3fff0, 0x40000, 0x4fff0, 0x50000, 0x50010, 1 << 63, ^uint64(0)}
		for _, off := range edges {
			for _, size := range edges {
				for _, d := range []uint64{0, 16, 0x4000} {
					o := off + d
					require.Equal(t, ar.check(o, size) == nil, ar.fits(o, size), "%s: off %#x size %#x", ar.name, o, size)
				}
			}
		}
	}
}

// A scan files every reusable block in the magazine of its node and class, whatever the order
// of sizes and nodes in the retired list (runs, interleavings, sizes that share a class), and
// large blocks among them with the free runs.
func TestMagazineFilesByNodeAndClass(t *testing.T) {
	ctx := context.Background()
	c := handoverCluster(t)
	a, _ := c.allocator(t, 0, Options{Lease: time.Hour, Refresh: time.Minute})
	sizes := []uint64{64, 64, 64, 1000, 1010, 64, 1000, 3000, 48, 20 << 10, 64}
	type blk struct {
		p    farmem.Addr
		size uint64
	}
	var bs []blk
	for round := range 3 {
		for i, s := range sizes {
			n := c.mem[(i+round)%len(c.mem)]
			p, err := a.AllocOn(ctx, n, s, 0)
			require.NoError(t, err)
			bs = append(bs, blk{p, s})
		}
	}
	for _, b := range bs {
		require.NoError(t, a.Retire(ctx, b.p, b.size))
	}
	n, err := a.scan(ctx)
	require.NoError(t, err)
	require.Equal(t, len(bs), n)
	want := map[farmem.Addr]int{} // small block -> class
	large := 0
	for _, b := range bs {
		if b.size > a.arenas[b.p.Node()].maxSmall {
			large++
			continue
		}
		want[b.p] = classOf(b.size)
	}
	got := map[farmem.Addr]int{}
	for _, node := range a.nodes {
		for cl, m := range a.arenas[node].mag {
			for _, off := range m {
				p := farmem.MakeAddr(node, off)
				require.NotContains(t, got, p, "filed twice")
				got[p] = cl
			}
		}
	}
	require.Equal(t, want, got)
	require.Positive(t, large)
	runs := 0
	for _, node := range a.nodes {
		for _, offs := range a.arenas[node].large {
			runs += len(offs)
		}
	}
	require.Equal(t, large, runs)
}

// plainMemory hides its Memory's optional interfaces (farmem.Restarts, ForgetAtomic), as a
// transport without them (cxl) has none.
type plainMemory struct{ farmem.Memory }

// Alloc's inline path (a transport with neither restarts nor ForgetAtomic) hands out the
// magazine's blocks like takeAny would, and keeps every check: a closed allocator, a bad
// request and Options.Admit are still refused, and Admit is still asked every time.
func TestMagazineInlinePath(t *testing.T) {
	ctx := context.Background()
	c := epochCluster(t)
	m := plainMemory{c.client(t, 0)}
	admitted := 0
	refuse := false
	admit := func(uint64) error {
		admitted++
		if refuse {
			return farmem.ErrNoSpace
		}
		return nil
	}
	w, err := New(ctx, m, Options{Lease: time.Hour, Refresh: time.Minute, Admit: admit})
	require.NoError(t, err)
	require.False(t, w.restartable)
	require.Nil(t, w.forgetFn)
	plain, err := New(ctx, plainMemory{c.client(t, 1)}, Options{Lease: time.Hour, Refresh: time.Minute})
	require.NoError(t, err)

	for _, a := range []*Allocator{w, plain} {
		const keys = 32
		live := map[farmem.Addr]bool{}
		cur := make([]farmem.Addr, keys)
		for k := range cur {
			p, err := a.Alloc(ctx, 300, 64)
			require.NoError(t, err)
			live[p], cur[k] = true, p
		}
		fromMag := 0
		for i := range 8 * scanBacklog {
			k := i % keys
			at, err := a.PinCoarse(ctx)
			require.NoError(t, err)
			var top farmem.Addr
			if mg := a.arenas[a.order[0]].mag[classOf(300)]; len(mg) > 0 {
				top = farmem.MakeAddr(a.order[0], mg[len(mg)-1])
			}
			p, err := a.Alloc(ctx, 300, 64)
			require.NoError(t, err)
			if live[p] || p.Offset()%64 != 0 {
				t.Fatalf("update %d: %v handed out while live, or not aligned as asked", i, p)
			}
			if p == top {
				fromMag++
			}
			require.NoError(t, a.RetireAt(ctx, cur[k], 300, at))
			delete(live, cur[k])
			live[p], cur[k] = true, p
			require.NoError(t, a.UnpinSeen())
		}
		require.Greater(t, fromMag, 4*scanBacklog)
		// Its standing announcement would hold back what the next client retires.
		require.NoError(t, a.Quiesce(ctx))
	}
	require.Equal(t, int(w.Stats().Allocs), admitted, "Admit asked at every allocation")

	// The checks still hold with a full magazine.
	_, err = plain.Alloc(ctx, 300, 48)
	require.ErrorIs(t, err, farmem.ErrInvalid)
	_, err = plain.Alloc(ctx, 0, 0)
	require.ErrorIs(t, err, farmem.ErrInvalid)
	refuse = true
	_, err = w.Alloc(ctx, 300, 64)
	require.ErrorIs(t, err, ErrRefused)
	require.NoError(t, plain.Close())
	_, err = plain.Alloc(ctx, 300, 64)
	require.ErrorIs(t, err, farmem.ErrClosed)
	require.NoError(t, w.Close())
}
