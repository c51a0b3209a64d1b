package farmem

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestBatchReusedSlotsAreFresh: a batch cut back to no ops without Reset (its slots still hold
// the last post's ops, results and errors) builds each kind of op exactly as a fresh batch does:
// every field of a reused slot is set, none is left over.
func TestBatchReusedSlotsAreFresh(t *testing.T) {
	a, buf := MakeAddr(1, 64), make([]byte, 8)
	build := func(b *Batch) {
		b.Read(a, buf)
		b.Write(a.Add(8), buf)
		b.CAS(a.Add(16), 1, 2)
		b.FAA(a.Add(24), 3)
		b.MaskedCAS(a.Add(32), 4, 5, 6, 7)
	}
	var fresh Batch
	build(&fresh)

	var used Batch
	for range 2 {
		used.MaskedCAS(MakeAddr(2, 8), 9, 9, 9, 9)
		used.Write(MakeAddr(2, 16), make([]byte, 16))
	}
	for i := range used.Ops {
		used.Ops[i].Unsignaled = true
		used.Ops[i].val, used.Ops[i].err = 42, errors.New("left over")
	}
	used.Ops = used.Ops[:0]
	build(&used)
	require.Equal(t, fresh.Ops, used.Ops)
	for i := range used.Ops {
		v, err := used.Result(i)
		require.Zero(t, v)
		require.NoError(t, err)
	}
}
