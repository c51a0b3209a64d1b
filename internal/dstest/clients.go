package dstest

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/farmem/farmem/alloc"
	"github.com/farmem/farmem/farmem"
	"github.com/farmem/farmem/sim"
)

// Build formats the allocators of f's memory nodes and calls create with a client on f's first
// compute node and an allocator with ao on it, closing both once create has returned; it
// returns what create built (a root address, or the replicas' addresses of a replicated
// structure). The structure's own handles are opened afterwards, each on a client of its own.
func Build[T any](t testing.TB, f farmem.Fabric, ao alloc.Options, create func(context.Context, farmem.Memory, *alloc.Allocator) (T, error)) T {
	t.Helper()
	ctx := context.Background()
	m, err := f.Open(ctx, f.Topology().ComputeNodes()[0])
	require.NoError(t, err)
	defer m.Close()
	require.NoError(t, alloc.FormatAll(ctx, m, alloc.FormatOptions{}))
	a, err := alloc.New(ctx, m, ao)
	require.NoError(t, err)
	defer a.Close()
	root, err := create(ctx, m, a)
	require.NoError(t, err)
	return root
}

// OpenClient opens a client on compute node i of f (modulo their number), closed at the test's
// cleanup, and returns it and the Memory the handle under test is to use: wrap's view of it
// (an interposer, a cutter), or the client itself when wrap is nil. A handle opened on that
// Memory and closed by a cleanup registered after this call closes before the client does.
func OpenClient(t testing.TB, f farmem.Fabric, i int, wrap func(farmem.Memory) farmem.Memory) (client, view farmem.Memory) {
	t.Helper()
	comp := f.Topology().ComputeNodes()
	m, err := f.Open(context.Background(), comp[i%len(comp)])
	require.NoError(t, err)
	t.Cleanup(func() { _ = m.Close() })
	if wrap == nil {
		return m, m
	}
	return m, wrap(m)
}

// Sim returns a simulated ConnectX-6 cluster (sim.ConnectX6) with tearing on, shaped and tuned
// by tune (node counts, memory size, jitter, down timeout, clocks), built from seed and closed
// at the test's cleanup.
func Sim(t testing.TB, seed uint64, tune func(*sim.Model)) *sim.Sim {
	t.Helper()
	model := sim.ConnectX6()
	model.Tearing = true
	tune(&model)
	s, err := sim.New(model, seed)
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	return s
}
