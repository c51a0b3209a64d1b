package far_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/farmem/farmem/cxl"
	"github.com/farmem/farmem/far"
	"github.com/farmem/farmem/farmem"
	"github.com/farmem/farmem/farmem/local"
	"github.com/farmem/farmem/farmem/transport"
)

// cxlPolicyClient opens a far.Client on a fresh cxl region with the given access policy, and
// returns a second Memory of the same fabric handle's other compute node.
func cxlPolicyClient(t *testing.T, policy cxl.Policy) (*far.Client, farmem.Memory) {
	t.Helper()
	r, err := cxl.CreateTemp("", "far-policy-*", cxl.Options{Shape: cxl.Shape{MemoryNodes: 1, MemorySize: 16 << 20, ComputeNodes: 2}})
	require.NoError(t, err)
	t.Cleanup(func() { _ = r.Close() })
	f, err := r.Attach(cxl.OpenOptions{Policy: policy})
	require.NoError(t, err)
	t.Cleanup(func() { _ = f.Close() })
	open := func() farmem.Memory {
		m, err := f.Open(context.Background(), f.Hosted()[0])
		require.NoError(t, err)
		t.Cleanup(func() { _ = m.Close() })
		return m
	}
	c, err := far.NewClient(context.Background(), open(), quiet)
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	return c, open()
}

// TestSingleWriterReadPath: a single-writer load is one round trip everywhere, made of one Read
// where the Memory reads in address order (cxl with the coherent policy, local) and of three
// Reads in one batch where it does not (cxl's Uncached policy, the simulator); LoadMany reads
// each record the same way.
func TestSingleWriterReadPath(t *testing.T) {
	ctx := context.Background()
	check := func(t *testing.T, c *far.Client, wantReads uint64) {
		t.Helper()
		m := c.Memory()
		or, ok := m.(transport.OrderedReader)
		require.Equal(t, wantReads == 1, ok && or.ReadsInAddressOrder(), "the Memory's claim")
		p, err := far.NewPtr(ctx, c, q(3), far.PtrOptions[quad]{Mode: far.SingleWriter})
		require.NoError(t, err)
		ps := []far.Ptr[quad]{p, p}
		out := make([]quad, 2)
		for _, fn := range []func() error{
			func() error { v, err := p.Load(ctx, c); require.Equal(t, q(3), v); return err },
			func() error { var v quad; err := p.LoadInto(ctx, c, &v); require.Equal(t, q(3), v); return err },
		} {
			before := m.Stats()
			require.NoError(t, fn())
			d := m.Stats().Sub(before)
			require.Equal(t, uint64(far.SingleWriterLoadRoundTrips), d.RoundTrips)
			require.Equal(t, wantReads, d.Verbs[farmem.TargetMemory][farmem.OpRead])
		}
		before := m.Stats()
		require.NoError(t, far.LoadMany(ctx, c, ps, out))
		d := m.Stats().Sub(before)
		require.Equal(t, uint64(far.LoadManyRoundTrips), d.RoundTrips)
		require.Equal(t, 2*wantReads, d.Verbs[farmem.TargetMemory][farmem.OpRead])
		require.Equal(t, []quad{q(3), q(3)}, out)
	}
	t.Run("cxl-coherent", func(t *testing.T) {
		c, _ := cxlPolicyClient(t, cxl.Coherent)
		check(t, c, 1)
	})
	t.Run("cxl-uncached", func(t *testing.T) {
		c, _ := cxlPolicyClient(t, cxl.Uncached)
		check(t, c, 3)
	})
	t.Run("local", func(t *testing.T) {
		check(t, localRig(t, local.Options{}).client(t), 1)
	})
	t.Run("sim", func(t *testing.T) {
		r := simRig(t, 3, true)
		ms := r.memories(t, 1)
		r.do(func() {
			c, err := far.NewClient(ctx, ms[0], quiet)
			require.NoError(t, err)
			check(t, c, 3)
			require.NoError(t, c.Close())
		})
	})
}

// onlyDecode is a codec without DecodeInto: loads assign what Decode returns.
type onlyDecode struct{ far.Codec[point64] }

// TestLoadIntoStack: LoadInto and Load into a variable of the caller's own allocate nothing,
// with a codec that decodes in place (hand-written or Binary's) and with one that does not,
// so the variable stays on the caller's stack; and Codec returns the codec the pointer was
// made with.
func TestLoadIntoStack(t *testing.T) {
	c := cxlClient(t)
	ctx := context.Background()
	for name, codec := range map[string]far.Codec[point64]{
		"hand":        point64Codec{},
		"binary":      far.MustBinary[point64](),
		"only-decode": onlyDecode{point64Codec{}},
	} {
		p, err := far.NewPtr(ctx, c, samplePoint, far.PtrOptions[point64]{Mode: far.SingleWriter, Codec: codec})
		require.NoError(t, err)
		require.Equal(t, codec, p.Codec(), name)
		_, isInto := codec.(far.DecoderInto[point64])
		require.Equal(t, name != "only-decode", isInto, name)
		var warm point64
		require.NoError(t, p.LoadInto(ctx, c, &warm)) // grows the scratch buffer, warms the pool
		require.Zero(t, testing.AllocsPerRun(100, func() {
			var v point64 // would be allocated here if LoadInto let it escape
			if err := p.LoadInto(ctx, c, &v); err != nil || v != samplePoint {
				panic(errors.Join(err, errors.New("wrong value")))
			}
		}), name)
		require.Zero(t, testing.AllocsPerRun(100, func() {
			v, err := p.Load(ctx, c)
			if err != nil || v != samplePoint {
				panic(errors.Join(err, errors.New("wrong value")))
			}
		}), name)
	}
}

// TestSingleWriterCXL: on cxl, with either policy (one Read, or three in a batch), loads that
// overlap the owner's stores return whole values, in the order stored: a reader never sees an
// older value after a newer one (the register's linearizability with one writer).
func TestSingleWriterCXL(t *testing.T) {
	for _, policy := range []cxl.Policy{cxl.Coherent, cxl.Uncached} {
		t.Run(policy.String(), func(t *testing.T) {
			ctx := context.Background()
			c, m2 := cxlPolicyClient(t, policy)
			c2, err := far.NewClient(ctx, m2, quiet)
			require.NoError(t, err)
			t.Cleanup(func() { _ = c2.Close() })
			p, err := far.NewPtr(ctx, c, wideOf(0), far.PtrOptions[wide]{Mode: far.SingleWriter})
			require.NoError(t, err)
			const loads = 5000
			var stop atomic.Bool
			var stored atomic.Uint64
			var wg sync.WaitGroup
			wg.Add(1)
			go func() { // the owner stores 1, 2, 3, ... until the loads are done
				defer wg.Done()
				for s := uint64(1); !stop.Load(); s++ {
					if err := p.Store(ctx, c, wideOf(s)); err != nil {
						t.Error(err)
						return
					}
					stored.Store(s)
				}
			}()
			var last uint64
			for i := range loads {
				var v wide
				require.NoError(t, p.LoadInto(ctx, c2, &v))
				require.True(t, v.whole(), "load %d: torn value", i)
				require.GreaterOrEqual(t, v.W[0], last, "load %d: an older value after a newer one", i)
				last = v.W[0]
			}
			stop.Store(true)
			wg.Wait()
			require.LessOrEqual(t, last, stored.Load())
			t.Logf("%d loads over %d stores, %d read again after a tear", loads, stored.Load(), c2.Stats().TornRetries)
		})
	}
}
