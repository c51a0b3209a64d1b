package selcc_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/farmem/farmem/ds/selcc"
	"github.com/farmem/farmem/farmem"
	"github.com/farmem/farmem/farmem/farmemtest"
)

// crashCase is how the victim node is caught when it crashes.
type crashCase struct {
	name string
	// hold: the victim's first client takes the hot line (exclusively if excl) and keeps the
	// guard while the node crashes; otherwise every client of the victim runs the mixed load
	// and the crash comes at a seeded random instant, often inside a hand-over or a downgrade
	// the victim serves or asks for.
	hold, excl bool
	wr         float64 // share of exclusive operations
	hot        bool    // every operation on the hottest line (it moves by hand-over all the time)
}

// TestCrashHolderSim crashes one of four compute nodes (two clients each) under contention on
// three hot lines, on sim, with several seeds: while it holds the hottest line exclusively (a
// guard held), while it holds it shared, and at a random instant of a mixed load (inside
// hand-overs, downgrades and invalidations to or from it). A survivor repairs the dead node's
// holds shortly after the crash (the fencing delay). Asserted: every survivor completes its
// operations after the repair, never waiting longer than a bound in virtual time for one, and
// no write is lost: each line's far counter, incremented under exclusive guards
// (WriteBackOnRelease), ends between the acknowledged increments and those plus the victim's
// unacknowledged ones; after Close every latch word is zero (no hold left behind).
func TestCrashHolderSim(t *testing.T) {
	t.Parallel() // a simulation: virtual time, unmoved by other tests
	cases := []crashCase{
		{name: "exclusive", hold: true, excl: true, wr: 0.5},
		{name: "shared", hold: true, wr: 0.7},
		{name: "mixed", wr: 0.4},
		{name: "handover", wr: 1, hot: true},
	}
	// In seeds 17, 19, 20 and 22 the victim dies inside a hand-over it serves for a survivor
	// (after its FAA, before the forward), so the survivor's hold is an orphan (see the
	// package's Recovery section); in seed 3 a survivor's upgrade fails on the dead sharer.
	// -selcc.long runs seeds 1-40.
	seeds := []uint64{1, 3, 17, 19, 20, 22}
	if *long {
		seeds = nil
		for s := uint64(1); s <= 40; s++ {
			seeds = append(seeds, s)
		}
	}
	for _, c := range cases {
		for _, seed := range seeds {
			t.Run(fmt.Sprintf("%s/seed%d", c.name, seed), func(t *testing.T) { crashHolder(t, c, crashShape{4, 2, 30, 300 * time.Microsecond}, seed) })
		}
	}
}

// TestCrashHolderSimGroups: the same past the bitmap, 64 compute nodes under the group codec,
// where the dead node's share can only be told from its group's by the fenced census of its
// group's live members (Repair): the latch words ending at zero after Close show it removed
// exactly the dead node's count (one too many would wrap the counter, one too few would stay).
// Each survivor completes two operations after the repair (four nodes' survivors complete 30
// in TestCrashHolderSim): with 63 survivors, half of whose operations go to the line the
// victim held, that shows the line served again; most of the run is the load up to the crash.
// By default the victim dies holding the line shared, the case only the group census can
// repair; -selcc.long adds the exclusive hold and the crash at a random instant. (A repair that
// leaves a dead exclusive holder in the word is caught by TestCrashHolderSim's exclusive case
// and TestGroupRepairExact, as well as by this test's exclusive case; one that skips the census
// or removes no count from the group, by the shared case and TestGroupRepairExact.)
func TestCrashHolderSimGroups(t *testing.T) {
	t.Parallel() // a simulation: virtual time, unmoved by other tests
	cases := []crashCase{
		{name: "shared", hold: true, wr: 0.3},
	}
	seeds := []uint64{2}
	if *long {
		cases = append(cases, crashCase{name: "exclusive", hold: true, excl: true, wr: 0.3}, crashCase{name: "mixed", wr: 0.3})
		seeds = []uint64{1, 2, 3, 4, 5, 6, 7, 8}
	}
	for _, c := range cases {
		for _, seed := range seeds {
			t.Run(fmt.Sprintf("%s/seed%d", c.name, seed), func(t *testing.T) { crashHolder(t, c, crashShape{64, 1, 2, 2 * time.Millisecond}, seed) })
		}
	}
}

// crashShape is the cluster of a crash test: compute nodes, clients per node, operations each
// surviving client completes after the repair (it runs from the start until then).
type crashShape struct {
	nodes, perNode, ops int
	reply               time.Duration // Options.ReplyTimeout
}

const (
	crashLines = 3
	crashFence = 50 * time.Microsecond // from the crash to the repair
)

func crashHolder(t *testing.T, c crashCase, sh crashShape, seed uint64) {
	r := simRig(t, simModel(sh.nodes, sh.perNode), seed, selcc.Options{LineSize: 64, Frames: 4, EvictBatch: 2,
		Durability: selcc.WriteBackOnRelease, ReplyTimeout: sh.reply})
	gs := r.lines(t, crashLines)
	n := sh.nodes * sh.perNode
	ms := make([]farmem.Memory, n)
	cls := make([]*selcc.Client, n)
	for i := range n {
		ms[i], cls[i] = r.client(t, i)
	}
	_, repairer := r.client(t, n) // on the first node, beside client 0 (a Client is one goroutine's)
	var runErr error
	dead := r.comp[1] // clients 1, 1+nodes, ...
	isVictim := func(i int) bool { return i%sh.nodes == 1 }
	acked := make([]atomic.Int64, len(gs))
	var unacked atomic.Int64 // the victim's increments whose Unlock did not return
	sw := newSWMR(len(gs))   // survivors only: the victim's guard dies held
	var crashed, repaired, removed atomic.Int64
	var start farmem.Time
	var maxWait atomic.Int64
	downs := atomic.Int64{}

	// op runs one operation of client i on line li: an increment under an exclusive guard or
	// a read under a shared one (checking for tears).
	op := func(ctx context.Context, i, li int, excl bool, hold time.Duration) error {
		cl, rt := cls[i], ms[i].Runtime()
		victim := isVictim(i)
		if excl {
			gd, err := cl.Lock(ctx, gs[li])
			if err != nil {
				return err
			}
			if !victim {
				sw.enter(li, true)
			}
			v, err := gd.ReadUint64(ctx, 0)
			if err == nil {
				err = gd.WriteUint64(ctx, 0, v+1)
			}
			if err == nil {
				err = gd.WriteUint64(ctx, 8, v+1)
			}
			if err != nil {
				return err
			}
			if hold > 0 {
				_ = rt.Sleep(ctx, hold)
			}
			if !victim {
				sw.exit(li, true)
			} else {
				unacked.Add(1)
			}
			if err := gd.Unlock(ctx); err != nil {
				return err
			}
			if victim {
				unacked.Add(-1)
			}
			acked[li].Add(1)
			return nil
		}
		gd, err := cl.RLock(ctx, gs[li])
		if err != nil {
			return err
		}
		if !victim {
			sw.enter(li, false)
		}
		a, err := gd.ReadUint64(ctx, 0)
		if err != nil {
			return err
		}
		b, err := gd.ReadUint64(ctx, 8)
		if err != nil {
			return err
		}
		if a != b {
			sw.torn.Add(1)
		}
		if hold > 0 {
			_ = rt.Sleep(ctx, hold)
		}
		if !victim {
			sw.exit(li, false)
		}
		return gd.Unlock(ctx)
	}

	r.do(func() {
		rt := r.f.Runtime()
		ctx, cancel := rt.WithTimeout(context.Background(), 200*time.Millisecond)
		defer cancel()
		rnd := rt.NewRand()
		start = rt.Now()
		crashAt := rt.Now().Add(time.Duration(100+rnd.IntN(400)) * time.Microsecond)
		crash := func() {
			if crashed.CompareAndSwap(0, int64(r.s.Now())) {
				if err := r.s.Crash(dead); err != nil {
					t.Error(err)
				}
				r.s.At(r.s.Now().Add(crashFence), func() {
					rt.Go(func() {
						n, err := repairer.Repair(context.Background(), dead.ComputeID(), gs)
						if err != nil {
							t.Errorf("repair: %v", err)
							cancel()
							return
						}
						removed.Store(int64(n))
						repaired.Store(int64(r.s.Now()))
					})
				})
			}
		}
		if !c.hold {
			r.s.At(crashAt, crash)
		}
		runErr = farmemtest.Parallel(rt, n, func(i int) error {
			rnd := ms[i].Runtime().NewRand()
			if isVictim(i) {
				if c.hold && i == 1 {
					// Warm up, then take the hot line and die holding it.
					for range 5 {
						if err := op(ctx, i, rnd.IntN(len(gs)), rnd.Float64() < 0.5, 0); err != nil {
							return nil
						}
					}
					var gd *selcc.Guard
					var err error
					if c.excl {
						gd, err = cls[i].Lock(ctx, gs[0])
					} else {
						gd, err = cls[i].RLock(ctx, gs[0])
					}
					if err != nil {
						return err
					}
					if c.excl {
						v, _ := gd.ReadUint64(ctx, 0)
						_ = gd.WriteUint64(ctx, 0, v+1) // never acknowledged
					}
					r.s.At(r.s.Now().Add(time.Microsecond), crash)
					_ = ms[i].Runtime().Sleep(ctx, time.Millisecond)
					return nil
				}
				for {
					li := rnd.IntN(len(gs))
					if c.hot {
						li = 0
					}
					if err := op(ctx, i, li, rnd.Float64() < c.wr, 0); err != nil {
						return nil // dies with its node
					}
				}
			}
			last := farmem.Time(0)
			for k := 0; repaired.Load() == 0 || k < sh.ops; {
				if err := ctx.Err(); err != nil {
					return fmt.Errorf("client %d, %d operations after the repair: %w", i, k, err)
				}
				li := rnd.IntN(len(gs))
				if c.hot || rnd.IntN(2) == 0 {
					li = 0 // the hottest line
				}
				start := ms[i].Runtime().Now()
				err := op(ctx, i, li, rnd.Float64() < c.wr, time.Duration(rnd.IntN(3))*time.Microsecond)
				now := ms[i].Runtime().Now()
				if rp := farmem.Time(repaired.Load()); rp != 0 {
					// the wait counted from the repair at the latest
					from := max(start, rp)
					if last > from {
						from = last
					}
					if d := int64(now - from); d > maxWait.Load() {
						maxWait.Store(d)
					}
				}
				if err != nil {
					if !errors.Is(err, farmem.ErrNodeDown) {
						return fmt.Errorf("client %d: %w", i, err)
					}
					// A line the dead node held, before its repair: retry.
					downs.Add(1)
					if err := ms[i].Runtime().Sleep(ctx, 5*time.Microsecond); err != nil {
						return fmt.Errorf("client %d after %d operations: %w", i, k, err)
					}
					continue
				}
				last = now
				if repaired.Load() != 0 {
					k++
				}
			}
			return nil
		})
	})
	require.NoError(t, runErr)
	require.NotZero(t, crashed.Load(), "the victim never crashed")
	require.NotZero(t, repaired.Load(), "the repair did not run or failed")
	require.Zero(t, sw.violations.Load(), "SWMR violated among the survivors")
	require.Zero(t, sw.torn.Load(), "torn reads")
	// The longest wait for one operation after the repair: a wait for an answer the dead node
	// never sends lasts ReplyTimeout, and the contention of the load adds some.
	bound := max(2*time.Millisecond, 2*sh.reply)
	require.LessOrEqual(t, time.Duration(maxWait.Load()), bound, "a survivor waited too long after the repair")
	r.do(func() { _ = r.c.Close() }) // the dead node's part fails: it is down
	latches, ctrs := r.farWords(t, gs)
	for i := range gs {
		require.Zero(t, latches[i], "line %d's latch after close: a hold was left behind", i)
		lo := uint64(acked[i].Load())
		require.GreaterOrEqual(t, ctrs[i], lo, "line %d lost acknowledged writes", i)
		require.LessOrEqual(t, ctrs[i], lo+uint64(unacked.Load()), "line %d has writes nobody made", i)
	}
	t.Logf("crash at %v, repair (%d holds) at %v; %d operations met the dead node before its repair; longest wait after it %v",
		time.Duration(farmem.Time(crashed.Load())-start), removed.Load(), time.Duration(farmem.Time(repaired.Load())-start),
		downs.Load(), time.Duration(maxWait.Load()))
}

// TestGroupRepairExact is the property of the group codec's online repair, over random
// holdings of two lines among 64 compute nodes (many of them in the dead node's group):
// whatever the dead node held (a share, the exclusive hold, nothing) and whoever else shares,
// Repair removes exactly the dead node's part. After it, the holder field names the live
// exclusive holder or no one, every other group's count is exactly its live sharers (a member
// that holds nothing never decrements; no live count is removed), the dead node's group's count
// is zero (its live members gave their shares up to the census), a live writer then gets each
// line, and after Close every word is zero.
func TestGroupRepairExact(t *testing.T) {
	seeds := uint64(6)
	if *long {
		seeds = 40
	}
	const nodes = 64
	for seed := uint64(1); seed <= seeds; seed++ {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) {
			r := simRig(t, simModel(nodes, 1), seed, selcc.Options{LineSize: 64, Frames: 4, ReplyTimeout: time.Millisecond})
			gs := r.lines(t, 2)
			cd := r.c.Options().Codec.(selcc.Groups)
			cls := make([]*selcc.Client, nodes)
			for i := range nodes {
				_, cls[i] = r.client(t, i)
			}
			rnd := r.f.Runtime().NewRand()
			deadIdx := 1 + rnd.IntN(nodes-1) // not the first node: the checks read through it
			dead := r.comp[deadIdx].ComputeID()
			group := func(id farmem.ComputeID) int { return int(id-1) % 8 }
			// holders[l]: compute index -> true (shared) for line l; excl[l]: the M holder or -1
			holders := []map[int]bool{{}, {}}
			excl := []int{-1, -1}
			r.do(func() {
				ctx := context.Background()
				for l, g := range gs {
					if rnd.IntN(3) == 0 {
						x := rnd.IntN(nodes)
						if rnd.IntN(2) == 0 {
							x = deadIdx
						}
						gd, err := cls[x].Lock(ctx, g)
						require.NoError(t, err)
						require.NoError(t, gd.Unlock(ctx))
						excl[l] = x
						continue
					}
					for range 1 + rnd.IntN(12) {
						x := rnd.IntN(nodes)
						if rnd.IntN(2) == 0 { // the dead node's group, often the dead node
							x = (deadIdx + 8*rnd.IntN(nodes/8)) % nodes
						}
						gd, err := cls[x].RLock(ctx, g)
						require.NoError(t, err)
						require.NoError(t, gd.Unlock(ctx))
						holders[l][x] = true
					}
				}
			})
			want := 0
			for l := range gs {
				if excl[l] == deadIdx || holders[l][deadIdx] {
					want++
				}
			}
			require.NoError(t, r.s.Crash(r.comp[deadIdx]))
			live := (deadIdx + 1) % nodes
			r.do(func() {
				n, err := cls[live].Repair(context.Background(), dead, gs)
				require.NoError(t, err)
				require.Equal(t, want, n, "holds removed")
			})
			for l := range gs {
				inGroup := 0
				for x := range holders[l] {
					if x != deadIdx && group(r.comp[x].ComputeID()) == group(dead) {
						inGroup++
					}
				}
				t.Logf("line %d: dead %v shared %v, exclusive holder index %d (dead %d); %d sharers, %d live in the dead node's group",
					l, dead, holders[l][deadIdx], excl[l], deadIdx, len(holders[l]), inGroup)
			}
			latches, _ := r.farWords(t, gs)
			for l := range gs {
				w := latches[l]
				if x := excl[l]; x >= 0 && x != deadIdx {
					require.Equal(t, r.comp[x].ComputeID(), cd.Holder(w), "line %d: the live holder", l)
				} else {
					require.Zero(t, cd.Holder(w), "line %d: holder after the repair", l)
				}
				var count [8]int
				for x := range holders[l] {
					if x != deadIdx {
						count[group(r.comp[x].ComputeID())]++
					}
				}
				count[group(dead)] = 0
				for gi := range 8 {
					require.Equal(t, count[gi], cd.Count(w, gi), "line %d, group %d (the dead node's: %d)", l, gi, group(dead))
				}
			}
			r.do(func() {
				ctx := context.Background()
				for _, g := range gs {
					gd, err := cls[live].Lock(ctx, g)
					require.NoError(t, err, "a live writer after the repair")
					require.NoError(t, gd.Unlock(ctx))
				}
				_ = r.c.Close()
			})
			latches, _ = r.farWords(t, gs)
			for l := range gs {
				require.Zero(t, latches[l], "line %d's word after Close", l)
			}
		})
	}
}
