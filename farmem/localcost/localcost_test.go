package localcost_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/farmem/farmem/farmem"
	"github.com/farmem/farmem/farmem/local"
	"github.com/farmem/farmem/farmem/localcost"
)

// A price is one access plus the bytes at bandwidth, rounded to the nanosecond; no bandwidth
// means no byte term, and the zero price is free.
func TestPriceFor(t *testing.T) {
	p := localcost.Price{Access: 100 * time.Nanosecond, Bandwidth: 10e9}
	require.Equal(t, 100*time.Nanosecond, p.For(0))
	require.Equal(t, 100*time.Nanosecond+102*time.Nanosecond, p.For(1024)) // 102.4 ns rounds down
	require.Equal(t, 100*time.Nanosecond+205*time.Nanosecond, p.For(2048)) // 204.8 ns rounds up
	require.Equal(t, 100*time.Nanosecond, localcost.Price{Access: 100 * time.Nanosecond}.For(1<<20))
	require.Zero(t, localcost.Price{}.For(4096))
}

// A real transport runs its clients' work in real time: it is no Pricer, its price is zero,
// and charging it does not call the runtime.
func TestRealTransportIsFree(t *testing.T) {
	f, err := local.New(local.Options{})
	require.NoError(t, err)
	defer f.Close()
	m, err := f.Open(context.Background(), f.Topology().ComputeNodes()[0])
	require.NoError(t, err)
	defer m.Close()
	_, ok := m.(localcost.Pricer)
	require.False(t, ok)
	require.Equal(t, localcost.Price{}, localcost.Of(m))
	rt := &counting{Runtime: m.Runtime()}
	localcost.Of(m).Charge(rt, 1<<30)
	require.Zero(t, rt.computes, "a zero price charges nothing")
	localcost.Price{Access: time.Nanosecond}.Charge(rt, 8)
	require.Equal(t, 1, rt.computes, "a price is charged through Runtime.Compute")
}

// counting is a Runtime that counts the Compute calls it is handed.
type counting struct {
	farmem.Runtime
	computes int
}

func (c *counting) Compute(d time.Duration) {
	c.computes++
	c.Runtime.Compute(d)
}
