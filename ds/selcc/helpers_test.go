package selcc_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/farmem/farmem/alloc"
	"github.com/farmem/farmem/ds/selcc"
	"github.com/farmem/farmem/farmem"
	"github.com/farmem/farmem/farmem/farmemtest"
	"github.com/farmem/farmem/farmem/lincheck"
	"github.com/farmem/farmem/farmem/local"
	"github.com/farmem/farmem/sim"
)

// rig is a fabric with SELCC open on it, on local or sim.
type rig struct {
	f    farmem.Fabric
	s    *sim.Sim // nil on local
	comp []farmem.NodeID
	c    *selcc.Cluster
	lf   *local.Fabric
	last selcc.NodeStats // summed by coherenceSim
}

func localRig(t *testing.T, o local.Options, so selcc.Options) *rig {
	t.Helper()
	o.Strict = true
	f, err := local.New(o)
	require.NoError(t, err)
	r := &rig{f: f, lf: f, comp: f.Topology().ComputeNodes()}
	t.Cleanup(func() {
		if r.c != nil {
			_ = r.c.Close()
		}
		require.Zero(t, f.Violations(), "strict-mode violations")
		_ = f.Close()
	})
	r.open(t, so)
	return r
}

func simModel(nodes, clients int) sim.Model {
	m := sim.ConnectX6()
	m.ComputeNodes, m.ClientsPerNode, m.MaxHandlers = nodes, clients+4, 1
	m.Jitter = 200 * time.Nanosecond
	m.SharedSize = 256 << 10
	m.SliceSize = 4 << 10
	return m
}

func simRig(t *testing.T, m sim.Model, seed uint64, so selcc.Options) *rig {
	t.Helper()
	s, err := sim.New(m, seed)
	require.NoError(t, err)
	r := &rig{f: s, s: s, comp: s.Topology().ComputeNodes()}
	t.Cleanup(func() {
		if r.c != nil {
			r.do(func() { _ = r.c.Close() })
		}
		_ = s.Close()
	})
	r.open(t, so)
	return r
}

func (r *rig) open(t *testing.T, so selcc.Options) {
	r.do(func() {
		ctx := context.Background()
		c, err := selcc.Open(ctx, r.f, so)
		require.NoError(t, err)
		r.c = c
		m, err := r.f.Open(ctx, r.comp[0])
		require.NoError(t, err)
		defer m.Close()
		require.NoError(t, alloc.FormatAll(ctx, m, alloc.FormatOptions{}))
	})
}

// do runs body inside the fabric (inside the simulation on sim).
func (r *rig) do(body func()) { farmemtest.Within(r.f, body) }

// client opens client i (round robin over the compute nodes) with its SELCC handle.
func (r *rig) client(t *testing.T, i int) (farmem.Memory, *selcc.Client) {
	t.Helper()
	ctx := context.Background()
	m, err := r.f.Open(ctx, r.comp[i%len(r.comp)])
	require.NoError(t, err)
	t.Cleanup(func() { _ = m.Close() })
	cl, err := r.c.Client(ctx, m)
	require.NoError(t, err)
	return m, cl
}

// lines allocates k GCLs (inside the fabric).
func (r *rig) lines(t *testing.T, k int) []selcc.GCL {
	var gs []selcc.GCL
	m, cl := r.client(t, 0)
	r.do(func() {
		ctx := context.Background()
		a, err := alloc.New(ctx, m, alloc.Options{})
		require.NoError(t, err)
		defer a.Close()
		for range k {
			g, err := cl.Alloc(ctx, a)
			require.NoError(t, err)
			gs = append(gs, g)
		}
	})
	return gs
}

// swmr checks single-writer-multiple-reader per line at every instant: each guard registers on
// entry and leaves on exit; a writer needs the line empty, a reader needs no writer.
type swmr struct {
	state      []atomic.Int64 // -1 writer, n > 0 readers
	violations atomic.Int64
	torn       atomic.Int64 // reads that saw a line half written
}

func newSWMR(k int) *swmr { return &swmr{state: make([]atomic.Int64, k)} }

func (s *swmr) enter(i int, excl bool) {
	if excl {
		if !s.state[i].CompareAndSwap(0, -1) {
			s.violations.Add(1)
		}
		return
	}
	if s.state[i].Add(1) <= 0 {
		s.violations.Add(1)
	}
}

func (s *swmr) exit(i int, excl bool) {
	if excl {
		s.state[i].Store(0)
		return
	}
	s.state[i].Add(-1)
}

var register = lincheck.Register[uint64]()

type regHistory = lincheck.History[lincheck.RegisterInput[uint64], lincheck.RegisterOutput[uint64]]

// workload: n clients each run k operations on random lines of gs: with probability wr an
// exclusive one (read the counter in word 0, write counter+1 there and a unique value to every
// other word), else a shared one (read the line, check every word after the first agrees: no
// tear, record a register read). Returns the increments per line.
func (r *rig) workload(t *testing.T, n, k int, wr float64, gs []selcc.GCL, sw *swmr, h *regHistory, hold time.Duration) []int64 {
	t.Helper()
	words := r.c.Options().LineSize / 8
	ms := make([]farmem.Memory, n)
	cls := make([]*selcc.Client, n)
	for i := range n {
		ms[i], cls[i] = r.client(t, i)
	}
	incs := make([]atomic.Int64, len(gs))
	r.do(func() {
		err := farmemtest.Parallel(r.f.Runtime(), n, func(i int) error {
			ctx := context.Background()
			m, cl := ms[i], cls[i]
			rt := m.Runtime()
			rnd := rt.NewRand()
			rec := h.Client(int(m.Info().ID))
			buf := make([]byte, 8*words)
			for j := range k {
				li := rnd.IntN(len(gs))
				g := gs[li]
				if rnd.Float64() < wr {
					v := uint64(m.Info().ID)<<32 | uint64(j+1)
					op := rec.Call(register.Write(uint64(li), v))
					gd, err := cl.Lock(ctx, g)
					if err != nil {
						return err
					}
					sw.enter(li, true)
					c, err := gd.ReadUint64(ctx, 0)
					if err != nil {
						return err
					}
					for w := 1; w < words; w++ {
						putU64(buf[8*w:], v)
					}
					putU64(buf, c+1)
					if err := gd.Write(ctx, 0, buf); err != nil {
						return err
					}
					if hold > 0 {
						_ = rt.Sleep(ctx, time.Duration(rnd.Int64N(int64(hold))))
					}
					sw.exit(li, true)
					if err := gd.Unlock(ctx); err != nil {
						return err
					}
					incs[li].Add(1)
					op.Return(register.Ack())
					continue
				}
				op := rec.Call(register.Read(uint64(li)))
				gd, err := cl.RLock(ctx, g)
				if err != nil {
					return err
				}
				sw.enter(li, false)
				if err := gd.Read(ctx, 0, buf); err != nil {
					return err
				}
				v := getU64(buf[8:])
				for w := 2; w < words; w++ {
					if x := getU64(buf[8*w:]); x != v {
						sw.torn.Add(1) // a write under way beside this read
						break
					}
				}
				if hold > 0 {
					_ = rt.Sleep(ctx, time.Duration(rnd.Int64N(int64(hold))))
				}
				sw.exit(li, false)
				if err := gd.Unlock(ctx); err != nil {
					return err
				}
				op.Return(register.Value(v))
			}
			return nil
		})
		require.NoError(t, err)
	})
	out := make([]int64, len(gs))
	for i := range incs {
		out[i] = incs[i].Load()
	}
	return out
}

// farWords reads the latch word and the counter of each line from far memory (after Close,
// which writes every dirty line back).
func (r *rig) farWords(t *testing.T, gs []selcc.GCL) (latches, counters []uint64) {
	m, err := r.f.Open(context.Background(), r.comp[0])
	require.NoError(t, err)
	defer m.Close()
	r.do(func() {
		ctx := context.Background()
		for _, g := range gs {
			var b [16]byte
			require.NoError(t, m.Read(ctx, g.Latch(), b[:]))
			latches = append(latches, getU64(b[:]))
			counters = append(counters, getU64(b[8:]))
		}
	})
	return latches, counters
}

func putU64(b []byte, v uint64) {
	for i := range 8 {
		b[i] = byte(v >> (8 * i))
	}
}

func getU64(b []byte) uint64 {
	var v uint64
	for i := range 8 {
		v |= uint64(b[i]) << (8 * i)
	}
	return v
}

// quiescentAgreement checks, with no guard held, that every line's latch word is exactly what
// the nodes' caches hold (Recount changes nothing): no leftover transient share, no carry, the
// exclusive field naming the one M node.
func (r *rig) quiescentAgreement(t *testing.T, gs []selcc.GCL) {
	m, err := r.f.Open(context.Background(), r.comp[0])
	require.NoError(t, err)
	defer m.Close()
	r.do(func() {
		n, err := r.c.Recount(context.Background(), m, gs)
		require.NoError(t, err)
		require.Zero(t, n, "latch words disagree with the caches' memos")
	})
}
