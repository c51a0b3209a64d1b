package cider_test

import (
	"context"
	"encoding/binary"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/farmem/farmem/ds/cider"
	"github.com/farmem/farmem/ds/race"
	"github.com/farmem/farmem/farmem"
	"github.com/farmem/farmem/farmem/local"
	"github.com/farmem/farmem/farmem/transport"
)

// FuzzDecode: the decoders of what the array reads from far memory (roots, blocks, pointer
// words) never panic, and accept only what their encoders write.
func FuzzDecode(f *testing.F) {
	root := make([]byte, 48)
	binary.LittleEndian.PutUint64(root, 0x41525450_6d726166)
	f.Add(root, uint64(0), uint64(1))
	f.Add([]byte{}, uint64(7), uint64(0))
	f.Add(make([]byte, 24), ^uint64(0), uint64(3))
	f.Fuzz(func(t *testing.T, b []byte, w, k uint64) {
		if keys, bases, err := cider.DecodeRoot(b); err == nil {
			require.Positive(t, keys)
			require.NotEmpty(t, bases)
		}
		if v, err := cider.DecodeBlock(b, k); err == nil {
			require.LessOrEqual(t, len(v), len(b))
			require.Equal(t, k, binary.LittleEndian.Uint64(b))
		}
		p := cider.Pointer(w)
		if q, err := cider.MakePointer(p.Addr(), p.Size()); err == nil {
			require.Equal(t, p.Addr(), q.Addr())
			require.Equal(t, p.Size(), q.Size())
		}
	})
}

func TestPointerRoundTrip(t *testing.T) {
	a := farmem.MakeAddr(3, 1<<40)
	p, err := cider.MakePointer(a, 40)
	require.NoError(t, err)
	require.Equal(t, a, p.Addr())
	require.Equal(t, uint64(48), p.Size(), "sizes round up to 16 bytes")
	for _, bad := range []struct {
		a    farmem.Addr
		size uint64
	}{{farmem.MakeAddr(256, 0), 16}, {farmem.MakeAddr(1, 8), 16}, {farmem.MakeAddr(1, 16<<40), 16}, {a, 0}, {a, 1 << 21}} {
		_, err := cider.MakePointer(bad.a, bad.size)
		require.ErrorIs(t, err, farmem.ErrInvalid, "%v %d", bad.a, bad.size)
	}
}

// TestFewKeysManyNodes: an array with fewer keys than nodes works, and keys spread over them.
func TestFewKeysManyNodes(t *testing.T) {
	e := newLocalEnv(t, local.Options{Shape: transport.Shape{MemoryNodes: 4}}, 2, race.Params{})
	c := e.open(t, 0, arrayKV, optimistic)
	ctx := context.Background()
	require.NoError(t, c.kv.Insert(ctx, 1, val(5, 8)))
	v, err := c.kv.Search(ctx, 1)
	require.NoError(t, err)
	require.Equal(t, uint64(5), unval(v))
	require.NotEqual(t, c.arr.Record(0).Node(), c.arr.Record(1).Node())
	require.ErrorIs(t, c.kv.Insert(ctx, 2, val(1, 8)), cider.ErrKeyRange)
}
