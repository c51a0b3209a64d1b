package farcoll_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/farmem/farmem/alloc"
	"github.com/farmem/farmem/far"
	"github.com/farmem/farmem/far/farcoll"
	"github.com/farmem/farmem/farmem"
	"github.com/farmem/farmem/farmem/farmemtest"
	"github.com/farmem/farmem/farmem/lincheck"
	"github.com/farmem/farmem/farmem/local"
	"github.com/farmem/farmem/kvstore"
	"github.com/farmem/farmem/sim"
)

var quiet = far.Options{Alloc: alloc.Options{Lease: time.Minute, Refresh: 30 * time.Second}}

type rig struct {
	f farmem.Fabric
	s *sim.Sim
}

func fabrics() map[string]func(t *testing.T) *rig {
	return map[string]func(t *testing.T) *rig{
		"local": func(t *testing.T) *rig {
			f, err := local.New(local.Options{Shape: local.Shape{MemoryNodes: 2, ComputeNodes: 2, MemorySize: 32 << 20}, Tearing: true, Strict: true, Jitter: 2 * time.Microsecond, Seed: 5})
			require.NoError(t, err)
			t.Cleanup(func() {
				require.Zero(t, f.Violations(), "strict-mode violations")
				_ = f.Close()
			})
			return &rig{f: f}
		},
		"sim": func(t *testing.T) *rig {
			m := sim.ConnectX6()
			m.MemoryNodes, m.ComputeNodes, m.ClientsPerNode, m.MaxHandlers = 2, 2, 16, 1
			m.MemorySize = 32 << 20
			m.Tearing, m.Jitter = true, 300*time.Nanosecond
			s, err := sim.New(m, 3)
			require.NoError(t, err)
			t.Cleanup(func() { _ = s.Close() })
			return &rig{f: s, s: s}
		},
	}
}

func (r *rig) do(body func()) { farmemtest.Within(r.f, body) }

// parallel runs n clients inside the fabric, each with its own far.Client; setup runs first on
// client 0.
func (r *rig) parallel(t *testing.T, n int, setup func(c *far.Client), body func(i int, c *far.Client) error) {
	t.Helper()
	comp := r.f.Topology().ComputeNodes()
	ms := make([]farmem.Memory, n)
	for i := range ms {
		m, err := r.f.Open(context.Background(), comp[i%len(comp)])
		require.NoError(t, err)
		t.Cleanup(func() { _ = m.Close() })
		ms[i] = m
	}
	r.do(func() {
		cs := make([]*far.Client, n)
		for i, m := range ms {
			c, err := far.NewClient(context.Background(), m, quiet)
			require.NoError(t, err)
			cs[i] = c
		}
		if setup != nil {
			setup(cs[0])
		}
		require.NoError(t, farmemtest.Parallel(r.f.Runtime(), n, func(i int) error { return body(i, cs[i]) }))
		for _, c := range cs {
			require.NoError(t, c.Close())
		}
	})
}

func rtts(t *testing.T, c *far.Client, fn func() error) uint64 {
	t.Helper()
	before := c.Memory().Stats()
	require.NoError(t, fn())
	return c.Memory().Stats().Sub(before).RoundTrips
}

type pair struct{ A, B uint64 }

// TestArray: an array over two nodes reads and writes ranges that span both in one round
// trip, elements start at zero, and ArrayAt reopens it.
func TestArray(t *testing.T) {
	r := fabrics()["local"](t)
	r.parallel(t, 1, nil, func(_ int, c *far.Client) error {
		ctx := context.Background()
		a, err := farcoll.NewArray(ctx, c, 100, farcoll.ArrayOptions[pair]{Nodes: []farmem.NodeID{1, 2}})
		require.NoError(t, err)
		require.Equal(t, 100, a.Len())
		require.Equal(t, 16, a.Stride())
		out := make([]pair, 100)
		require.Equal(t, uint64(1), rtts(t, c, func() error { return a.ReadRange(ctx, c, 0, out) }))
		require.Equal(t, make([]pair, 100), out)
		vs := make([]pair, 60)
		for i := range vs {
			vs[i] = pair{uint64(i + 20), 1}
		}
		require.Equal(t, uint64(1), rtts(t, c, func() error { return a.WriteRange(ctx, c, 20, vs) }))
		require.Equal(t, uint64(1), rtts(t, c, func() error { return a.Set(ctx, c, 99, pair{7, 7}) }))
		var got pair
		require.Equal(t, uint64(1), rtts(t, c, func() error { got, err = a.Get(ctx, c, 50); return err }))
		require.Equal(t, pair{50, 1}, got)
		var into pair
		require.Equal(t, uint64(1), rtts(t, c, func() error { return a.GetInto(ctx, c, 51, &into) }))
		require.Equal(t, pair{51, 1}, into)

		b, err := farcoll.ArrayAt[pair](ctx, c, a.Addr(), nil)
		require.NoError(t, err)
		require.NoError(t, b.ReadRange(ctx, c, 0, out))
		for i := range out {
			switch {
			case i == 99:
				require.Equal(t, pair{7, 7}, out[i])
			case i >= 20 && i < 80:
				require.Equal(t, pair{uint64(i), 1}, out[i])
			default:
				require.Zero(t, out[i])
			}
		}
		require.ErrorIs(t, a.Set(ctx, c, 100, pair{}), farmem.ErrOutOfRange)
		require.ErrorIs(t, a.ReadRange(ctx, c, 90, out[:11]), farmem.ErrOutOfRange)
		_, err = farcoll.ArrayAt[uint32](ctx, c, a.Addr(), nil)
		require.ErrorIs(t, err, farmem.ErrInvalid)
		return a.Free(ctx, c)
	})
}

// TestLincheckArray: Get, Set and the elements of ReadRange and WriteRange of an array of
// words, from several clients, are linearizable per element (each element a register).
func TestLincheckArray(t *testing.T) {
	for name, mk := range fabrics() {
		t.Run(name, func(t *testing.T) {
			r := mk(t)
			reg := lincheck.Register[uint64]()
			h := reg.NewHistory(r.f.Runtime())
			const n = 6
			var a *farcoll.Array[uint64]
			r.parallel(t, 4, func(c *far.Client) {
				var err error
				a, err = farcoll.NewArray(context.Background(), c, n, farcoll.ArrayOptions[uint64]{Nodes: []farmem.NodeID{1, 2}})
				require.NoError(t, err)
			}, func(i int, c *far.Client) error {
				ctx := context.Background()
				rec := h.Client(i + 1)
				rnd := c.Memory().Runtime().Rand()
				for s := range 80 {
					k := rnd.IntN(n)
					v := uint64(i+1)<<32 | uint64(s+1)
					switch rnd.IntN(4) {
					case 0:
						op := rec.Call(reg.Write(uint64(k), v))
						op.End(reg.Ack(), a.Set(ctx, c, k, v))
					case 1:
						op := rec.Call(reg.Read(uint64(k)))
						got, err := a.Get(ctx, c, k)
						op.End(reg.Value(got), err)
					case 2: // a range read: one register read per element, all over its interval
						out := make([]uint64, n)
						ops := make([]lincheck.Op[lincheck.RegisterInput[uint64], lincheck.RegisterOutput[uint64]], n)
						for e := range n {
							ops[e] = rec.Call(reg.Read(uint64(e)))
						}
						err := a.ReadRange(ctx, c, 0, out)
						for e := range n {
							ops[e].End(reg.Value(out[e]), err)
						}
					default:
						vs := []uint64{v, v + 1<<20}
						from := rnd.IntN(n - 1)
						ops := []lincheck.Op[lincheck.RegisterInput[uint64], lincheck.RegisterOutput[uint64]]{
							rec.Call(reg.Write(uint64(from), vs[0])), rec.Call(reg.Write(uint64(from+1), vs[1])),
						}
						err := a.WriteRange(ctx, c, from, vs)
						for _, op := range ops {
							op.End(reg.Ack(), err)
						}
					}
				}
				return nil
			})
			h.Check(t)
		})
	}
}

type acct struct {
	Balance int64
	Owner   [8]byte
}

// TestLincheckMap: a typed map over kvstore (uint64 keys, struct values), used by several
// goroutines, is linearizable as a map.
func TestLincheckMap(t *testing.T) {
	for name, mk := range fabrics() {
		t.Run(name, func(t *testing.T) {
			r := mk(t)
			kv := lincheck.KV[uint64, int64]()
			h := kv.NewHistory(r.f.Runtime())
			r.do(func() {
				ctx := context.Background()
				s, err := kvstore.Open(ctx, r.f, kvstore.Options{Alloc: alloc.Options{Lease: 10 * time.Second, Refresh: time.Second}})
				require.NoError(t, err)
				defer func() { require.NoError(t, s.Close()) }()
				m, err := farcoll.NewMap[uint64, acct](s, nil, nil)
				require.NoError(t, err)
				require.NoError(t, farmemtest.Parallel(r.f.Runtime(), 4, func(i int) error {
					rec := h.Client(i + 1)
					rnd := r.f.Runtime().NewRand()
					for s := range 60 {
						k := uint64(rnd.IntN(4))
						v := int64(i+1)<<32 | int64(s+1)
						switch rnd.IntN(5) {
						case 0:
							op := rec.Call(kv.Get(k))
							got, err := m.Get(ctx, k)
							if errors.Is(err, kvstore.ErrNotFound) {
								op.Return(kv.Missing())
								continue
							}
							op.End(kv.Found(got.Balance), err)
						case 1:
							op := rec.Call(kv.Put(k, v))
							op.End(kv.OK(), m.Put(ctx, k, acct{Balance: v}))
						case 2:
							op := rec.Call(kv.Insert(k, v))
							err := m.Insert(ctx, k, acct{Balance: v})
							if errors.Is(err, kvstore.ErrExists) {
								op.Return(kv.Exists())
								continue
							}
							op.End(kv.OK(), err)
						case 3:
							op := rec.Call(kv.Update(k, v))
							err := m.Update(ctx, k, acct{Balance: v})
							if errors.Is(err, kvstore.ErrNotFound) {
								op.Return(kv.Missing())
								continue
							}
							op.End(kv.OK(), err)
						default:
							op := rec.Call(kv.Delete(k))
							err := m.Delete(ctx, k)
							if errors.Is(err, kvstore.ErrNotFound) {
								op.Return(kv.Missing())
								continue
							}
							op.End(kv.OK(), err)
						}
					}
					return nil
				}))
			})
			h.Check(t)
		})
	}
}

// TestMapEncodings: string keys, Marshaler values, and a malformed stored value reported as an
// error.
func TestMapEncodings(t *testing.T) {
	r := fabrics()["local"](t)
	ctx := context.Background()
	s, err := kvstore.Open(ctx, r.f, kvstore.Options{})
	require.NoError(t, err)
	defer s.Close()
	m, err := farcoll.NewMap(s, farcoll.String(), farcoll.Marshaler[version]())
	require.NoError(t, err)
	require.NoError(t, m.Put(ctx, "go", version{1, 26}))
	v, err := m.Get(ctx, "go")
	require.NoError(t, err)
	require.Equal(t, version{1, 26}, v)
	_, err = m.Get(ctx, "rust")
	require.ErrorIs(t, err, kvstore.ErrNotFound)
	require.NoError(t, s.Put(ctx, []byte("bad"), []byte("x")))
	_, err = m.Get(ctx, "bad")
	require.Error(t, err)

	_, err = farcoll.NewMap[string, []byte](s, nil, nil)
	require.ErrorIs(t, err, far.ErrType)
}

// version is a type with its own binary encoding ("1.26").
type version struct{ Major, Minor int }

func (v version) MarshalBinary() ([]byte, error) {
	return fmt.Appendf(nil, "%d.%d", v.Major, v.Minor), nil
}

func (v *version) UnmarshalBinary(b []byte) error {
	_, err := fmt.Sscanf(string(b), "%d.%d", &v.Major, &v.Minor)
	return err
}

// queueModel is a bounded FIFO queue: enqueue returns whether it fit, dequeue the oldest value
// or nothing.
type queueIn struct {
	Enq bool
	V   uint64
}

type queueOut struct {
	OK bool
	V  uint64
}

func queueModel(capacity int) *lincheck.Model[queueIn, queueOut] {
	return lincheck.NewModel(lincheck.Spec[[]uint64, queueIn, queueOut]{
		Name: "queue",
		Init: func() []uint64 { return nil },
		Apply: func(s []uint64, in queueIn) (queueOut, []uint64) {
			if in.Enq {
				if len(s) >= capacity {
					return queueOut{}, s
				}
				return queueOut{OK: true}, append(slices.Clone(s), in.V)
			}
			if len(s) == 0 {
				return queueOut{}, s
			}
			return queueOut{OK: true, V: s[0]}, slices.Clone(s[1:])
		},
		EqualState: func(a, b []uint64) bool { return slices.Equal(a, b) },
	})
}

// TestLincheckQueue: enqueues and dequeues from several producers and consumers, with the
// queue often full and often empty, are linearizable as a bounded FIFO queue.
func TestLincheckQueue(t *testing.T) {
	for name, mk := range fabrics() {
		t.Run(name, func(t *testing.T) {
			r := mk(t)
			const capacity = 3
			model := queueModel(capacity)
			h := model.NewHistory(r.f.Runtime())
			var q *farcoll.Queue[pair]
			r.parallel(t, 4, func(c *far.Client) {
				var err error
				q, err = farcoll.NewQueue(context.Background(), c, capacity, farcoll.QueueOptions[pair]{Node: 2})
				require.NoError(t, err)
			}, func(i int, c *far.Client) error {
				ctx := context.Background()
				rec := h.Client(i + 1)
				rnd := c.Memory().Runtime().Rand()
				for s := range 40 {
					if rnd.IntN(2) == 0 {
						v := uint64(i+1)<<32 | uint64(s+1)
						op := rec.Call(queueIn{Enq: true, V: v})
						err := q.Enqueue(ctx, c, pair{v, ^v})
						if errors.Is(err, farcoll.ErrFull) {
							op.Return(queueOut{})
							continue
						}
						op.End(queueOut{OK: true}, err)
						continue
					}
					op := rec.Call(queueIn{})
					got, err := q.Dequeue(ctx, c)
					if errors.Is(err, farcoll.ErrEmpty) {
						op.Return(queueOut{})
						continue
					}
					if err == nil && got.B != ^got.A {
						return fmt.Errorf("torn element %+v", got)
					}
					op.End(queueOut{OK: true, V: got.A}, err)
				}
				return nil
			})
			h.Check(t)
		})
	}
}

// TestQueueRoundTrips: uncontended, an enqueue costs 3 round trips and a dequeue 3; a full
// queue refuses in 1, an empty one in 1; QueueAt reopens it.
func TestQueueRoundTrips(t *testing.T) {
	r := fabrics()["local"](t)
	r.parallel(t, 1, nil, func(_ int, c *far.Client) error {
		ctx := context.Background()
		q, err := farcoll.NewQueue(ctx, c, 2, farcoll.QueueOptions[uint64]{})
		require.NoError(t, err)
		require.Equal(t, uint64(3), rtts(t, c, func() error { return q.Enqueue(ctx, c, 1) }))
		require.NoError(t, q.Enqueue(ctx, c, 2))
		before := c.Memory().Stats()
		require.ErrorIs(t, q.Enqueue(ctx, c, 3), farcoll.ErrFull)
		require.Equal(t, uint64(1), c.Memory().Stats().Sub(before).RoundTrips)
		q2, err := farcoll.QueueAt[uint64](ctx, c, q.Addr(), nil)
		require.NoError(t, err)
		var v uint64
		require.Equal(t, uint64(3), rtts(t, c, func() error { v, err = q2.Dequeue(ctx, c); return err }))
		require.Equal(t, uint64(1), v)
		v, err = q.Dequeue(ctx, c)
		require.NoError(t, err)
		require.Equal(t, uint64(2), v)
		before = c.Memory().Stats()
		_, err = q.Dequeue(ctx, c)
		require.ErrorIs(t, err, farcoll.ErrEmpty)
		require.Equal(t, uint64(1), c.Memory().Stats().Sub(before).RoundTrips)
		// The ring wraps: positions 2 and 3 reuse cells 0 and 1.
		for i := range uint64(5) {
			require.NoError(t, q.Enqueue(ctx, c, 10+i))
			v, err = q.Dequeue(ctx, c)
			require.NoError(t, err)
			require.Equal(t, 10+i, v)
		}
		return q.Free(ctx, c)
	})
}

// FuzzOpen: ArrayAt and QueueAt read descriptors from far memory that anyone could have
// written; whatever the bytes, they return an error or a structure whose operations stay in
// range, and never panic.
func FuzzOpen(f *testing.F) {
	fab, err := local.New(local.Options{Shape: local.Shape{MemoryNodes: 1}})
	require.NoError(f, err)
	defer fab.Close()
	ctx := context.Background()
	m, err := fab.Open(ctx, fab.Hosted()[0])
	require.NoError(f, err)
	c, err := far.NewClient(ctx, m, quiet)
	require.NoError(f, err)
	a, err := farcoll.NewArray(ctx, c, 5, farcoll.ArrayOptions[uint64]{})
	require.NoError(f, err)
	good := make([]byte, 56)
	require.NoError(f, m.Read(ctx, a.Addr(), good))
	f.Add(good)
	q, err := farcoll.NewQueue(ctx, c, 3, farcoll.QueueOptions[uint64]{})
	require.NoError(f, err)
	qgood := make([]byte, 24)
	require.NoError(f, m.Read(ctx, q.Addr(), qgood))
	f.Add(qgood)
	spot, err := c.Allocator().Alloc(ctx, 4096, 64)
	require.NoError(f, err)
	f.Fuzz(func(t *testing.T, b []byte) {
		if len(b) > 4096 {
			b = b[:4096]
		}
		buf := make([]byte, 4096)
		copy(buf, b)
		require.NoError(t, m.Write(ctx, spot, buf))
		if a, err := farcoll.ArrayAt[uint64](ctx, c, spot, nil); err == nil {
			_, _ = a.Get(ctx, c, a.Len()-1)
			_ = a.ReadRange(ctx, c, 0, make([]uint64, min(a.Len(), 64)))
		}
		if q, err := farcoll.QueueAt[uint64](ctx, c, spot, nil); err == nil {
			_ = q.Cap()
		}
	})
}

// TestMapRoundTrips: a Map's operations cost exactly their kvstore counterparts with the
// store's default synchronizer (the codecs add no verb), asserted with the store's Stats deltas.
// A change of a key the client's address cache holds costs the cached count when the key's slot
// and block share a memory node (another Store on the fabric locates them).
func TestMapRoundTrips(t *testing.T) {
	r := fabrics()["local"](t)
	ctx := context.Background()
	s, err := kvstore.Open(ctx, r.f, kvstore.Options{MaxClients: 1, Alloc: alloc.Options{Lease: time.Minute, Refresh: 30 * time.Second}})
	require.NoError(t, err)
	defer func() { require.NoError(t, s.Close()) }()
	m, err := farcoll.NewMap[uint64, acct](s, nil, nil)
	require.NoError(t, err)
	require.NoError(t, m.Insert(ctx, 99, acct{Balance: 1})) // warms the client's allocator
	peek, err := kvstore.Open(ctx, r.f, kvstore.Options{MaxClients: 1})
	require.NoError(t, err)
	defer func() { require.NoError(t, peek.Close()) }()
	fixed := func(n uint64) func() uint64 { return func() uint64 { return n } }
	// cached returns want, or cachedWant if key k's slot and block share a memory node.
	cached := func(k uint64, want, cachedWant uint64) uint64 {
		c, err := far.Binary[uint64]()
		require.NoError(t, err)
		kb, err := farcoll.Fixed(c).Append(nil, k)
		require.NoError(t, err)
		loc, err := peek.Locate(ctx, kb)
		require.NoError(t, err)
		if loc.Slot.Node() == loc.Block.Node() {
			return cachedWant
		}
		return want
	}
	for _, st := range []struct {
		name string
		want func() uint64
		fn   func() error
	}{
		{"insert", fixed(kvstore.InsertRoundTrips), func() error { return m.Insert(ctx, 1, acct{Balance: 2}) }},
		// The store's client inserted key 1: its address cache names the block.
		{"get", fixed(kvstore.CachedGetRoundTrips), func() error {
			v, err := m.Get(ctx, 1)
			if err == nil && v.Balance != 2 {
				return fmt.Errorf("got %+v", v)
			}
			return err
		}},
		{"update", func() uint64 { return cached(1, kvstore.UpdateRoundTrips, kvstore.CachedUpdateRoundTrips) }, func() error { return m.Update(ctx, 1, acct{Balance: 3}) }},
		{"put present", func() uint64 { return cached(1, kvstore.UpdateRoundTrips, kvstore.CachedUpdateRoundTrips) }, func() error { return m.Put(ctx, 1, acct{Balance: 4}) }},
		{"put absent", fixed(kvstore.PutAbsentRoundTrips), func() error { return m.Put(ctx, 2, acct{Balance: 5}) }},
		// The default synchronizer, CIDER, takes the lock for a delete.
		{"delete", func() uint64 { return cached(2, kvstore.LockedDeleteRoundTrips, kvstore.LockedCachedDeleteRoundTrips) }, func() error { return m.Delete(ctx, 2) }},
	} {
		want := st.want()
		before := s.Stats()
		require.NoError(t, st.fn(), st.name)
		require.Equal(t, want, s.Stats().Sub(before).RoundTrips, st.name)
	}
	before := s.Stats()
	_, err = m.Get(ctx, 2)
	require.ErrorIs(t, err, kvstore.ErrNotFound)
	require.Equal(t, uint64(kvstore.GetAbsentRoundTrips), s.Stats().Sub(before).RoundTrips, "get absent")
}
