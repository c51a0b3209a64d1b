package maxreg_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/farmem/farmem/alloc"
	"github.com/farmem/farmem/ds/maxreg"
	"github.com/farmem/farmem/farmem"
)

// TestErrors: bad input fails with the package's errors, each wrapping a farmem sentinel, and
// changes nothing.
func TestErrors(t *testing.T) {
	f := newLocal(t, false)
	ctx := context.Background()
	addr := create(t, f, maxreg.Params{ValueSize: 8, Writers: 64})
	w := open(t, f, 0, addr, maxreg.Options{}, nil)
	far := open(t, f, 1, addr, maxreg.Options{}, nil) // a client of compute node 2: id above 64
	require.Greater(t, int(far.m.Info().ID), 64)

	_, err := w.r.Write(ctx, make([]byte, 9))
	require.ErrorIs(t, err, maxreg.ErrValueSize)
	require.ErrorIs(t, err, farmem.ErrInvalid)
	_, err = far.r.Write(ctx, []byte("x"))
	require.ErrorIs(t, err, maxreg.ErrNotWriter)
	require.ErrorIs(t, err, farmem.ErrInvalid)
	tag, err := w.r.Write(ctx, []byte("12345678"))
	require.NoError(t, err)
	require.ErrorIs(t, far.r.Verify(ctx, tag), maxreg.ErrNotWriter)
	// Verify accepts the writer's recent tags only: after Slots more writes, tag's buffer is
	// another write's.
	require.NoError(t, w.r.Verify(ctx, tag))
	require.ErrorIs(t, w.r.Verify(ctx, tag+1<<17), maxreg.ErrReused, "a tag never written")
	for range maxreg.DefaultSlots {
		_, err := w.r.WriteFlag(ctx, []byte("12345678"), false)
		require.NoError(t, err)
	}
	require.ErrorIs(t, w.r.Verify(ctx, tag), maxreg.ErrReused)
	tag, err = w.r.Write(ctx, []byte("12345678"))
	require.NoError(t, err)
	got, v, err := far.r.Read(ctx)
	require.NoError(t, err, "any client may read")
	require.Equal(t, tag, got)
	require.Equal(t, "12345678", string(v))

	for _, p := range []maxreg.Params{{Words: -1}, {Words: maxreg.MaxWords + 1}, {Slots: 1}, {ValueSize: maxreg.MaxValueSize + 1}, {Writers: 1 << 16}, {Tick: -1}} {
		require.Zero(t, maxreg.Size(p))
		require.ErrorIs(t, maxreg.Format(ctx, w.m, addr, p), maxreg.ErrBadParams, "%+v", p)
	}
	require.ErrorIs(t, maxreg.Format(ctx, w.m, addr+8, maxreg.Params{}), farmem.ErrMisaligned)
	_, err = maxreg.Open(ctx, w.m, addr+4096, maxreg.Options{})
	require.ErrorIs(t, err, maxreg.ErrNotFormatted)
	require.ErrorIs(t, err, farmem.ErrInvalid)

	// The register is unchanged by all of it.
	got, v, err = w.r.Read(ctx)
	require.NoError(t, err)
	require.Equal(t, tag, got)
	require.Equal(t, "12345678", string(v))

	require.NoError(t, w.r.Close())
	require.NoError(t, w.r.Close())
	_, err = w.r.Write(ctx, nil)
	require.ErrorIs(t, err, maxreg.ErrClosed)
	_, _, err = w.r.Read(ctx)
	require.ErrorIs(t, err, farmem.ErrClosed)
}

// TestCreateAllocates: Create takes the register's Size from the allocator on the node named,
// and a register there opens with the parameters given.
func TestCreateAllocates(t *testing.T) {
	f := newLocal(t, false)
	ctx := context.Background()
	m, err := f.Open(ctx, f.Topology().ComputeNodes()[0])
	require.NoError(t, err)
	defer m.Close()
	require.NoError(t, alloc.FormatAll(ctx, m, alloc.FormatOptions{}))
	a, err := alloc.New(ctx, m, alloc.Options{})
	require.NoError(t, err)
	defer a.Close()
	p := maxreg.Params{Words: 3, Slots: 5, ValueSize: 100, Writers: 10}
	size := maxreg.Size(p)
	require.NotZero(t, size)
	x, err := maxreg.Create(ctx, m, a, 1, p)
	require.NoError(t, err)
	y, err := maxreg.Create(ctx, m, a, 1, p)
	require.NoError(t, err)
	require.GreaterOrEqual(t, max(x, y)-min(x, y), farmem.Addr(size), "registers overlap")
	before := m.Stats()
	r, err := maxreg.Open(ctx, m, y, maxreg.Options{})
	require.NoError(t, err)
	require.Equal(t, uint64(maxreg.OpenRoundTrips), m.Stats().Sub(before).RoundTrips)
	want := p
	want.Tick, want.Lease, want.Skew = maxreg.DefaultTick, maxreg.DefaultLease, maxreg.DefaultSkew
	require.Equal(t, want, r.Params())
}
