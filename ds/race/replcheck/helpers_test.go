package replcheck_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/farmem/farmem/alloc"
	"github.com/farmem/farmem/ds/race"
	"github.com/farmem/farmem/ds/race/racetest"
	"github.com/farmem/farmem/farmem"
	"github.com/farmem/farmem/farmem/local"
	"github.com/farmem/farmem/farmem/transport"
	"github.com/farmem/farmem/internal/dstest"
)

// replAlloc are the allocator options of the tests.
var replAlloc = dstest.AllocOptions

// env is a formatted local fabric holding one replicated table.
type env struct {
	f    *local.Fabric
	root farmem.Addr
	comp []farmem.NodeID
}

// client is one client's Memory, allocator and table handle.
type client struct {
	m   farmem.Memory
	a   *alloc.Allocator
	tab *race.Table
}

// replEnv is a local fabric (strict mode off: the replication protocol writes its control
// words plainly when it lays out fresh memory) with nodes memory nodes and a table
// replicated on r of them.
func replEnv(t testing.TB, nodes, r int, p race.Params) *env {
	return replEnvWith(t, nodes, r, p, false)
}

// replEnvWith is replEnv, with tearing and jitter on if noisy is set.
func replEnvWith(t testing.TB, nodes, r int, p race.Params, noisy bool) *env {
	return replEnvDown(t, nodes, r, p, noisy, 0)
}

// replEnvDown is replEnvWith whose fabric fails a verb to an unreachable node after down
// (local.Options.DownTimeout; zero: the transport's default).
func replEnvDown(t testing.TB, nodes, r int, p race.Params, noisy bool, down time.Duration) *env {
	t.Helper()
	lo := local.Options{Shape: transport.Shape{MemoryNodes: nodes, ComputeNodes: 2, MemorySize: 8 << 20}, DownTimeout: down}
	if noisy {
		lo.Tearing, lo.Jitter = true, 5*time.Microsecond
	}
	f, err := local.New(lo)
	require.NoError(t, err)
	t.Cleanup(func() { _ = f.Close() })
	ctx := context.Background()
	m, err := f.Open(ctx, f.Topology().ComputeNodes()[0])
	require.NoError(t, err)
	defer m.Close()
	require.NoError(t, alloc.FormatAll(ctx, m, alloc.FormatOptions{SymmetricSize: 4 << 20}))
	a, err := alloc.New(ctx, m, replAlloc)
	require.NoError(t, err)
	defer a.Close()
	p.IndexReplicas = r
	root, err := race.Create(ctx, m, a, p)
	require.NoError(t, err)
	return &env{f: f, root: root, comp: f.Topology().ComputeNodes()}
}

// open opens a client on compute node i (modulo their number) with its handle.
func (e *env) open(t testing.TB, i int, opts race.Options) *client {
	t.Helper()
	ctx := context.Background()
	m, err := e.f.Open(ctx, e.comp[i%len(e.comp)])
	require.NoError(t, err)
	a, err := alloc.New(ctx, m, replAlloc)
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

var (
	key   = racetest.Key
	val   = racetest.Val
	unval = racetest.Unval
)

// kvModel is the map the histories are checked against.
var kvModel = racetest.Model

// workload is a random mix of operations over a small key space (racetest.Workload).
type workload racetest.Workload

// run performs w's operations with one client's table, recording them in h; the values it
// writes count from base+1.
func (w workload) run(ctx context.Context, c *client, h *racetest.History, base int) error {
	return racetest.Workload(w).Run(ctx, racetest.Client{Memory: c.m, Table: c.tab}, h, base)
}
