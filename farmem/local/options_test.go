package local_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/farmem/farmem/farmem"
	"github.com/farmem/farmem/farmem/local"
	"github.com/farmem/farmem/farmem/transport"
)

func newFabric(t *testing.T, o local.Options) (*local.Fabric, farmem.Memory) {
	t.Helper()
	f, err := local.New(o)
	require.NoError(t, err)
	t.Cleanup(func() { _ = f.Close() })
	m, err := f.Open(context.Background(), f.Hosted()[0])
	require.NoError(t, err)
	return f, m
}

func TestStrictMode(t *testing.T) {
	f, m := newFabric(t, local.Options{Strict: true})
	ctx := context.Background()
	a := farmem.MakeAddr(1, 4096)
	require.NoError(t, m.Write(ctx, a, make([]byte, 32)), "no atomic has touched these words yet")
	_, err := m.CAS(ctx, a.Add(8), 0, 1)
	require.NoError(t, err)
	err = m.Write(ctx, a, make([]byte, 32))
	require.ErrorIs(t, err, farmem.ErrAtomicOverlap, "a plain write over a CASed word")
	require.ErrorIs(t, m.Write(ctx, a.Add(12), []byte{1}), farmem.ErrAtomicOverlap, "even one byte of it")
	require.NoError(t, m.Write(ctx, a.Add(16), make([]byte, 16)), "the neighbouring words are plain")
	buf := make([]byte, 8)
	require.NoError(t, m.Read(ctx, a.Add(8), buf))
	require.Equal(t, byte(1), buf[0], "the rejected write was not applied")
	require.Equal(t, int64(2), f.Violations())
	m.(transport.StrictMemory).ForgetAtomic(a, 32)
	require.NoError(t, m.Write(ctx, a, make([]byte, 32)), "after the block is recycled")
}

func TestOptionsRejected(t *testing.T) {
	for name, o := range map[string]local.Options{
		"too many handlers": {Shape: transport.Shape{ClientsPerNode: 4, MaxHandlers: 4}},
		"ids overflow":      {Shape: transport.Shape{ComputeNodes: 2000, ClientsPerNode: 64}},
		"negative latency":  {Latency: -1},
		"tiny node":         {MemorySizes: []uint64{8}},
		"huge compute":      {Shape: transport.Shape{SliceSize: 1 << 46, ClientsPerNode: 64}},
	} {
		_, err := local.New(o)
		require.ErrorIs(t, err, farmem.ErrInvalid, name)
	}
	f, err := local.New(local.Options{MemorySizes: []uint64{4096, 8192}})
	require.NoError(t, err)
	defer f.Close()
	tp := f.Topology()
	require.Len(t, tp.MemoryNodes(), 2)
	n2, _ := tp.Node(2)
	require.Equal(t, uint64(8192), n2.Size)
}

func TestSlotsExhausted(t *testing.T) {
	f, err := local.New(local.Options{Shape: local.Shape{ClientsPerNode: 4, MaxHandlers: 1}})
	require.NoError(t, err)
	defer f.Close()
	var ms []farmem.Memory
	for range 3 {
		m, err := f.Open(context.Background(), f.Hosted()[0])
		require.NoError(t, err)
		ms = append(ms, m)
	}
	_, err = f.Open(context.Background(), f.Hosted()[0])
	require.ErrorIs(t, err, farmem.ErrNoSpace)
	require.NoError(t, ms[1].Close())
	m, err := f.Open(context.Background(), f.Hosted()[0])
	require.NoError(t, err, "a closed client's slot is reused")
	require.Equal(t, ms[1].Info().ID, m.Info().ID)
	_, err = f.Open(context.Background(), farmem.MakeAddr(1, 0).Node())
	require.ErrorIs(t, err, farmem.ErrInvalid, "a memory node hosts no clients")
}

func TestLatencyAndParallelNodes(t *testing.T) {
	// Long enough that a loaded machine's scheduling delays (milliseconds) cannot make three
	// parallel waits look like one after another (which would take 3*lat).
	const lat = 100 * time.Millisecond
	f, m := newFabric(t, local.Options{Shape: local.Shape{MemoryNodes: 3}, Latency: lat})
	_ = f
	ctx := context.Background()
	start := time.Now()
	_, err := m.FAA(ctx, farmem.MakeAddr(1, 64), 1)
	require.NoError(t, err)
	require.GreaterOrEqual(t, time.Since(start), lat)
	var b farmem.Batch
	for n := range 3 {
		b.Read(farmem.MakeAddr(farmem.NodeID(n+1), 64), make([]byte, 8))
	}
	start = time.Now()
	require.NoError(t, m.Do(ctx, &b))
	took := time.Since(start)
	require.GreaterOrEqual(t, took, lat)
	require.Less(t, took, 3*lat, "the three nodes were reached one after another")
	require.Equal(t, uint64(2), m.Stats().RoundTrips)
}

func TestHandlerPanicIsAnError(t *testing.T) {
	f, m := newFabric(t, local.Options{})
	node := f.Hosted()[0]
	require.NoError(t, f.Handle(node, 1, func(context.Context, farmem.Memory, farmem.ClientID, []byte) ([]byte, error) {
		panic("boom")
	}))
	_, err := m.Call(context.Background(), node, 1, nil)
	require.ErrorIs(t, err, farmem.ErrRemote)
	require.ErrorContains(t, err, "boom")
	require.ErrorIs(t, f.Handle(node, 2, nil), farmem.ErrInvalid)
	require.ErrorIs(t, f.Handle(farmem.NodeID(1), 2, func(context.Context, farmem.Memory, farmem.ClientID, []byte) ([]byte, error) {
		return nil, nil
	}), farmem.ErrInvalid)
}

func TestContextEndsPostedBatch(t *testing.T) {
	f, m := newFabric(t, local.Options{DownTimeout: time.Hour})
	require.NoError(t, f.Hang(1))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	_, err := m.FAA(ctx, farmem.MakeAddr(1, 64), 1)
	require.True(t, errors.Is(err, context.DeadlineExceeded), "got %v", err)
}
