package kvstoretest

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/farmem/farmem/farmem"
	"github.com/farmem/farmem/farmem/farmemtest"
	"github.com/farmem/farmem/farmem/local"
	"github.com/farmem/farmem/kvstore"
)

// LincheckLocal runs w with perStore goroutines on each of nStores stores of one local fabric
// (two memory and two compute nodes, tearing, jitter, strict mode) opened with o (their Alloc
// and Nodes set here: each store prefers its own compute node, as separate processes would),
// and returns the history's verdict (LincheckStores).
func LincheckLocal(t *testing.T, w Workload, nStores, perStore int, seed uint64, o kvstore.Options) error {
	t.Helper()
	f := NewLocal(t, local.Options{Shape: local.Shape{MemoryNodes: 2, ComputeNodes: 2}, Tearing: true, Jitter: 5 * time.Microsecond, Seed: seed})
	stores := make([]*kvstore.Store, nStores)
	for i := range stores {
		o.Alloc, o.Nodes = QuietAlloc, []farmem.NodeID{farmem.ComputeID(1 + i%2).Node(), farmem.ComputeID(2 - i%2).Node()}
		stores[i] = OpenStore(t, f, o)
	}
	return LincheckStores(t, f.Runtime(), w, stores, perStore)
}

// LincheckStores runs w with perStore goroutines on each store, half of each store's through
// Store methods and half through Sessions, and returns the history's verdict (its summary
// logged).
func LincheckStores(t *testing.T, rt farmem.Runtime, w Workload, stores []*kvstore.Store, perStore int) error {
	t.Helper()
	h := Model.NewHistory(rt)
	ctx := context.Background()
	n := len(stores)
	err := farmemtest.Parallel(rt, n*perStore, func(g int) error {
		s := stores[g%n]
		rng := rt.NewRand()
		if g/n%2 == 0 {
			return w.Run(ctx, s, g, rng, h)
		}
		ss, err := s.Session(ctx)
		if err != nil {
			return err
		}
		defer ss.Close()
		return w.Run(ctx, ss, g, rng, h)
	})
	require.NoError(t, err)
	sum, verdict := h.Verify()
	t.Logf("%v", sum)
	return verdict
}

// OpenSession opens node's Memory on f and a session of s on it; end closes both, the session
// first.
func OpenSession(ctx context.Context, f farmem.Fabric, s *kvstore.Store, node farmem.NodeID) (ss *kvstore.Session, end func(), err error) {
	m, err := f.Open(ctx, node)
	if err != nil {
		return nil, nil, err
	}
	if ss, err = s.SessionOn(ctx, m); err != nil {
		_ = m.Close()
		return nil, nil, err
	}
	return ss, func() { _ = ss.Close(); _ = m.Close() }, nil
}
