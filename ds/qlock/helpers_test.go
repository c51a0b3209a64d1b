package qlock_test

import (
	"context"
	"encoding/binary"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/farmem/farmem/ds/qlock"
	"github.com/farmem/farmem/farmem"
	"github.com/farmem/farmem/farmem/farmemtest"
	"github.com/farmem/farmem/farmem/lincheck"
	"github.com/farmem/farmem/farmem/local"
	"github.com/farmem/farmem/farmem/transport"
	"github.com/farmem/farmem/sim"
)

// rig is a fabric with a lock entry and a counter the lock protects, on local or sim.
type rig struct {
	f     farmem.Fabric
	fi    transport.FaultInjector
	s     *sim.Sim // nil on local
	comp  []farmem.NodeID
	entry farmem.Addr
	ctr   farmem.Addr
}

// Data lies clear of the first 64 KiB of memory node 1.
var (
	entryAt = farmem.MakeAddr(1, 1<<20)
	ctrAt   = farmem.MakeAddr(1, 1<<20+64)
)

func localRig(t *testing.T, o local.Options) *rig {
	t.Helper()
	o.Strict = true
	if o.ComputeNodes == 0 {
		o.ComputeNodes = 3
	}
	f, err := local.New(o)
	require.NoError(t, err)
	t.Cleanup(func() {
		require.Zero(t, f.Violations(), "strict-mode violations")
		_ = f.Close()
	})
	return &rig{f: f, fi: f, comp: f.Topology().ComputeNodes(), entry: entryAt, ctr: ctrAt}
}

func simRig(t *testing.T, seed uint64) *rig {
	t.Helper()
	m := sim.ConnectX6()
	m.ComputeNodes, m.ClientsPerNode, m.MaxHandlers = 3, 8, 1
	m.Jitter = 200 * time.Nanosecond
	s, err := sim.New(m, seed)
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	return &rig{f: s, fi: s, s: s, comp: s.Topology().ComputeNodes(), entry: entryAt, ctr: ctrAt}
}

// do runs body inside the fabric (inside the simulation on sim).
func (r *rig) do(body func()) { farmemtest.Within(r.f, body) }

// client opens client i (round robin over the compute nodes) with its Locker.
func (r *rig) client(t *testing.T, i int, o qlock.Options) (farmem.Memory, *qlock.Locker) {
	t.Helper()
	m, err := r.f.Open(context.Background(), r.comp[i%len(r.comp)])
	require.NoError(t, err)
	t.Cleanup(func() { _ = m.Close() })
	l, err := qlock.New(m, o)
	require.NoError(t, err)
	return m, l
}

var counter = lincheck.Counter()

type counterHistory = lincheck.History[lincheck.CounterInput, uint64]

// grantLog records, in order, the tickets that entered the critical section, with their
// predecessors at enqueue.
type grantLog struct {
	mu     sync.Mutex // short sections without verbs
	grants []qlock.Ticket
	preds  map[qlock.Ticket]qlock.Ticket
}

func (g *grantLog) add(a *qlock.Acquisition) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.preds == nil {
		g.preds = map[qlock.Ticket]qlock.Ticket{}
	}
	g.grants = append(g.grants, a.Ticket())
	g.preds[a.Ticket()] = a.Pred()
}

// fifo checks that every acquisition that queued was granted right after its predecessor.
func (g *grantLog) fifo(t *testing.T) int {
	t.Helper()
	queued := 0
	for i, tk := range g.grants {
		p := g.preds[tk]
		if p.IsZero() {
			continue
		}
		queued++
		require.Positive(t, i, "%v queued behind %v but was granted first", tk, p)
		require.Equal(t, p, g.grants[i-1], "%v queued behind %v but was granted after %v", tk, p, g.grants[i-1])
	}
	return queued
}

func readWord(ctx context.Context, m farmem.Memory, a farmem.Addr) (uint64, error) {
	var b [8]byte
	if err := m.Read(ctx, a, b[:]); err != nil {
		return 0, err
	}
	return binary.LittleEndian.Uint64(b[:]), nil
}

func writeWord(ctx context.Context, m farmem.Memory, a farmem.Addr, v uint64) error {
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], v)
	return m.Write(ctx, a, b[:])
}

// noWait is a client's Memory on which a Wait on its lock node's grant word returns at once
// the word it holds: its Locker never waits for its predecessor's hand-over (a broken lock).
type noWait struct {
	farmem.Memory
	grant farmem.Addr
}

func (m *noWait) Wait(ctx context.Context, a farmem.Addr, until func(uint64) bool) (uint64, error) {
	if a != m.grant {
		return m.Memory.Wait(ctx, a, until)
	}
	return readWord(ctx, m.Memory, a)
}

// increments runs n clients that each add 1 to the counter k times under the lock with a
// non-atomic read and write, recording every increment in h and every grant in g. With
// broken set, every client's Locker runs on a noWait Memory.
func (r *rig) increments(t *testing.T, n, k int, o qlock.Options, h *counterHistory, g *grantLog, hold time.Duration, broken bool) {
	t.Helper()
	ms := make([]farmem.Memory, n)
	ls := make([]*qlock.Locker, n)
	for i := range n {
		if !broken {
			ms[i], ls[i] = r.client(t, i, o)
			continue
		}
		m, err := r.f.Open(context.Background(), r.comp[i%len(r.comp)])
		require.NoError(t, err)
		t.Cleanup(func() { _ = m.Close() })
		ms[i] = &noWait{Memory: m, grant: m.Info().Slice.Add(o.Offset + qlock.GrantOffset)}
		ls[i], err = qlock.New(ms[i], o)
		require.NoError(t, err)
	}
	r.do(func() {
		err := farmemtest.Parallel(r.f.Runtime(), n, func(i int) error {
			ctx := context.Background()
			m, l := ms[i], ls[i]
			rec := h.Client(int(m.Info().ID))
			for range k {
				op := rec.Call(counter.Add(0, 1))
				a, _, err := l.Lock(ctx, r.entry)
				if err != nil {
					return err
				}
				g.add(a)
				v, err := readWord(ctx, m, r.ctr)
				if err != nil {
					return err
				}
				if hold > 0 {
					_ = m.Runtime().Sleep(ctx, time.Duration(m.Runtime().Rand().Int64N(int64(hold))))
				}
				if err := writeWord(ctx, m, r.ctr, v+1); err != nil {
					return err
				}
				if err := a.Release(ctx, 0, 0); err != nil {
					return err
				}
				op.Return(v)
			}
			return nil
		})
		require.NoError(t, err)
	})
}
