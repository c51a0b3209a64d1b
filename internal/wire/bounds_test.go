package wire

import (
	"errors"
	"math"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/farmem/farmem/farmem"
)

// No length or count field wraps: a value too large for its field is written as one every
// decoder refuses.
func TestLengthFieldsSaturate(t *testing.T) {
	require.Equal(t, uint32(100), frameLen(100))
	require.Equal(t, uint32(MaxFrameLen-1), frameLen(MaxFrameLen-1))
	for _, n := range []int{MaxFrameLen, MaxFrameLen + 1, 1 << 33, (1 << 32) + 100, math.MaxInt, -1} {
		require.Equal(t, uint32(MaxFrameLen), frameLen(n), "payload of %d bytes", n)
	}
	// The saturated frame length is refused by every receiver, whatever its limit.
	h := AppendHeader(nil, Header{Type: TypeResult, Len: MaxFrameLen})
	_, err := ParseHeader(h, math.MaxUint32)
	require.ErrorIs(t, err, ErrMalformed)

	require.Equal(t, uint16(farmem.MaxBatchOps), countField(farmem.MaxBatchOps))
	for _, n := range []int{farmem.MaxBatchOps + 1, 1 << 16, 1<<16 + 5, -1} {
		require.Equal(t, uint16(0xFFFF), countField(n), "count %d", n)
		_, err := DecodeBatch(AppendBatchCount(nil, n), nil)
		require.ErrorIs(t, err, ErrMalformed, "count %d", n)
		var rs Results
		_, err = rs.Reset(AppendResultCount(nil, n))
		require.ErrorIs(t, err, ErrMalformed, "count %d", n)
	}

	require.Equal(t, uint32(farmem.MaxOpBytes), lenField(farmem.MaxOpBytes))
	for _, n := range []int{farmem.MaxOpBytes + 1, 1 << 32, 1<<32 + 8, -1} {
		require.Equal(t, uint32(math.MaxUint32), lenField(n), "length %d", n)
	}
	// An op whose buffer is over the limit is encoded with a length the decoder refuses.
	op := farmem.Op{Kind: farmem.OpRead, Buf: make([]byte, farmem.MaxOpBytes+1)}
	_, err = DecodeBatch(AppendOp(AppendBatchCount(nil, 1), &op, 1), nil)
	require.ErrorIs(t, err, ErrMalformed)
}

func TestResultsSizeAndTooLarge(t *testing.T) {
	ops := []Op{
		{Kind: farmem.OpRead, Len: 100},
		{Kind: farmem.OpRead, Len: 100, Unsignaled: true},
		{Kind: farmem.OpWrite, Len: 50},
		{Kind: farmem.OpCAS, Len: 8},
	}
	require.Equal(t, uint64(2+101+1+9), ResultsSize(ops))
	// 4096 reads of 16 MiB: 64 GiB of results, counted without overflow.
	big := make([]Op, farmem.MaxBatchOps)
	for i := range big {
		big[i] = Op{Kind: farmem.OpRead, Len: farmem.MaxOpBytes}
	}
	require.Equal(t, uint64(2+farmem.MaxBatchOps*(1+farmem.MaxOpBytes)), ResultsSize(big))

	require.Equal(t, StatusTooLarge, StatusOf(ErrReplyTooLarge))
	require.True(t, StatusTooLarge.Valid())
	require.ErrorIs(t, StatusTooLarge.Err(), ErrReplyTooLarge)
	require.True(t, errors.Is(StatusTooLarge.Err(), farmem.ErrInvalid))
	var rs Results
	_, err := rs.Reset(AppendStatus(AppendResultCount(nil, 1), StatusTooLarge))
	require.NoError(t, err)
	st, _, _, err := rs.Next(farmem.OpRead, 1<<20)
	require.NoError(t, err)
	require.ErrorIs(t, st.Err(), ErrReplyTooLarge)
}
