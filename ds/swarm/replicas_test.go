package swarm_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/farmem/farmem/ds/maxreg"
	"github.com/farmem/farmem/farmem"
	"github.com/farmem/farmem/farmem/farmemtest"
	"github.com/farmem/farmem/farmem/lincheck"
)

// TestReplicaCrashes: Safe-Guess on 2f+1 replicas (f = 1 and 2), with a metadata word per
// writer, clocks up to 30µs apart drifting by up to 100 ppm, tearing and jitter, and replicas
// at different distances (the k-th is k·4µs slower each way, so a quorum is the f+1 nearest
// and the others' ops land late). "first-acked": right after a write returns, exactly f of
// the replicas that write reached first (the f+1 that answered it) crash at once; every
// operation then still completes and the history is linearizable, so no acknowledged write is
// lost. "f+1": f+1 replicas crash at a random moment; from then on operations fail with an
// error wrapping farmem.ErrNodeDown, and none returns a wrong value (the history, those
// operations' outcomes unknown, is linearizable).
func TestReplicaCrashes(t *testing.T) {
	for _, f := range []int{1, 2} {
		for _, mode := range []string{"first-acked", "f+1"} {
			t.Run(fmt.Sprintf("f=%d/%s", f, mode), func(t *testing.T) {
				defer func(p maxreg.Params) { params = p }(params)
				params.Words = ownWords
				for seed := uint64(1); seed <= 2; seed++ {
					replicaCrashRun(t, f, mode, seed)
				}
			})
		}
	}
}

func replicaCrashRun(t *testing.T, f int, mode string, seed uint64) {
	n := 2*f + 1
	s := newSimC(t, seed*10+uint64(f), n, 2, 30*time.Microsecond, 100)
	s.Run(func() {
		ctx := context.Background()
		mem := s.Topology().MemoryNodes()
		rng := s.Runtime().NewRand()
		perm := rng.Perm(n)
		for k, j := range perm {
			for _, c := range s.Topology().ComputeNodes() {
				require.NoError(t, s.DelayLink(c, mem[j], time.Duration(k)*4*time.Microsecond))
			}
		}
		addrs := create(t, s)
		const clients = 4
		hs := make([]*handle, clients)
		for i := range hs {
			hs[i] = open(t, s, i, addrs, nil)
			require.True(t, hs[i].r.Replicated().OwnWord())
		}
		if mode == "f+1" {
			at := time.Duration(50+rng.IntN(200)) * time.Microsecond
			s.At(s.Now().Add(at), func() {
				for _, j := range perm[:f+1] { // the nearest f+1: every quorum loses one
					require.NoError(t, s.Crash(mem[j]))
				}
			})
		}
		reg := lincheck.Register[uint64]()
		h := reg.NewHistory(s.Runtime())
		crashed, failed := false, 0
		err := farmemtest.Parallel(s.Runtime(), clients, func(i int) error {
			hd := hs[i]
			id := hd.m.Info().ID
			c := h.Client(int(id))
			r := hd.m.Runtime().NewRand()
			for k := range 30 {
				var err error
				if r.IntN(2) == 0 {
					v := uint64(id)<<32 | uint64(k+1)
					op := c.Call(reg.Write(0, v))
					err = hd.r.Write(ctx, encode(v))
					op.End(reg.Ack(), err)
					if mode == "first-acked" && err == nil && i == 0 && !crashed && k > 5 {
						crashed = true
						// The f+1 replicas this write completed at know its tag or more:
						// crash f of them at once, its stragglers still in flight.
						known := hd.r.Replicated().Known()
						sorted := slices.Sorted(slices.Values(known))
						slices.Reverse(sorted)
						var acked []int
						for j, kt := range known {
							if kt >= sorted[f] {
								acked = append(acked, j)
							}
						}
						require.GreaterOrEqual(t, len(acked), f+1)
						for _, j := range acked[:f] {
							require.NoError(t, s.Crash(mem[j]))
						}
					}
				} else {
					op := c.Call(reg.Read(0))
					var v []byte
					v, err = hd.r.Read(ctx)
					if err == nil {
						op.End(reg.Value(decode(t, v)), nil)
					} else {
						op.End(reg.Value(0), err)
					}
				}
				if err != nil {
					require.ErrorIs(t, err, farmem.ErrNodeDown)
					if mode != "f+1" {
						return fmt.Errorf("client %d op %d with f replicas down: %w", id, k, err)
					}
					failed++
				}
			}
			return nil
		})
		require.NoError(t, err)
		h.Check(t)
		if mode == "first-acked" {
			require.True(t, crashed)
			return
		}
		require.NotZero(t, failed, "no operation failed with f+1 replicas down")
		_, err = hs[1].r.Read(ctx)
		require.ErrorIs(t, err, farmem.ErrNodeDown)
	})
}
