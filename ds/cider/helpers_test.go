package cider_test

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/farmem/farmem/alloc"
	"github.com/farmem/farmem/bench/ptrarray"
	"github.com/farmem/farmem/ds/cider"
	"github.com/farmem/farmem/ds/ptrsync"
	"github.com/farmem/farmem/ds/qlock"
	"github.com/farmem/farmem/ds/race"
	"github.com/farmem/farmem/farmem"
	"github.com/farmem/farmem/farmem/farmemtest"
	"github.com/farmem/farmem/farmem/lincheck"
	"github.com/farmem/farmem/farmem/local"
	"github.com/farmem/farmem/internal/dstest"
	"github.com/farmem/farmem/sim"
)

// syncKind names a synchronizer of the tests.
type syncKind string

const (
	optimistic syncKind = "optimistic"
	spin       syncKind = "spin"
	mcs        syncKind = "mcs"
	ciderAuto  syncKind = "cider"
	ciderMixed syncKind = "cider-random" // CIDER with each update's path drawn at random
	ciderPess  syncKind = "cider-pessimistic"
	// Local write combining (LocalWC) over optimistic CAS and over CIDER.
	optimisticLWC syncKind = "optimistic+lwc"
	ciderLWC      syncKind = "cider+lwc"
)

var allSyncs = []syncKind{optimistic, spin, mcs, ciderAuto, ciderMixed, ciderPess, optimisticLWC, ciderLWC}

// structure names the index the synchronizers run on.
type structure string

const (
	arrayKV structure = "array"
	raceKV  structure = "race"
)

// env is a formatted fabric holding a pointer array and a RACE table.
type env struct {
	f     farmem.Fabric
	s     *sim.Sim // nil on local
	comp  []farmem.NodeID
	ao    alloc.Options
	lease time.Duration // the locks' lease

	arrayRoot, raceRoot farmem.Addr

	mu      sync.Mutex // guards credits and tables (test setup only)
	credits map[farmem.NodeID]*cider.Credits
	tables  map[farmem.NodeID]*cider.LocalTable
}

// tableOf returns compute node n's shared local write-combining table.
func (e *env) tableOf(n farmem.NodeID) *cider.LocalTable {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.tables == nil {
		e.tables = map[farmem.NodeID]*cider.LocalTable{}
	}
	if e.tables[n] == nil {
		e.tables[n] = cider.NewLocalTable()
	}
	return e.tables[n]
}

var aopts = dstest.AllocOptions

func newLocalEnv(t testing.TB, lo local.Options, keys uint64, rp race.Params) *env {
	t.Helper()
	lo.Strict = true
	if lo.MemorySize == 0 {
		lo.MemorySize = 4 << 20
	}
	if lo.ComputeNodes == 0 {
		lo.ComputeNodes = 3
	}
	f, err := local.New(lo)
	require.NoError(t, err)
	t.Cleanup(func() {
		require.Zero(t, f.Violations(), "strict-mode violations")
		_ = f.Close()
	})
	e := &env{f: f, comp: f.Topology().ComputeNodes(), ao: aopts, lease: time.Second}
	e.setup(t, keys, rp)
	return e
}

func newSimEnv(t testing.TB, m sim.Model, seed uint64, keys uint64, rp race.Params) *env {
	t.Helper()
	s, err := sim.New(m, seed)
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	e := &env{f: s, s: s, comp: s.Topology().ComputeNodes(), ao: aopts, lease: time.Millisecond}
	e.do(func() { e.setup(t, keys, rp) })
	return e
}

// do runs body inside the fabric (inside the simulation on sim).
func (e *env) do(body func()) { farmemtest.Within(e.f, body) }

func (e *env) setup(t testing.TB, keys uint64, rp race.Params) {
	ctx := context.Background()
	m, err := e.f.Open(ctx, e.comp[0])
	require.NoError(t, err)
	defer m.Close()
	require.NoError(t, alloc.FormatAll(ctx, m, alloc.FormatOptions{}))
	a, err := alloc.New(ctx, m, e.ao)
	require.NoError(t, err)
	defer a.Close()
	if keys > 0 {
		e.arrayRoot, err = ptrarray.Create(ctx, m, a, ptrarray.Params{Keys: keys})
		require.NoError(t, err)
	}
	if rp.MetaSize > 0 {
		e.raceRoot, err = race.Create(ctx, m, a, rp)
		require.NoError(t, err)
	}
}

// creditsOf returns compute node n's shared contention state.
func (e *env) creditsOf(n farmem.NodeID) *cider.Credits {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.credits == nil {
		e.credits = map[farmem.NodeID]*cider.Credits{}
	}
	c := e.credits[n]
	if c == nil {
		c = cider.NewCredits(0)
		e.credits[n] = c
	}
	return c
}

func (e *env) newSync(t testing.TB, m farmem.Memory, k syncKind) ptrsync.Synchronizer {
	t.Helper()
	lo := qlock.Options{Lease: e.lease}
	var s ptrsync.Synchronizer
	var err error
	switch k {
	case optimistic:
		s = ptrsync.NewOptimistic()
	case spin:
		s, err = cider.NewSpin(m, cider.SpinOptions{Lease: e.lease})
	case mcs:
		s, err = cider.NewMCS(m, lo)
	case ciderAuto:
		s, err = cider.NewCIDER(m, e.creditsOf(m.Info().Node), cider.Options{Lock: lo})
	case ciderMixed:
		s, err = cider.NewCIDER(m, e.creditsOf(m.Info().Node), cider.Options{Lock: lo, Mode: cider.RandomMode})
	case ciderPess:
		s, err = cider.NewCIDER(m, e.creditsOf(m.Info().Node), cider.Options{Lock: lo, Mode: cider.AlwaysPessimistic})
	case optimisticLWC:
		s, err = cider.NewLocalWC(m, e.tableOf(m.Info().Node), ptrsync.NewOptimistic(), cider.LocalOptions{Patience: e.lease})
	case ciderLWC:
		var in ptrsync.Synchronizer
		if in, err = cider.NewCIDER(m, e.creditsOf(m.Info().Node), cider.Options{Lock: lo}); err == nil {
			s, err = cider.NewLocalWC(m, e.tableOf(m.Info().Node), in, cider.LocalOptions{Patience: e.lease})
		}
	default:
		t.Fatalf("unknown synchronizer %q", k)
	}
	require.NoError(t, err)
	return s
}

// statsOf returns a synchronizer's counters: ptrsync's, and for ds/cider's those of the lock
// paths too.
func statsOf(s ptrsync.Synchronizer) cider.Stats {
	switch x := s.(type) {
	case *cider.LocalWC:
		return statsOf(x.Inner())
	case *ptrsync.Optimistic:
		return cider.Stats{Stats: x.Stats()}
	case interface{ Stats() cider.Stats }:
		return x.Stats()
	case *stall:
		return statsOf(x.Synchronizer)
	}
	panic(fmt.Sprintf("no counters in %T", s))
}

// lastOf describes a synchronizer's last operation.
func lastOf(s ptrsync.Synchronizer) cider.OpInfo {
	switch x := s.(type) {
	case *cider.LocalWC:
		return lastOf(x.Inner())
	case *ptrsync.Optimistic:
		return cider.OpInfo{Op: x.Last()}
	case interface{ Last() cider.OpInfo }:
		return x.Last()
	case *stall:
		return lastOf(x.Synchronizer)
	}
	panic(fmt.Sprintf("no last operation in %T", s))
}

// stall is a synchronizer that calls before ahead of each Commit (after the structure read the
// pointer), then commits through the synchronizer it wraps.
type stall struct {
	ptrsync.Synchronizer
	before func()
}

func (s *stall) Commit(ctx context.Context, t ptrsync.Target) (ptrsync.Result, error) {
	s.before()
	return s.Synchronizer.Commit(ctx, t)
}

// kv is a structure's operations with uint64 keys.
type kv interface {
	Search(ctx context.Context, k uint64) ([]byte, error)
	Insert(ctx context.Context, k uint64, v []byte) error
	Update(ctx context.Context, k uint64, v []byte) error
	Delete(ctx context.Context, k uint64) error
}

// raceKVs adapts a RACE table: keys as 8 big-endian bytes, its errors as the pointer array's.
type raceKVs struct{ t *race.Table }

func rkey(k uint64) []byte { return binary.BigEndian.AppendUint64(nil, k) }

func mapErr(err error) error {
	switch {
	case errors.Is(err, race.ErrNotFound):
		return ptrarray.ErrNotFound
	case errors.Is(err, race.ErrExists):
		return ptrarray.ErrExists
	}
	return err
}

func (r raceKVs) Search(ctx context.Context, k uint64) ([]byte, error) {
	v, err := r.t.Search(ctx, rkey(k))
	return v, mapErr(err)
}
func (r raceKVs) Insert(ctx context.Context, k uint64, v []byte) error {
	return mapErr(r.t.Insert(ctx, rkey(k), v))
}
func (r raceKVs) Update(ctx context.Context, k uint64, v []byte) error {
	return mapErr(r.t.Update(ctx, rkey(k), v))
}
func (r raceKVs) Delete(ctx context.Context, k uint64) error { return mapErr(r.t.Delete(ctx, rkey(k))) }

// client is one client's Memory, allocator, synchronizer and structure handle.
type client struct {
	m    farmem.Memory
	a    *alloc.Allocator
	sync ptrsync.Synchronizer
	kv   kv
	arr  *ptrarray.Array
	tab  *race.Table
	hs   *afterVerbs // set by openHooked: actions after the client's verbs
}

// open opens client i (round robin over the compute nodes) on structure st with synchronizer k.
// On sim it must run inside the simulation.
func (e *env) open(t testing.TB, i int, st structure, k syncKind) *client {
	t.Helper()
	return e.openWith(t, i, st, k, nil)
}

// openWith is open with the synchronizer wrapped by wrap (if not nil).
func (e *env) openWith(t testing.TB, i int, st structure, k syncKind, wrap func(ptrsync.Synchronizer) ptrsync.Synchronizer) *client {
	t.Helper()
	return e.openFull(t, i, st, k, wrap, nil)
}

// openHooked is open with every verb of the client seen through an Interposer running the
// actions armed on c.hs.
func (e *env) openHooked(t testing.TB, i int, st structure, k syncKind) *client {
	t.Helper()
	return e.openFull(t, i, st, k, nil, new(afterVerbs))
}

func (e *env) openFull(t testing.TB, i int, st structure, k syncKind, wrap func(ptrsync.Synchronizer) ptrsync.Synchronizer, hs *afterVerbs) *client {
	t.Helper()
	ctx := context.Background()
	m, err := e.f.Open(ctx, e.comp[i%len(e.comp)])
	require.NoError(t, err)
	raw := m
	if hs != nil {
		m = interposed(m, hs)
	}
	a, err := alloc.New(ctx, m, e.ao)
	require.NoError(t, err)
	c := &client{m: m, a: a, sync: e.newSync(t, m, k), hs: hs}
	if wrap != nil {
		c.sync = wrap(c.sync)
	}
	switch st {
	case arrayKV:
		c.arr, err = ptrarray.Open(ctx, m, a, e.arrayRoot, ptrarray.Options{Sync: c.sync})
		require.NoError(t, err)
		c.kv = c.arr
	case raceKV:
		c.tab, err = race.Open(ctx, m, a, e.raceRoot, race.Options{Sync: c.sync, Lease: 20 * e.lease})
		require.NoError(t, err)
		c.kv = raceKVs{c.tab}
	}
	t.Cleanup(func() {
		_ = a.Close()
		_ = raw.Close()
	})
	return c
}

func val(v uint64, n int) []byte {
	b := make([]byte, max(n, 8))
	binary.LittleEndian.PutUint64(b, v)
	for i := 8; i < len(b); i++ {
		b[i] = byte(v) + byte(i)
	}
	return b
}

func unval(b []byte) uint64 { return binary.LittleEndian.Uint64(b) }

var kvModel = lincheck.KV[uint64, uint64]()

type kvHistory = lincheck.History[lincheck.KVInput[uint64, uint64], lincheck.KVOutput[uint64, uint64]]

// workload is a random mix of operations over a small key space.
type workload struct {
	keys    uint64
	ops     int // per client
	search  int // percent; then insert, update, the rest delete
	insert  int
	update  int
	maxVal  int
	unknown int // stop a client after this many unknown outcomes
}

// run performs w's operations with c, recording them in h. Written values are unique: the
// client id in the high bits, a counter in the low ones.
func (w workload) run(ctx context.Context, c *client, h *kvHistory) error {
	id := uint64(c.m.Info().ID)
	rec := h.Client(int(id))
	rng := c.m.Runtime().Rand()
	unknown := 0
	for n := range w.ops {
		k := rng.Uint64N(w.keys)
		v := id<<32 | uint64(n+1)
		body := val(v, 8+rng.IntN(w.maxVal+1))
		p := rng.IntN(100)
		var op lincheck.Op[lincheck.KVInput[uint64, uint64], lincheck.KVOutput[uint64, uint64]]
		var out lincheck.KVOutput[uint64, uint64]
		var err error
		switch {
		case p < w.search:
			op = rec.Call(kvModel.Get(k))
			var got []byte
			got, err = c.kv.Search(ctx, k)
			switch {
			case errors.Is(err, ptrarray.ErrNotFound):
				out, err = kvModel.Missing(), nil
			case err == nil:
				if len(got) < 8 {
					return fmt.Errorf("short value %x", got)
				}
				out = kvModel.Found(unval(got))
			}
		case p < w.search+w.insert:
			op = rec.Call(kvModel.Insert(k, v))
			err = c.kv.Insert(ctx, k, body)
			out = kvModel.OK()
			if errors.Is(err, ptrarray.ErrExists) {
				out, err = kvModel.Exists(), nil
			}
		case p < w.search+w.insert+w.update:
			op = rec.Call(kvModel.Update(k, v))
			err = c.kv.Update(ctx, k, body)
			out = kvModel.OK()
			if errors.Is(err, ptrarray.ErrNotFound) {
				out, err = kvModel.Missing(), nil
			}
		default:
			op = rec.Call(kvModel.Delete(k))
			err = c.kv.Delete(ctx, k)
			out = kvModel.OK()
			if errors.Is(err, ptrarray.ErrNotFound) {
				out, err = kvModel.Missing(), nil
			}
		}
		if op.End(out, err) == lincheck.Unknown {
			unknown++
			if unknown >= w.unknown {
				return nil
			}
		}
		if err != nil && !errors.Is(err, farmem.ErrNodeDown) && ctx.Err() == nil {
			return err
		}
	}
	return nil
}

func sumStats(cs []*client) cider.Stats {
	var s cider.Stats
	for _, c := range cs {
		s = s.Add(statsOf(c.sync))
	}
	return s
}
