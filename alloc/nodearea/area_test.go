package nodearea_test

import (
	"bytes"
	"context"
	"errors"
	"math/rand/v2"
	"sort"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/farmem/farmem/alloc/nodearea"
	"github.com/farmem/farmem/farmem"
)

// live is an allocated block and the pattern written into it.
type live struct {
	a    farmem.Addr
	size uint64
	tag  byte
}

// TestConcurrentAllocFree: on every transport, four clients of each of two compute nodes
// allocate and free blocks of several classes at once, each writing its own pattern into
// every block and checking it before freeing; no two live blocks overlap, every pattern
// survives (so no block was handed to two clients), and not one verb leaves the caller's own
// compute node.
func TestConcurrentAllocFree(t *testing.T) {
	for _, c := range clusters(t) {
		t.Run(c.name, func(t *testing.T) {
			ctx := context.Background()
			const perNode, rounds, maxLive = 4, 150, 6
			sizes := []uint64{8, 24, 64, 100, 256, 1000}
			ms := make([]farmem.Memory, 2*perNode)
			for i := range ms {
				ms[i] = c.client(t, i%2)
			}
			var e errs
			held := make([][]live, len(ms))
			c.within(func() {
				c.par(len(ms), func(i int) {
					m := ms[i]
					a, err := nodearea.Open(ctx, m)
					if err != nil {
						e.add("client %d: open: %w", i, err)
						return
					}
					rnd := rand.New(rand.NewPCG(uint64(i), 1))
					tag := byte(i + 1)
					var mine []live
					check := func(b live) {
						got := make([]byte, b.size)
						if err := m.Read(ctx, b.a, got); err != nil {
							e.add("client %d: read: %w", i, err)
							return
						}
						if !bytes.Equal(got, bytes.Repeat([]byte{b.tag}, int(b.size))) {
							e.add("client %d: block %v of %d bytes overwritten: %x", i, b.a, b.size, got[:min(16, len(got))])
						}
					}
					for r := range rounds {
						if len(mine) == maxLive || (len(mine) > 0 && rnd.IntN(3) == 0) {
							k := rnd.IntN(len(mine))
							check(mine[k])
							if err := a.Free(ctx, mine[k].a, mine[k].size); err != nil {
								e.add("client %d: free: %w", i, err)
								return
							}
							mine = append(mine[:k], mine[k+1:]...)
							continue
						}
						size := sizes[rnd.IntN(len(sizes))]
						b, err := a.Alloc(ctx, size)
						if err != nil {
							e.add("client %d round %d: alloc %d: %w", i, r, size, err)
							return
						}
						if b.Node() != m.Info().Node {
							e.add("client %d: block %v not on its node", i, b)
						}
						if err := m.Write(ctx, b, bytes.Repeat([]byte{tag}, int(size))); err != nil {
							e.add("client %d: write: %w", i, err)
							return
						}
						mine = append(mine, live{b, size, tag})
					}
					for _, b := range mine {
						check(b)
					}
					held[i] = mine
				})
			})
			e.check(t)
			// No overlap among the blocks still held, per node.
			var all []live
			for _, h := range held {
				all = append(all, h...)
			}
			require.NotEmpty(t, all)
			sort.Slice(all, func(i, j int) bool { return all[i].a < all[j].a })
			for k := 1; k < len(all); k++ {
				p, q := all[k-1], all[k]
				if p.a.Node() == q.a.Node() {
					require.LessOrEqual(t, uint64(p.a)+p.size, uint64(q.a), "blocks %v and %v overlap", p.a, q.a)
				}
			}
			var st farmem.Stats
			for _, m := range ms {
				st = st.Add(m.Stats())
			}
			require.Zero(t, st.VerbsTo(farmem.TargetMemory), "verbs to memory nodes")
			require.Zero(t, st.VerbsTo(farmem.TargetCompute), "verbs to other compute nodes")
			require.Zero(t, st.RoundTrips, "round trips")
			require.Greater(t, st.VerbsTo(farmem.TargetLocal), uint64(2*perNode*rounds))
			t.Logf("%d local verbs, %d failed CASes, %d blocks held at the end", st.VerbsTo(farmem.TargetLocal), st.FailedCAS, len(all))
		})
	}
}

// TestExhaustion: allocating until the area is full fails with an error wrapping
// farmem.ErrNoSpace; a freed block is then reused by its class; a request larger than the
// largest class fails the same way; costs are the documented verbs.
func TestExhaustion(t *testing.T) {
	for _, c := range clusters(t) {
		t.Run(c.name, func(t *testing.T) {
			ctx := context.Background()
			m := c.client(t, 1)
			c.within(func() {
				a, err := nodearea.Open(ctx, m)
				require.NoError(t, err)
				require.EqualValues(t, smallShared, a.Size())
				const size = 1000
				cs := a.ClassSize(size)
				require.EqualValues(t, 1024, cs)
				var blocks []farmem.Addr
				for {
					before := m.Stats()
					b, err := a.Alloc(ctx, size)
					if err != nil {
						require.ErrorIs(t, err, farmem.ErrNoSpace)
						require.ErrorIs(t, err, nodearea.ErrNoSpace)
						require.Contains(t, err.Error(), "exhausted")
						break
					}
					d := m.Stats().VerbsTo(farmem.TargetLocal) - before.VerbsTo(farmem.TargetLocal)
					require.EqualValues(t, 3, d, "verbs of a bump allocation")
					require.Zero(t, uint64(b)%64, "a 1024-byte class is cache-line aligned")
					blocks = append(blocks, b)
				}
				require.Len(t, blocks, int(smallShared/cs)-1, "every block but the header's share")
				used, err := a.InUse(ctx)
				require.NoError(t, err)
				require.LessOrEqual(t, used, a.Size())

				before := m.Stats()
				require.NoError(t, a.Free(ctx, blocks[3], size))
				require.EqualValues(t, 3, m.Stats().VerbsTo(farmem.TargetLocal)-before.VerbsTo(farmem.TargetLocal), "verbs of a free")
				before = m.Stats()
				b, err := a.AllocZeroed(ctx, 1010) // same class
				require.NoError(t, err)
				require.Equal(t, blocks[3], b, "the freed block is reused by its class")
				require.EqualValues(t, 4, m.Stats().VerbsTo(farmem.TargetLocal)-before.VerbsTo(farmem.TargetLocal), "a pop and a zeroing write")
				z := make([]byte, cs)
				require.NoError(t, m.Read(ctx, b, z))
				require.Equal(t, make([]byte, cs), z, "AllocZeroed zeroes a reused block")

				_, err = a.Alloc(ctx, a.MaxBlock()+1)
				require.ErrorIs(t, err, farmem.ErrNoSpace)
				_, err = a.Alloc(ctx, 0)
				require.ErrorIs(t, err, farmem.ErrInvalid)
				require.ErrorIs(t, a.Free(ctx, b+8, size), farmem.ErrInvalid, "misaligned")
				require.ErrorIs(t, a.Free(ctx, a.Base(), size), farmem.ErrInvalid, "the header")
				require.ErrorIs(t, a.Free(ctx, farmem.MakeAddr(1, 4096), size), farmem.ErrInvalid, "another node")
				st := m.Stats()
				require.Zero(t, st.RoundTrips)
				require.Zero(t, st.VerbsTo(farmem.TargetMemory))
			})
		})
	}
}

// TestOpenRace: eight clients of one node open the area at once and all agree; blocks one
// allocates are not handed to another; an area holding another format is refused.
func TestOpenRace(t *testing.T) {
	for _, c := range clusters(t) {
		t.Run(c.name, func(t *testing.T) {
			ctx := context.Background()
			ms := make([]farmem.Memory, 8)
			for i := range ms {
				ms[i] = c.client(t, 0)
			}
			got := make([]farmem.Addr, len(ms))
			var e errs
			c.within(func() {
				c.par(len(ms), func(i int) {
					a, err := nodearea.Open(ctx, ms[i])
					if err != nil {
						e.add("open %d: %w", i, err)
						return
					}
					if got[i], err = a.Alloc(ctx, 48); err != nil {
						e.add("alloc %d: %w", i, err)
					}
				})
			})
			e.check(t)
			seen := map[farmem.Addr]bool{}
			for _, b := range got {
				require.False(t, seen[b], "block %v handed out twice", b)
				seen[b] = true
			}
			// Another format on node 2's area.
			m := c.client(t, 1)
			c.within(func() {
				base := farmem.MakeAddr(m.Info().Node, m.Topology().SharedBase())
				_, err := m.CAS(ctx, base, 0, 0x1234)
				require.NoError(t, err)
				_, err = nodearea.Open(ctx, m)
				require.ErrorIs(t, err, farmem.ErrInvalid)
				require.False(t, errors.Is(err, farmem.ErrNoSpace))
			})
		})
	}
}
