package alloc

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/farmem/farmem/farmem"
	"github.com/farmem/farmem/farmem/local"
)

// fill allocates blocks of size bytes until the allocator runs out, and returns them.
func fill(t *testing.T, a *Allocator, size uint64) []farmem.Addr {
	t.Helper()
	var got []farmem.Addr
	for {
		p, err := a.Alloc(context.Background(), size, 0)
		if err != nil {
			require.ErrorIs(t, err, farmem.ErrNoSpace)
			return got
		}
		got = append(got, p)
	}
}

// Memory freed in one size class serves every other one, and every client: a client fills the
// heap with 64-byte blocks and frees them all; Reclaim rebuilds whole chunks from them and
// pushes all but one onto the node's pool (one round trip for the scan, two for the push), whose
// count in far memory says so; another client, whose node is exhausted, then fills the heap
// again with 3000-byte blocks from the pool (each chunk three round trips: head, link, CAS),
// and the first client uses the chunk it kept: together they hold as many bytes as the heap
// (less what 3000-byte blocks waste of a chunk).
func TestPoolAcrossClassesAndClients(t *testing.T) {
	ctx := context.Background()
	const chunk = 16 << 10
	c := newCluster(t, local.Options{Shape: local.Shape{MemoryNodes: 1, MemorySize: 1 << 20, ComputeNodes: 2}}, FormatOptions{ChunkSize: chunk, SymmetricSize: chunk})
	a, ma := c.allocator(t, 0, Options{})
	h := c.header(t, ma, 1)
	heapChunks := (h.HeapLimit - h.HeapBase) / chunk

	small := fill(t, a, 64)
	require.Len(t, small, int(heapChunks*chunk/64))
	for _, p := range small {
		require.NoError(t, a.Free(p, 64))
	}
	s := ma.Stats()
	_, err := a.Reclaim(ctx)
	require.NoError(t, err)
	d := ma.Stats().Sub(s)
	require.Equal(t, uint64(ScanRoundTrips+PoolPushRoundTrips), d.RoundTrips, "scan; read head; links and CAS")
	require.Equal(t, heapChunks, a.Stats().Coalesced, "every chunk rebuilt")
	require.Equal(t, heapChunks-keepSpares, a.Stats().Pooled)
	require.Equal(t, heapChunks-keepSpares, d.VerbsOf(farmem.OpWrite), "one link word per pooled chunk")
	require.Equal(t, int64(heapChunks-keepSpares), c.header(t, ma, 1).PoolChunks)

	b, mb := c.allocator(t, 1, Options{})
	s = mb.Stats()
	first, err := b.Alloc(ctx, 3000, 0)
	require.NoError(t, err)
	d = mb.Stats().Sub(s)
	require.Equal(t, uint64(ChunkClaimRoundTrips+PoolPopRoundTrips), d.RoundTrips, "an FAA past the heap's end, then head, link and CAS")
	require.Equal(t, uint64(2), d.VerbsOf(farmem.OpFAA), "the claim, and the count's unsignaled decrement")
	require.Equal(t, uint64(2), d.VerbsOf(farmem.OpRead))
	require.Equal(t, uint64(1), d.VerbsOf(farmem.OpCAS))
	large := append([]farmem.Addr{first}, fill(t, b, 3000)...)
	perChunk := uint64(chunk / classSizes[classOf(3000)])
	require.Len(t, large, int((heapChunks-keepSpares)*perChunk))
	require.Equal(t, heapChunks-keepSpares, b.Stats().Unpooled)
	require.Zero(t, c.header(t, ma, 1).PoolChunks)
	// The first client's kept chunk serves yet another class.
	mid := fill(t, a, 1000)
	require.Len(t, mid, int(chunk/classSizes[classOf(1000)]))

	reg := newRegistry()
	for _, p := range large {
		require.NoError(t, reg.add(p.Node(), p.Offset(), classSizes[classOf(3000)]))
	}
	for _, p := range mid {
		require.NoError(t, reg.add(p.Node(), p.Offset(), classSizes[classOf(1000)]))
	}
	held := uint64(len(large))*3000 + uint64(len(mid))*1000
	require.GreaterOrEqual(t, float64(held), 0.9*float64(heapChunks*chunk), "the second fill holds at least 90%% of the heap")
}

// Clients fill one node concurrently, each with its own block size, check their blocks' stamps,
// free them all and give whole chunks back, round after round: chunks travel between clients and
// size classes through the pool under contention, and no two live blocks ever overlap.
func TestPoolConcurrent(t *testing.T) {
	ctx := context.Background()
	const chunk = 4 << 10
	c := newCluster(t, local.Options{Shape: local.Shape{MemoryNodes: 1, MemorySize: 512 << 10, ComputeNodes: 3}},
		FormatOptions{ChunkSize: chunk, SymmetricSize: chunk})
	reg := newRegistry()
	sizes := []uint64{48, 160, 700, 1500, 96, 2000}
	const rounds = 12
	var mu sync.Mutex
	var pooled, unpooled uint64
	var wg sync.WaitGroup
	errs := make([]error, len(sizes))
	for i, size := range sizes {
		a, m := c.allocator(t, i, Options{})
		wg.Add(1)
		m.Runtime().Go(func() {
			defer wg.Done()
			errs[i] = func() error {
				for r := range rounds {
					var mine []farmem.Addr
					for k := 0; k < 40; k++ {
						p, err := a.Alloc(ctx, size, 0)
						if errors.Is(err, farmem.ErrNoSpace) {
							break
						}
						if err != nil {
							return err
						}
						if err := reg.add(p.Node(), p.Offset(), size); err != nil {
							return err
						}
						if err := m.Write(ctx, p, image(uint64(p), size, uint64(i)<<32|uint64(r))); err != nil {
							return err
						}
						mine = append(mine, p)
					}
					for _, p := range mine {
						got := make([]byte, size&^7)
						if err := m.Read(ctx, p, got); err != nil {
							return err
						}
						if string(got) != string(image(uint64(p), size, uint64(i)<<32|uint64(r))) {
							return fmt.Errorf("block %v of client %d overwritten while live", p, i)
						}
						reg.remove(p.Node(), p.Offset())
						if err := a.Free(p, size); err != nil {
							return err
						}
					}
					if _, err := a.Reclaim(ctx); err != nil {
						return err
					}
				}
				mu.Lock()
				pooled += a.Stats().Pooled
				unpooled += a.Stats().Unpooled
				mu.Unlock()
				return nil
			}()
		})
	}
	wg.Wait()
	require.NoError(t, errors.Join(errs...))
	require.Positive(t, pooled, "no chunk pushed")
	require.Positive(t, unpooled, "no chunk popped")
	require.Equal(t, int64(pooled-unpooled), c.header(t, c.client(t, 0), 1).PoolChunks, "the count in far memory")
	t.Logf("%d chunks pushed onto the pool, %d taken", pooled, unpooled)
}

// Options.Admit refuses allocations: the error wraps ErrRefused, farmem.ErrNoSpace and
// Admit's own, nothing is claimed, and allocations it admits go on.
func TestAdmitRefuses(t *testing.T) {
	ctx := context.Background()
	c := newCluster(t, local.Options{Shape: local.Shape{MemorySize: 1 << 20}}, FormatOptions{ChunkSize: 4 << 10, SymmetricSize: 64 << 10})
	quota := errors.New("over quota")
	a, m := c.allocator(t, 0, Options{Admit: func(size uint64) error {
		if size > 512 {
			return quota
		}
		return nil
	}})
	s := m.Stats()
	_, err := a.Alloc(ctx, 1024, 0)
	require.ErrorIs(t, err, ErrRefused)
	require.ErrorIs(t, err, farmem.ErrNoSpace)
	require.ErrorIs(t, err, quota)
	_, err = a.AllocOn(ctx, c.mem[0], 600, 0)
	require.ErrorIs(t, err, quota)
	_, err = a.AllocSymmetric(ctx, 4096, 0)
	require.ErrorIs(t, err, quota)
	require.Zero(t, m.Stats().Sub(s).TotalVerbs())
	require.Zero(t, a.Stats().Allocs)
	_, err = a.Alloc(ctx, 512, 0)
	require.NoError(t, err)
}

// Absorb moves what one allocator holds into another with no verb: blocks that one client
// allocated and another freed or retired are rebuilt into whole chunks by the absorber, retired
// blocks keep their tags (reclaimed at the absorber's scan), and the absorbed allocator is left
// holding nothing.
func TestAbsorb(t *testing.T) {
	ctx := context.Background()
	const chunk = 4 << 10
	c := newCluster(t, local.Options{Shape: local.Shape{MemoryNodes: 2, MemorySize: 256 << 10, ComputeNodes: 2}},
		FormatOptions{ChunkSize: chunk, SymmetricSize: chunk})
	a, ma := c.allocator(t, 0, Options{})
	b, mb := c.allocator(t, 1, Options{})
	var ps []farmem.Addr
	for range 4 * chunk / 64 {
		p, err := a.AllocOn(ctx, c.mem[0], 64, 0)
		require.NoError(t, err)
		ps = append(ps, p)
	}
	// a frees half of its blocks, b frees a quarter and retires a quarter.
	for i, p := range ps {
		switch i % 4 {
		case 0, 1:
			require.NoError(t, a.Free(p, 64))
		case 2:
			require.NoError(t, b.Free(p, 64))
		default:
			require.NoError(t, b.Retire(ctx, p, 64))
		}
	}
	sa, sb := ma.Stats(), mb.Stats()
	require.NoError(t, a.Absorb(b))
	require.Zero(t, ma.Stats().Sub(sa).TotalVerbs())
	require.Zero(t, mb.Stats().Sub(sb).TotalVerbs())
	require.Equal(t, len(ps)/4, a.Stats().Pending, "b's retired blocks, with their tags")
	require.Zero(t, b.Stats().Pending)
	require.NoError(t, b.Quiesce(ctx))
	require.NoError(t, a.Quiesce(ctx))
	n, err := a.Reclaim(ctx)
	require.NoError(t, err)
	require.Equal(t, len(ps)/4, n)
	require.GreaterOrEqual(t, a.Stats().Coalesced, uint64(4), "the four chunks rebuilt")
	// Whole chunks now serve another class.
	reg := newRegistry()
	for range 4 {
		p, err := a.AllocOn(ctx, c.mem[0], 2000, 0)
		require.NoError(t, err)
		require.NoError(t, reg.add(p.Node(), p.Offset(), 2000))
	}
	// b holds nothing: its Close hands nothing over.
	require.NoError(t, b.Close())
	require.Zero(t, b.Stats().HandedOver)

	other, _ := c.allocator(t, 0, Options{Nodes: c.mem[:1]})
	require.ErrorIs(t, a.Absorb(other), farmem.ErrInvalid)
	require.ErrorIs(t, a.Absorb(b), farmem.ErrClosed)
}
