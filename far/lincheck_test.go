package far_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/farmem/farmem/ds/qlock"
	"github.com/farmem/farmem/far"
	"github.com/farmem/farmem/farmem/lincheck"
	"github.com/farmem/farmem/farmem/local"
)

const (
	linClients = 4
	linKeys    = 2
)

// fabrics are the two places every mode is checked: local with tearing, jitter and strict mode,
// and the simulator with tearing.
func fabrics(t *testing.T) map[string]func(t *testing.T) *rig {
	return map[string]func(t *testing.T) *rig{
		"local": func(t *testing.T) *rig {
			return localRig(t, local.Options{Shape: local.Shape{MemoryNodes: 2}, Tearing: true, Jitter: 2 * time.Microsecond, Seed: 7})
		},
		"sim": func(t *testing.T) *rig { return simRig(t, 11, true) },
	}
}

func linOps(r *rig) int {
	if r.s != nil {
		return 150
	}
	return 120
}

// TestLincheckRegister: loads (Load, LoadInto and LoadMany), stores (and in Word mode CASes) of
// every mode, from several clients on two pointers, are linearizable as registers. In SingleWriter mode client 0 owns
// both pointers and the others only load; the test also asserts that torn reads happened and
// were detected (on local and sim alike, tearing is real), and every load checks that the
// value it returned is whole.
func TestLincheckRegister(t *testing.T) {
	for fname, mk := range fabrics(t) {
		for _, mode := range []far.Mode{far.Word, far.SingleWriter, far.OutOfPlace, far.Locked} {
			t.Run(fmt.Sprintf("%s/%v", fname, mode), func(t *testing.T) {
				r := mk(t)
				if mode == far.Word {
					registerWord(t, r)
					return
				}
				if mode == far.SingleWriter {
					// 512-byte values, so that the simulator's tearing (spread over an access's
					// service time) interleaves the owner's stores with loads often.
					registerMode(t, r, mode, wideOf)
					return
				}
				registerMode(t, r, mode, q)
			})
		}
	}
}

func registerMode[V interface {
	comparable
	whole() bool
}](t *testing.T, r *rig, mode far.Mode, mk func(uint64) V) {
	reg := lincheck.Register[V]()
	h := reg.NewHistory(r.f.Runtime())
	ps := make([]far.Ptr[V], linKeys)
	var torn atomic.Uint64
	ops := linOps(r)
	r.parallel(t, linClients, func(c *far.Client) {
		for k := range ps {
			var err error
			var zero V
			ps[k], err = far.NewPtr(context.Background(), c, zero, far.PtrOptions[V]{Mode: mode, Node: 1})
			require.NoError(t, err)
		}
	}, func(i int, c *far.Client) error {
		ctx := context.Background()
		rec := h.Client(i + 1)
		rnd := c.Memory().Runtime().Rand()
		for s := range ops {
			k := rnd.IntN(linKeys)
			write := rnd.IntN(2) == 0
			if mode == far.SingleWriter {
				write = i == 0 // the owner writes, the others read
			}
			if write {
				v := mk(uint64(i+1)<<32 | uint64(s+1))
				op := rec.Call(reg.Write(uint64(k), v))
				op.End(reg.Ack(), ps[k].Store(ctx, c, v))
				continue
			}
			op := rec.Call(reg.Read(uint64(k)))
			var v V
			var err error
			switch s % 3 {
			case 0:
				v, err = ps[k].Load(ctx, c)
			case 1:
				err = ps[k].LoadInto(ctx, c, &v)
			default:
				out := []V{v}
				err = far.LoadMany(ctx, c, ps[k:k+1], out)
				v = out[0]
			}
			if err == nil && !v.whole() {
				return fmt.Errorf("torn value returned: %v", v)
			}
			op.End(reg.Value(v), err)
		}
		torn.Add(c.Stats().TornRetries)
		return nil
	})
	sum := h.Check(t)
	require.Equal(t, linClients*ops, sum.OK)
	if mode == far.SingleWriter {
		t.Logf("%d torn loads read again", torn.Load())
		require.Positive(t, torn.Load(), "no torn read was seen: the test did not exercise the version check")
	}
}

func registerWord(t *testing.T, r *rig) {
	reg := lincheck.Register[uint64]()
	h := reg.NewHistory(r.f.Runtime())
	ps := make([]far.Ptr[uint64], linKeys)
	ops := linOps(r)
	r.parallel(t, linClients, func(c *far.Client) {
		for k := range ps {
			var err error
			ps[k], err = far.NewPtr(context.Background(), c, uint64(0), far.PtrOptions[uint64]{Node: 1})
			require.NoError(t, err)
		}
	}, func(i int, c *far.Client) error {
		ctx := context.Background()
		rec := h.Client(i + 1)
		rnd := c.Memory().Runtime().Rand()
		for s := range ops {
			k := rnd.IntN(linKeys)
			switch rnd.IntN(3) {
			case 0:
				v := uint64(i+1)<<32 | uint64(s+1)
				op := rec.Call(reg.Write(uint64(k), v))
				op.End(reg.Ack(), ps[k].Store(ctx, c, v))
			case 1:
				op := rec.Call(reg.Read(uint64(k)))
				v, err := ps[k].Load(ctx, c)
				op.End(reg.Value(v), err)
				// CAS from the value just read: it succeeds unless another write landed.
				nv := uint64(i+1)<<32 | uint64(s+1) | 1<<31
				op = rec.Call(reg.CAS(uint64(k), v, nv))
				ok, err := ps[k].CompareAndSwap(ctx, c, v, nv)
				op.End(reg.Swapped(ok), err)
			default:
				op := rec.Call(reg.Read(uint64(k)))
				v, err := ps[k].Load(ctx, c)
				op.End(reg.Value(v), err)
			}
		}
		return nil
	})
	h.Check(t)
}

// TestLincheckUpdate: read-modify-write updates (an increment of every word of the value) and
// loads, from several clients, are linearizable as a counter, in the modes where any client
// may update: Word (CAS loop), OutOfPlace (lock-free block swap) and Locked (far MCS lock).
func TestLincheckUpdate(t *testing.T) {
	for fname, mk := range fabrics(t) {
		for _, mode := range []far.Mode{far.Word, far.OutOfPlace, far.Locked} {
			t.Run(fmt.Sprintf("%s/%v", fname, mode), func(t *testing.T) {
				r := mk(t)
				ctr := lincheck.Counter()
				h := ctr.NewHistory(r.f.Runtime())
				var qp far.Ptr[quad]
				var wp far.Ptr[uint64]
				ops := linOps(r) / 2
				r.parallel(t, linClients, func(c *far.Client) {
					var err error
					if mode == far.Word {
						wp, err = far.NewPtr(context.Background(), c, uint64(0), far.PtrOptions[uint64]{})
					} else {
						qp, err = far.NewPtr(context.Background(), c, quad{}, far.PtrOptions[quad]{Mode: mode})
					}
					require.NoError(t, err)
				}, func(i int, c *far.Client) error {
					ctx := context.Background()
					rec := h.Client(i + 1)
					rnd := c.Memory().Runtime().Rand()
					for range ops {
						if rnd.IntN(3) == 0 {
							op := rec.Call(ctr.Read(0))
							var v uint64
							var err error
							if mode == far.Word {
								v, err = wp.Load(ctx, c)
							} else {
								var x quad
								x, err = qp.Load(ctx, c)
								if err == nil && !x.whole() {
									return fmt.Errorf("torn value returned: %+v", x)
								}
								v = x.A
							}
							op.End(v, err)
							continue
						}
						op := rec.Call(ctr.Add(0, 1))
						var nv uint64
						var err error
						if mode == far.Word {
							nv, err = wp.Update(ctx, c, func(x uint64) uint64 { return x + 1 })
						} else {
							var x quad
							x, err = qp.Update(ctx, c, func(x quad) quad { return q(x.A + 1) })
							nv = x.A
						}
						op.End(nv-1, err)
					}
					return nil
				})
				h.Check(t)
			})
		}
	}
}

// TestLockedPausedHolder: on the simulator, clients updating a Locked pointer are paused for
// longer than the far lock's lease, some while holding the lock: the others reset the lock and
// go on, and a resumed holder's fencing CAS fails, so it runs its update again. Every
// increment is counted exactly once (the history is linearizable as a counter) and fenced
// reruns happened.
func TestLockedPausedHolder(t *testing.T) {
	const updates = 300
	r := simRig(t, 5, true)
	ctr := lincheck.Counter()
	h := ctr.NewHistory(r.f.Runtime())
	var p far.Ptr[quad]
	var fenced atomic.Uint64
	ms := r.memories(t, linClients)
	r.do(func() {
		ctx := context.Background()
		cs := make([]*far.Client, linClients)
		// A short lock lease, so that a pause of a millisecond gets a holder's lock reset.
		o := quiet
		o.Lock = qlock.Options{Lease: 200 * time.Microsecond}
		for i, m := range ms {
			c, err := far.NewClient(ctx, m, o)
			require.NoError(t, err)
			cs[i] = c
		}
		var err error
		p, err = far.NewPtr(ctx, cs[0], quad{}, far.PtrOptions[quad]{Mode: far.Locked})
		require.NoError(t, err)
		start := r.s.Now()
		for k := range 40 {
			id := ms[1+k%(linClients-1)].Info().ID
			at := start.Add(time.Duration(50+k*731) * time.Microsecond)
			r.s.At(at, func() { _ = r.s.PauseClient(id) })
			r.s.At(at.Add(time.Millisecond), func() { _ = r.s.ResumeClient(id) })
		}
		require.NoError(t, r.s.Parallel(linClients, func(i int) {
			c := cs[i]
			rec := h.Client(i + 1)
			for range updates {
				op := rec.Call(ctr.Add(0, 1))
				x, err := p.Update(ctx, c, func(x quad) quad { return q(x.A + 1) })
				op.End(x.A-1, err)
				require.NoError(t, err)
			}
			fenced.Add(c.Stats().Fenced)
		}))
		t.Logf("ran for %v of virtual time", r.s.Now().Sub(start))
		v, err := p.Load(ctx, cs[0])
		require.NoError(t, err)
		require.Equal(t, q(linClients*updates), v)
	})
	h.Check(t)
	t.Logf("%d fenced updates ran again", fenced.Load())
	require.Positive(t, fenced.Load(), "no holder was fenced: the pauses missed every critical section")
}
