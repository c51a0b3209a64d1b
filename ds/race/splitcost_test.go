package race_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/farmem/farmem/alloc"
	"github.com/farmem/farmem/cxl"
	"github.com/farmem/farmem/ds/race"
	"github.com/farmem/farmem/farmem"
	"github.com/farmem/farmem/farmem/farmemtest"
	"github.com/farmem/farmem/farmem/local"
	"github.com/farmem/farmem/internal/dstest"
	"github.com/farmem/farmem/sim"
)

// splitSim runs body on a simulated ConnectX-6 cluster (two memory nodes, two compute nodes)
// holding a table laid out with p, with a client per compute node; wrap, if set, sees client
// 0's verbs.
func splitSim(t *testing.T, p race.Params, opts race.Options, wrap func(s *sim.Sim, m farmem.Memory) farmem.Memory, body func(s *sim.Sim, cs []*client)) {
	t.Helper()
	model := sim.ConnectX6()
	model.MemoryNodes, model.ComputeNodes, model.MemorySize = 2, 2, envMemory
	s, err := sim.New(model, 1)
	require.NoError(t, err)
	defer s.Close()
	s.Run(func() {
		ctx := context.Background()
		comp := s.Topology().ComputeNodes()
		m0, err := s.Open(ctx, comp[0])
		require.NoError(t, err)
		require.NoError(t, alloc.FormatAll(ctx, m0, alloc.FormatOptions{}))
		a0, err := alloc.New(ctx, m0, dstest.AllocOptions)
		require.NoError(t, err)
		root, err := race.CreateVersion(ctx, m0, a0, p, wholeSplit.version) // the whole split's costs
		require.NoError(t, err)
		cs := make([]*client, 2)
		for i := range cs {
			m, err := s.Open(ctx, comp[i])
			require.NoError(t, err)
			a, err := alloc.New(ctx, m, dstest.AllocOptions)
			require.NoError(t, err)
			tm := m
			if i == 0 && wrap != nil {
				tm = wrap(s, m)
			}
			tab, err := race.Open(ctx, tm, a, root, opts)
			require.NoError(t, err)
			cs[i] = &client{m: m, a: a, tab: tab}
		}
		body(s, cs)
		for _, c := range cs {
			require.NoError(t, c.tab.Close())
			require.NoError(t, c.a.Close())
		}
	})
}

// splitInsertRoundTrips is the round trips of the first insert that splits a table of one
// subtable, uncontended: the split's (its reads of block heads ahead of the freeze take the
// round trip its reads of whole blocks took after it) and the insert's.
const splitInsertRoundTrips = 26

// TestSplitCost: the insert that splits a subtable reads one Unit of each of its KV blocks
// (their heads), not the blocks, so its bytes do not grow with the values; counted on the
// simulator, for 8-byte and 1,000-byte values, against a bound from the geometry: the subtable
// read four times (twice before and twice after its header moves, the new half once), a Unit
// per slot, the atomics' results and a few KiB for the directory and the insert's own reads.
func TestSplitCost(t *testing.T) {
	const groups = 8
	p := race.Params{Groups: groups}
	slots := uint64(groups * 3 * 8)
	subtable := 5*race.Unit + 8*slots
	bound := 4*subtable + slots*race.Unit + 3*8*slots + 4<<10
	for _, vlen := range []int{8, 1000} {
		splitSim(t, p, race.Options{}, nil, func(s *sim.Sim, cs []*client) {
			ctx := context.Background()
			c := cs[0]
			for i := uint64(0); c.tab.Stats().Splits == 0; i++ {
				require.Less(t, i, slots, "no split")
				before := c.m.Stats()
				require.NoError(t, c.tab.Insert(ctx, key(i), val(i, vlen)))
				if c.tab.Stats().Splits == 0 {
					continue
				}
				d := c.m.Stats().Sub(before)
				t.Logf("%d-byte values: the insert that split (after %d keys): %v", vlen, i, d)
				require.LessOrEqual(t, d.BytesIn, bound, "bytes read by the split (%d-byte values)", vlen)
				require.LessOrEqual(t, d.RoundTrips, uint64(splitInsertRoundTrips), "round trips of the insert that split")
			}
			audit(t, c, true)
		})
	}
}

// TestSplitWaiterResumes: a client whose insert meets a split in progress resumes within
// MaxSplitPoll plus a few round trips of the split's end (the release of its lock), however
// long the split took: counted in the simulator's virtual time, for splits stalled 0.5 to 3 ms
// (within their lease) after freezing.
func TestSplitWaiterResumes(t *testing.T) {
	for _, stall := range []time.Duration{500 * time.Microsecond, 1300 * time.Microsecond, 2100 * time.Microsecond, 2900 * time.Microsecond} {
		var fired atomic.Bool
		var released farmem.Time // when the splitter last released a lock of its own
		var id farmem.ClientID
		wrap := func(s *sim.Sim, m farmem.Memory) farmem.Memory {
			id = m.Info().ID
			steps := race.NewSplitSteps(0)
			return &farmemtest.Interposer{Memory: m, After: func(ctx context.Context, v farmemtest.Verb, _ uint64, err error) {
				if err != nil {
					return
				}
				if !fired.Load() && steps.Step(v) == 1 {
					fired.Store(true)
					_ = s.Runtime().Sleep(ctx, stall)
				}
				if v.Single && len(v.Batch.Ops) == 1 {
					op := v.Batch.Ops[0]
					if op.Kind == farmem.OpCAS && op.Swap == 0 && op.Cmp>>48 == uint64(id) && op.Cmp != 0 {
						released = s.Now()
					}
				}
			}}
		}
		splitSim(t, race.Params{Groups: 8}, race.Options{Lease: 50 * time.Millisecond}, wrap, func(s *sim.Sim, cs []*client) {
			ctx := context.Background()
			var resumed farmem.Time
			var splitterDone farmem.Time
			errs := make([]error, 2)
			require.NoError(t, s.Parallel(2, func(i int) {
				c := cs[i]
				if i == 0 {
					for k := uint64(0); c.tab.Stats().Splits == 0 && errs[0] == nil; k++ {
						errs[0] = c.tab.Insert(ctx, key(k), val(k, 8))
					}
					splitterDone = s.Now()
					return
				}
				for !fired.Load() {
					if errs[1] = s.Runtime().Sleep(ctx, time.Microsecond); errs[1] != nil {
						return
					}
				}
				errs[1] = c.tab.Insert(ctx, key(1<<20), val(1<<20, 8))
				resumed = s.Now()
			}))
			require.NoError(t, errs[0])
			require.NoError(t, errs[1])
			require.NotZero(t, cs[1].tab.Stats().SplitWaits, "the second client never waited for the split")
			require.NotZero(t, released)
			late := resumed.Sub(released)
			t.Logf("split stalled %v: splitter done %v after its last release, waiter done %v after it", stall, splitterDone.Sub(released), late)
			require.LessOrEqual(t, late, race.MaxSplitPoll+50*time.Microsecond, "waiter resumed late (split stalled %v)", stall)
			audit(t, cs[1], true)
		})
	}
}

// TestSplitLongKeys: keys too long for a block's head (over 40 bytes), mixed with short ones,
// are read whole by splits and end up where lookups find them.
func TestSplitLongKeys(t *testing.T) {
	e := newEnv(t, local.Options{}, race.Params{Groups: 8})
	c := e.open(t, 0, race.Options{})
	ctx := context.Background()
	long := func(i uint64) []byte {
		if i%3 == 0 {
			return key(i)
		}
		return append(bytes.Repeat([]byte{'k'}, 30+int(i%50)), key(i)...)
	}
	const n = 1500
	for i := range uint64(n) {
		require.NoError(t, c.tab.Insert(ctx, long(i), val(i, 16)), "insert %d", i)
	}
	require.Greater(t, c.tab.Stats().Splits, uint64(4))
	for i := range uint64(n) {
		v, err := c.tab.Search(ctx, long(i))
		require.NoError(t, err, "key %d", i)
		require.Equal(t, i, unval(v))
	}
	require.Equal(t, n, audit(t, c, true).Keys)
}

// TestSplitRefusesBadHead: a split that reads a block head not matching its slot word (a key
// byte flipped on the way, so the key's fingerprint differs from the slot's) fails the insert
// with ErrCorrupt before freezing anything: no slot is left frozen nor the lock held, and the
// next insert splits the subtable.
func TestSplitRefusesBadHead(t *testing.T) {
	e := newEnvProto(t, local.Options{}, race.Params{Groups: 8}, wholeSplit)
	var damaged atomic.Bool
	c := e.openWith(t, 0, race.Options{}, func(m farmem.Memory) farmem.Memory {
		return &farmemtest.Interposer{Memory: m, After: func(_ context.Context, v farmemtest.Verb, _ uint64, err error) {
			if err != nil || v.Single || damaged.Load() || len(v.Batch.Ops) < 16 {
				return
			}
			for _, op := range v.Batch.Ops {
				// A split's batch of block heads: many reads of one Unit holding an 8-byte key
				// (an insert reads at most a few blocks at once).
				if op.Kind != farmem.OpRead || len(op.Buf) != race.Unit || binary.LittleEndian.Uint16(op.Buf) != 8 {
					return
				}
			}
			v.Batch.Ops[0].Buf[24+7] ^= 0x5a // the last byte of the first head's key
			damaged.Store(true)
		}}
	})
	ctx := context.Background()
	var i uint64
	var err error
	for ; err == nil; i++ {
		require.Less(t, i, uint64(1000), "no split")
		err = c.tab.Insert(ctx, key(i), val(i, 8))
	}
	require.ErrorIs(t, err, race.ErrCorrupt)
	require.True(t, damaged.Load())
	require.Zero(t, c.tab.Stats().Splits)
	audit(t, c, true)
	require.NoError(t, c.tab.Insert(ctx, key(i-1), val(i-1, 8)))
	require.Equal(t, uint64(1), c.tab.Stats().Splits)
	require.Equal(t, int(i), audit(t, c, true).Keys)
}

// BenchmarkSplit inserts 1,000-byte values into a table of the default geometry on a cxl
// region (one client) until b.N subtables have split, and reports what the inserts that
// split cost: wall time, verbs, round trips and bytes read, per split. The table is of layout
// version 3, whose whole split is done by the one insert that splits (a table of version 4,
// the default, moves a split region by region over many inserts: BenchmarkSplitStages,
// BenchmarkLoadTail). The splits are made in loads of at most splitsPerRegion, each on a new
// table on a region of its own (splitLoads); ns/op is the time of all the inserts per split.
func BenchmarkSplit(b *testing.B) {
	var took time.Duration
	var cost farmem.Stats
	create := func(ctx context.Context, m farmem.Memory, a *alloc.Allocator) (farmem.Addr, error) {
		return race.CreateVersion(ctx, m, a, race.Params{}, wholeSplit.version)
	}
	splits := splitLoads(b, "race-split-*.region", dstest.AllocOptions, create, func(m farmem.Memory, a *alloc.Allocator, root farmem.Addr, want int) int {
		ctx := context.Background()
		tab, err := race.Open(ctx, m, a, root, race.Options{})
		require.NoError(b, err)
		defer tab.Close()
		made := 0
		for i := uint64(0); made < want; i++ {
			before, s0 := m.Stats(), tab.Stats().Splits
			t0 := time.Now()
			if err := tab.Insert(ctx, key(i), val(i, 1000)); err != nil {
				b.Fatal(err)
			}
			d := time.Since(t0)
			if n := tab.Stats().Splits - s0; n > 0 {
				made += int(n)
				took += d
				cost = cost.Add(m.Stats().Sub(before))
			}
		}
		return made
	})
	n := float64(splits)
	b.ReportMetric(float64(took.Nanoseconds())/n, "split-ns")
	b.ReportMetric(float64(cost.TotalVerbs())/n, "verbs/split")
	b.ReportMetric(float64(cost.RoundTrips)/n, "rtt/split")
	b.ReportMetric(float64(cost.BytesIn)/n, "in-B/split")
}

// splitsPerRegion is how many splits a split benchmark makes on one table before it goes on
// with a new table on a new region: the 1,000-byte values of fewer than 1,500 splits fill a
// region's two 512 MiB nodes (BenchmarkSplit failed with "heap exhausted" at -benchtime
// 1500x when it made all of b.N on one region; 535 at the default -benchtime passed).
const splitsPerRegion = 400

// splitLoads makes b.N splits (or a few more) in loads of at most splitsPerRegion: each load
// gets a region of its own (tempSplitRegion), removed when the load ends, on which create
// makes a table (with an allocator of options ao); load then inserts into the table at root,
// with a client and an allocator (ao) of its own, until it has made at least want splits, and
// returns how many it made. b's timer runs during the loads alone. It returns the splits made.
func splitLoads(b *testing.B, pattern string, ao alloc.Options, create func(context.Context, farmem.Memory, *alloc.Allocator) (farmem.Addr, error),
	load func(m farmem.Memory, a *alloc.Allocator, root farmem.Addr, want int) int) int {
	b.StopTimer()
	made := 0
	for made < b.N {
		made += oneSplitLoad(b, pattern, ao, create, min(b.N-made, splitsPerRegion), load)
	}
	return made
}

// oneSplitLoad is one load of splitLoads.
func oneSplitLoad(b *testing.B, pattern string, ao alloc.Options, create func(context.Context, farmem.Memory, *alloc.Allocator) (farmem.Addr, error),
	want int, load func(m farmem.Memory, a *alloc.Allocator, root farmem.Addr, want int) int) int {
	f, release := tempSplitRegion(b, pattern)
	defer release()
	root := dstest.Build(b, f, ao, create)
	ctx := context.Background()
	m, err := f.Open(ctx, f.ID())
	require.NoError(b, err)
	defer m.Close()
	a, err := alloc.New(ctx, m, ao)
	require.NoError(b, err)
	defer a.Close()
	b.StartTimer()
	defer b.StopTimer()
	return load(m, a, root, want)
}

// tempSplitRegion creates a temporary cxl region of two 512 MiB memory nodes, named after
// pattern, and attaches to it; it skips where cxl regions are not supported. The caller removes
// the region, calling release (once), so that a benchmark making one region per load holds one
// at a time, not one of 1 GiB per load.
func tempSplitRegion(tb testing.TB, pattern string) (*cxl.Fabric, func()) {
	r, err := cxl.CreateTemp("", pattern, cxl.Options{Shape: cxl.Shape{MemoryNodes: 2, MemorySize: 512 << 20}})
	if errors.Is(err, farmem.ErrNotSupported) {
		tb.Skip(err)
	}
	require.NoError(tb, err)
	f, err := r.Attach(cxl.OpenOptions{})
	if err != nil {
		_ = os.Remove(r.Path())
		_ = r.Close()
		require.NoError(tb, err)
	}
	return f, func() { _ = f.Close(); _ = os.Remove(r.Path()); _ = r.Close() }
}
