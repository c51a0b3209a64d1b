package farmemtest

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/farmem/farmem/farmem"
)

// timed runs fn and returns how long it took in fabric time.
func (e *env) timed(fn func()) time.Duration {
	start := e.rt.Now()
	fn()
	return e.rt.Now().Sub(start)
}

func testPartialWait(t *testing.T, open Open) {
	e := newEnv(t, open, DefaultConfig)
	fi := e.faults(t)
	ctx := e.ctx()
	m := e.client(0)
	hung := e.tp.MemoryNodes()[2]
	skipUnsupported(t, fi.Hang(hung))
	defer func() { _ = fi.Resume(hung) }()
	var b farmem.Batch
	for i := range 3 {
		b.Read(e.mem(i, base), make([]byte, 8))
	}
	var p *farmem.Pending
	took := e.timed(func() {
		p = m.Post(ctx, &b)
		require.NoError(t, p.Wait(ctx, 2))
	})
	require.Less(t, took, e.tp.DownTimeout, "Wait(2) waited for the hung node")
	require.True(t, p.OpDone(0) && p.OpDone(1), "the two live nodes answered")
	require.False(t, p.OpDone(2), "the hung node answered")
	took = e.timed(func() { require.NoError(t, p.Wait(ctx, 0)) })
	_, err := b.Result(2)
	require.ErrorIs(t, err, farmem.ErrNodeDown)
	require.Less(t, took, e.downBound())
}

func testCrash(t *testing.T, open Open) {
	e := newEnv(t, open, DefaultConfig)
	fi := e.faults(t)
	ctx := e.ctx()
	m := e.client(0)
	victim := e.tp.MemoryNodes()[1]
	skipUnsupported(t, fi.Crash(victim))
	took := e.timed(func() {
		_, err := m.FAA(ctx, e.mem(1, base), 1)
		require.ErrorIs(t, err, farmem.ErrNodeDown)
		require.ErrorIs(t, m.Read(ctx, e.mem(1, base), make([]byte, 64)), farmem.ErrNodeDown)
	})
	require.Less(t, took, e.downBound())
	_, err := m.FAA(ctx, e.mem(0, base), 1)
	require.NoError(t, err, "other nodes keep serving")
}

func testHang(t *testing.T, open Open) {
	e := newEnv(t, open, DefaultConfig)
	fi := e.faults(t)
	ctx := e.ctx()
	m := e.client(0)
	victim := e.tp.MemoryNodes()[1]
	skipUnsupported(t, fi.Hang(victim))
	took := e.timed(func() {
		_, err := m.FAA(ctx, e.mem(1, base), 1)
		require.ErrorIs(t, err, farmem.ErrNodeDown)
	})
	t.Logf("a hung node was reported down after %v (down timeout %v)", took, e.tp.DownTimeout)
	require.Less(t, took, e.downBound())
	_, err := m.FAA(ctx, e.mem(0, base), 1)
	require.NoError(t, err, "other nodes keep serving")
	require.NoError(t, fi.Resume(victim))
	_, err = m.FAA(ctx, e.mem(1, base+8), 1)
	require.NoError(t, err, "a resumed node serves again")
}

func testPartition(t *testing.T, open Open) {
	e := newEnv(t, open, DefaultConfig)
	fi := e.faults(t)
	ctx := e.ctx()
	a, b := e.client(0), e.client(1)
	victim := e.tp.MemoryNodes()[1]
	skipUnsupported(t, fi.Partition(a.Info().ID, victim))
	took := e.timed(func() {
		require.ErrorIs(t, a.Read(ctx, e.mem(1, base), make([]byte, 8)), farmem.ErrNodeDown)
	})
	require.Less(t, took, e.downBound())
	require.NoError(t, b.Read(ctx, e.mem(1, base), make([]byte, 8)), "another client still reaches the node")
	require.NoError(t, a.Read(ctx, e.mem(0, base), make([]byte, 8)), "the client still reaches other nodes")
	require.NoError(t, fi.Heal(a.Info().ID, victim))
	require.NoError(t, a.Read(ctx, e.mem(1, base), make([]byte, 8)), "healed")
}

func testCrashMidBatch(t *testing.T, open Open) {
	e := newEnv(t, open, DefaultConfig)
	fi := e.faults(t)
	ctx := e.ctx()
	m := e.client(0)
	victim := e.tp.MemoryNodes()[1]
	skipUnsupported(t, fi.CrashAfter(victim, 2))
	var b farmem.Batch
	b.Write(e.mem(1, base), words(1))
	b.FAA(e.mem(1, base+8), 1)
	b.Write(e.mem(0, base), words(5)) // another node: unaffected
	b.Write(e.mem(1, base+16), words(2))
	b.FAA(e.mem(1, base+24), 1)
	require.ErrorIs(t, m.Do(ctx, &b), farmem.ErrNodeDown)
	for i, want := range []error{nil, nil, nil, farmem.ErrNodeDown, farmem.ErrNodeDown} {
		_, err := b.Result(i)
		if want == nil {
			require.NoError(t, err, "op %d", i)
		} else {
			require.ErrorIs(t, err, want, "op %d", i)
		}
	}
	buf := make([]byte, 8)
	require.NoError(t, m.Read(ctx, e.mem(0, base), buf))
	require.Equal(t, uint64(5), word(buf))
	require.ErrorIs(t, m.Read(ctx, e.mem(1, base), buf), farmem.ErrNodeDown, "the node stays crashed")
}

func testCrashClient(t *testing.T, open Open) {
	e := newEnv(t, open, DefaultConfig)
	fi := e.faults(t)
	ctx := e.ctx()
	a, b := e.client(0), e.client(0)
	skipUnsupported(t, fi.CrashClient(a.Info().ID))
	_, err := a.FAA(ctx, e.mem(0, base), 1)
	require.ErrorIs(t, err, farmem.ErrNodeDown)
	_, err = b.FAA(ctx, e.mem(0, base), 1)
	require.NoError(t, err, "another client of the same node")
	require.NoError(t, a.Close())
}

func testComputeCrash(t *testing.T, open Open) {
	e := newEnv(t, open, DefaultConfig)
	fi := e.faults(t)
	ctx := e.ctx()
	hs := e.hosted()
	a, b := e.client(0), e.client(1)
	require.NoError(t, hs[1].f.Handle(hs[1].id, 1, func(context.Context, farmem.Memory, farmem.ClientID, []byte) ([]byte, error) {
		return []byte("ok"), nil
	}))
	_, err := a.Call(ctx, hs[1].id, 1, nil)
	require.NoError(t, err)
	require.NoError(t, e.parallel(2, func(i int) error {
		if i == 0 {
			_, err := b.Wait(ctx, b.Info().Slice, func(v uint64) bool { return v == 1 })
			return errIs(err, farmem.ErrNodeDown)
		}
		if err := e.rt.Sleep(ctx, 10*time.Millisecond); err != nil {
			return err
		}
		err := fi.Crash(hs[1].id)
		if err != nil {
			_ = b.Close() // unblock the waiter; the skip follows below
		}
		return err
	}))
	took := e.timed(func() {
		_, err = a.Call(ctx, hs[1].id, 1, nil)
		require.ErrorIs(t, err, farmem.ErrNodeDown)
		require.ErrorIs(t, a.Send(ctx, hs[1].id, 1, nil), farmem.ErrNodeDown, "a message to a node known down")
		require.ErrorIs(t, a.Read(ctx, b.Info().Slice, make([]byte, 8)), farmem.ErrNodeDown)
	})
	require.Less(t, took, e.downBound())
	_, err = a.FAA(ctx, e.mem(0, base), 1)
	require.NoError(t, err, "the rest of the cluster keeps serving")
}
