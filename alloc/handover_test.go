package alloc

import (
	"context"
	"encoding/binary"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/farmem/farmem/farmem"
	"github.com/farmem/farmem/farmem/local"
)

func handoverCluster(t testing.TB) *testCluster {
	return newCluster(t, local.Options{Shape: local.Shape{MemoryNodes: 2, MemorySize: 8 << 20, ComputeNodes: 2, ClientsPerNode: 16}},
		FormatOptions{ChunkSize: 16 << 10, SymmetricSize: 256 << 10})
}

// successor closes a and its client m, and opens the client that takes m's client id next
// (on the same compute node: the lowest free slot, which m's was). It does not open an
// allocator, so that New's cost can be measured.
func (c *testCluster) successor(t *testing.T, a *Allocator, m farmem.Memory) farmem.Memory {
	t.Helper()
	if a != nil {
		require.NoError(t, a.Close())
	}
	require.NoError(t, m.Close())
	m2, err := c.f.Open(context.Background(), m.Info().Node)
	require.NoError(t, err)
	t.Cleanup(func() { _ = m2.Close() })
	require.Equal(t, m.Info().ID, m2.Info().ID, "client ids are reused")
	return m2
}

// bumps reads every node's bump word and the symmetric bump word.
func (c *testCluster) bumps(t *testing.T, m farmem.Memory) []uint64 {
	var out []uint64
	for _, n := range c.mem {
		h := c.header(t, m, n)
		out = append(out, h.Bump, h.SymBump)
	}
	return out
}

// handWord reads client id's handover word on the home node.
func handWord(t *testing.T, m farmem.Memory, home farmem.NodeID, id farmem.ClientID) uint64 {
	t.Helper()
	b := make([]byte, 8)
	require.NoError(t, m.Read(context.Background(), farmem.MakeAddr(home, HandoverOffset+8*uint64(id)), b))
	return binary.LittleEndian.Uint64(b)
}

// peekRecord reads and decodes the record a handover word names, with client m.
func peekRecord(t *testing.T, m farmem.Memory, w uint64) (recordHead, *handover) {
	t.Helper()
	ctx := context.Background()
	head, read := unpackWord(w)
	buf := make([]byte, read)
	require.NoError(t, m.Read(ctx, head, buf))
	rh, err := decodeHead(buf)
	require.NoError(t, err)
	for _, s := range rh.segs {
		p := make([]byte, s.n)
		require.NoError(t, m.Read(ctx, s.addr, p))
		buf = append(buf, p...)
	}
	rh, h, err := decodeRecord(buf, int(read))
	require.NoError(t, err)
	return rh, h
}

// closeAndPeek closes a (of client m) and returns Close's cost, and the word and record it
// published, read by spy.
func closeAndPeek(t *testing.T, a *Allocator, m, spy farmem.Memory) (farmem.Stats, uint64, recordHead, *handover) {
	t.Helper()
	s := m.Stats()
	require.NoError(t, a.Close())
	d := m.Stats().Sub(s)
	w := handWord(t, spy, a.Home(), m.Info().ID)
	require.NotZero(t, w)
	rh, rec := peekRecord(t, spy, w)
	return d, w, rh, rec
}

// adopter opens client m's allocator (with default options) and returns it with New's cost.
func adopter(t *testing.T, m farmem.Memory) (*Allocator, farmem.Stats) {
	t.Helper()
	s := m.Stats()
	b, err := New(context.Background(), m, Options{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = b.Close() })
	return b, m.Stats().Sub(s)
}

type sized struct {
	p    farmem.Addr
	size uint64
}

// workload allocates many blocks of many sizes (some symmetric), frees about half, retires a
// quarter, and returns what it freed and retired.
func workload(t *testing.T, a *Allocator, m farmem.Memory, n int) (freed, retiredBlocks []sized, symFreed []uint64) {
	ctx := context.Background()
	rng := m.Runtime().NewRand()
	var live []sized
	for i := range n {
		size := []uint64{16, 24, 64, 100, 256, 700, 3000}[rng.IntN(7)]
		if i%97 == 0 {
			size = 20 << 10 // a run of two chunks
		}
		p, err := a.Alloc(ctx, size, 0)
		require.NoError(t, err)
		live = append(live, sized{p, size})
		if i%50 == 0 {
			o, err := a.AllocSymmetric(ctx, 64, 0)
			require.NoError(t, err)
			require.NoError(t, a.FreeSymmetric(o, 64))
			symFreed = append(symFreed, 64)
		}
	}
	for i, b := range live {
		switch {
		case i%4 == 1:
			require.NoError(t, a.Retire(ctx, b.p, b.size))
			retiredBlocks = append(retiredBlocks, b)
		case i%2 == 0:
			require.NoError(t, a.Free(b.p, b.size))
			freed = append(freed, b)
		}
	}
	return freed, retiredBlocks, symFreed
}

// A client allocates, frees and retires many blocks and closes; the next client with its id
// adopts everything and allocates the same total without claiming a single chunk. Close costs
// one round trip, New two.
func TestHandoverAdopt(t *testing.T) {
	ctx := context.Background()
	c := handoverCluster(t)
	a, m := c.allocator(t, 0, Options{})
	freed, retiredBlocks, symFreed := workload(t, a, m, 3000)
	require.Equal(t, len(retiredBlocks), a.Stats().Pending)
	chunks := a.Stats().Chunks
	spy := c.client(t, 1)
	before := c.bumps(t, spy)

	d, w, rh, rec := closeAndPeek(t, a, m, spy)
	require.Equal(t, uint64(m.Info().ID), rh.client)
	_, read := unpackWord(w)
	t.Logf("record: %d-byte body, head read %d, %d more segments", rh.bodyLen, read, len(rh.segs))
	require.Empty(t, rh.segs, "the record fits one block the allocator held")
	require.Len(t, rec.retired, len(retiredBlocks))
	require.Equal(t, uint64(CloseRoundTrips), d.RoundTrips, "Close: one batch")
	require.Equal(t, uint64(1+len(rh.segs)), d.VerbsOf(farmem.OpWrite), "one Write per segment")
	require.Equal(t, uint64(1), d.VerbsOf(farmem.OpMaskedCAS), "the announcement withdrawn")
	require.Equal(t, uint64(1), d.VerbsOf(farmem.OpCAS), "the record published")
	require.Equal(t, uint64(3+len(rh.segs)), d.TotalVerbs())
	require.Equal(t, uint64(1), a.Stats().HandedOver)
	require.Equal(t, before, c.bumps(t, spy), "the record is stored in blocks the allocator held")
	require.NoError(t, a.Close(), "idempotent")

	m2 := c.successor(t, nil, m)
	b, d := adopter(t, m2)
	ad := b.Adopted()
	require.NoError(t, ad.Err)
	require.Equal(t, 1, ad.Records)
	require.Equal(t, len(retiredBlocks), ad.Retired)
	require.Equal(t, len(retiredBlocks), b.Stats().Pending)
	require.Zero(t, ad.Relayed)
	require.Zero(t, handWord(t, spy, b.Home(), m2.Info().ID), "the word is cleared")
	rtts := uint64(NewAdoptRoundTrips)
	if len(rh.segs) > 0 {
		rtts = NewAdoptSegmentsRoundTrips
	}
	require.Equal(t, rtts, d.RoundTrips, "New: headers and word, then take and head, then segments")
	require.Equal(t, uint64(len(c.mem)+2+len(rh.segs)), d.VerbsOf(farmem.OpRead))
	require.Equal(t, uint64(1), d.VerbsOf(farmem.OpCAS))
	require.Equal(t, uint64(len(c.mem)+3+len(rh.segs)), d.TotalVerbs())

	// No reader: every retired block is reusable at the first scan.
	n, err := b.Reclaim(ctx)
	require.NoError(t, err)
	require.Equal(t, len(retiredBlocks), n)
	s := m2.Stats()
	reg := newRegistry()
	for _, blk := range append(freed, retiredBlocks...) {
		p, err := b.Alloc(ctx, blk.size, 0)
		require.NoError(t, err)
		require.NoError(t, reg.add(p.Node(), p.Offset(), b.arenaOfTest(p).blockSize(blk.size)))
	}
	for range symFreed {
		o, err := b.AllocSymmetric(ctx, 64, 0)
		require.NoError(t, err)
		require.NoError(t, reg.add(0, uint64(o), 64))
	}
	// And the tails of the closed allocator's chunks, in 16-byte blocks.
	tails := uint64(0)
	for _, n := range c.mem {
		tails += b.arenas[n].end - b.arenas[n].cur
	}
	for range tails / 16 {
		p, err := b.Alloc(ctx, 16, 0)
		require.NoError(t, err)
		require.NoError(t, reg.add(p.Node(), p.Offset(), 16))
	}
	require.Zero(t, m2.Stats().Sub(s).VerbsOf(farmem.OpFAA), "no chunk claimed")
	require.Zero(t, b.Stats().Chunks)
	require.Equal(t, before, c.bumps(t, spy), "bump words unchanged")
	require.NotZero(t, chunks)
}

func (a *Allocator) arenaOfTest(p farmem.Addr) *arena { return a.arenas[p.Node()] }

// The same cycle without a handover to adopt costs New one round trip, and a deliberately
// broken Close (that publishes nothing) is caught: the successor has to claim chunks.
func TestHandoverCatchesLoss(t *testing.T) {
	ctx := context.Background()
	c := handoverCluster(t)
	a, m := c.allocator(t, 0, Options{})
	_, err := a.Alloc(ctx, 64, 0)
	require.NoError(t, err)
	a.handAddr = a.handAddr.Add(8 * 1000) // sabotage: publish in a slot nobody reads
	m2 := c.successor(t, a, m)
	b, d := adopter(t, m2)
	require.Equal(t, uint64(NewRoundTrips), d.RoundTrips, "nothing to adopt")
	require.Equal(t, uint64(len(c.mem)+1), d.TotalVerbs())
	require.Zero(t, b.Adopted().Records)
	_, err = b.Alloc(ctx, 64, 0)
	require.NoError(t, err)
	require.Equal(t, uint64(1), b.Stats().Chunks, "what the closed allocator held was lost")
}

// Retired blocks handed over keep their tags: the adopter does not reuse them while a reader
// that was pinned before their retirement stalls, and does once it moves on.
func TestHandoverRetiredWaitsForEpoch(t *testing.T) {
	ctx := context.Background()
	b, r, retiredAt, rt := retiredUnderReader(t, 20)
	require.Equal(t, 20, b.Adopted().Retired)
	for range 20 {
		require.NoError(t, rt.Sleep(ctx, 3*time.Millisecond))
		require.NoError(t, b.Pin(ctx))
		x, err := b.Alloc(ctx, 64, 0)
		require.NoError(t, err)
		require.False(t, retiredAt[x], "%v reused while a reader stalls", x)
		require.NoError(t, b.Free(x, 64))
		require.NoError(t, b.Unpin())
		n, err := b.Reclaim(ctx)
		require.NoError(t, err)
		require.Zero(t, n)
	}
	require.Equal(t, 20, b.Stats().Pending)

	require.NoError(t, r.Unpin())
	for round := 0; b.Stats().Pending > 0; round++ {
		require.Less(t, round, 100, "never reclaimed")
		require.NoError(t, rt.Sleep(ctx, 3*time.Millisecond))
		require.NoError(t, b.Pin(ctx))
		require.NoError(t, b.Unpin())
		_, err := b.Reclaim(ctx)
		require.NoError(t, err)
	}
	got := 0
	for range 40 {
		x, err := b.Alloc(ctx, 64, 0)
		require.NoError(t, err)
		if retiredAt[x] {
			got++
		}
	}
	require.Equal(t, 20, got, "every retired block comes back")
}

// The check above is not vacuous: an adopter that dropped the tags (took the handed-over
// retired blocks as reusable at once) reuses them while the reader stalls.
func TestHandoverCatchesDroppedTags(t *testing.T) {
	ctx := context.Background()
	b, _, _, _ := retiredUnderReader(t, 5)
	n, err := b.Reclaim(ctx)
	require.NoError(t, err)
	require.Zero(t, n, "tags kept")
	for i := range b.ep.retired {
		b.ep.retired[i].tag = 0 // sabotage
	}
	n, err = b.Reclaim(ctx)
	require.NoError(t, err)
	require.Equal(t, 5, n, "dropped tags: reused under a stalled reader")
}

// retiredUnderReader has a reader pin (and stall), a writer allocate and retire n blocks and
// close, and the writer's successor adopt them; it returns the adopter, the reader, the retired
// blocks and the runtime.
func retiredUnderReader(t *testing.T, n int) (*Allocator, *Allocator, map[farmem.Addr]bool, farmem.Runtime) {
	ctx := context.Background()
	c := handoverCluster(t)
	opts := Options{Lease: time.Minute, Refresh: 2 * time.Millisecond}
	w, mw := c.allocator(t, 0, opts)
	r, _ := c.allocator(t, 1, opts)
	require.NoError(t, r.Pin(ctx))
	retiredAt := map[farmem.Addr]bool{}
	for range n {
		require.NoError(t, w.Pin(ctx))
		x, err := w.Alloc(ctx, 64, 0)
		require.NoError(t, err)
		require.False(t, retiredAt[x])
		retiredAt[x] = true
		require.NoError(t, w.Retire(ctx, x, 64))
		require.NoError(t, w.Unpin())
	}
	b, err := New(ctx, c.successor(t, w, mw), opts)
	require.NoError(t, err)
	t.Cleanup(func() { _ = b.Close() })
	require.NoError(t, b.Adopted().Err)
	return b, r, retiredAt, mw.Runtime()
}

// A record too large for one block spills over several segments (New: one more round trip),
// and one no held block can store is written into chunks claimed for it (Close: one FAA
// more). Nothing is dropped either way.
func TestHandoverSpills(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name  string
		keep  int // 512-byte blocks kept free, scattered: storage for the record
		claim bool
	}{
		{"segments", 14, false},
		{"claimed chunks", 0, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newCluster(t, local.Options{Shape: local.Shape{MemoryNodes: 1, MemorySize: 8 << 20, ComputeNodes: 1, ClientsPerNode: 16}},
				FormatOptions{ChunkSize: 4 << 10, SymmetricSize: 64 << 10})
			a, m := c.allocator(t, 0, Options{})
			// Isolated 16-byte free blocks: every one costs the record two bytes.
			var small []farmem.Addr
			for range 8 * (4 << 10) / 16 {
				p, err := a.Alloc(ctx, 16, 0)
				require.NoError(t, err)
				small = append(small, p)
			}
			var big []farmem.Addr
			for range 2 * tc.keep {
				p, err := a.Alloc(ctx, 512, 0)
				require.NoError(t, err)
				big = append(big, p)
			}
			// Fill the current chunk's tail so nothing larger is held.
			for a.arenas[c.mem[0]].end-a.arenas[c.mem[0]].cur >= 16 {
				_, err := a.Alloc(ctx, 16, 0)
				require.NoError(t, err)
			}
			for i, p := range small {
				if i%2 == 0 {
					require.NoError(t, a.Free(p, 16))
				}
			}
			for i, p := range big {
				if i%2 == 0 {
					require.NoError(t, a.Free(p, 512))
				}
			}
			spy := c.client(t, 0)
			before := c.bumps(t, spy)
			d, _, rh, rec := closeAndPeek(t, a, m, spy)
			if tc.claim {
				require.Equal(t, uint64(RecordClaimRoundTrips+CloseRoundTrips), d.RoundTrips, "a claim, then the batch")
				require.Equal(t, uint64(1), d.VerbsOf(farmem.OpFAA))
				require.NotEqual(t, before, c.bumps(t, spy))
			} else {
				require.Equal(t, uint64(CloseRoundTrips), d.RoundTrips)
				require.Zero(t, d.VerbsOf(farmem.OpFAA))
				require.Equal(t, before, c.bumps(t, spy))
				require.Greater(t, len(rh.segs), 3, "spread over several blocks")
			}
			require.Equal(t, uint64(1+len(rh.segs)), d.VerbsOf(farmem.OpWrite))
			blocks := 0
			for _, s := range rec.arenas {
				for _, runs := range s.small {
					for _, r := range runs {
						blocks += int(r.n)
					}
				}
			}
			require.GreaterOrEqual(t, blocks, len(small)/2, "every isolated block is in the record")

			m2 := c.successor(t, nil, m)
			b, d := adopter(t, m2)
			require.NoError(t, b.Adopted().Err)
			rtts := uint64(NewAdoptRoundTrips)
			if len(rh.segs) > 0 {
				rtts = NewAdoptSegmentsRoundTrips
			}
			require.Equal(t, rtts, d.RoundTrips)
			require.Equal(t, uint64(len(c.mem)+2+len(rh.segs)), d.VerbsOf(farmem.OpRead))
			// Every isolated block comes back without a claim.
			after := c.bumps(t, spy)
			for range len(small) / 2 {
				_, err := b.Alloc(ctx, 16, 0)
				require.NoError(t, err)
			}
			require.Zero(t, b.Stats().Chunks)
			require.Equal(t, after, c.bumps(t, spy))
		})
	}
}

// Free blocks that are contiguous coalesce into runs: thousands of freed blocks make a record
// of a few bytes, read in the least head read.
func TestHandoverCoalesces(t *testing.T) {
	ctx := context.Background()
	c := handoverCluster(t)
	a, m := c.allocator(t, 0, Options{})
	var ps []farmem.Addr
	for range 4096 {
		p, err := a.Alloc(ctx, 64, 0)
		require.NoError(t, err)
		ps = append(ps, p)
	}
	for _, p := range ps {
		require.NoError(t, a.Free(p, 64))
	}
	spy := c.client(t, 1)
	require.NoError(t, a.Close())
	w := handWord(t, spy, a.Home(), m.Info().ID)
	_, read := unpackWord(w)
	require.Equal(t, uint64(minHeadRead), read)
	rh, _ := peekRecord(t, spy, w)
	require.Less(t, rh.bodyLen, uint64(64), "4096 blocks in a few runs")
	b, err := New(ctx, c.successor(t, a, m), Options{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = b.Close() })
	require.GreaterOrEqual(t, b.Adopted().Blocks, 4096)
}

// A corrupt record does not fail New: it is reported, adopted in no part, and its word
// cleared; so is a word naming no memory.
func TestHandoverCorrupt(t *testing.T) {
	ctx := context.Background()
	c := handoverCluster(t)
	a, m := c.allocator(t, 0, Options{})
	_, _, _ = workload(t, a, m, 200)
	spy := c.client(t, 1)
	require.NoError(t, a.Close())
	w := handWord(t, spy, a.Home(), m.Info().ID)
	head, _ := unpackWord(w)
	// Flip a byte of the body.
	buf := make([]byte, 1)
	at := head.Add(prefixFixed + 5)
	require.NoError(t, spy.Read(ctx, at, buf))
	buf[0] ^= 0x40
	require.NoError(t, spy.Write(ctx, at, buf))

	m2 := c.successor(t, a, m)
	b, err := New(ctx, m2, Options{})
	require.NoError(t, err)
	require.ErrorIs(t, b.Adopted().Err, ErrBadHandover)
	require.ErrorIs(t, b.Adopted().Err, farmem.ErrInvalid)
	require.Zero(t, b.Adopted().Records)
	require.Zero(t, b.Adopted().Blocks)
	require.Zero(t, handWord(t, spy, b.Home(), m2.Info().ID))
	_, err = b.Alloc(ctx, 64, 0)
	require.NoError(t, err, "the allocator works")
	require.NoError(t, b.Close())

	// A word naming an address past the node's end.
	m3 := c.successor(t, nil, m2)
	cur := handWord(t, spy, b.Home(), m3.Info().ID)
	_, err = spy.CAS(ctx, farmem.MakeAddr(b.Home(), HandoverOffset+8*uint64(m3.Info().ID)), cur, uint64(farmem.MakeAddr(b.Home(), 8<<20-16)))
	require.NoError(t, err)
	b3, err := New(ctx, m3, Options{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = b3.Close() })
	require.ErrorIs(t, b3.Adopted().Err, ErrBadHandover)
	require.Zero(t, handWord(t, spy, b.Home(), m3.Info().ID))
}

// Two allocators of one client id that both close chain their records; the next New adopts
// both. A second New finds the word taken and adopts nothing (the CAS makes adoption
// exclusive).
func TestHandoverChainAndExclusive(t *testing.T) {
	ctx := context.Background()
	c := handoverCluster(t)
	a1, m := c.allocator(t, 0, Options{})
	a2, err := New(ctx, m, Options{})
	require.NoError(t, err)
	_, _, _ = workload(t, a1, m, 100)
	_, _, _ = workload(t, a2, m, 100)
	require.NoError(t, a1.Close())
	s := m.Stats()
	require.NoError(t, a2.Close())
	d := m.Stats().Sub(s)
	require.Equal(t, uint64(CloseRoundTrips+ChainRoundTrips), d.RoundTrips, "the batch, then the next word, then the CAS")
	require.Equal(t, uint64(1), a2.Stats().HandedOver)

	m2 := c.successor(t, nil, m)
	b1, err := New(ctx, m2, Options{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = b1.Close() })
	require.NoError(t, b1.Adopted().Err)
	require.Equal(t, 2, b1.Adopted().Records)
	require.Equal(t, 25+25, b1.Adopted().Retired)

	b2, err := New(ctx, m2, Options{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = b2.Close() })
	require.Zero(t, b2.Adopted().Records)
	require.NoError(t, b2.Adopted().Err)
}

// Blocks on nodes outside the adopter's set are kept and handed over again: an allocator that
// works on one node relays the rest, and the next one with every node adopts it all.
func TestHandoverRelays(t *testing.T) {
	ctx := context.Background()
	c := handoverCluster(t)
	a, m := c.allocator(t, 0, Options{})
	var ps []farmem.Addr
	for _, n := range c.mem {
		for range 10 {
			p, err := a.AllocOn(ctx, n, 128, 0)
			require.NoError(t, err)
			ps = append(ps, p)
		}
	}
	for _, p := range ps {
		require.NoError(t, a.Retire(ctx, p, 128))
	}
	m2 := c.successor(t, a, m)
	b, err := New(ctx, m2, Options{Nodes: c.mem[:1]})
	require.NoError(t, err)
	ad := b.Adopted()
	require.NoError(t, ad.Err)
	require.Positive(t, ad.Relayed)
	require.Equal(t, 10, ad.Retired, "the retired blocks of the allocator's node: %+v", ad)
	m3 := c.successor(t, b, m2)
	b3, err := New(ctx, m3, Options{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = b3.Close() })
	require.NoError(t, b3.Adopted().Err)
	require.Zero(t, b3.Adopted().Relayed)
	require.Equal(t, 20, b3.Adopted().Retired)
	require.Greater(t, b3.Adopted().Bytes, ad.Bytes, "and the relayed blocks")
	other := b3.arenas[c.mem[1]]
	require.True(t, other.end > other.cur || len(other.free[classOf(128)][0])+len(other.free[classOf(128)][1])+len(other.free[classOf(128)][2]) > 0,
		"the relayed node's blocks came back")
}

func TestHandoverBodyRoundTrip(t *testing.T) {
	h := sampleHandover()
	b := encodeBody(h)
	got, err := decodeBody(b)
	require.NoError(t, err)
	require.Equal(t, b, encodeBody(got))
	require.Equal(t, h.retired, got.retired)
	require.Len(t, got.arenas, len(h.arenas))
	for i := range h.arenas {
		require.Equal(t, h.arenas[i].small, got.arenas[i].small)
		require.Equal(t, h.arenas[i].spare, got.arenas[i].spare)
		require.Equal(t, h.arenas[i].cur, got.arenas[i].cur)
	}
	for i := range b {
		_, err := decodeBody(b[:i])
		require.ErrorIs(t, err, ErrBadHandover, "truncated at %d", i)
	}
}

func sampleHandover() *handover {
	return &handover{
		arenas: []arenaState{
			{node: 1, cur: 0x20000, end: 0x24000, spare: []uint64{0x40000, 0x30000},
				large:  []blockRun{{0x50000, 3}},
				ranges: []blockRun{{0x60010, 0x1230}},
				small:  map[int][]blockRun{3: coalesce([]uint64{0x21000, 0x21040, 0x21080, 0x22000}, 64), 20: {{0x23000, 2}}}},
			{node: 0, small: map[int][]blockRun{0: {{0x10000, 1}}}},
		},
		retired: []retiredState{{node: 1, off: 0x70000, size: 100, tag: 7}, {node: 0, off: 0x10100, size: 16, tag: 1 << 40}},
	}
}

func sampleRecord() ([]byte, int) {
	body := encodeBody(sampleHandover())
	rec := append(encodePrefix(5, nil, body, 0), body...)
	return rec, minHeadRead
}

// Decoders of records never panic; what they accept re-encodes to the same bytes; what they
// refuse is ErrBadHandover. A body that decodes is checked against real headers and, if it
// passes, adopted by a fresh allocator: neither panics.
func FuzzHandover(f *testing.F) {
	ctx := context.Background()
	c := handoverCluster(f)
	m := c.client(f, 0)
	hdrs := map[farmem.NodeID]Header{}
	for _, n := range c.mem {
		hdrs[n] = c.header(f, m, n)
	}
	rec, read := sampleRecord()
	f.Add(rec, uint16(read))
	f.Add(rec[:40], uint16(read))
	f.Add(encodeBody(sampleHandover()), uint16(0))
	f.Add([]byte{1, 1, 0, 0, 0, 0, 0, 0, 0, 0}, uint16(0))
	f.Fuzz(func(t *testing.T, b []byte, read uint16) {
		if _, h, err := decodeRecord(b, int(read)); err != nil {
			require.ErrorIs(t, err, ErrBadHandover)
		} else {
			require.NotNil(t, h)
		}
		if _, err := decodeHead(b); err != nil {
			require.ErrorIs(t, err, ErrBadHandover)
		}
		h, err := decodeBody(b)
		if err != nil {
			require.ErrorIs(t, err, ErrBadHandover)
			return
		}
		again, err := decodeBody(encodeBody(h))
		require.NoError(t, err)
		require.Equal(t, encodeBody(h), encodeBody(again))
		a, err := New(ctx, m, Options{})
		require.NoError(t, err)
		if err := a.checkHandover(h, hdrs, map[farmem.NodeID][]span{}); err != nil {
			require.ErrorIs(t, err, ErrBadHandover)
			return
		}
		a.apply(h, &a.adoption)
	})
}

// A record that cannot be read (its node unreachable) is put back for a later New.
func TestHandoverPutBack(t *testing.T) {
	ctx := context.Background()
	c := handoverCluster(t)
	far, home := c.mem[1], c.mem[0]
	a, m := c.allocator(t, 0, Options{Nodes: []farmem.NodeID{far}})
	_, err := a.Alloc(ctx, 64, 0)
	require.NoError(t, err)
	spy := c.client(t, 1)
	require.NoError(t, a.Close())
	w := handWord(t, spy, home, m.Info().ID)
	head, _ := unpackWord(w)
	require.Equal(t, far, head.Node(), "the record is on the far node")

	m2 := c.successor(t, nil, m)
	require.NoError(t, c.f.Partition(m2.Info().ID, far))
	b, err := New(ctx, m2, Options{Nodes: []farmem.NodeID{home}})
	require.NoError(t, err)
	require.ErrorIs(t, b.Adopted().Err, farmem.ErrNodeDown)
	require.Zero(t, b.Adopted().Records)
	require.Equal(t, w, handWord(t, spy, home, m2.Info().ID), "put back")
	require.NoError(t, c.f.Heal(m2.Info().ID, far))
	b2, err := New(ctx, m2, Options{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = b2.Close() })
	require.NoError(t, b2.Adopted().Err)
	require.Equal(t, 1, b2.Adopted().Records)
}
