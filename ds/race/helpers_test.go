package race_test

import (
	"context"
	"encoding/binary"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/farmem/farmem/alloc"
	"github.com/farmem/farmem/ds/race"
	"github.com/farmem/farmem/farmem"
	"github.com/farmem/farmem/farmem/local"
)

// env is a formatted local fabric holding one table.
type env struct {
	f    *local.Fabric
	root farmem.Addr
	comp []farmem.NodeID
	ao   alloc.Options
}

// newEnv starts a local fabric with strict mode on, formats it and creates a table with p.
func newEnv(t testing.TB, lo local.Options, p race.Params) *env {
	t.Helper()
	lo.Strict = true
	if lo.MemorySize == 0 {
		lo.MemorySize = 64 << 20
	}
	f, err := local.New(lo)
	require.NoError(t, err)
	t.Cleanup(func() {
		require.Zero(t, f.Violations(), "strict-mode violations")
		_ = f.Close()
	})
	e := &env{f: f, comp: f.Topology().ComputeNodes(),
		ao: alloc.Options{Lease: 10 * time.Second, Refresh: time.Second, ScanInterval: time.Millisecond}}
	ctx := context.Background()
	m, err := f.Open(ctx, e.comp[0])
	require.NoError(t, err)
	defer m.Close()
	require.NoError(t, alloc.FormatAll(ctx, m, alloc.FormatOptions{}))
	a, err := alloc.New(ctx, m, e.ao)
	require.NoError(t, err)
	defer a.Close()
	e.root, err = race.Create(ctx, m, a, p)
	require.NoError(t, err)
	return e
}

// client is one client's Memory, allocator and table handle.
type client struct {
	m   farmem.Memory
	a   *alloc.Allocator
	tab *race.Table
}

// open opens a client on compute node i (modulo their number) with its handle.
func (e *env) open(t testing.TB, i int, opts race.Options) *client {
	t.Helper()
	ctx := context.Background()
	m, err := e.f.Open(ctx, e.comp[i%len(e.comp)])
	require.NoError(t, err)
	a, err := alloc.New(ctx, m, e.ao)
	require.NoError(t, err)
	tab, err := race.Open(ctx, m, a, e.root, opts)
	require.NoError(t, err)
	t.Cleanup(func() {
		_ = tab.Close()
		_ = a.Close()
		_ = m.Close()
	})
	return &client{m: m, a: a, tab: tab}
}

func key(i uint64) []byte {
	b := make([]byte, 8)
	binary.BigEndian.PutUint64(b, i)
	return b
}

func val(v uint64, n int) []byte {
	b := make([]byte, max(n, 8))
	binary.LittleEndian.PutUint64(b, v)
	for i := 8; i < len(b); i++ {
		b[i] = byte(v) + byte(i)
	}
	return b
}

func unval(b []byte) uint64 { return binary.LittleEndian.Uint64(b) }

// audit checks the table's invariants from c and returns its census; with quiet set it also
// requires no frozen, tentative or locked state left behind.
func audit(t testing.TB, c *client, quiet bool) race.Census {
	t.Helper()
	census, err := c.tab.Audit(context.Background())
	require.NoError(t, err)
	if quiet {
		require.Zero(t, census.Frozen, "frozen slots left: %+v", census)
		require.Zero(t, census.Tentative, "tentative slots left: %+v", census)
		require.Zero(t, census.Locked, "split locks left held: %+v", census)
	}
	return census
}
