package farmemtest

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/farmem/farmem/farmem"
)

// wakeBound is the largest wake latency of a Wait the suite accepts.
const wakeBound = 100 * time.Millisecond

func testWait(t *testing.T, open Open) {
	e := newEnv(t, open, DefaultConfig)
	ctx := e.ctx()
	a, b := e.client(0), e.client(1)
	w := a.Info().Slice.Add(64)

	_, err := a.Wait(ctx, b.Info().Slice, func(uint64) bool { return true })
	require.ErrorIs(t, err, farmem.ErrNotLocal)
	_, err = a.Wait(ctx, w.Add(4), func(uint64) bool { return true })
	require.ErrorIs(t, err, farmem.ErrMisaligned)
	_, err = a.Wait(ctx, e.mem(0, base), func(uint64) bool { return true })
	require.ErrorIs(t, err, farmem.ErrNotLocal)

	// Woken by a peer's plain write, then by a peer's CAS.
	for _, step := range []struct {
		name string
		want uint64
		do   func() error
	}{
		{"write", 1, func() error { return b.Write(ctx, w, words(1)) }},
		{"cas", 2, func() error { _, err := b.CAS(ctx, w, 1, 2); return err }},
		{"faa", 3, func() error { _, err := b.FAA(ctx, w, 1); return err }},
	} {
		var woke, wrote atomic.Int64
		err := e.parallel(2, func(i int) error {
			if i == 0 {
				v, err := a.Wait(ctx, w, func(v uint64) bool { return v == step.want })
				woke.Store(int64(e.rt.Now()))
				if err == nil && v != step.want {
					err = fmt.Errorf("woke with %d, want %d", v, step.want)
				}
				return err
			}
			if err := e.rt.Sleep(ctx, 20*time.Millisecond); err != nil {
				return err
			}
			err := step.do()
			wrote.Store(int64(e.rt.Now()))
			return err
		})
		require.NoError(t, err, step.name)
		lat := time.Duration(woke.Load() - wrote.Load())
		t.Logf("%s: woke %v after the peer's verb returned", step.name, lat)
		require.Less(t, lat, wakeBound, "%s: wake latency", step.name)
	}

	// A Wait that is never satisfied ends with its context.
	short, cancel := e.rt.WithTimeout(context.Background(), 30*time.Millisecond)
	defer cancel()
	start := e.rt.Now()
	_, err = a.Wait(short, w, func(v uint64) bool { return v == 99 })
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.GreaterOrEqual(t, e.rt.Now().Sub(start), 25*time.Millisecond, "a Wait gave up before its deadline")
}

func testCall(t *testing.T, open Open) {
	e := newEnv(t, open, DefaultConfig)
	ctx := e.ctx()
	hs := e.hosted()
	counter := e.mem(0, base)
	require.NoError(t, hs[0].f.Handle(hs[0].id, 2, func(_ context.Context, _ farmem.Memory, _ farmem.ClientID, req []byte) ([]byte, error) {
		return append([]byte("pong:"), req...), nil
	}))
	require.NoError(t, hs[1].f.Handle(hs[1].id, 1, func(ctx context.Context, m farmem.Memory, from farmem.ClientID, req []byte) ([]byte, error) {
		if m.Info().Node != hs[1].id {
			return nil, fmt.Errorf("handler ran with a client of %v, not %v", m.Info().Node, hs[1].id)
		}
		if _, err := m.FAA(ctx, counter, 1); err != nil {
			return nil, err
		}
		inner, err := m.Call(ctx, hs[0].id, 2, req)
		if err != nil {
			return nil, err
		}
		return fmt.Appendf(nil, "%d:nested:%s", from, inner), nil
	}))
	require.NoError(t, hs[1].f.Handle(hs[1].id, 3, func(context.Context, farmem.Memory, farmem.ClientID, []byte) ([]byte, error) {
		return nil, fmt.Errorf("full: %w", farmem.ErrNoSpace)
	}))
	a := e.client(0)
	reply, err := a.Call(ctx, hs[1].id, 1, []byte("ping"))
	require.NoError(t, err)
	require.Equal(t, fmt.Sprintf("%d:nested:pong:ping", a.Info().ID), string(reply))
	buf := make([]byte, 8)
	require.NoError(t, a.Read(ctx, counter, buf))
	require.Equal(t, uint64(1), word(buf))

	_, err = a.Call(ctx, hs[1].id, 9, nil)
	require.ErrorIs(t, err, farmem.ErrNoHandler)
	_, err = a.Call(ctx, hs[1].id, 3, nil)
	require.ErrorIs(t, err, farmem.ErrRemote)
	require.ErrorIs(t, err, farmem.ErrNoSpace, "the handler's sentinel crosses over")
	require.ErrorContains(t, err, "full")
	_, err = a.Call(ctx, e.tp.MemoryNodes()[0], 1, nil)
	require.ErrorIs(t, err, farmem.ErrInvalid, "a Call to a memory node")
	_, err = a.Call(ctx, farmem.ComputeID(999).Node(), 1, nil)
	require.Error(t, err, "a Call to a node that does not exist")
	_, err = a.Call(ctx, hs[1].id, 2, make([]byte, farmem.MaxCallBytes+1))
	require.ErrorIs(t, err, farmem.ErrInvalid)

	// More concurrent calls than a node runs handlers at once: all complete.
	const callers = 24
	ms := make([]farmem.Memory, callers)
	for i := range ms {
		ms[i] = e.client(2 * i) // all on hosted node 0
	}
	require.NoError(t, e.parallel(callers, func(i int) error {
		r, err := ms[i].Call(ctx, hs[1].id, 1, []byte{byte(i)})
		if err == nil && r[len(r)-1] != byte(i) {
			err = fmt.Errorf("call %d got reply %q", i, r)
		}
		return err
	}))
	require.NoError(t, a.Read(ctx, counter, buf))
	require.Equal(t, uint64(callers+1), word(buf))
}

func testClose(t *testing.T, open Open) {
	e := newEnv(t, open, DefaultConfig)
	ctx := e.ctx()
	m := e.client(0)
	require.NoError(t, m.Close())
	require.NoError(t, m.Close(), "Close is idempotent")
	a := e.mem(0, base)
	require.ErrorIs(t, m.Read(ctx, a, make([]byte, 8)), farmem.ErrClosed)
	require.ErrorIs(t, m.Write(ctx, a, make([]byte, 8)), farmem.ErrClosed)
	_, err := m.FAA(ctx, a, 1)
	require.ErrorIs(t, err, farmem.ErrClosed)
	_, err = m.Wait(ctx, m.Info().Slice, func(uint64) bool { return true })
	require.ErrorIs(t, err, farmem.ErrClosed)
	_, err = m.Call(ctx, e.hosted()[0].id, 1, nil)
	require.ErrorIs(t, err, farmem.ErrClosed)
	var b farmem.Batch
	b.Read(a, make([]byte, 8))
	require.ErrorIs(t, m.Do(ctx, &b), farmem.ErrClosed)

	// A Wait in progress ends when its client closes.
	w := e.client(0)
	require.NoError(t, e.parallel(2, func(i int) error {
		if i == 0 {
			_, err := w.Wait(ctx, w.Info().Slice, func(v uint64) bool { return v == 1 })
			return errIs(err, farmem.ErrClosed)
		}
		if err := e.rt.Sleep(ctx, 10*time.Millisecond); err != nil {
			return err
		}
		return w.Close()
	}))

	f := e.cl.Fabrics[len(e.cl.Fabrics)-1]
	other := e.client(len(e.hosted()) - 1)
	require.NoError(t, f.Close())
	require.NoError(t, f.Close(), "fabric Close is idempotent")
	_, err = f.Open(ctx, f.Hosted()[0])
	require.Error(t, err, "Open after Close")
	if other.Info().Node == f.Hosted()[len(f.Hosted())-1] {
		_, err = other.FAA(ctx, a, 1)
		require.True(t, errors.Is(err, farmem.ErrClosed) || errors.Is(err, farmem.ErrNodeDown), "a client of a closed fabric: %v", err)
	}
}
