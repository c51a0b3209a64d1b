package selcc_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/farmem/farmem/ds/selcc"
	"github.com/farmem/farmem/farmem"
)

// TestClientCrashTakeoverSim crashes one client of a live compute node in the middle of a run
// of counter increments on three hot lines (two nodes, three clients each, WriteBackOnRelease),
// at several instants: its node takes over what it held, every other client finishes its
// increments, the crashed client's later accesses fail with ErrClientDown, and each line ends
// with every acknowledged increment (plus at most the crashed client's one in flight).
func TestClientCrashTakeoverSim(t *testing.T) {
	for _, at := range []time.Duration{7 * time.Microsecond, 23 * time.Microsecond, 61 * time.Microsecond, 140 * time.Microsecond} {
		t.Run(fmt.Sprint(at), func(t *testing.T) {
			r := simRig(t, simModel(2, 3), uint64(at), selcc.Options{LineSize: 64, Frames: 8, Durability: selcc.WriteBackOnRelease})
			lines := r.lines(t, 3)
			const clients, rounds = 6, 60
			ms := make([]farmem.Memory, clients)
			cls := make([]*selcc.Client, clients)
			for i := range ms {
				ms[i], cls[i] = r.client(t, i)
			}
			acked := make([]int, clients)
			var deadErr error
			r.do(func() {
				ctx, cancel := r.f.Runtime().WithTimeout(context.Background(), time.Second)
				defer cancel()
				victim := ms[3].Info().ID
				r.s.At(r.s.Now().Add(at), func() { _ = r.s.CrashClient(victim) })
				require.NoError(t, r.s.Parallel(clients, func(i int) {
					for k := range rounds {
						g := lines[(i+k)%len(lines)]
						gd, err := cls[i].Lock(ctx, g)
						if err != nil {
							if i == 3 {
								deadErr = err
								return
							}
							t.Errorf("client %d: %v", i, err)
							return
						}
						v, err := gd.ReadUint64(ctx, 0)
						if err == nil {
							err = gd.WriteUint64(ctx, 0, v+1)
						}
						if err = errors.Join(err, gd.Unlock(ctx)); err != nil {
							if i == 3 {
								deadErr = err
								return
							}
							t.Errorf("client %d: %v", i, err)
							return
						}
						acked[i]++
					}
				}))
				require.NoError(t, ctx.Err(), "the survivors finished")
				require.ErrorIs(t, deadErr, farmem.ErrNodeDown)
				_, err := cls[3].Lock(ctx, lines[0])
				require.ErrorIs(t, err, selcc.ErrClientDown, "the crashed client serves nothing any more")
				require.ErrorIs(t, err, farmem.ErrNodeDown)
				// Sum the lines through a survivor.
				sum := 0
				for _, g := range lines {
					gd, err := cls[0].RLock(ctx, g)
					require.NoError(t, err)
					v, err := gd.ReadUint64(ctx, 0)
					require.NoError(t, err)
					require.NoError(t, gd.Unlock(ctx))
					sum += int(v)
				}
				want := 0
				for _, a := range acked {
					want += a
				}
				require.GreaterOrEqual(t, sum, want, "no acknowledged increment lost")
				require.LessOrEqual(t, sum, want+1, "at most the crashed client's increment in flight")
				require.Equal(t, clients-1, func() int {
					n := 0
					for i, a := range acked {
						if i != 3 && a == rounds {
							n++
						}
					}
					return n
				}())
			})
		})
	}
}

// TestClientCrashGuardsTakenOver: a client holding a shared guard on one line and an exclusive
// one on another crashes; its failed write's Unlock hands both to its node, its other guard
// then refuses to read the frame, and another client of the node takes both lines.
func TestClientCrashGuardsTakenOver(t *testing.T) {
	r := simRig(t, simModel(2, 3), 3, selcc.Options{LineSize: 64, Frames: 8, Durability: selcc.WriteBackOnRelease})
	lines := r.lines(t, 2)
	mv, victim := r.client(t, 0)
	_, other := r.client(t, 2) // the same node
	r.do(func() {
		ctx := context.Background()
		ga, err := victim.RLock(ctx, lines[0])
		require.NoError(t, err)
		gb, err := victim.Lock(ctx, lines[1])
		require.NoError(t, err)
		require.NoError(t, r.s.CrashClient(mv.Info().ID))
		require.ErrorIs(t, gb.WriteUint64(ctx, 0, 1), farmem.ErrNodeDown)
		err = gb.Unlock(ctx)
		require.ErrorIs(t, err, selcc.ErrClientDown)
		_, err = ga.ReadUint64(ctx, 0)
		require.ErrorIs(t, err, selcc.ErrClientDown, "no read of a frame the node took over")
		require.ErrorIs(t, ga.Unlock(ctx), selcc.ErrClientDown)
		for _, g := range lines {
			gd, err := other.Lock(ctx, g)
			require.NoError(t, err)
			require.NoError(t, gd.WriteUint64(ctx, 0, 5))
			require.NoError(t, gd.Unlock(ctx))
		}
	})
}
