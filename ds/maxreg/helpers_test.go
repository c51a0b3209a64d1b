package maxreg_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/farmem/farmem/alloc"
	"github.com/farmem/farmem/ds/maxreg"
	"github.com/farmem/farmem/farmem"
	"github.com/farmem/farmem/farmem/farmemtest"
	"github.com/farmem/farmem/farmem/local"
	"github.com/farmem/farmem/internal/dstest"
	"github.com/farmem/farmem/sim"
)

// crasher is what the tests need of a fabric besides farmem.Fabric.
type crasher interface {
	farmem.Fabric
	CrashClient(farmem.ClientID) error
}

// newLocal returns a local fabric with one memory node and two compute nodes, strict mode on,
// and tearing and jitter as asked; its strict-mode violations are asserted zero at cleanup.
func newLocal(t testing.TB, tearing bool) *local.Fabric {
	t.Helper()
	lo := local.Options{Shape: local.Shape{MemoryNodes: 1, ComputeNodes: 2, MemorySize: 2 << 20}, Strict: true}
	if tearing {
		lo.Tearing, lo.Jitter = true, 3*time.Microsecond
	}
	f, err := local.New(lo)
	require.NoError(t, err)
	t.Cleanup(func() {
		require.Zero(t, f.Violations(), "strict-mode violations")
		_ = f.Close()
	})
	return f
}

// newSim returns a simulated ConnectX-6 cluster shaped as newLocal's, tearing and jitter on.
func newSim(t testing.TB, seed uint64) *sim.Sim {
	t.Helper()
	return dstest.Sim(t, seed, func(m *sim.Model) {
		m.MemoryNodes, m.ComputeNodes, m.MemorySize = 1, 2, 2<<20
		m.Jitter = 300 * time.Nanosecond
	})
}

// create formats f's memory nodes for the allocator and creates a register with p on the
// first memory node, from a client that it then closes.
func create(t testing.TB, f farmem.Fabric, p maxreg.Params) farmem.Addr {
	t.Helper()
	return dstest.Build(t, f, alloc.Options{}, func(ctx context.Context, m farmem.Memory, a *alloc.Allocator) (farmem.Addr, error) {
		return maxreg.Create(ctx, m, a, f.Topology().MemoryNodes()[0], p)
	})
}

// handle is one client's Memory and register handle.
type handle struct {
	m   farmem.Memory
	r   *maxreg.Register
	cut *cutter // set for a client whose write is to be cut
}

// open opens a client on compute node i (mod their number) and its handle; wrap, if set, sees
// the handle's Memory.
func open(t testing.TB, f farmem.Fabric, i int, addr farmem.Addr, opts maxreg.Options, wrap func(farmem.Memory) farmem.Memory) *handle {
	t.Helper()
	_, hm := dstest.OpenClient(t, f, i, wrap)
	r, err := maxreg.Open(context.Background(), hm, addr, opts)
	require.NoError(t, err)
	t.Cleanup(func() { _ = r.Close() })
	h := &handle{m: hm, r: r}
	if c, ok := hm.(*cutter); ok {
		h.cut = c
	}
	return h
}

// cutter is a client whose at-th write batch (an out-of-place record's Write, then the
// metadata CAS) reaches the node cut after its first op: the record is written, then the
// client crashes (through the fabric's fault injection) before the CAS is sent, as a client
// dying between the two posts of its batch would. The write fails with farmem.ErrNodeDown.
type cutter struct {
	farmem.Memory
	at    int
	n     int
	crash func()
	fired atomic.Bool
}

func (c *cutter) Do(ctx context.Context, b *farmem.Batch) error {
	if len(b.Ops) == 2 && b.Ops[0].Kind == farmem.OpWrite && b.Ops[1].Kind == farmem.OpCAS {
		c.n++
		if c.n == c.at {
			var pre farmem.Batch
			pre.Write(b.Ops[0].Addr, b.Ops[0].Buf)
			err := c.Memory.Do(ctx, &pre)
			c.fired.Store(true)
			c.crash()
			return errors.Join(err, fmt.Errorf("cut after the record's write: %w", farmem.ErrNodeDown))
		}
	}
	return c.Memory.Do(ctx, b)
}

// costOf runs op and returns the handle's farmem.Stats and register Stats deltas.
func costOf(h *handle, op func()) (farmem.Stats, maxreg.Stats) {
	s0, r0 := h.m.Stats(), h.r.Stats()
	op()
	return h.m.Stats().Sub(s0), subStats(h.r.Stats(), r0)
}

func subStats(a, b maxreg.Stats) maxreg.Stats {
	return maxreg.Stats{
		Writes: a.Writes - b.Writes, Absorbed: a.Absorbed - b.Absorbed, CASRetries: a.CASRetries - b.CASRetries,
		Reads: a.Reads - b.Reads, Empty: a.Empty - b.Empty, InPlace: a.InPlace - b.InPlace, Torn: a.Torn - b.Torn,
		Stale: a.Stale - b.Stale, Chased: a.Chased - b.Chased, Retries: a.Retries - b.Retries, Refreshes: a.Refreshes - b.Refreshes,
	}
}

func addStats(a, b maxreg.Stats) maxreg.Stats {
	return maxreg.Stats{
		Writes: a.Writes + b.Writes, Absorbed: a.Absorbed + b.Absorbed, CASRetries: a.CASRetries + b.CASRetries,
		Reads: a.Reads + b.Reads, Empty: a.Empty + b.Empty, InPlace: a.InPlace + b.InPlace, Torn: a.Torn + b.Torn,
		Stale: a.Stale + b.Stale, Chased: a.Chased + b.Chased, Retries: a.Retries + b.Retries, Refreshes: a.Refreshes + b.Refreshes,
	}
}

// wantWriteCost checks a write's round trips exactly against its counters: none if absorbed
// without a verb, else the batch and one per lost CAS, and one CAS verb per round trip.
func wantWriteCost(d farmem.Stats, rd maxreg.Stats) error {
	cas := d.VerbsOf(farmem.OpCAS)
	if rd.Absorbed == 1 && d.RoundTrips == maxreg.WriteAbsorbedRoundTrips && cas == 0 {
		return nil
	}
	want := maxreg.WriteRoundTrips + maxreg.CASRetryRoundTrips*rd.CASRetries
	if d.RoundTrips != want || cas != want {
		return fmt.Errorf("write: %d round trips, %d CASes, want %d (%+v; %v)", d.RoundTrips, cas, want, rd, d)
	}
	return nil
}

// wantReadCost checks a read's round trips exactly: one if the in-place copy answered (or the
// register was empty), two if the read chased the pointer, and two more per restart.
func wantReadCost(d farmem.Stats, rd maxreg.Stats) error {
	want := maxreg.ReadChaseRoundTrips * rd.Retries
	if rd.InPlace+rd.Empty == 1 {
		want += maxreg.ReadRoundTrips
	} else {
		want += maxreg.ReadChaseRoundTrips
	}
	if d.RoundTrips != want {
		return fmt.Errorf("read: %d round trips, want %d (%+v; %v)", d.RoundTrips, want, rd, d)
	}
	return nil
}

// workload is a mix of writes and reads on one register.
type workload struct {
	ops    int // per client
	writes int // percent
}

// run performs w's operations with h, recording them in rec and checking each one's round
// trips. It returns early, with no error, once the client was cut.
func (w workload) run(ctx context.Context, h *handle, rec *recorder, valueSize int) error {
	id := h.m.Info().ID
	rng := h.m.Runtime().Rand()
	nw := 0
	for range w.ops {
		if rng.IntN(100) < w.writes {
			nw++
			v := payload(id, nw, valueSize)
			call := rec.now()
			var tag maxreg.Tag
			var err error
			d, rd := costOf(h, func() { tag, err = h.r.Write(ctx, v) })
			o := opRec{client: int(id), kind: kWrite, tag: tag, sum: digest(v), call: call, ret: rec.now()}
			if err != nil {
				o.unknown = true
				rec.add(o)
				if h.cut != nil && h.cut.fired.Load() {
					return nil
				}
				return fmt.Errorf("client %d: %w", id, err)
			}
			rec.add(o)
			if err := wantWriteCost(d, rd); err != nil {
				return fmt.Errorf("client %d: %w", id, err)
			}
			continue
		}
		call := rec.now()
		var tag maxreg.Tag
		var v []byte
		var err error
		d, rd := costOf(h, func() { tag, v, err = h.r.Read(ctx) })
		if err != nil {
			return fmt.Errorf("client %d: %w", id, err)
		}
		rec.add(opRec{client: int(id), kind: kRead, tag: tag, sum: digest(v), call: call, ret: rec.now()})
		if err := wantReadCost(d, rd); err != nil {
			return fmt.Errorf("client %d: %w", id, err)
		}
	}
	return nil
}

// scenario is one lincheck run's set-up.
type scenario struct {
	words, clients, valueSize int
	load                      workload
	// cutAt > 0 makes client 0's cutAt-th write be cut after its record (see cutter).
	cutAt int
	// refreshers gives each compute node a Refresher its clients share; else each client
	// posts its in-place writes unsignaled.
	refreshers bool
	// faults, if set, schedules faults on the simulator once the clients are open: the
	// handles, the Refreshers' client ids, and the time the workload starts.
	faults func(s *sim.Sim, hs []*handle, refs []farmem.ClientID, start farmem.Time)
}

// outcome is what a scenario produced.
type outcome struct {
	ops      []opRec
	stats    maxreg.Stats
	refresh  maxreg.RefresherStats
	victimID farmem.ClientID
	final    maxreg.Tag // what a read returned after the run
}

// play runs sc on f (inside the simulation if f is one) and returns its history.
func play(t *testing.T, f crasher, sc scenario) outcome {
	t.Helper()
	var out outcome
	p := maxreg.Params{Words: sc.words, ValueSize: sc.valueSize}
	farmemtest.Within(f, func() {
		ctx := context.Background()
		addr := create(t, f, p)
		var refs []*maxreg.Refresher
		var refIDs []farmem.ClientID
		if sc.refreshers {
			for _, c := range f.Topology().ComputeNodes() {
				m, err := f.Open(ctx, c)
				require.NoError(t, err)
				t.Cleanup(func() { _ = m.Close() })
				refs = append(refs, maxreg.NewRefresher(m))
				refIDs = append(refIDs, m.Info().ID)
			}
		}
		rec := newRecorder(f.Runtime())
		hs := make([]*handle, sc.clients)
		for i := range hs {
			opts := maxreg.Options{}
			if refs != nil {
				opts.Refresher = refs[i%len(refs)]
			}
			var wrap func(farmem.Memory) farmem.Memory
			if i == 0 && sc.cutAt > 0 {
				wrap = func(m farmem.Memory) farmem.Memory {
					id := m.Info().ID
					out.victimID = id
					return &cutter{Memory: m, at: sc.cutAt, crash: func() { require.NoError(t, f.CrashClient(id)) }}
				}
			}
			hs[i] = open(t, f, i, addr, opts, wrap)
		}
		if s, ok := f.(*sim.Sim); ok && sc.faults != nil {
			sc.faults(s, hs, refIDs, s.Now())
		}
		err := farmemtest.Parallel(f.Runtime(), len(hs), func(i int) error {
			return sc.load.run(ctx, hs[i], rec, sc.valueSize)
		})
		require.NoError(t, err)
		if sc.cutAt > 0 {
			require.True(t, hs[0].cut.fired.Load(), "client 0 never made its %d-th write", sc.cutAt)
		}
		// The register still serves a survivor: a write, then a read of it.
		last := hs[len(hs)-1]
		tag, err := last.r.Write(ctx, []byte("after"))
		require.NoError(t, err)
		got, v, err := last.r.Read(ctx)
		require.NoError(t, err)
		require.GreaterOrEqual(t, got, tag)
		if got == tag {
			require.Equal(t, "after", string(v))
		}
		out.final = got
		for _, h := range hs {
			out.stats = addStats(out.stats, h.r.Stats())
		}
		for _, r := range refs {
			s := r.Stats()
			out.refresh.Written += s.Written
			out.refresh.Failed += s.Failed
			out.refresh.Dropped += s.Dropped
		}
		out.ops = rec.all()
	})
	return out
}
