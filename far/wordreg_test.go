package far_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/farmem/farmem/far"
	"github.com/farmem/farmem/farmem"
	"github.com/farmem/farmem/farmem/lincheck"
)

// TestLincheckWordRegister: the atomic words' Load, Store, CompareAndSwap and Swap, from
// several clients on two words, through Uint64 and through an Int64 view of the same words,
// are linearizable as registers, on local with tearing and on sim. A Swap that returned prev
// is recorded as a CAS from prev that succeeded: the two have the same linearizations. (Add is
// checked against the counter model in TestLincheckWords.)
func TestLincheckWordRegister(t *testing.T) {
	for fname, mk := range fabrics(t) {
		t.Run(fname, func(t *testing.T) {
			r := mk(t)
			reg := lincheck.Register[uint64]()
			h := reg.NewHistory(r.f.Runtime())
			us := make([]far.Uint64, linKeys)
			ops := linOps(r)
			r.parallel(t, linClients, func(c *far.Client) {
				for k := range us {
					var err error
					us[k], err = far.NewUint64(context.Background(), c, 1, 0)
					require.NoError(t, err)
				}
			}, func(i int, c *far.Client) error {
				ctx := context.Background()
				rec := h.Client(i + 1)
				rnd := c.Memory().Runtime().Rand()
				for s := range ops {
					k := rnd.IntN(linKeys)
					u := us[k]
					iv, err := far.Int64At(u.Addr())
					if err != nil {
						return err
					}
					signed := rnd.IntN(2) == 0 // through the Int64 view
					v := uint64(i+1)<<32 | uint64(s+1)
					if signed {
						v |= 1 << 63 // a negative int64
					}
					switch rnd.IntN(4) {
					case 0:
						op := rec.Call(reg.Write(uint64(k), v))
						if signed {
							op.End(reg.Ack(), iv.Store(ctx, c, int64(v)))
						} else {
							op.End(reg.Ack(), u.Store(ctx, c, v))
						}
					case 1:
						op := rec.Call(reg.Read(uint64(k)))
						var got uint64
						if signed {
							x, err2 := iv.Load(ctx, c)
							got, err = uint64(x), err2
						} else {
							got, err = u.Load(ctx, c)
						}
						op.End(reg.Value(got), err)
					case 2:
						// CAS from the value just read: it succeeds unless another write landed.
						cur, err := u.Load(ctx, c)
						if err != nil {
							return err
						}
						op := rec.Call(reg.CAS(uint64(k), cur, v))
						var ok bool
						if signed {
							ok, err = iv.CompareAndSwap(ctx, c, int64(cur), int64(v))
						} else {
							ok, err = u.CompareAndSwap(ctx, c, cur, v)
						}
						op.End(reg.Swapped(ok), err)
					default:
						var prev uint64
						start := r.f.Runtime().Now()
						if signed {
							x, err2 := iv.Swap(ctx, c, int64(v))
							prev, err = uint64(x), err2
						} else {
							prev, err = u.Swap(ctx, c, v)
						}
						if err != nil {
							return err
						}
						end := r.f.Runtime().Now()
						if r.s == nil {
							// The history reads Go's monotonic clock, the runtime the wall
							// clock: a wider interval keeps the record sound.
							start, end = start-farmem.Time(time.Millisecond), end+farmem.Time(time.Millisecond)
						}
						// Added once the previous value is known, over the swap's interval.
						h.Add(lincheck.Record[lincheck.RegisterInput[uint64], lincheck.RegisterOutput[uint64]]{
							Client: i + 1, Call: start, Return: end,
							In: reg.CAS(uint64(k), prev, v), Out: reg.Swapped(true), Outcome: lincheck.OK,
						})
					}
				}
				return nil
			})
			h.Check(t)
		})
	}
}
