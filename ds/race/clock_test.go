package race_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/farmem/farmem/alloc"
	"github.com/farmem/farmem/ds/race"
	"github.com/farmem/farmem/farmem"
	"github.com/farmem/farmem/farmem/local"
)

// countingRuntime counts clock readings.
type countingRuntime struct {
	farmem.Runtime
	n *atomic.Int64
}

func (r countingRuntime) Now() farmem.Time {
	r.n.Add(1)
	return r.Runtime.Now()
}

// countingMemory is a Memory whose Runtime counts clock readings.
type countingMemory struct {
	farmem.Memory
	rt countingRuntime
}

func (m countingMemory) Runtime() farmem.Runtime { return m.rt }

// A Search reads the clock once (the allocator's Unpin): its pin takes the allocator's last
// reading; an Insert's and an Update's pin read it once for the allocator and the section.
func TestSearchReadsTheClockOnce(t *testing.T) {
	e := newEnv(t, local.Options{}, race.Params{})
	ctx := context.Background()
	m, err := e.f.Open(ctx, e.comp[0])
	require.NoError(t, err)
	defer m.Close()
	var n atomic.Int64
	cm := countingMemory{Memory: m, rt: countingRuntime{Runtime: m.Runtime(), n: &n}}
	a, err := alloc.New(ctx, cm, steadyPins(e.ao))
	require.NoError(t, err)
	defer a.Close()
	tab, err := race.Open(ctx, cm, a, e.root, race.Options{})
	require.NoError(t, err)
	defer tab.Close()

	require.NoError(t, tab.Insert(ctx, []byte("key"), []byte("value")))
	_, err = tab.Search(ctx, []byte("key")) // the first pin may announce
	require.NoError(t, err)
	for _, k := range []string{"key", "absent"} {
		before := n.Load()
		_, err := tab.Search(ctx, []byte(k))
		if k == "absent" {
			require.ErrorIs(t, err, race.ErrNotFound)
		} else {
			require.NoError(t, err)
		}
		require.EqualValues(t, 1, n.Load()-before, "clock readings of a Search of %q", k)
	}
	buf := make([]byte, 0, 16)
	before := n.Load()
	got, err := tab.AppendSearch(ctx, buf, []byte("key"))
	require.NoError(t, err)
	require.Equal(t, "value", string(got))
	require.EqualValues(t, 1, n.Load()-before, "clock readings of an AppendSearch")
}

// An Update and a Delete read the clock once: the synchronizer's deadline check before the CAS,
// whose reading the allocator's retire takes (ptrsync.Result's CheckedAt) and the Unpin then;
// the pin takes the allocator's last reading.
func TestChangeReadsTheClockOnce(t *testing.T) {
	e := newEnv(t, local.Options{}, race.Params{})
	ctx := context.Background()
	m, err := e.f.Open(ctx, e.comp[0])
	require.NoError(t, err)
	defer m.Close()
	var n atomic.Int64
	cm := countingMemory{Memory: m, rt: countingRuntime{Runtime: m.Runtime(), n: &n}}
	a, err := alloc.New(ctx, cm, steadyPins(e.ao))
	require.NoError(t, err)
	defer a.Close()
	tab, err := race.Open(ctx, cm, a, e.root, race.Options{})
	require.NoError(t, err)
	defer tab.Close()

	require.NoError(t, tab.Insert(ctx, []byte("key"), []byte("value")))
	require.NoError(t, tab.Update(ctx, []byte("key"), []byte("v1"))) // the first pin may announce
	before := n.Load()
	require.NoError(t, tab.Update(ctx, []byte("key"), []byte("v2")))
	require.EqualValues(t, 1, n.Load()-before, "clock readings of an Update")
	before = n.Load()
	require.NoError(t, tab.Delete(ctx, []byte("key")))
	require.EqualValues(t, 1, n.Load()-before, "clock readings of a Delete")
	got, err := tab.Search(ctx, []byte("key"))
	require.ErrorIs(t, err, race.ErrNotFound, "got %q", got)
	require.Zero(t, tab.Stats().Repins)
}

// A change whose pin takes a reading older than PinBudget (the client sat idle) finds its
// deadline passed at the CAS, re-pins and looks again, and commits.
func TestChangeAfterIdleRepins(t *testing.T) {
	e := newEnv(t, local.Options{}, race.Params{})
	ctx := context.Background()
	m, err := e.f.Open(ctx, e.comp[0])
	require.NoError(t, err)
	defer m.Close()
	a, err := alloc.New(ctx, m, e.ao)
	require.NoError(t, err)
	defer a.Close()
	const budget = 20 * time.Millisecond
	tab, err := race.Open(ctx, m, a, e.root, race.Options{PinBudget: budget})
	require.NoError(t, err)
	defer tab.Close()

	require.NoError(t, tab.Insert(ctx, []byte("key"), []byte("value")))
	require.NoError(t, m.Runtime().Sleep(ctx, 3*budget))
	require.NoError(t, tab.Update(ctx, []byte("key"), []byte("v1")))
	require.GreaterOrEqual(t, tab.Stats().Repins, uint64(1))
	got, err := tab.Search(ctx, []byte("key"))
	require.NoError(t, err)
	require.Equal(t, "v1", string(got))
}

// steadyPins returns o with a lease and refresh long enough that no pin of a test on a slow,
// busy machine finds its announcement due for a refresh (which reads the clock once more).
func steadyPins(o alloc.Options) alloc.Options {
	o.Lease, o.Refresh = 10*time.Minute, 5*time.Minute
	return o
}
