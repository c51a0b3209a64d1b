package alloc

import (
	"context"
	"encoding/binary"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/farmem/farmem/farmem"
	"github.com/farmem/farmem/farmem/local"
)

func rawFabric(t *testing.T, opts local.Options) *local.Fabric {
	t.Helper()
	opts.Strict = true
	f, err := local.New(opts)
	require.NoError(t, err)
	t.Cleanup(func() {
		require.Zero(t, f.Violations())
		_ = f.Close()
	})
	return f
}

func openClient(t *testing.T, f *local.Fabric, i int) farmem.Memory {
	t.Helper()
	cs := f.Hosted()
	m, err := f.Open(context.Background(), cs[i%len(cs)])
	require.NoError(t, err)
	t.Cleanup(func() { _ = m.Close() })
	return m
}

func readRaw(t *testing.T, m farmem.Memory, n farmem.NodeID) []byte {
	t.Helper()
	b := make([]byte, HeaderLen)
	require.NoError(t, m.Read(context.Background(), farmem.MakeAddr(n, 0), b))
	return b
}

// mutations counts the verbs that could change memory.
func mutations(s farmem.Stats) uint64 {
	return s.VerbsOf(farmem.OpWrite) + s.VerbsOf(farmem.OpCAS) + s.VerbsOf(farmem.OpFAA) + s.VerbsOf(farmem.OpMaskedCAS)
}

func TestFormatOpen(t *testing.T) {
	ctx := context.Background()
	f := rawFabric(t, local.Options{Shape: local.Shape{MemoryNodes: 2, MemorySize: 4 << 20, ComputeNodes: 2, ClientsPerNode: 16}})
	m := openClient(t, f, 0)
	_, err := Open(ctx, m, 1)
	require.ErrorIs(t, err, ErrNotFormatted)

	before := m.Stats()
	require.NoError(t, Format(ctx, m, 1, FormatOptions{}))
	require.Equal(t, uint64(FormatRoundTrips), m.Stats().Sub(before).RoundTrips, "read, claim, one batch")
	h, err := Open(ctx, m, 1)
	require.NoError(t, err)
	want, err := Layout(m.Topology(), 1, FormatOptions{})
	require.NoError(t, err)
	want.Bump, want.SymBump, want.Epoch = want.HeapBase, want.SymBase, 1
	require.Equal(t, want, h)
	require.Equal(t, 32, h.MaxClients, "2 compute nodes x 16 slots")
	require.Equal(t, uint64(512<<10), h.SymSize, "an eighth of the node")
	require.Equal(t, farmem.NodeID(1), h.Home)

	// Formatting again with the same options is a no-op: one round trip of three Reads (the
	// header, then its claim and magic words again, in batch order), nothing written.
	before = m.Stats()
	require.NoError(t, Format(ctx, m, 1, FormatOptions{}))
	d := m.Stats().Sub(before)
	require.Equal(t, uint64(FormattedRoundTrips), d.RoundTrips)
	require.Equal(t, uint64(3), d.TotalVerbs())
	require.Zero(t, mutations(d))

	// Open writes nothing.
	before = m.Stats()
	_, err = Open(ctx, m, 1)
	require.NoError(t, err)
	require.Equal(t, uint64(1), m.Stats().Sub(before).VerbsOf(farmem.OpRead))
	require.Zero(t, mutations(m.Stats().Sub(before)))

	_, err = Open(ctx, m, 2)
	require.ErrorIs(t, err, ErrNotFormatted)
	_, err = Open(ctx, m, farmem.ComputeID(1).Node())
	require.ErrorIs(t, err, farmem.ErrInvalid)
}

func TestFormatConflictWritesNothing(t *testing.T) {
	ctx := context.Background()
	f := rawFabric(t, local.Options{Shape: local.Shape{MemoryNodes: 1, MemorySize: 4 << 20}})
	m := openClient(t, f, 0)
	require.NoError(t, Format(ctx, m, 1, FormatOptions{ChunkSize: 64 << 10}))
	img := readRaw(t, m, 1)
	before := m.Stats()
	err := Format(ctx, m, 1, FormatOptions{ChunkSize: 128 << 10})
	require.ErrorIs(t, err, ErrFormatConflict)
	require.Zero(t, mutations(m.Stats().Sub(before)))
	require.Equal(t, img, readRaw(t, m, 1))
}

func TestFormatRefusesData(t *testing.T) {
	ctx := context.Background()
	f := rawFabric(t, local.Options{Shape: local.Shape{MemoryNodes: 1, MemorySize: 4 << 20}})
	m := openClient(t, f, 0)
	require.NoError(t, m.Write(ctx, farmem.MakeAddr(1, 128), []byte{1}))
	before := m.Stats()
	require.ErrorIs(t, Format(ctx, m, 1, FormatOptions{}), ErrBadHeader)
	require.Zero(t, mutations(m.Stats().Sub(before)))
	_, err := Open(ctx, m, 1)
	require.ErrorIs(t, err, ErrBadHeader)
}

// A formatter that dies after claiming leaves a recognisable half-formatted node; one with other
// options is refused without a write, one with the same options finishes the job.
func TestFormatHalfFormatted(t *testing.T) {
	ctx := context.Background()
	f := rawFabric(t, local.Options{Shape: local.Shape{MemoryNodes: 1, MemorySize: 4 << 20}})
	m := openClient(t, f, 0)
	h, err := Layout(m.Topology(), 1, FormatOptions{})
	require.NoError(t, err)
	// What a formatter did before dying: the claim, and a torn half of the constants.
	_, err = m.CAS(ctx, farmem.MakeAddr(1, offClaim), 0, h.Claim())
	require.NoError(t, err)
	require.NoError(t, m.Write(ctx, farmem.MakeAddr(1, offConst), h.constantBytes()[:40]))

	_, err = Open(ctx, m, 1)
	require.ErrorIs(t, err, ErrHalfFormatted)
	img := readRaw(t, m, 1)
	before := m.Stats()
	require.ErrorIs(t, Format(ctx, m, 1, FormatOptions{ChunkSize: 8 << 10}), ErrFormatConflict)
	require.Zero(t, mutations(m.Stats().Sub(before)))
	require.Equal(t, img, readRaw(t, m, 1))

	require.NoError(t, Format(ctx, m, 1, FormatOptions{}))
	got, err := Open(ctx, m, 1)
	require.NoError(t, err)
	require.Equal(t, h.HeapBase, got.Bump)
}

func TestOpenWrongSizeVersionNode(t *testing.T) {
	ctx := context.Background()
	f := rawFabric(t, local.Options{Shape: local.Shape{MemoryNodes: 2}, MemorySizes: []uint64{4 << 20, 8 << 20}})
	m := openClient(t, f, 0)
	write := func(n farmem.NodeID, b []byte) {
		require.NoError(t, m.Write(ctx, farmem.MakeAddr(n, 0), b))
	}
	// A header written for a 8 MiB node, on the 4 MiB one.
	h2, err := Layout(m.Topology(), 2, FormatOptions{})
	require.NoError(t, err)
	h2.Node = 1
	write(1, h2.Encode())
	_, err = Open(ctx, m, 1)
	require.ErrorIs(t, err, ErrSizeMismatch)

	// Node 2's own header, on node 1.
	h2wrong, err := Layout(m.Topology(), 2, FormatOptions{})
	require.NoError(t, err)
	write(1, h2wrong.Encode())
	_, err = Open(ctx, m, 1)
	require.ErrorIs(t, err, ErrBadHeader)

	// A future layout version.
	h1, err := Layout(m.Topology(), 1, FormatOptions{})
	require.NoError(t, err)
	write(1, setConst(h1.Encode(), 0, Version+1, true))
	_, err = Open(ctx, m, 1)
	require.ErrorIs(t, err, ErrVersion)

	// An allocator refuses such nodes too.
	_, err = New(ctx, m, Options{})
	require.ErrorIs(t, err, farmem.ErrInvalid)
}

// Many clients on several compute nodes format every node at once: all succeed with the same
// options, and each node ends up with exactly one valid header whose atomic words were set once.
func TestFormatConcurrent(t *testing.T) {
	ctx := context.Background()
	f := rawFabric(t, local.Options{Shape: local.Shape{MemoryNodes: 3, MemorySize: 2 << 20, ComputeNodes: 3, ClientsPerNode: 16}})
	const n = 12
	ms := make([]farmem.Memory, n)
	for i := range ms {
		ms[i] = openClient(t, f, i)
	}
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i, m := range ms {
		wg.Go(func() { errs[i] = FormatAll(ctx, m, FormatOptions{ChunkSize: 16 << 10}) })
	}
	wg.Wait()
	for _, err := range errs {
		require.NoError(t, err)
	}
	for _, node := range f.Topology().MemoryNodes() {
		h, err := Open(ctx, ms[0], node)
		require.NoError(t, err)
		require.Equal(t, h.HeapBase, h.Bump)
		require.Equal(t, uint64(1), h.Epoch)
	}
}

// Formatters with different options race: on each node exactly one set of options wins, every
// formatter with it succeeds and every other fails with ErrFormatConflict.
func TestFormatConcurrentConflict(t *testing.T) {
	ctx := context.Background()
	f := rawFabric(t, local.Options{Shape: local.Shape{MemoryNodes: 2, MemorySize: 2 << 20, ComputeNodes: 2, ClientsPerNode: 16}})
	chunks := []uint64{8 << 10, 16 << 10}
	const n = 8
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		m := openClient(t, f, i)
		wg.Go(func() { errs[i] = Format(ctx, m, 1, FormatOptions{ChunkSize: chunks[i%2]}) })
	}
	wg.Wait()
	h, err := Open(ctx, openClient(t, f, 0), 1)
	require.NoError(t, err)
	for i, err := range errs {
		if chunks[i%2] == h.ChunkSize {
			require.NoError(t, err)
		} else {
			require.ErrorIs(t, err, ErrFormatConflict)
		}
	}
}

func TestFormatOptionsErrors(t *testing.T) {
	ctx := context.Background()
	f := rawFabric(t, local.Options{Shape: local.Shape{MemoryNodes: 1, MemorySize: 1 << 20}})
	m := openClient(t, f, 0)
	for _, o := range []FormatOptions{
		{ChunkSize: 1000},
		{ChunkSize: 2 << 30},
		{MaxClients: 1 << 16},
		{Home: 9},
	} {
		require.ErrorIs(t, Format(ctx, m, 1, o), farmem.ErrInvalid, "%+v", o)
	}
	require.ErrorIs(t, Format(ctx, m, 1, FormatOptions{SymmetricSize: 1 << 20}), farmem.ErrNoSpace)
	require.ErrorIs(t, Format(ctx, m, 5, FormatOptions{}), farmem.ErrInvalid)
	require.Equal(t, make([]byte, HeaderLen), readRaw(t, m, 1))
	require.Equal(t, uint64(0), binary.LittleEndian.Uint64(readRaw(t, m, 1)))
}
