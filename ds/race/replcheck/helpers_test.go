package replcheck_test

import (
	"context"
	"encoding/binary"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/farmem/farmem/alloc"
	"github.com/farmem/farmem/ds/race"
	"github.com/farmem/farmem/farmem"
	"github.com/farmem/farmem/farmem/lincheck"
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
	t.Helper()
	lo := local.Options{Shape: transport.Shape{MemoryNodes: nodes, ComputeNodes: 2, MemorySize: 16 << 20}}
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
	require.NoError(t, alloc.FormatAll(ctx, m, alloc.FormatOptions{SymmetricSize: 8 << 20}))
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

// kvModel is the map the histories are checked against.
var kvModel = lincheck.KV[uint64, uint64]()

// workload is a random mix of operations over a small key space.
type workload struct {
	keys    uint64
	ops     int // per client
	search  int // percent; the rest split between insert, update and delete
	insert  int
	update  int
	maxVal  int // largest value length, bytes
	unknown int // stop a client after this many unknown outcomes
}

// run performs w's operations with one client's table, recording them in h. Values are unique
// per write: the client id in the high bits, a counter in the low ones.
func (w workload) run(ctx context.Context, c *client, h *lincheck.History[lincheck.KVInput[uint64, uint64], lincheck.KVOutput[uint64, uint64]], base int) error {
	id := uint64(c.m.Info().ID)
	rec := h.Client(int(id))
	rng := c.m.Runtime().Rand()
	unknown := 0
	for n := range w.ops {
		k := rng.Uint64N(w.keys)
		v := id<<32 | uint64(base+n+1)
		body := val(v, 8+rng.IntN(w.maxVal))
		p := rng.IntN(100)
		var out lincheck.KVOutput[uint64, uint64]
		var err error
		var op lincheck.Op[lincheck.KVInput[uint64, uint64], lincheck.KVOutput[uint64, uint64]]
		switch {
		case p < w.search:
			op = rec.Call(kvModel.Get(k))
			var got []byte
			got, err = c.tab.Search(ctx, key(k))
			switch {
			case errors.Is(err, race.ErrNotFound):
				out, err = kvModel.Missing(), nil
			case err == nil:
				if len(got) < 8 {
					return errors.New("short value")
				}
				out = kvModel.Found(unval(got))
			}
		case p < w.search+w.insert:
			op = rec.Call(kvModel.Insert(k, v))
			err = c.tab.Insert(ctx, key(k), body)
			out = kvModel.OK()
			if errors.Is(err, race.ErrExists) {
				out, err = kvModel.Exists(), nil
			}
		case p < w.search+w.insert+w.update:
			op = rec.Call(kvModel.Update(k, v))
			err = c.tab.Update(ctx, key(k), body)
			out = kvModel.OK()
			if errors.Is(err, race.ErrNotFound) {
				out, err = kvModel.Missing(), nil
			}
		default:
			op = rec.Call(kvModel.Delete(k))
			err = c.tab.Delete(ctx, key(k))
			out = kvModel.OK()
			if errors.Is(err, race.ErrNotFound) {
				out, err = kvModel.Missing(), nil
			}
		}
		if op.End(out, err) == lincheck.Unknown {
			unknown++
			if unknown >= w.unknown {
				return nil
			}
		}
		if err != nil && !errors.Is(err, farmem.ErrNodeDown) && ctx.Err() == nil {
			return err
		}
	}
	return nil
}
