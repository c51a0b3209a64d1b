package kvstore_test

import (
	"context"
	"encoding/binary"
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

// scanKV is what crashRecorder runs on: a store's Session.
type scanKV interface {
	Get(ctx context.Context, key []byte) ([]byte, error)
	Insert(ctx context.Context, key, value []byte) error
	Update(ctx context.Context, key, value []byte) error
	Delete(ctx context.Context, key []byte) error
	Scan(ctx context.Context, from, to []byte, limit int) ([]kvstore.Pair, error)
}

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
					r := crashRecorder{s: ss, kv: kv, rec: h.Client(g)}
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
				r := crashRecorder{s: sessions[0], kv: kv, rec: h.Client(100)}
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

// crashRecorder is recorder over a session, with string keys and 8-byte values.
type crashRecorder struct {
	s   scanKV
	kv  *lincheck.KVModel[string, uint64]
	rec *lincheck.Client[lincheck.KVInput[string, uint64], lincheck.KVOutput[string, uint64]]
}

func (r crashRecorder) get(ctx context.Context, k string) error {
	op := r.rec.Call(r.kv.Get(k))
	got, err := r.s.Get(ctx, []byte(k))
	out := r.kv.Missing()
	if err == nil {
		out = r.kv.Found(binary.LittleEndian.Uint64(got))
	} else if errors.Is(err, kvstore.ErrNotFound) {
		err = nil
	}
	op.End(out, err)
	return err
}

func (r crashRecorder) insert(ctx context.Context, k string, v uint64) error {
	op := r.rec.Call(r.kv.Insert(k, v))
	err := r.s.Insert(ctx, []byte(k), le8(v))
	out := r.kv.OK()
	if errors.Is(err, kvstore.ErrExists) {
		out, err = r.kv.Exists(), nil
	}
	op.End(out, err)
	return err
}

func (r crashRecorder) update(ctx context.Context, k string, v uint64) error {
	op := r.rec.Call(r.kv.Update(k, v))
	err := r.s.Update(ctx, []byte(k), le8(v))
	out := r.kv.OK()
	if errors.Is(err, kvstore.ErrNotFound) {
		out, err = r.kv.Missing(), nil
	}
	op.End(out, err)
	return err
}

func (r crashRecorder) delete(ctx context.Context, k string) error {
	op := r.rec.Call(r.kv.Delete(k))
	err := r.s.Delete(ctx, []byte(k))
	out := r.kv.OK()
	if errors.Is(err, kvstore.ErrNotFound) {
		out, err = r.kv.Missing(), nil
	}
	op.End(out, err)
	return err
}

func (r crashRecorder) scan(ctx context.Context, from, to string) error {
	op := r.rec.Call(r.kv.Scan(from, to, 0))
	ps, err := r.s.Scan(ctx, []byte(from), []byte(to), 0)
	var got []lincheck.Pair[string, uint64]
	for _, p := range ps {
		got = append(got, lincheck.Pair[string, uint64]{Key: string(p.Key), Value: binary.LittleEndian.Uint64(p.Value)})
	}
	op.End(r.kv.Pairs(got), err)
	return err
}
