package farmemtest

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/farmem/farmem/farmem"
)

// testSend checks one-way messages: a client's messages to a node run at its handler in the
// order sent, the sender counts them as messages and never as round trips or Calls, a
// handler's failure is counted on the callee, and a message to a memory node, an unknown
// node or over MaxCallBytes fails at once.
func testSend(t *testing.T, open Open) {
	e := newEnv(t, open, DefaultConfig)
	ctx := e.ctx()
	hs := e.hosted()
	a := e.client(0)
	require.Equal(t, hs[0].id, a.Info().Node)
	to := hs[1]
	done := a.Info().Slice.Add(128) // the handler writes how many messages it saw here

	const n = 50
	var mu sync.Mutex
	var got []uint64
	var wrongFrom error
	mOrder := farmem.OwnerApp.Method(40)
	mFail := farmem.OwnerApp.Method(41)
	mNone := farmem.OwnerApp.Method(42)
	require.NoError(t, to.f.Handle(to.id, mOrder, func(ctx context.Context, m farmem.Memory, from farmem.ClientID, req []byte) ([]byte, error) {
		mu.Lock()
		if from != a.Info().ID && wrongFrom == nil {
			wrongFrom = fmt.Errorf("message from client %d, want %d", from, a.Info().ID)
		}
		got = append(got, binary.LittleEndian.Uint64(req))
		k := uint64(len(got))
		mu.Unlock()
		return []byte("discarded"), m.Write(ctx, done, words(k))
	}))
	require.NoError(t, to.f.Handle(to.id, mFail, func(context.Context, farmem.Memory, farmem.ClientID, []byte) ([]byte, error) {
		return nil, errors.New("refused")
	}))
	failsBefore := to.f.Stats().MessageFailures

	before := a.Stats()
	require.NoError(t, a.Send(ctx, to.id, mFail, nil))
	require.NoError(t, a.Send(ctx, to.id, mNone, []byte("nobody")))
	var sent uint64 = 6
	for i := range uint64(n) {
		req := make([]byte, 8+i%5)
		binary.LittleEndian.PutUint64(req, i)
		sent += uint64(len(req))
		require.NoError(t, a.Send(ctx, to.id, mOrder, req))
	}
	d := a.Stats().Sub(before)
	require.Equal(t, uint64(n+2), d.Messages, "messages counted: %v", d)
	require.Equal(t, sent, d.MessageBytes, "message bytes counted: %v", d)
	require.Zero(t, d.RoundTrips, "a message is no round trip: %v", d)
	require.Zero(t, d.Calls, "a message is no Call: %v", d)

	v, err := a.Wait(ctx, done, func(v uint64) bool { return v == n })
	require.NoError(t, err)
	require.Equal(t, uint64(n), v)
	mu.Lock()
	require.NoError(t, wrongFrom)
	want := make([]uint64, n)
	for i := range want {
		want[i] = uint64(i)
	}
	require.Equal(t, want, got, "messages ran in the order sent")
	mu.Unlock()
	// The failing message and the one with no handler ran (and failed) before the first of
	// the ordered ones, on the same lane; the callee counted both.
	require.GreaterOrEqual(t, to.f.Stats().MessageFailures-failsBefore, uint64(2), "failures counted on the callee")

	// A message to the sender's own node takes the same path.
	self := a.Info().Slice.Add(136)
	require.NoError(t, hs[0].f.Handle(hs[0].id, mOrder, func(ctx context.Context, m farmem.Memory, _ farmem.ClientID, req []byte) ([]byte, error) {
		return nil, m.Write(ctx, self, req)
	}))
	require.NoError(t, a.Send(ctx, a.Info().Node, mOrder, words(7)))
	_, err = a.Wait(ctx, self, func(v uint64) bool { return v == 7 })
	require.NoError(t, err)
	before = before.Add(farmem.Stats{Messages: 1, MessageBytes: 8})

	err = a.Send(ctx, e.tp.MemoryNodes()[0], mOrder, nil)
	require.ErrorIs(t, err, farmem.ErrInvalid, "a message to a memory node")
	err = a.Send(ctx, farmem.ComputeID(999).Node(), mOrder, nil)
	require.ErrorIs(t, err, farmem.ErrInvalid, "a message to a node that does not exist")
	err = a.Send(ctx, to.id, mOrder, make([]byte, farmem.MaxCallBytes+1))
	require.ErrorIs(t, err, farmem.ErrInvalid, "a message over MaxCallBytes")
	d = a.Stats().Sub(before)
	require.Equal(t, uint64(n+2), d.Messages, "refused messages are not counted")
}

// testHandleCollision checks the method namespace's rule: a second registration of a method
// on a node is refused, whoever makes it, until the first is removed.
func testHandleCollision(t *testing.T, open Open) {
	e := newEnv(t, open, DefaultConfig)
	hs := e.hosted()
	h := func(context.Context, farmem.Memory, farmem.ClientID, []byte) ([]byte, error) { return nil, nil }
	m := farmem.OwnerRace.Method(1)
	require.NoError(t, hs[0].f.Handle(hs[0].id, m, h))
	err := hs[0].f.Handle(hs[0].id, m, h)
	require.ErrorIs(t, err, farmem.ErrInvalid, "a second registration of one method")
	require.ErrorContains(t, err, "ds/race.1", "the error names the method's owner")
	require.NoError(t, hs[0].f.Handle(hs[0].id, farmem.OwnerCider.Method(1), h), "another owner's block")
	require.NoError(t, hs[1].f.Handle(hs[1].id, m, h), "the same method on another node")
	require.NoError(t, hs[0].f.Handle(hs[0].id, m, nil), "removal")
	require.ErrorIs(t, hs[0].f.Handle(hs[0].id, m, nil), farmem.ErrInvalid, "removing twice")
	require.NoError(t, hs[0].f.Handle(hs[0].id, m, h), "registered again after removal")
}
