package far_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/farmem/farmem/far"
	"github.com/farmem/farmem/farmem"
	"github.com/farmem/farmem/farmem/lincheck"
	"github.com/farmem/farmem/farmem/local"
)

// TestLincheckCounter: adds of non-negative deltas and reads of a counter that widens itself
// while the clients run are linearizable as a counter, on local with tearing and on sim; the
// counter did widen.
func TestLincheckCounter(t *testing.T) {
	for fname, mk := range fabrics(t) {
		t.Run(fname, func(t *testing.T) {
			r := mk(t)
			ctr := lincheck.Counter()
			h := ctr.NewHistory(r.f.Runtime())
			var k *far.Counter
			var widest atomic.Int64
			r.parallel(t, linClients, func(c *far.Client) {
				var err error
				k, err = far.NewCounter(context.Background(), c, far.CounterOptions{MaxShards: 4, HotAdds: 8, HotWindow: time.Second})
				require.NoError(t, err)
			}, func(i int, c *far.Client) error {
				ctx := context.Background()
				rec := h.Client(i + 1)
				rnd := c.Memory().Runtime().Rand()
				for range 100 {
					if rnd.IntN(3) == 0 {
						op := rec.Call(ctr.Read(0))
						v, err := k.Read(ctx, c)
						op.End(v, err)
						continue
					}
					d := uint64(rnd.IntN(5))
					op := rec.Call(ctr.Add(0, d))
					if err := k.Add(ctx, c, d); err != nil {
						return fmt.Errorf("add: %w", err)
					}
					op.Done()
				}
				widest.Store(max(widest.Load(), int64(k.Width())))
				return nil
			})
			h.Check(t)
			require.Equal(t, int64(4), widest.Load(), "the counter never widened to its 4 shards")
		})
	}
}

// TestCounterCosts: an add is one round trip, a read two; CounterAt sees the same counter.
func TestCounterCosts(t *testing.T) {
	r := localRig(t, local.Options{Shape: local.Shape{MemoryNodes: 3}})
	c := r.client(t)
	ctx := context.Background()
	k, err := far.NewCounter(ctx, c, far.CounterOptions{})
	require.NoError(t, err)
	require.Equal(t, 6, k.Shards())
	require.Equal(t, uint64(1), rtts(t, c, func() error { return k.Add(ctx, c, 5) }))
	var v uint64
	require.Equal(t, uint64(2), rtts(t, c, func() error { v, err = k.Read(ctx, c); return err }))
	require.Equal(t, uint64(5), v)
	c2 := r.client(t)
	k2, err := far.CounterAt(ctx, c2, k.Addr(), far.CounterOptions{})
	require.NoError(t, err)
	require.NoError(t, k2.Add(ctx, c2, 7))
	v, err = k.Read(ctx, c)
	require.NoError(t, err)
	require.Equal(t, uint64(12), v)
	p, err := far.NewPtr(ctx, c, uint64(0), far.PtrOptions[uint64]{})
	require.NoError(t, err)
	_, err = far.CounterAt(ctx, c2, p.Addr(), far.CounterOptions{})
	require.ErrorIs(t, err, farmem.ErrInvalid)
}

// FuzzCounterAt: CounterAt reads a descriptor from far memory that anyone could have written;
// whatever the bytes, it returns an error or a counter whose operations fail cleanly, and
// never panics.
func FuzzCounterAt(f *testing.F) {
	fab, err := local.New(local.Options{Shape: local.Shape{MemoryNodes: 2}})
	require.NoError(f, err)
	defer fab.Close()
	ctx := context.Background()
	m, err := fab.Open(ctx, fab.Hosted()[0])
	require.NoError(f, err)
	c, err := far.NewClient(ctx, m, quiet)
	require.NoError(f, err)
	k, err := far.NewCounter(ctx, c, far.CounterOptions{})
	require.NoError(f, err)
	good := make([]byte, 24+8*k.Shards())
	require.NoError(f, m.Read(ctx, k.Addr(), good))
	f.Add(good)
	spot, err := c.Allocator().Alloc(ctx, 4096, 64)
	require.NoError(f, err)
	f.Fuzz(func(t *testing.T, b []byte) {
		buf := make([]byte, 4096)
		copy(buf, b)
		require.NoError(t, m.Write(ctx, spot, buf))
		if k, err := far.CounterAt(ctx, c, spot, far.CounterOptions{}); err == nil {
			_, _ = k.Read(ctx, c)
			_ = k.Add(ctx, c, 1)
		}
	})
}

// TestLincheckWords: Add and Load of a far.Uint64, and Add (with negative deltas) of the same
// word through a far.Int64, from several clients, are linearizable as a fetch-and-add counter
// (modulo 2^64); Swap and CompareAndSwap are checked as a register on the Word-mode pointer,
// which uses the same verbs.
func TestLincheckWords(t *testing.T) {
	for fname, mk := range fabrics(t) {
		t.Run(fname, func(t *testing.T) {
			r := mk(t)
			ctr := lincheck.Counter()
			h := ctr.NewHistory(r.f.Runtime())
			var u far.Uint64
			r.parallel(t, linClients, func(c *far.Client) {
				var err error
				u, err = far.NewUint64(context.Background(), c, 1, 0)
				require.NoError(t, err)
			}, func(i int, c *far.Client) error {
				ctx := context.Background()
				rec := h.Client(i + 1)
				rnd := c.Memory().Runtime().Rand()
				s, err := far.Int64At(u.Addr())
				if err != nil {
					return err
				}
				for range 100 {
					switch rnd.IntN(3) {
					case 0:
						op := rec.Call(ctr.Read(0))
						v, err := u.Load(ctx, c)
						op.End(v, err)
					case 1:
						d := uint64(rnd.IntN(10))
						op := rec.Call(ctr.Add(0, d))
						v, err := u.Add(ctx, c, d)
						op.End(v-d, err)
					default:
						d := -int64(rnd.IntN(10))
						op := rec.Call(ctr.Add(0, uint64(d)))
						v, err := s.Add(ctx, c, d)
						op.End(uint64(v-d), err)
					}
				}
				return nil
			})
			h.Check(t)
		})
	}
}
