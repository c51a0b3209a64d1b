package alloc

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/farmem/farmem/farmem"
	"github.com/farmem/farmem/farmem/local"
)

// The cost the package doc states: a small allocation claims one chunk with one FAA per
// ChunkSize/classSize allocations and costs nothing else; frees and re-allocations from the
// free lists cost no verb at all.
func TestAllocCostAmortized(t *testing.T) {
	ctx := context.Background()
	c := newCluster(t, local.Options{Shape: local.Shape{MemoryNodes: 2, MemorySize: 16 << 20}}, FormatOptions{ChunkSize: 64 << 10})
	m := c.client(t, 0)
	before := m.Stats()
	a, err := New(ctx, m, Options{})
	require.NoError(t, err)
	d := m.Stats().Sub(before)
	require.Equal(t, uint64(NewRoundTrips), d.RoundTrips, "New reads every header and the handover word in one batch")
	require.Equal(t, uint64(3), d.VerbsOf(farmem.OpRead))
	require.Equal(t, uint64(3), d.TotalVerbs())
	const perChunk = (64 << 10) / 64
	const n = 8 * perChunk
	addrs := make([]farmem.Addr, 0, n)
	before = m.Stats()
	for range n {
		p, err := a.Alloc(ctx, 64, 0)
		require.NoError(t, err)
		addrs = append(addrs, p)
	}
	d = m.Stats().Sub(before)
	require.Equal(t, uint64(n/perChunk), d.VerbsOf(farmem.OpFAA), "one FAA per %d allocations", perChunk)
	require.Equal(t, uint64(n/perChunk), d.TotalVerbs(), "and no other verb")
	require.Equal(t, uint64(n/perChunk*ChunkClaimRoundTrips), d.RoundTrips)
	require.Equal(t, uint64(n/perChunk), a.Stats().Chunks)

	// Each FAA claims the next chunk of the preferred node, in order.
	pref := a.nodes[a.pref]
	h := c.header(t, m, pref)
	require.Equal(t, h.HeapBase+uint64(n/perChunk)*h.ChunkSize, h.Bump)
	for i, p := range addrs {
		require.Equal(t, pref, p.Node())
		require.Equal(t, h.HeapBase+uint64(i)*64, p.Offset())
	}

	before = m.Stats()
	for _, p := range addrs {
		require.NoError(t, a.Free(p, 64))
	}
	for range n {
		_, err := a.Alloc(ctx, 64, 0)
		require.NoError(t, err)
	}
	require.Zero(t, m.Stats().Sub(before).TotalVerbs(), "free and reuse cost no verb")
	require.Equal(t, uint64(n/perChunk), a.Stats().Chunks)

	before = m.Stats()
	require.NoError(t, a.Close())
	d = m.Stats().Sub(before)
	require.Equal(t, uint64(1), d.TotalVerbs(), "holding nothing, Close only withdraws the announcement")
	require.Equal(t, uint64(1), d.VerbsOf(farmem.OpMaskedCAS))
	require.Equal(t, uint64(CloseRoundTrips), d.RoundTrips)
	require.Zero(t, a.Stats().HandedOver)
}

func TestAllocInvalid(t *testing.T) {
	ctx := context.Background()
	c := newCluster(t, local.Options{Shape: local.Shape{MemorySize: 4 << 20}}, FormatOptions{})
	a, _ := c.allocator(t, 0, Options{})
	for _, r := range [][2]uint64{{0, 0}, {8, 3}, {8, 128}, {1 << 50, 0}} {
		_, err := a.Alloc(ctx, r[0], r[1])
		require.ErrorIs(t, err, farmem.ErrInvalid, "size %d align %d", r[0], r[1])
	}
	p, err := a.Alloc(ctx, 100, 0)
	require.NoError(t, err)
	require.ErrorIs(t, a.Free(p.Add(8), 100), farmem.ErrInvalid, "misaligned")
	require.ErrorIs(t, a.Free(farmem.MakeAddr(1, 64), 16), farmem.ErrInvalid, "header")
	require.ErrorIs(t, a.Free(farmem.MakeAddr(7, 1<<20), 16), farmem.ErrInvalid, "no such node")
	require.ErrorIs(t, a.Free(p, 0), farmem.ErrInvalid)
	_, err = a.AllocOn(ctx, 9, 16, 0)
	require.ErrorIs(t, err, farmem.ErrInvalid)
	require.ErrorIs(t, a.Unpin(), farmem.ErrInvalid)

	require.NoError(t, a.Close())
	require.NoError(t, a.Close(), "idempotent")
	_, err = a.Alloc(ctx, 16, 0)
	require.ErrorIs(t, err, farmem.ErrClosed)
	require.ErrorIs(t, a.Free(p, 100), farmem.ErrClosed)
}

func TestAlignment(t *testing.T) {
	ctx := context.Background()
	c := newCluster(t, local.Options{Shape: local.Shape{MemorySize: 8 << 20}}, FormatOptions{ChunkSize: 16 << 10})
	a, m := c.allocator(t, 0, Options{})
	rng := m.Runtime().NewRand()
	type blk struct {
		p    farmem.Addr
		size uint64
	}
	var live []blk
	for i := range 5000 {
		if len(live) > 0 && rng.IntN(3) == 0 {
			k := rng.IntN(len(live))
			require.NoError(t, a.Free(live[k].p, live[k].size))
			live[k] = live[len(live)-1]
			live = live[:len(live)-1]
			continue
		}
		size := uint64(1 + rng.IntN(300))
		if i%50 == 0 {
			size = uint64(9<<10 + rng.IntN(20<<10)) // large: whole chunks
		}
		align := []uint64{0, 1, 8, 16, 32, 64}[rng.IntN(6)]
		p, err := a.Alloc(ctx, size, align)
		require.NoError(t, err)
		require.True(t, p.Offset()%(max(align, 16)) == 0, "%v for align %d", p, align)
		if size > 8<<10 {
			require.True(t, p.Offset()%(16<<10) == 0, "large blocks are chunk-aligned")
		}
		live = append(live, blk{p, size})
	}
	checkDisjoint(t, func(yield func(farmem.Addr, uint64) bool) {
		for _, b := range live {
			if !yield(b.p, a.arenas[b.p.Node()].blockSize(b.size)) {
				return
			}
		}
	})
}

// checkDisjoint fails if two blocks overlap.
func checkDisjoint(t *testing.T, blocks func(func(farmem.Addr, uint64) bool)) {
	t.Helper()
	type iv struct{ lo, hi uint64 }
	byNode := map[farmem.NodeID][]iv{}
	for p, n := range blocks {
		byNode[p.Node()] = append(byNode[p.Node()], iv{p.Offset(), p.Offset() + n})
	}
	for node, ivs := range byNode {
		for i := range ivs {
			for j := i + 1; j < len(ivs); j++ {
				// (An if rather than require.False: this runs for every pair of blocks.)
				if ivs[i].lo < ivs[j].hi && ivs[j].lo < ivs[i].hi {
					t.Fatalf("%v: [%#x,%#x) overlaps [%#x,%#x)", node, ivs[i].lo, ivs[i].hi, ivs[j].lo, ivs[j].hi)
				}
			}
		}
	}
}

// Exhaustion is an error wrapping farmem.ErrNoSpace, never a crash; once a node is known to be
// exhausted, failing costs one Read (the node's free-chunk pool, found empty) for a small block
// and no verb for a run of chunks; freed blocks are still handed out.
func TestExhaustion(t *testing.T) {
	ctx := context.Background()
	c := newCluster(t, local.Options{Shape: local.Shape{MemorySize: 1 << 20}}, FormatOptions{ChunkSize: 4 << 10, SymmetricSize: 64 << 10})
	a, m := c.allocator(t, 0, Options{})
	h := c.header(t, m, 1)
	var got []farmem.Addr
	var err error
	for {
		var p farmem.Addr
		p, err = a.Alloc(ctx, 1024, 0)
		if err != nil {
			break
		}
		got = append(got, p)
	}
	require.ErrorIs(t, err, farmem.ErrNoSpace)
	require.Len(t, got, int((h.HeapLimit-h.HeapBase)/1024), "every byte of the heap was handed out")
	before := m.Stats()
	_, err = a.Alloc(ctx, 16, 0)
	require.ErrorIs(t, err, farmem.ErrNoSpace)
	d := m.Stats().Sub(before)
	require.Equal(t, uint64(1), d.TotalVerbs(), "one Read of the pool's head")
	require.Equal(t, uint64(PoolEmptyRoundTrips), d.RoundTrips)
	before = m.Stats()
	_, err = a.Alloc(ctx, 64<<10, 0)
	require.ErrorIs(t, err, farmem.ErrNoSpace)
	require.Zero(t, m.Stats().Sub(before).TotalVerbs())

	require.NoError(t, a.Free(got[7], 1024))
	p, err := a.Alloc(ctx, 1000, 0)
	require.NoError(t, err)
	require.Equal(t, got[7], p)

	// Another client finds the node exhausted with one FAA.
	b, _ := c.allocator(t, 1, Options{})
	_, err = b.Alloc(ctx, 16, 0)
	require.ErrorIs(t, err, farmem.ErrNoSpace)

	// A request larger than the heap fails without a verb.
	_, err = b.Alloc(ctx, 4<<20, 0)
	require.ErrorIs(t, err, farmem.ErrNoSpace)
}

// A large claim that runs past the end keeps the chunks that fit as spares: no space is lost.
func TestExhaustionKeepsPartialClaim(t *testing.T) {
	ctx := context.Background()
	c := newCluster(t, local.Options{Shape: local.Shape{MemorySize: 1 << 20}}, FormatOptions{ChunkSize: 4 << 10, SymmetricSize: 64 << 10})
	a, m := c.allocator(t, 0, Options{})
	h := c.header(t, m, 1)
	chunks := (h.HeapLimit - h.HeapBase) / h.ChunkSize
	_, err := a.Alloc(ctx, (chunks-3)*h.ChunkSize, 0)
	require.NoError(t, err)
	_, err = a.Alloc(ctx, 5*h.ChunkSize, 0)
	require.ErrorIs(t, err, farmem.ErrNoSpace)
	for range 3 {
		p, err := a.Alloc(ctx, h.ChunkSize, 0)
		require.NoError(t, err)
		require.True(t, p.Offset()%h.ChunkSize == 0)
	}
	_, err = a.Alloc(ctx, 16, 0)
	require.ErrorIs(t, err, farmem.ErrNoSpace)
}

func TestPlacement(t *testing.T) {
	ctx := context.Background()
	c := newCluster(t, local.Options{Shape: local.Shape{MemoryNodes: 3, MemorySize: 1 << 20, ComputeNodes: 2, ClientsPerNode: 16}},
		FormatOptions{ChunkSize: 4 << 10, SymmetricSize: 64 << 10})
	// Default placement: client id k prefers node (k-1) % 3.
	for i := range 4 {
		a, m := c.allocator(t, i, Options{})
		p, err := a.Alloc(ctx, 32, 0)
		require.NoError(t, err)
		require.Equal(t, c.mem[(int(m.Info().ID)-1)%3], p.Node())
	}
	a, _ := c.allocator(t, 0, Options{Nodes: []farmem.NodeID{3, 2}})
	for _, n := range a.nodes {
		p, err := a.AllocOn(ctx, n, 200, 64)
		require.NoError(t, err)
		require.Equal(t, n, p.Node())
		require.True(t, p.Offset()%64 == 0)
	}
	// Exhaust node 2 through AllocOn: it fails there while Alloc spills to the next node.
	for _, size := range []uint64{4 << 10, 16} {
		for {
			if _, err := a.AllocOn(ctx, 2, size, 0); err != nil {
				require.ErrorIs(t, err, farmem.ErrNoSpace)
				break
			}
		}
	}
	_, err := a.AllocOn(ctx, 2, 1024, 0)
	require.ErrorIs(t, err, farmem.ErrNoSpace)
	_, err = a.AllocOn(ctx, 1, 16, 0)
	require.ErrorIs(t, err, farmem.ErrInvalid, "node 1 is not in the allocator's set")
	for range 300 {
		p, err := a.Alloc(ctx, 1024, 0)
		require.NoError(t, err)
		require.NotEqual(t, farmem.NodeID(2), p.Node())
	}
}

// Alloc reuses a free block on any of its nodes before it claims a chunk on its preferred one:
// a client that frees blocks on other nodes (it retires what its peers wrote) must not make
// memory grow. Fails if Alloc grows the preferred node first.
func TestAllocReusesOtherNodesFirst(t *testing.T) {
	ctx := context.Background()
	c := newCluster(t, local.Options{Shape: local.Shape{MemoryNodes: 2, MemorySize: 1 << 20, ComputeNodes: 1, ClientsPerNode: 16}},
		FormatOptions{ChunkSize: 4 << 10})
	a, m := c.allocator(t, 0, Options{Nodes: []farmem.NodeID{1, 2}})
	pref := a.nodes[a.pref]
	other := a.nodes[(a.pref+1)%2]
	// One block on the preferred node, so its arena has a chunk, then blocks on the other.
	_, err := a.AllocOn(ctx, pref, 64, 0)
	require.NoError(t, err)
	var freed []farmem.Addr
	for range 64 {
		p, err := a.AllocOn(ctx, other, 64, 0)
		require.NoError(t, err)
		freed = append(freed, p)
	}
	for _, p := range freed {
		require.NoError(t, a.Free(p, 64))
	}
	// Allocate until a verb is needed (a chunk claim): by then every free block on the other
	// node must have been reused.
	onOther := 0
	for {
		before := m.Stats()
		p, err := a.Alloc(ctx, 64, 0)
		require.NoError(t, err)
		if m.Stats().Sub(before).TotalVerbs() > 0 {
			require.Equal(t, pref, p.Node(), "new chunks come from the preferred node")
			break
		}
		if p.Node() == other {
			onOther++
		}
	}
	require.Equal(t, 64, onOther, "a chunk was claimed while free blocks remained on another node")
}

func TestSymmetric(t *testing.T) {
	ctx := context.Background()
	c := newCluster(t, local.Options{Shape: local.Shape{MemoryNodes: 3, MemorySize: 2 << 20, ComputeNodes: 2, ClientsPerNode: 16}},
		FormatOptions{ChunkSize: 8 << 10, SymmetricSize: 64 << 10})
	a, m := c.allocator(t, 0, Options{})
	b, _ := c.allocator(t, 1, Options{})
	h := c.header(t, m, 1)
	for _, n := range c.mem {
		hn := c.header(t, m, n)
		require.Equal(t, h.SymBase, hn.SymBase, "the symmetric area is at the same offsets everywhere")
		require.LessOrEqual(t, hn.SymBase+hn.SymSize, hn.HeapBase, "and below every heap")
	}
	var syms []SymOffset
	var regular []farmem.Addr
	for i := 0; ; i++ {
		al := []*Allocator{a, b}[i%2]
		o, err := al.AllocSymmetric(ctx, 500, 64)
		if err != nil {
			require.ErrorIs(t, err, farmem.ErrNoSpace)
			break
		}
		require.Equal(t, uint64(0), uint64(o)%64)
		require.GreaterOrEqual(t, uint64(o), h.SymBase)
		require.LessOrEqual(t, uint64(o)+500, h.SymBase+h.SymSize)
		syms = append(syms, o)
		p, err := al.Alloc(ctx, 500, 64)
		require.NoError(t, err)
		regular = append(regular, p)
	}
	require.Len(t, syms, int(h.SymSize/(8<<10))*((8<<10)/512), "every symmetric chunk carved into 512-byte blocks")
	checkDisjoint(t, func(yield func(farmem.Addr, uint64) bool) {
		for _, n := range c.mem {
			for _, o := range syms {
				if !yield(o.On(n), 512) {
					return
				}
			}
		}
		for _, p := range regular {
			if !yield(p, 512) {
				return
			}
		}
	})
	// A replica write at a symmetric offset lands on every node and nowhere else.
	stamp := []byte("replica!")
	for _, n := range c.mem {
		require.NoError(t, m.Write(ctx, syms[3].On(n), stamp))
	}
	for _, n := range c.mem {
		got := make([]byte, 8)
		require.NoError(t, m.Read(ctx, syms[3].On(n), got))
		require.Equal(t, stamp, got)
	}
	// Symmetric blocks are freed and reused like others.
	require.NoError(t, b.FreeSymmetric(syms[0], 500))
	o, err := b.AllocSymmetric(ctx, 490, 0) // the same class, 512
	require.NoError(t, err)
	require.Equal(t, syms[0], o)
	require.ErrorIs(t, b.FreeSymmetric(SymOffset(h.HeapBase), 16), farmem.ErrInvalid)
}

// New refuses a client whose id has no slot in the epoch table.
func TestNewClientBeyondTable(t *testing.T) {
	ctx := context.Background()
	c := newCluster(t, local.Options{Shape: local.Shape{MemorySize: 2 << 20, ComputeNodes: 2, ClientsPerNode: 16}}, FormatOptions{MaxClients: 16})
	_, err := New(ctx, c.client(t, 0), Options{})
	require.NoError(t, err)
	_, err = New(ctx, c.client(t, 1), Options{})
	require.True(t, errors.Is(err, farmem.ErrNoSpace), "%v", err)
	_, err = New(ctx, c.client(t, 0), Options{Lease: 1})
	require.ErrorIs(t, err, farmem.ErrInvalid)
}
