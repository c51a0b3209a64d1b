package farmem

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestCountersAddRoundTrips(t *testing.T) {
	var c Counters
	var b Batch
	b.MaskedCAS(MakeAddr(1, 64), 1, 1, 2, 2)
	c.CountBatch(&b, ComputeID(1).Node())
	c.AddRoundTrips(2)
	c.AddRoundTrips(0)
	s := c.Snapshot()
	require.Equal(t, uint64(3), s.RoundTrips, "the batch's round trip and two extra")
	require.Equal(t, uint64(1), s.VerbsOf(OpMaskedCAS), "extra round trips are not extra verbs")
}
