package kvstore_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/farmem/farmem/farmem"
	"github.com/farmem/farmem/farmem/lincheck"
	"github.com/farmem/farmem/farmem/local"
	"github.com/farmem/farmem/kvstore"
	"github.com/farmem/farmem/kvstore/kvstoretest"
)

// kvModel is the map histories are checked against.
var kvModel = kvstoretest.Model

type history = kvstoretest.History

// workload is a random mix of the five operations over a small key space.
type workload struct {
	keys                     uint64
	ops                      int // per goroutine
	get, insert, update, put int // percent; the rest are deletes
	maxVal                   int // largest value length
	unknown                  int // a goroutine stops after this many unknown outcomes
}

var mix = workload{keys: 12, ops: 250, get: 35, insert: 15, update: 15, put: 20, maxVal: 200, unknown: 4}

// stressScale returns the factor KVSTORE_STRESS (an integer) asks for, or 1.
func stressScale() int { return kvstoretest.StressScale() }

// kit returns w as a kvstoretest.Workload.
func (w workload) kit() kvstoretest.Workload {
	return kvstoretest.Workload{Keys: w.keys, Ops: w.ops, Get: w.get, Insert: w.insert, Update: w.update, Put: w.put,
		MaxVal: w.maxVal, Unknown: w.unknown}
}

// run performs w's operations on s as goroutine g (values are unique per write: g in the high
// bits, a counter in the low ones), recording them in h: kvstoretest.Workload.Run.
func (w workload) run(ctx context.Context, s kv, g int, rng *rand.Rand, h *history) error {
	return w.kit().Run(ctx, s, g, rng, h)
}

// lincheckLocal runs w with goroutines spread over nStores stores of one local fabric (tearing,
// jitter, strict mode) and returns the history's verdict (kvstoretest.LincheckLocal).
// The stores use sy (nil: the default).
func lincheckLocal(t *testing.T, w workload, nStores, perStore int, seed uint64, sy kvstore.Sync) error {
	t.Helper()
	return kvstoretest.LincheckLocal(t, w.kit(), nStores, perStore, seed, kvstore.Options{Sync: sy})
}

// lincheckStores runs w with perStore goroutines on each store (kvstoretest.LincheckStores).
func lincheckStores(t *testing.T, rt farmem.Runtime, w workload, stores []*kvstore.Store, perStore int) error {
	t.Helper()
	return kvstoretest.LincheckStores(t, rt, w.kit(), stores, perStore)
}

// TestLinearizable: many goroutines of one store (through its pool and through sessions).
func TestLinearizable(t *testing.T) {
	t.Parallel()
	w := mix
	w.ops *= stressScale()
	require.NoError(t, lincheckLocal(t, w, 1, 8, 1, nil))
}

// TestLinearizableTwoStores: two stores on one fabric, as two processes would open it.
func TestLinearizableTwoStores(t *testing.T) {
	t.Parallel()
	w := mix
	w.ops *= stressScale()
	require.NoError(t, lincheckLocal(t, w, 2, 4, 2, nil))
}

// TestLinearizableStraightPuts: TestLinearizableTwoStores on a few keys, mostly Puts and
// Updates, with the stores' default synchronizer (CIDER) and address caches: changes through
// entries take the straight path, and some of them go back to the general loop (a stale entry,
// or a commit step that did not commit), under tearing and jitter; the history must be
// linearizable.
func TestLinearizableStraightPuts(t *testing.T) {
	t.Parallel()
	w := workload{keys: 6, ops: 300 * stressScale(), get: 30, insert: 5, update: 25, put: 30, maxVal: 64, unknown: 4}
	f := kvstoretest.NewLocal(t, local.Options{Shape: local.Shape{MemoryNodes: 2, ComputeNodes: 2}, Tearing: true, Jitter: 5 * time.Microsecond, Seed: 5})
	stores := make([]*kvstore.Store, 2)
	for i := range stores {
		stores[i] = kvstoretest.OpenStore(t, f, kvstore.Options{Alloc: kvstoretest.QuietAlloc,
			Nodes: []farmem.NodeID{farmem.ComputeID(1 + i%2).Node(), farmem.ComputeID(2 - i%2).Node()}})
	}
	require.NoError(t, lincheckStores(t, f.Runtime(), w, stores, 4))
	var straight, handovers uint64
	for _, s := range stores {
		for _, st := range kvstore.IdleRaceStats(s) {
			straight += st.Straight
			handovers += st.StraightHandovers
		}
	}
	t.Logf("straight %d, handed over %d", straight, handovers)
	require.NotZero(t, straight, "no change took the straight path")
	require.NotZero(t, handovers, "no straight change went on in the general loop")
}

// TestLinearizableSyncs: every synchronizer, on a few hot keys (contended updates and deletes),
// with two stores (each using the synchronizer: a store has one).
func TestLinearizableSyncs(t *testing.T) {
	t.Parallel()
	hot := workload{keys: 3, ops: 200 * stressScale(), get: 30, insert: 10, update: 30, put: 20, maxVal: 64, unknown: 4}
	for i, name := range kvstore.SyncNames() {
		t.Run(name, func(t *testing.T) {
			sy, err := kvstore.SyncByName(name)
			require.NoError(t, err)
			require.NoError(t, lincheckLocal(t, hot, 2, 4, uint64(10+i), sy))
		})
	}
}

// TestLinearizableCatchesBrokenPut: a Put made of a Delete and an Insert is caught. The defect
// is an index built here (brokenPut), whose Update, which Put starts with, is a Delete then an
// Insert.
func TestLinearizableCatchesBrokenPut(t *testing.T) {
	t.Parallel()
	w := workload{keys: 3, ops: 200, get: 50, put: 50, maxVal: 8, unknown: 4}
	err := kvstoretest.LincheckLocal(t, w.kit(), 1, 6, 3, kvstore.Options{Replication: brokenPut{}})
	require.ErrorIs(t, err, lincheck.ErrNotLinearizable)
}

// brokenPut is a Replicator over one instance whose handles' Update is not atomic: a Delete
// followed by an Insert, so a reader in between sees the key missing although it was present
// before and after.
type brokenPut struct{ kvstore.NoReplication }

func (brokenPut) Name() string { return "broken-put" }

func (brokenPut) Combine(rs []kvstore.Index) (kvstore.Index, error) {
	idx, err := kvstore.NoReplication{}.Combine(rs)
	return brokenUpdate{idx}, err
}

type brokenUpdate struct{ kvstore.Index }

func (b brokenUpdate) Update(ctx context.Context, key, value []byte) error {
	for {
		if err := b.Index.Delete(ctx, key); err != nil {
			return err
		}
		if err := b.Index.Insert(ctx, key, value); !errors.Is(err, kvstore.ErrExists) {
			return err
		}
	}
}
