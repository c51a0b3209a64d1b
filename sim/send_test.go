package sim_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/farmem/farmem/farmem"
	"github.com/farmem/farmem/sim"
)

// TestSendCostsARequestLeg: in virtual time, a message's handler starts as long after Send as
// a Call's handler starts after the Call (the request leg is modelled the same way), Send
// returns without waiting for it, and a message with jitter on never overtakes an earlier one.
func TestSendCostsARequestLeg(t *testing.T) {
	m := sim.ConnectX6()
	m.MemoryNodes, m.ComputeNodes = 1, 2
	s, err := sim.New(m, 11)
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	ctx := context.Background()
	a := open1(t, s, 1)
	target := farmem.ComputeID(2).Node()
	var started farmem.Time
	mark := farmem.OwnerApp.Method(1)
	require.NoError(t, s.Handle(target, mark, func(context.Context, farmem.Memory, farmem.ClientID, []byte) ([]byte, error) {
		started = s.Now()
		return nil, nil
	}))
	s.Run(func() {
		// Warm up, then one Call and one message from an idle cluster.
		_, err := a.Call(ctx, target, mark, nil)
		require.NoError(t, err)
		require.NoError(t, a.Runtime().Sleep(ctx, time.Millisecond))
		t0 := s.Now()
		_, err = a.Call(ctx, target, mark, make([]byte, 64))
		require.NoError(t, err)
		callLeg, callRT := started.Sub(t0), s.Now().Sub(t0)
		require.NoError(t, a.Runtime().Sleep(ctx, time.Millisecond))

		before := a.Stats()
		t1 := s.Now()
		require.NoError(t, a.Send(ctx, target, mark, make([]byte, 64)))
		sendTook := s.Now().Sub(t1)
		require.NoError(t, a.Runtime().Sleep(ctx, time.Millisecond))
		msgLeg := started.Sub(t1)
		t.Logf("call: handler after %v, round trip %v; message: handler after %v, Send took %v", callLeg, callRT, msgLeg, sendTook)
		require.Equal(t, callLeg, msgLeg, "a message's request leg costs what a Call's does")
		require.Less(t, sendTook, callLeg, "Send does not wait for the message to arrive")
		d := a.Stats().Sub(before)
		require.Equal(t, uint64(1), d.Messages)
		require.Zero(t, d.RoundTrips)
	})
}

// TestSendFIFOWithJitter: with jitter on every trip, one client's messages still run in the
// order sent.
func TestSendFIFOWithJitter(t *testing.T) {
	m := sim.ConnectX6()
	m.MemoryNodes, m.ComputeNodes = 1, 2
	m.Jitter = 5 * time.Microsecond
	s, err := sim.New(m, 12)
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	ctx := context.Background()
	a := open1(t, s, 1)
	target := farmem.ComputeID(2).Node()
	var got []byte
	require.NoError(t, s.Handle(target, 1, func(_ context.Context, _ farmem.Memory, _ farmem.ClientID, req []byte) ([]byte, error) {
		got = append(got, req[0])
		return nil, nil
	}))
	s.Run(func() {
		for i := range 100 {
			require.NoError(t, a.Send(ctx, target, 1, []byte{byte(i)}))
		}
		require.NoError(t, a.Runtime().Sleep(ctx, 10*time.Millisecond))
	})
	require.Len(t, got, 100)
	for i, b := range got {
		require.Equal(t, byte(i), b)
	}
}
