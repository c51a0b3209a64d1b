package maxreg_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/farmem/farmem/ds/maxreg"
	"github.com/farmem/farmem/farmem"
	"github.com/farmem/farmem/farmem/farmemtest"
)

// TestCrashAfterRecordWrite: a writer dies with its batch cut after the out-of-place record's
// write (the CAS never sent). Its write has no effect for others: reads still return its
// previous write, in place, and another writer's next write wins as usual. Run on local and on
// the simulator.
func TestCrashAfterRecordWrite(t *testing.T) {
	for name, f := range map[string]crasher{"local": newLocal(t, false), "sim": newSim(t, 3)} {
		t.Run(name, func(t *testing.T) {
			farmemtest.Within(f, func() {
				ctx := context.Background()
				addr := create(t, f, frozen)
				victim := open(t, f, 0, addr, maxreg.Options{}, func(m farmem.Memory) farmem.Memory {
					id := m.Info().ID
					return &cutter{Memory: m, at: 2, crash: func() { require.NoError(t, f.CrashClient(id)) }}
				})
				r := open(t, f, 1, addr, maxreg.Options{}, nil)
				w := open(t, f, 2, addr, maxreg.Options{}, nil)
				t1 := write(t, victim, "victim's write", maxreg.WriteRoundTrips, "kept")
				_, err := victim.r.Write(ctx, []byte("cut"))
				require.ErrorIs(t, err, farmem.ErrNodeDown)
				require.True(t, victim.cut.fired.Load())
				// The victim's refresh of t1 was applied before its cut batch.
				read(t, r, "read after the cut", maxreg.ReadRoundTrips, t1, "kept")
				t3 := write(t, w, "another writer", maxreg.WriteRoundTrips+maxreg.CASRetryRoundTrips, "next")
				require.Greater(t, t3, t1)
				read(t, w, "read after the next write", maxreg.ReadRoundTrips, t3, "next")
				read(t, r, "reader", maxreg.ReadRoundTrips, t3, "next")
			})
		})
	}
}

// TestCrashBeforeRefresh: a writer dies right after its batch (record and CAS) completed, before
// its in-place refresh is sent. Its write took effect: readers find the copy stale, chase the
// pointer (two round trips) and refresh the copy themselves, after which reads are one round
// trip again.
func TestCrashBeforeRefresh(t *testing.T) {
	for name, f := range map[string]crasher{"local": newLocal(t, false), "sim": newSim(t, 4)} {
		t.Run(name, func(t *testing.T) {
			farmemtest.Within(f, func() {
				ctx := context.Background()
				addr := create(t, f, frozen)
				batches := 0
				victim := open(t, f, 0, addr, maxreg.Options{}, func(m farmem.Memory) farmem.Memory {
					id := m.Info().ID
					return &farmemtest.Interposer{Memory: m, After: func(_ context.Context, v farmemtest.Verb, _ uint64, err error) {
						if !v.Single && !v.Posted && len(v.Batch.Ops) == 2 && v.Batch.Ops[1].Kind == farmem.OpCAS {
							if batches++; batches == 2 {
								require.NoError(t, f.CrashClient(id))
							}
						}
					}}
				})
				r := open(t, f, 1, addr, maxreg.Options{}, nil)
				write(t, victim, "victim's first write", maxreg.WriteRoundTrips, "first")
				t2, err := victim.r.Write(ctx, []byte("second"))
				require.NoError(t, err, "the batch completed before the crash")
				_, _, err = victim.r.Read(ctx)
				require.ErrorIs(t, err, farmem.ErrNodeDown, "the victim is dead")
				rd := read(t, r, "read, copy stale", maxreg.ReadChaseRoundTrips, t2, "second")
				require.Equal(t, uint64(1), rd.Stale)
				read(t, r, "read after the reader's refresh", maxreg.ReadRoundTrips, t2, "second")
			})
		})
	}
}
