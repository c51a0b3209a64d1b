package kvstore_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/farmem/farmem/farmem"
	"github.com/farmem/farmem/farmem/lincheck"
	"github.com/farmem/farmem/kvstore"
	"github.com/farmem/farmem/sim"
)

// TestBlinkCrashLincheckSim runs the blink kind with the default durability (write-back on
// release) on the simulator (tearing, jitter) over three compute nodes, two sessions on each,
// with point operations and scans on 48 keys and 512-byte lines (leaves split), and crashes
// the third compute node mid-run. The survivors repair the dead node's holds on the lines they
// want, online, and run to the end; then one reads every key. The history must be
// linearizable, so no acknowledged write is lost (the dead node's included: they were written
// back before they were acknowledged), and no survivor operation fails.
func TestBlinkCrashLincheckSim(t *testing.T) {
	t.Parallel()
	for _, seed := range []uint64{1, 2, 3, 4} {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) {
			model := sim.ConnectX6()
			model.MemoryNodes, model.ComputeNodes, model.MemorySize = 2, 3, 64<<20
			model.Tearing, model.Jitter = true, 300*time.Nanosecond
			s := startSim(t, model, seed)
			kv := lincheck.KV[string, uint64]()
			h := kv.NewHistory(s.Runtime())
			const keys, ops, perNode = 48, 120, 2
			k := func(i int) string { return fmt.Sprintf("user%02d", i) }
			enc, dec := func(k string) []byte { return []byte(k) }, func(b []byte) string { return string(b) }
			dead := s.Topology().ComputeNodes()[2]
			crashAt := time.Duration(200+50*seed) * time.Microsecond
			var survivorErrs, deadOps, afterCrash int
			s.Run(func() {
				ctx, cancel := s.Runtime().WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				st, err := kvstore.Open(ctx, s, kvstore.Options{Alloc: quietAlloc, Index: &kvstore.Blink{LineSize: 512, Frames: 32}})
				require.NoError(t, err)
				nodes := s.Topology().ComputeNodes()
				sessions := make([]*kvstore.Session, perNode*len(nodes))
				for i := range sessions {
					ss, end, err := openSession(ctx, s, st, nodes[i%len(nodes)])
					require.NoError(t, err)
					defer end()
					sessions[i] = ss
				}
				start := s.Now()
				s.At(start.Add(crashAt), func() { _ = s.Crash(dead) })
				errs := make([]error, len(sessions))
				require.NoError(t, s.Parallel(len(sessions), func(g int) {
					ss := sessions[g]
					onDead := ss.Memory().Info().Node == dead
					r := recorder[string]{s: ss, kv: kv, rec: h.Client(g), enc: enc, dec: dec, val: le8}
					rng := s.Runtime().NewRand()
					for n := range ops {
						i := rng.IntN(keys)
						v := uint64(g+1)<<32 | uint64(n+1)
						var err error
						switch p := rng.IntN(100); {
						case p < 30:
							err = r.get(ctx, k(i))
						case p < 50:
							err = r.insert(ctx, k(i), v)
						case p < 65:
							err = r.update(ctx, k(i), v)
						case p < 80:
							err = r.delete(ctx, k(i))
						default:
							err = r.scan(ctx, k(i), k(min(keys, i+1+rng.IntN(12))))
						}
						if s.Now() > start.Add(crashAt) && !onDead && err == nil {
							afterCrash++
						}
						if err == nil {
							continue
						}
						if onDead && errors.Is(err, farmem.ErrNodeDown) {
							deadOps++
							return // its node is gone
						}
						errs[g] = fmt.Errorf("goroutine %d (on %v), op %d: %w", g, ss.Memory().Info().Node, n, err)
						survivorErrs++
						return
					}
				}))
				for _, err := range errs {
					require.NoError(t, err)
				}
				require.NoError(t, ctx.Err(), "the survivors finished within the virtual deadline")
				// Every key, read by a survivor.
				r := recorder[string]{s: sessions[0], kv: kv, rec: h.Client(100), enc: enc, dec: dec, val: le8}
				for i := range keys {
					require.NoError(t, r.get(ctx, k(i)))
				}
				_ = st.Close() // the dead node's clients cannot be released
			})
			sum, verdict := h.Verify()
			t.Logf("%v; %d survivor operations done after the crash", sum, afterCrash)
			require.NoError(t, verdict)
			require.Zero(t, survivorErrs)
			require.Equal(t, perNode, deadOps, "each of the dead node's goroutines saw it die mid-run")
			require.Positive(t, afterCrash, "the survivors ran on after the crash")
		})
	}
}
