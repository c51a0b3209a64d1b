package farcoll_test

import (
	"context"
	"encoding/binary"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/farmem/farmem/cxl"
	"github.com/farmem/farmem/far"
	"github.com/farmem/farmem/far/farcoll"
)

// TestArrayAllocs: on cxl, whose verbs allocate nothing, Get, GetInto and ReadRange into the
// caller's own variables allocate nothing: the variables stay on the caller's stack, with the
// default codec (which decodes in place) as with a codec that only has Decode.
func TestArrayAllocs(t *testing.T) {
	r, err := cxl.CreateTemp("", "farcoll-allocs-*", cxl.Options{Shape: cxl.Shape{MemoryNodes: 1, MemorySize: 16 << 20, ComputeNodes: 1}})
	require.NoError(t, err)
	t.Cleanup(func() { _ = r.Close() })
	f, err := r.Attach(cxl.OpenOptions{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = f.Close() })
	m, err := f.Open(context.Background(), f.Hosted()[0])
	require.NoError(t, err)
	t.Cleanup(func() { _ = m.Close() })
	ctx := context.Background()
	c, err := far.NewClient(ctx, m, far.Options{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	for name, codec := range map[string]far.Codec[pair]{"binary": nil, "only-decode": pairCodec{}} {
		a, err := farcoll.NewArray(ctx, c, 8, farcoll.ArrayOptions[pair]{Codec: codec})
		require.NoError(t, err)
		for i := range 8 {
			require.NoError(t, a.Set(ctx, c, i, pair{uint64(i), 1}))
		}
		var warm [8]pair
		require.NoError(t, a.ReadRange(ctx, c, 0, warm[:]))
		require.Zero(t, testing.AllocsPerRun(200, func() {
			var v pair
			var vs [4]pair
			if a.GetInto(ctx, c, 2, &v) != nil || v != (pair{2, 1}) || a.ReadRange(ctx, c, 4, vs[:]) != nil || vs[3] != (pair{7, 1}) {
				panic("wrong values")
			}
			if w, err := a.Get(ctx, c, 3); err != nil || w != (pair{3, 1}) {
				panic("wrong value")
			}
		}), name)
	}
}

// pairCodec is a hand-written codec without DecodeInto. (Binary's Decode, by value, takes its
// scratch value from a sync.Pool, which the race detector makes drop items on purpose.)
type pairCodec struct{}

func (pairCodec) Size() int { return 16 }

func (pairCodec) Encode(b []byte, p pair) {
	binary.LittleEndian.PutUint64(b, p.A)
	binary.LittleEndian.PutUint64(b[8:], p.B)
}

func (pairCodec) Decode(b []byte) pair {
	return pair{binary.LittleEndian.Uint64(b), binary.LittleEndian.Uint64(b[8:])}
}
