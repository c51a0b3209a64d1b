package transport_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/farmem/farmem/farmem"
	"github.com/farmem/farmem/farmem/transport"
)

func TestCountersAddRoundTrips(t *testing.T) {
	var c transport.Counters
	var b farmem.Batch
	b.MaskedCAS(farmem.MakeAddr(1, 64), 1, 1, 2, 2)
	c.CountBatch(&b, farmem.ComputeID(1).Node())
	c.AddRoundTrips(2)
	c.AddRoundTrips(0)
	s := c.Snapshot()
	require.Equal(t, uint64(3), s.RoundTrips, "the batch's round trip and two extra")
	require.Equal(t, uint64(1), s.VerbsOf(farmem.OpMaskedCAS), "extra round trips are not extra verbs")
}
