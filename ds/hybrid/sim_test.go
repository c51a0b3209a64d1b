package hybrid_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/farmem/farmem/alloc"
	"github.com/farmem/farmem/ds/hybrid"
	"github.com/farmem/farmem/farmem"
	"github.com/farmem/farmem/farmem/lincheck"
	"github.com/farmem/farmem/internal/dstest"
	"github.com/farmem/farmem/sim"
)

const simLease = 2 * time.Millisecond

type simOutcome struct {
	stats   hybrid.Stats
	census  hybrid.Census
	summary lincheck.Summary
	verdict error
	digest  string
	// recovery is the virtual time another client's insert into the victim's leaf took,
	// from the victim's death.
	recovery time.Duration
}

// victimPrefix is the prefix the victim fills until its first SMO.
const victimPrefix = 0x3f_00_00_00_00_00_00_00

// runSim runs the workload with n clients on a simulated ConnectX-6 cluster (two memory and
// two compute nodes, tearing and jitter on), 8-slot leaves, zero-byte per-node caches, one
// client paused past the lease mid-run, and checks the history. With victim set, client 0
// first inserts alone until it is crashed right after that step of its first SMO; then
// another client inserts into the same leaf (timed), and the others run.
func runSim(t *testing.T, seed uint64, n int, victim smoStep, blocks bool) simOutcome {
	t.Helper()
	model := sim.ConnectX6()
	model.MemoryNodes, model.ComputeNodes, model.MemorySize = 2, 2, 64<<20
	model.Tearing, model.Jitter = true, 300*time.Nanosecond
	s, err := sim.New(model, seed)
	require.NoError(t, err)
	defer s.Close()
	ao := dstest.AllocOptions
	h := kvModel.NewHistory(s.Runtime())
	var out simOutcome
	s.Run(func() {
		ctx := context.Background()
		comp := s.Topology().ComputeNodes()
		m0, err := s.Open(ctx, comp[0])
		require.NoError(t, err)
		require.NoError(t, alloc.FormatAll(ctx, m0, alloc.FormatOptions{}))
		a0, err := alloc.New(ctx, m0, ao)
		require.NoError(t, err)
		root, err := hybrid.Create(ctx, m0, a0, hybrid.Params{LeafSlots: 8, BlockValues: blocks})
		require.NoError(t, err)
		caches, err := hybrid.OpenCaches(ctx, s, comp, 0)
		require.NoError(t, err)
		defer caches.Close()
		cs := make([]*client, n)
		for i := range cs {
			m, err := s.Open(ctx, comp[i%len(comp)])
			require.NoError(t, err)
			a, err := alloc.New(ctx, m, ao)
			require.NoError(t, err)
			c := &client{m: m, a: a}
			tm := m
			if i == 0 && victim != stepNone {
				tm, c.killed = atStep(m, victim, func() { require.NoError(t, s.CrashClient(m.Info().ID)) })
			}
			cache, _ := caches.Get(m.Info().Node)
			c.tree, err = hybrid.Open(ctx, tm, a, root, hybrid.Options{Cache: cache, Lease: simLease})
			require.NoError(t, err)
			cs[i] = c
		}
		run := cs
		if victim != stepNone {
			rec := h.Client(int(cs[0].m.Info().ID))
			for k := uint64(1); ; k++ {
				op := rec.Call(kvModel.Insert(victimPrefix|k, k))
				err := insertOne(ctx, cs[0], victimPrefix|k, k, blocks)
				if err != nil {
					require.ErrorIs(t, err, farmem.ErrNodeDown)
					require.True(t, cs[0].killed.Load())
					op.Unknown()
					break
				}
				op.Return(kvModel.OK())
			}
			died := s.Now()
			c := cs[1]
			rec = h.Client(int(c.m.Info().ID))
			op := rec.Call(kvModel.Insert(victimPrefix|200, 200))
			require.NoError(t, insertOne(ctx, c, victimPrefix|200, 200, blocks))
			op.Return(kvModel.OK())
			out.recovery = s.Now().Sub(died)
			run = cs[1:]
		}
		paused := run[len(run)-1].m.Info().ID
		start := s.Now()
		s.At(start.Add(200*time.Microsecond), func() { _ = s.PauseClient(paused) })
		s.At(start.Add(200*time.Microsecond+3*simLease), func() { _ = s.ResumeClient(paused) })
		errs := make([]error, len(run))
		w := splitLoad
		w.ops = 300
		w.blocks = blocks
		require.NoError(t, s.Parallel(len(run), func(i int) { errs[i] = w.run(ctx, run[i], h) }))
		for i, err := range errs {
			require.NoError(t, err, "client %d", i)
		}
		out.census = audit(t, run[0])
		out.stats = sumStats(cs)
		out.digest = fmt.Sprintf("%+v %+v %v %v", out.stats, out.census.Nodes, s.Now(), s.Stats())
	})
	out.summary, out.verdict = h.Verify()
	return out
}

// TestLinearizableSim checks the workload's histories on the simulator over several seeds (the
// second with values in blocks), with a client paused past the lease, and that a run is a
// function of its seed.
func TestLinearizableSim(t *testing.T) {
	var first string
	for seed := range uint64(2 * *stress) {
		o := runSim(t, seed+1, 6, stepNone, seed == 1)
		t.Logf("seed %d: %v; %+v; special types %v", seed+1, o.summary, o.stats, o.census.SpecialTypes)
		require.NoError(t, o.verdict, "seed %d", seed+1)
		require.NotZero(t, o.stats.Splits)
		require.NotZero(t, o.stats.Growths)
		require.NotZero(t, o.census.SpecialTypes[2]+o.census.SpecialTypes[3], "no special node grew past 16")
		require.NotZero(t, o.stats.Backtracks, "no stale path (a dead or out-of-range leaf)")
		require.NotZero(t, o.stats.PrefixSplits)
		if seed == 0 {
			first = o.digest
		}
	}
	require.Equal(t, first, runSim(t, 1, 6, stepNone, false).digest, "same seed, same run")
}

// TestCrashMidSMOSim crashes a client right after it took a leaf's Spear exclusive (the
// successor drains, plans and publishes the SMO itself) and right after it marked the leaf
// dead with its plan recorded (the successor publishes that plan). Another client's insert
// into the leaf completes within about the lease of the crash, the tree audits clean, and the
// history (the victim's last insert open-ended) is linearizable.
func TestCrashMidSMOSim(t *testing.T) {
	for _, step := range []smoStep{stepExclusive, stepDead} {
		for seed := range uint64(2 * *stress) {
			o := runSim(t, seed+10, 5, step, false)
			t.Logf("step %d seed %d: recovery %v; %v; %+v", step, seed+10, o.recovery, o.summary, o.stats)
			require.NoError(t, o.verdict)
			require.NotZero(t, o.stats.Helps, "nobody finished the dead client's SMO")
			require.LessOrEqual(t, o.recovery, simLease+simLease/2, "recovery took longer than the lease")
			require.Zero(t, o.census.Tentative)
		}
	}
}

// insertOne inserts k with value v (in a block of 8 bytes if blocks).
func insertOne(ctx context.Context, c *client, k, v uint64, blocks bool) error {
	if blocks {
		return c.tree.InsertBytes(ctx, key(k), body(v, 8))
	}
	return c.tree.Insert(ctx, key(k), v)
}
