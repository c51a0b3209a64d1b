package alloc

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/farmem/farmem/farmem"
	"github.com/farmem/farmem/farmem/local"
	"github.com/farmem/farmem/farmem/transport"
)

// registry is the test's own record of every live block (allocated, not yet freed or retired),
// checked for overlap at every allocation. A symmetric block occupies its offset on every node.
type registry struct {
	mu   sync.Mutex
	live map[farmem.NodeID]map[uint64]uint64 // node (0: symmetric) -> offset -> end
	sym  map[uint64]uint64
}

func newRegistry() *registry {
	return &registry{live: map[farmem.NodeID]map[uint64]uint64{}, sym: map[uint64]uint64{}}
}

func overlaps(m map[uint64]uint64, lo, hi uint64) (uint64, uint64, bool) {
	for l, h := range m {
		if lo < h && l < hi {
			return l, h, true
		}
	}
	return 0, 0, false
}

func (r *registry) add(node farmem.NodeID, lo, n uint64) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	hi := lo + n
	check := []map[uint64]uint64{r.sym}
	if node != 0 {
		check = append(check, r.live[node])
	} else {
		for _, m := range r.live {
			check = append(check, m)
		}
	}
	for _, m := range check {
		if l, h, bad := overlaps(m, lo, hi); bad {
			return fmt.Errorf("block %v+[%#x,%#x) overlaps live block [%#x,%#x)", node, lo, hi, l, h)
		}
	}
	if node == 0 {
		r.sym[lo] = hi
	} else {
		if r.live[node] == nil {
			r.live[node] = map[uint64]uint64{}
		}
		r.live[node][lo] = hi
	}
	return nil
}

func (r *registry) remove(node farmem.NodeID, lo uint64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if node == 0 {
		delete(r.sym, lo)
	} else {
		delete(r.live[node], lo)
	}
}

// A block's image: word 0 is its own address, word 1 its size, every other word the stamp of
// its owner (client id << 48 | serial). Symmetric blocks hold the same image on every node with
// word 0 the offset.
func image(self, size, stamp uint64) []byte {
	b := make([]byte, size&^7)
	for i := 0; i+8 <= len(b); i += 8 {
		binary.LittleEndian.PutUint64(b[i:], stamp)
	}
	binary.LittleEndian.PutUint64(b, self)
	binary.LittleEndian.PutUint64(b[8:], size)
	return b
}

type held struct {
	p     farmem.Addr // for symmetric blocks, the offset on node 0
	sym   bool
	size  uint64
	stamp uint64
}

// stressConfig shapes the concurrent test.
type stressConfig struct {
	computeNodes, perNode, iters int
	// latency and jitter model the network (0: verbs run inline in the caller).
	latency, jitter time.Duration
	// sabotage, if set, breaks an allocator on purpose; the run must then report a failure.
	sabotage func(a *Allocator, c *testCluster)
	// reopen makes clients close their allocator and client now and then, mid-run, and open
	// new ones (which take a free client id of the compute node, usually their own, and adopt
	// what its last allocator handed over), keeping the blocks they had allocated live.
	reopen bool
}

// stress runs clients on several compute nodes that allocate, stamp, free, publish and retire
// blocks concurrently, while reading each other's published blocks under pins. It returns the
// first violation seen: two live blocks overlapping (registry or stamps), or a published block
// changing under a pinned reader (reuse before every reader left).
func stress(t *testing.T, cfg stressConfig) error {
	ctx := context.Background()
	c := newCluster(t, local.Options{
		Shape:   transport.Shape{MemoryNodes: 3, MemorySize: 8 << 20, ComputeNodes: cfg.computeNodes, ClientsPerNode: cfg.perNode + 12},
		Latency: cfg.latency,
		Jitter:  cfg.jitter,
	},
		FormatOptions{ChunkSize: 16 << 10, SymmetricSize: 512 << 10})
	reg := newRegistry()
	n := cfg.computeNodes * cfg.perNode
	opts := Options{Lease: 5 * time.Second, Refresh: time.Millisecond, ScanInterval: 500 * time.Microsecond}
	as := make([]*Allocator, n)
	ms := make([]farmem.Memory, n)
	for i := range n {
		as[i], ms[i] = c.allocator(t, i, opts)
		if cfg.sabotage != nil && i%2 == 1 {
			cfg.sabotage(as[i], c)
		}
	}
	// The publication board: 16 words holding addresses of published blocks.
	const slots = 16
	boardAddr, err := as[0].Alloc(ctx, 8*slots, 64)
	require.NoError(t, err)
	require.NoError(t, reg.add(boardAddr.Node(), boardAddr.Offset(), 8*slots))
	mem := c.mem

	var failed atomic.Pointer[error]
	fail := func(err error) {
		failed.CompareAndSwap(nil, &err)
	}
	var reclaimed, reads, reopens, adopted atomic.Int64
	var reopen func(a *Allocator, m farmem.Memory) (*Allocator, farmem.Memory, error)
	if cfg.reopen {
		reopen = func(a *Allocator, m farmem.Memory) (*Allocator, farmem.Memory, error) {
			reclaimed.Add(int64(a.Stats().Reclaimed))
			if err := a.Close(); err != nil {
				return nil, nil, err
			}
			node := m.Info().Node
			if err := m.Close(); err != nil {
				return nil, nil, err
			}
			m2, err := c.f.Open(ctx, node)
			if err != nil {
				return nil, nil, err
			}
			a2, err := New(ctx, m2, opts)
			if err != nil {
				_ = m2.Close()
				return nil, nil, err
			}
			if err := a2.Adopted().Err; err != nil {
				return nil, nil, err
			}
			reopens.Add(1)
			adopted.Add(int64(a2.Adopted().Records))
			return a2, m2, nil
		}
	}
	var wg sync.WaitGroup
	for i := range n {
		a, m := as[i], ms[i]
		wg.Add(1)
		m.Runtime().Go(func() {
			defer wg.Done()
			last, err := stressClient(ctx, a, m, reg, boardAddr, slots, mem, cfg.iters, &failed, &reads, reopen)
			if err != nil {
				fail(fmt.Errorf("client %d: %w", m.Info().ID, err))
			}
			if last != nil {
				reclaimed.Add(int64(last.Stats().Reclaimed))
			}
		})
	}
	wg.Wait()
	if p := failed.Load(); p != nil {
		return *p
	}
	// Not vacuous: blocks were retired, reclaimed and reused, and published blocks were read.
	require.Positive(t, reclaimed.Load(), "no retired block was ever reclaimed")
	require.Positive(t, reads.Load())
	if cfg.reopen {
		require.Positive(t, reopens.Load())
		require.Positive(t, adopted.Load(), "no handover was ever adopted")
	}
	t.Logf("%d clients x %d iterations: %d retired blocks reclaimed, %d pinned double reads, %d reopens adopting %d records",
		n, cfg.iters, reclaimed.Load(), reads.Load(), reopens.Load(), adopted.Load())
	return nil
}

// stressClient runs one client's part of the stress test. With reopen, it now and then closes
// its allocator and client and continues on new ones (keeping its live blocks); it returns the
// allocator it ends with (closing it and its client if they are not the ones it was given).
func stressClient(ctx context.Context, a *Allocator, m farmem.Memory, reg *registry, board farmem.Addr, slots int,
	mem []farmem.NodeID, iters int, failed *atomic.Pointer[error], reads *atomic.Int64,
	reopen func(*Allocator, farmem.Memory) (*Allocator, farmem.Memory, error)) (last *Allocator, err error) {
	first := a
	defer func() {
		last = a
		if a != first && a != nil {
			err = errors.Join(err, a.Close(), m.Close())
		}
	}()
	err = func() error {
		rng := m.Runtime().NewRand()
		id := uint64(m.Info().ID)
		serial := uint64(0)
		var mine []held
		write := func(h held) error {
			if h.sym {
				for _, node := range mem {
					if err := m.Write(ctx, farmem.MakeAddr(node, h.p.Offset()), image(h.p.Offset(), h.size, h.stamp)); err != nil {
						return err
					}
				}
				return nil
			}
			return m.Write(ctx, h.p, image(uint64(h.p), h.size, h.stamp))
		}
		verify := func(h held) error {
			nodes := []farmem.NodeID{h.p.Node()}
			self := uint64(h.p)
			if h.sym {
				nodes, self = mem, h.p.Offset()
			}
			want := image(self, h.size, h.stamp)
			got := make([]byte, len(want))
			for _, node := range nodes {
				if err := m.Read(ctx, farmem.MakeAddr(node, h.p.Offset()), got); err != nil {
					return err
				}
				if string(got) != string(want) {
					return fmt.Errorf("block %v (sym %v) of %d bytes was overwritten while live", farmem.MakeAddr(node, h.p.Offset()), h.sym, h.size)
				}
			}
			return nil
		}
		release := func(h held) error {
			if err := verify(h); err != nil {
				return err
			}
			if h.sym {
				reg.remove(0, h.p.Offset())
				return a.FreeSymmetric(SymOffset(h.p.Offset()), h.size)
			}
			reg.remove(h.p.Node(), h.p.Offset())
			return a.Free(h.p, h.size)
		}
		for it := 0; it < iters && failed.Load() == nil; it++ {
			if reopen != nil && rng.IntN(150) == 0 {
				na, nm, err := reopen(a, m)
				if err != nil {
					a = nil
					return fmt.Errorf("reopen: %w", err)
				}
				a, m = na, nm
			}
			switch op := rng.IntN(100); {
			case op < 35 || len(mine) == 0: // allocate and stamp
				size := uint64(16 + rng.IntN(600))
				if rng.IntN(2) == 0 { // common sizes, so that blocks are often reused
					size = []uint64{24, 64, 100, 256}[rng.IntN(4)]
				}
				if rng.IntN(100) == 0 {
					size = uint64(9<<10 + rng.IntN(16<<10)) // whole chunks
				}
				align := []uint64{0, 16, 32, 64}[rng.IntN(4)]
				var h held
				var err error
				switch k := rng.IntN(20); {
				case k == 0:
					var o SymOffset
					o, err = a.AllocSymmetric(ctx, size, align)
					h = held{p: farmem.MakeAddr(0, uint64(o)), sym: true}
				case k < 4:
					h.p, err = a.AllocOn(ctx, mem[rng.IntN(len(mem))], size, align)
				default:
					h.p, err = a.Alloc(ctx, size, align)
				}
				if err != nil {
					return err
				}
				if h.p.Offset()%(max(align, 16)) != 0 {
					return fmt.Errorf("%v not aligned to %d", h.p, align)
				}
				serial++
				h.size, h.stamp = size, id<<48|serial
				if err := reg.add(h.p.Node(), h.p.Offset(), size); err != nil {
					return err
				}
				if err := write(h); err != nil {
					return err
				}
				mine = append(mine, h)
			case op < 55: // free at once
				k := rng.IntN(len(mine))
				h := mine[k]
				mine[k] = mine[len(mine)-1]
				mine = mine[:len(mine)-1]
				if err := release(h); err != nil {
					return err
				}
			case op < 75: // publish a block, retiring the one it replaces
				k := rng.IntN(len(mine))
				h := mine[k]
				if h.sym || h.size < 32 {
					continue
				}
				if err := verify(h); err != nil {
					return err
				}
				mine[k] = mine[len(mine)-1]
				mine = mine[:len(mine)-1]
				slot := board.Add(8 * uint64(rng.IntN(slots)))
				if err := a.Pin(ctx); err != nil {
					return err
				}
				buf := make([]byte, 16)
				if err := m.Read(ctx, slot, buf[:8]); err != nil {
					return err
				}
				old := farmem.Addr(binary.LittleEndian.Uint64(buf))
				prev, err := m.CAS(ctx, slot, uint64(old), uint64(h.p))
				if err != nil {
					return err
				}
				if prev != uint64(old) { // lost the race: keep the block
					mine = append(mine, h)
				} else {
					reg.remove(h.p.Node(), h.p.Offset()) // now the board's
					if old != 0 {
						if err := m.Read(ctx, old, buf); err != nil {
							return err
						}
						if farmem.Addr(binary.LittleEndian.Uint64(buf)) != old {
							return fmt.Errorf("published block %v does not hold its address", old)
						}
						size := binary.LittleEndian.Uint64(buf[8:])
						if rng.IntN(4) == 0 {
							// Retire outside the pin: the tag comes from a read of the epoch.
							if err := a.Unpin(); err != nil {
								return err
							}
							if err := a.Retire(ctx, old, size); err != nil {
								return err
							}
							continue
						}
						if err := a.Retire(ctx, old, size); err != nil {
							return err
						}
						if rng.IntN(10) == 0 {
							if _, err := a.Reclaim(ctx); err != nil {
								return err
							}
						}
					}
				}
				if err := a.Unpin(); err != nil {
					return err
				}
			default: // read a published block twice under one pin: it must not change
				slot := board.Add(8 * uint64(rng.IntN(slots)))
				if err := a.Pin(ctx); err != nil {
					return err
				}
				w := make([]byte, 8)
				if err := m.Read(ctx, slot, w); err != nil {
					return err
				}
				p := farmem.Addr(binary.LittleEndian.Uint64(w))
				if p != 0 {
					hdr := make([]byte, 16)
					if err := m.Read(ctx, p, hdr); err != nil {
						return err
					}
					size := binary.LittleEndian.Uint64(hdr[8:])
					if farmem.Addr(binary.LittleEndian.Uint64(hdr)) != p || size < 32 || size > 32<<10 {
						return fmt.Errorf("pinned read of %v found another block's header", p)
					}
					first := make([]byte, size&^7)
					if err := m.Read(ctx, p, first); err != nil {
						return err
					}
					for range 1 + rng.IntN(3) {
						if err := m.Runtime().Sleep(ctx, time.Duration(rng.IntN(40))*time.Microsecond); err != nil {
							return err
						}
					}
					second := make([]byte, len(first))
					if err := m.Read(ctx, p, second); err != nil {
						return err
					}
					if string(first) != string(second) {
						return fmt.Errorf("published block %v changed under a pinned reader: reused too early", p)
					}
					reads.Add(1)
				}
				if err := a.Unpin(); err != nil {
					return err
				}
			}
		}
		if p := failed.Load(); p != nil {
			return nil
		}
		for _, h := range mine {
			if err := release(h); err != nil {
				return err
			}
		}
		return nil
	}()
	return a, err
}

func stressIters() int {
	if s := os.Getenv("ALLOC_STRESS_ITERS"); s != "" {
		if n, err := strconv.Atoi(s); err == nil {
			return n
		}
	}
	return 1500
}

// Many clients on several compute nodes allocate, free, publish, retire and read concurrently
// on farmem/local (strict mode, run it under -race): no two live blocks ever overlap, and no
// block is reused while a reader pinned before its retirement may still read it. Clients close
// and reopen mid-run, so what they held is handed over and adopted under the same checks.
func TestConcurrentNoOverlap(t *testing.T) {
	require.NoError(t, stress(t, stressConfig{computeNodes: 3, perNode: 4, iters: stressIters(), reopen: true}))
}

// The same with modelled latency and jitter: verbs complete from the transport's goroutines and
// clients interleave at every verb.
func TestConcurrentNoOverlapLatency(t *testing.T) {
	require.NoError(t, stress(t, stressConfig{computeNodes: 3, perNode: 3, iters: stressIters() / 5, reopen: true,
		latency: 2 * time.Microsecond, jitter: 5 * time.Microsecond}))
}

// The same test catches an allocator that claims chunks without the FAA (every sabotaged client
// carves from the start of the heap)...
func TestConcurrentCatchesOverlap(t *testing.T) {
	err := stress(t, stressConfig{computeNodes: 2, perNode: 2, iters: 500, sabotage: func(a *Allocator, c *testCluster) {
		for _, ar := range a.arenas {
			if ar == nil {
				continue
			}
			// A private bump word in the unused gap after the epoch table: claims start at the
			// heap base again.
			fake := farmem.MakeAddr(ar.bump.Node(), 8192+8*uint64(a.id))
			_, err := a.m.CAS(context.Background(), fake, 0, ar.base)
			require.NoError(t, err)
			ar.bump = fake
		}
	}})
	require.Error(t, err)
	t.Log(err)
}

// ...and one whose scans see no announcement (reuse as soon as retired). A reader must be
// caught in the act, so this may take a few runs.
func TestConcurrentCatchesEarlyReuse(t *testing.T) {
	var err error
	for attempt := 0; attempt < 8 && err == nil; attempt++ {
		err = stress(t, stressConfig{computeNodes: 2, perNode: 3, iters: 3000, sabotage: func(a *Allocator, c *testCluster) {
			a.tableAddr = a.tableAddr.Add(8 * uint64(a.slots)) // past the table: all zero
		}})
	}
	require.Error(t, err)
	require.False(t, errors.Is(err, farmem.ErrNoSpace), "%v", err)
	t.Log(err)
}
