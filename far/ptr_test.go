package far_test

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/farmem/farmem/far"
	"github.com/farmem/farmem/farmem"
	"github.com/farmem/farmem/farmem/local"
	"github.com/farmem/farmem/farmem/transport"
	"github.com/farmem/farmem/sim"
)

func TestCheckType(t *testing.T) {
	type ok struct {
		A int8
		B [3]uint16
		C struct{ F float32 }
		D bool
		E complex64
	}
	n, err := far.CheckType[ok]()
	require.NoError(t, err)
	require.Equal(t, 1+6+4+1+8, n)

	type withPtr struct {
		A uint64
		P *int
	}
	type withSlice struct{ S []byte }
	type withInt struct{ I int }
	type nested struct{ In [2]withString }
	for name, err := range map[string]error{
		"pointer":   check[withPtr](),
		"slice":     check[withSlice](),
		"int":       check[withInt](),
		"string":    check[string](),
		"nested":    check[nested](),
		"map":       check[map[int64]int64](),
		"interface": check[any](),
		"uintptr":   check[uintptr](),
		"empty":     check[struct{}](),
	} {
		require.ErrorIs(t, err, far.ErrType, name)
		require.ErrorIs(t, err, farmem.ErrInvalid, name)
	}
	err = check[nested]()
	require.ErrorContains(t, err, "In[].S")

	type unexported struct{ a uint64 }
	_, err = far.Binary[unexported]()
	require.ErrorIs(t, err, far.ErrType)
}

type withString struct{ S string }

func check[T any]() error {
	_, err := far.CheckType[T]()
	return err
}

// TestBinary: the default codec round-trips composite values, lays them out as encoding/binary
// does (packed, little-endian), and allocates nothing once warm.
func TestBinary(t *testing.T) {
	type rec struct {
		A int8
		B uint16
		_ [3]byte
		C [2]int32
		D bool
		E float64
		F complex128
	}
	c, err := far.Binary[rec]()
	require.NoError(t, err)
	require.Equal(t, 1+2+3+8+1+8+16, c.Size())
	v := rec{A: -3, B: 0x1234, C: [2]int32{-1, 7}, D: true, E: 2.5, F: complex(1, -2)}
	buf := make([]byte, c.Size())
	c.Encode(buf, v)
	require.Equal(t, []byte{0xfd, 0x34, 0x12, 0, 0, 0, 0xff, 0xff, 0xff, 0xff, 7, 0, 0, 0, 1}, buf[:15])
	require.Equal(t, v, c.Decode(buf))
	allocs := testing.AllocsPerRun(100, func() {
		c.Encode(buf, v)
		_ = c.Decode(buf)
	})
	require.Zero(t, allocs)

	u, err := far.Binary[uint64]()
	require.NoError(t, err)
	u.Encode(buf, 0x0102030405060708)
	require.Equal(t, []byte{8, 7, 6, 5, 4, 3, 2, 1}, buf[:8])
}

// TestModes: every mode loads what was stored, and its misuses are refused.
func TestModes(t *testing.T) {
	r := localRig(t, local.Options{Shape: local.Shape{MemoryNodes: 2}})
	c := r.client(t)
	ctx := context.Background()
	for _, mode := range []far.Mode{far.SingleWriter, far.OutOfPlace, far.Locked} {
		p, err := far.NewPtr(ctx, c, q(1), far.PtrOptions[quad]{Mode: mode, Node: 2})
		require.NoError(t, err, mode)
		require.Equal(t, farmem.NodeID(2), p.Addr().Node())
		v, err := p.Load(ctx, c)
		require.NoError(t, err)
		require.Equal(t, q(1), v)
		require.NoError(t, p.Store(ctx, c, q(2)))
		v, err = p.Load(ctx, c)
		require.NoError(t, err)
		require.Equal(t, q(2), v)
		var into quad
		require.NoError(t, p.LoadInto(ctx, c, &into))
		require.Equal(t, q(2), into)
		nv, err := p.Update(ctx, c, func(x quad) quad { return q(x.A + 10) })
		require.NoError(t, err)
		require.Equal(t, q(12), nv)
		_, err = p.CompareAndSwap(ctx, c, q(12), q(13))
		require.ErrorIs(t, err, far.ErrMode)

		// Another handle on the same address, as a program would rebuild it.
		p2, err := far.PtrAt[quad](p.Addr(), mode, nil)
		require.NoError(t, err)
		v, err = p2.Load(ctx, c)
		require.NoError(t, err)
		require.Equal(t, q(12), v)
		require.NoError(t, p.Free(ctx, c))
	}

	_, err := far.NewPtr(ctx, c, q(1), far.PtrOptions[quad]{Mode: far.Word})
	require.ErrorIs(t, err, far.ErrType)
	p, err := far.NewPtr(ctx, c, int32(-5), far.PtrOptions[int32]{})
	require.NoError(t, err)
	require.Equal(t, far.Word, p.Mode())
	ok, err := p.CompareAndSwap(ctx, c, -5, 7)
	require.NoError(t, err)
	require.True(t, ok)
	ok, err = p.CompareAndSwap(ctx, c, -5, 8)
	require.NoError(t, err)
	require.False(t, ok)
	v, err := p.Update(ctx, c, func(x int32) int32 { return x * 3 })
	require.NoError(t, err)
	require.Equal(t, int32(21), v)

	// Single-writer ownership.
	sw, err := far.NewPtr(ctx, c, q(1), far.PtrOptions[quad]{Mode: far.SingleWriter})
	require.NoError(t, err)
	c2 := r.client(t)
	require.ErrorIs(t, sw.Store(ctx, c2, q(3)), far.ErrNotOwner)
	sw.Disown(c)
	require.NoError(t, sw.Own(ctx, c2))
	require.NoError(t, sw.Store(ctx, c2, q(3)))
	got, err := sw.Load(ctx, c)
	require.NoError(t, err)
	require.Equal(t, q(3), got)

	var nilp far.Ptr[quad]
	_, err = nilp.Load(ctx, c)
	require.ErrorIs(t, err, far.ErrNil)
	_, err = far.PtrAt[quad](farmem.MakeAddr(1, 4100), far.OutOfPlace, nil)
	require.ErrorIs(t, err, farmem.ErrMisaligned)
}

// TestRoundTrips asserts the round trips of every operation in every mode, uncontended, with
// farmem.Stats deltas, on local and on the simulator (two memory nodes each); and those of the
// atomic words.
func TestRoundTrips(t *testing.T) {
	for fname, mk := range map[string]func(t *testing.T) *rig{
		"local": func(t *testing.T) *rig { return localRig(t, local.Options{Shape: local.Shape{MemoryNodes: 2}}) },
		"sim": func(t *testing.T) *rig {
			m := sim.ConnectX6()
			m.MemoryNodes, m.ComputeNodes, m.ClientsPerNode, m.MaxHandlers = 2, 2, 4, 1
			s, err := sim.New(m, 1)
			require.NoError(t, err)
			t.Cleanup(func() { _ = s.Close() })
			return &rig{f: s, s: s}
		},
	} {
		t.Run(fname, func(t *testing.T) {
			r := mk(t)
			ms := r.memories(t, 2)
			r.do(func() {
				cs := make([]*far.Client, len(ms))
				for i, m := range ms {
					c, err := far.NewClient(context.Background(), m, quiet)
					require.NoError(t, err)
					cs[i] = c
				}
				roundTrips(t, cs[0], cs[1])
				wordRoundTrips(t, cs[0])
				for _, c := range cs {
					require.NoError(t, c.Close())
				}
			})
		})
	}
}

// wordRoundTrips: every operation of Uint64 and Int64 is one round trip.
func wordRoundTrips(t *testing.T, c *far.Client) {
	ctx := context.Background()
	u, err := far.NewUint64(ctx, c, 2, 5)
	require.NoError(t, err)
	i, err := far.NewInt64(ctx, c, 1, -5)
	require.NoError(t, err)
	for _, op := range []struct {
		name string
		fn   func() error
	}{
		{"uint64 load", func() error { _, err := u.Load(ctx, c); return err }},
		{"uint64 store", func() error { return u.Store(ctx, c, 6) }},
		{"uint64 swap", func() error { _, err := u.Swap(ctx, c, 7); return err }},
		{"uint64 cas", func() error { _, err := u.CompareAndSwap(ctx, c, 7, 8); return err }},
		{"uint64 add", func() error { _, err := u.Add(ctx, c, 1); return err }},
		{"int64 load", func() error { _, err := i.Load(ctx, c); return err }},
		{"int64 store", func() error { return i.Store(ctx, c, -6) }},
		{"int64 swap", func() error { _, err := i.Swap(ctx, c, -7); return err }},
		{"int64 cas", func() error { _, err := i.CompareAndSwap(ctx, c, -7, -8); return err }},
		{"int64 add", func() error { _, err := i.Add(ctx, c, -1); return err }},
	} {
		require.Equal(t, uint64(1), rtts(t, c, op.fn), op.name)
	}
	v, err := u.Load(ctx, c)
	require.NoError(t, err)
	require.Equal(t, uint64(9), v)
	w, err := i.Load(ctx, c)
	require.NoError(t, err)
	require.Equal(t, int64(-9), w)
}

// roundTrips asserts the pointers' round trips with two clients of one fabric.
func roundTrips(t *testing.T, c, c2 *far.Client) {
	ctx := context.Background()

	w, err := far.NewPtr(ctx, c, uint64(1), far.PtrOptions[uint64]{})
	require.NoError(t, err)
	ptrs := map[far.Mode]far.Ptr[quad]{}
	for _, mode := range []far.Mode{far.SingleWriter, far.OutOfPlace, far.Locked} {
		ptrs[mode], err = far.NewPtr(ctx, c, q(1), far.PtrOptions[quad]{Mode: mode, Node: 1})
		require.NoError(t, err)
	}
	// Warm the allocator's current chunk and pin, and the lock node.
	require.NoError(t, ptrs[far.Locked].Store(ctx, c, q(1)))
	require.NoError(t, ptrs[far.OutOfPlace].Store(ctx, c, q(1)))

	load := func(p far.Ptr[quad]) func() error {
		return func() error { _, err := p.Load(ctx, c); return err }
	}
	for _, tc := range []struct {
		name string
		want uint64
		fn   func() error
	}{
		{"word load", far.WordLoadRoundTrips, func() error { _, err := w.Load(ctx, c); return err }},
		{"word store", far.WordStoreRoundTrips, func() error { return w.Store(ctx, c, 2) }},
		{"word cas", far.WordStoreRoundTrips, func() error { _, err := w.CompareAndSwap(ctx, c, 2, 3); return err }},
		{"word update", far.WordUpdateRoundTrips, func() error { _, err := w.Update(ctx, c, func(x uint64) uint64 { return x + 1 }); return err }},
		{"single-writer load", far.SingleWriterLoadRoundTrips, load(ptrs[far.SingleWriter])},
		{"single-writer load into", far.SingleWriterLoadRoundTrips, func() error { var v quad; return ptrs[far.SingleWriter].LoadInto(ctx, c, &v) }},
		{"single-writer store", far.SingleWriterStoreRoundTrips, func() error { return ptrs[far.SingleWriter].Store(ctx, c, q(5)) }},
		{"single-writer update", far.SingleWriterUpdateRoundTrips, func() error {
			_, err := ptrs[far.SingleWriter].Update(ctx, c, func(x quad) quad { return q(x.A + 1) })
			return err
		}},
		{"out-of-place load", far.OutOfPlaceLoadRoundTrips, load(ptrs[far.OutOfPlace])},
		{"out-of-place store", far.OutOfPlaceStoreRoundTrips, func() error { return ptrs[far.OutOfPlace].Store(ctx, c, q(6)) }},
		{"out-of-place update", far.OutOfPlaceUpdateRoundTrips, func() error {
			_, err := ptrs[far.OutOfPlace].Update(ctx, c, func(x quad) quad { return q(x.A + 1) })
			return err
		}},
		{"locked load", far.LockedLoadRoundTrips, load(ptrs[far.Locked])},
		{"locked store", far.LockedStoreRoundTrips, func() error { return ptrs[far.Locked].Store(ctx, c, q(7)) }},
		{"locked update", far.LockedUpdateRoundTrips, func() error {
			_, err := ptrs[far.Locked].Update(ctx, c, func(x quad) quad { return q(x.A + 1) })
			return err
		}},
	} {
		require.Equal(t, tc.want, rtts(t, c, tc.fn), tc.name)
	}

	// A store by a client whose sight of the cell is stale costs one more round trip (the CAS
	// that fails names the current block).
	oop := ptrs[far.OutOfPlace]
	require.NoError(t, oop.Store(ctx, c2, q(8))) // warms c2's allocator and pin
	require.NoError(t, oop.Store(ctx, c, q(9)))
	retries := c2.Stats().CASRetries
	require.Equal(t, uint64(far.OutOfPlaceStoreRoundTrips+far.StaleStoreRoundTrips), rtts(t, c2, func() error { return oop.Store(ctx, c2, q(10)) }))
	require.Equal(t, retries+1, c2.Stats().CASRetries)
	v, err := oop.Load(ctx, c)
	require.NoError(t, err)
	require.Equal(t, q(10), v)

	// Batched loads: n pointers on one node in one round trip (two if out of place).
	const n = 16
	for _, mode := range []far.Mode{far.Word, far.SingleWriter, far.OutOfPlace, far.Locked} {
		ps := make([]far.Ptr[quad], n)
		var ws []far.Ptr[uint64]
		for i := range ps {
			if mode == far.Word {
				p, err := far.NewPtr(ctx, c, uint64(i), far.PtrOptions[uint64]{Node: 2})
				require.NoError(t, err)
				ws = append(ws, p)
				continue
			}
			ps[i], err = far.NewPtr(ctx, c, q(uint64(i)), far.PtrOptions[quad]{Mode: mode, Node: 2})
			require.NoError(t, err)
		}
		want := uint64(far.LoadManyRoundTrips)
		if mode == far.OutOfPlace || mode == far.Locked {
			want = far.LoadManyIndirectRoundTrips
		}
		if mode == far.Word {
			out := make([]uint64, n)
			require.Equal(t, want, rtts(t, c, func() error { return far.LoadMany(ctx, c, ws, out) }), mode.String())
			for i := range out {
				require.Equal(t, uint64(i), out[i])
			}
			continue
		}
		out := make([]quad, n)
		require.Equal(t, want, rtts(t, c, func() error { return far.LoadMany(ctx, c, ps, out) }), mode.String())
		for i := range out {
			require.Equal(t, q(uint64(i)), out[i])
		}
	}
}

// TestStoreErrors: a store to a node that is down reports ErrNodeDown.
func TestStoreErrors(t *testing.T) {
	r := localRig(t, local.Options{Shape: local.Shape{MemoryNodes: 2}})
	c := r.client(t)
	ctx := context.Background()
	p, err := far.NewPtr(ctx, c, q(1), far.PtrOptions[quad]{Mode: far.OutOfPlace, Node: 2})
	require.NoError(t, err)
	require.NoError(t, r.f.(transport.FaultInjector).Crash(2))
	err = p.Store(ctx, c, q(2))
	require.True(t, errors.Is(err, farmem.ErrNodeDown), "%v", err)
	_, err = p.Load(ctx, c)
	require.ErrorIs(t, err, farmem.ErrNodeDown)
}
