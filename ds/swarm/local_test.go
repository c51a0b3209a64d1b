package swarm_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/farmem/farmem/alloc"
	"github.com/farmem/farmem/ds/maxreg"
	"github.com/farmem/farmem/ds/swarm"
	"github.com/farmem/farmem/farmem"
	"github.com/farmem/farmem/farmem/farmemtest"
	"github.com/farmem/farmem/farmem/lincheck"
	"github.com/farmem/farmem/farmem/local"
	"github.com/farmem/farmem/internal/dstest"
)

// TestLinearizableLocal: the same register on the local transport, where clients are real
// goroutines (so the race detector sees the completion hooks and the caches they share with
// their handle), with tearing, jitter, strict mode and three replicas, one of which crashes
// midway. The history is checked with lincheck's register model. The lease is long (50ms) because
// under the race detector on a loaded machine a read can take milliseconds, and a read that
// overruns its lease starts over (see maxreg.Replicated).
func TestLinearizableLocal(t *testing.T) {
	f, err := local.New(local.Options{Shape: local.Shape{MemoryNodes: 3, ComputeNodes: 2, MemorySize: 8 << 20},
		DownTimeout: 20 * time.Millisecond,
		Tearing:     true, Jitter: 3 * time.Microsecond, Strict: true})
	require.NoError(t, err)
	t.Cleanup(func() {
		require.Zero(t, f.Violations(), "strict-mode violations")
		_ = f.Close()
	})
	ctx := context.Background()
	p := maxreg.Params{Words: 16, Slots: 8, ValueSize: 32, Writers: 128, Lease: 50 * time.Millisecond, Skew: time.Millisecond}
	addrs := dstest.Build(t, f, alloc.Options{}, func(ctx context.Context, m farmem.Memory, a *alloc.Allocator) ([]farmem.Addr, error) {
		return swarm.Create(ctx, m, a, f.Topology().MemoryNodes(), p)
	})
	const clients = 5
	hs := make([]*handle, clients)
	for i := range hs {
		hs[i] = open(t, f, i, addrs, nil)
	}
	reg := lincheck.Register[uint64]()
	h := reg.NewHistory(f.Runtime())
	ops := 40 * stress()
	err = farmemtest.Parallel(f.Runtime(), clients, func(i int) error {
		hd := hs[i]
		id := hd.m.Info().ID
		c := h.Client(int(id))
		for k := range ops {
			if i == 0 && k == ops/2 {
				if err := f.Crash(f.Topology().MemoryNodes()[2]); err != nil {
					return err
				}
			}
			if err := regOp(ctx, t, hd, reg, c, id, k, (k+i)%2 == 0); err != nil {
				return err
			}
		}
		return nil
	})
	require.NoError(t, err)
	h.Check(t)
	var st swarm.Stats
	for _, hd := range hs {
		x := hd.r.Stats()
		st.Fast += x.Fast
		st.Stale += x.Stale
		st.Reads += x.Reads
	}
	t.Logf("fast %d, stale %d, reads %d", st.Fast, st.Stale, st.Reads)
}
