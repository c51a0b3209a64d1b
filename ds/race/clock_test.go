package race_test

import (
	"context"
	"fmt"
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

// countingTable opens a table handle whose Memory's runtime counts clock readings in n, with
// an allocator lease no test outlives (steadyPins).
func countingTable(t *testing.T) (tab *race.Table, n *atomic.Int64) {
	e := newEnv(t, local.Options{}, race.Params{})
	m := e.memory(t, 0)
	n = new(atomic.Int64)
	cm := countingMemory{Memory: m, rt: countingRuntime{Runtime: m.Runtime(), n: n}}
	return e.tableOn(t, cm, steadyPins(e.ao), race.Options{}), n
}

// A Search reads the clock once (the allocator's Unpin): its pin takes the allocator's last
// reading.
func TestSearchReadsTheClockOnce(t *testing.T) {
	ctx := context.Background()
	tab, n := countingTable(t)

	require.NoError(t, tab.Insert(ctx, []byte("key"), []byte("value")))
	_, err := tab.Search(ctx, []byte("key")) // the first pin may announce
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
	ctx := context.Background()
	tab, n := countingTable(t)

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

// An Insert reads the clock once: the budget's check before the tentative CAS, whose reading
// the allocator is told of and the Unpin then takes (the pin takes the allocator's last
// reading, and the commit follows the check without another when the first re-read found no
// competitor). One that finds the key reads it once too, at its Unpin.
func TestInsertReadsTheClockOnce(t *testing.T) {
	ctx := context.Background()
	tab, n := countingTable(t)

	require.NoError(t, tab.Insert(ctx, []byte("key0"), []byte("value"))) // the first pin may announce
	for i := 1; i <= 20; i++ {
		before := n.Load()
		require.NoError(t, tab.Insert(ctx, fmt.Appendf(nil, "key%d", i), []byte("value")))
		require.EqualValues(t, 1, n.Load()-before, "clock readings of Insert %d", i)
	}
	before := n.Load()
	require.ErrorIs(t, tab.Insert(ctx, []byte("key7"), []byte("other")), race.ErrExists)
	require.EqualValues(t, 1, n.Load()-before, "clock readings of an Insert of a key present")
	require.Zero(t, tab.Stats().Repins)
	for i := 0; i <= 20; i++ {
		got, err := tab.Search(ctx, fmt.Appendf(nil, "key%d", i))
		require.NoError(t, err)
		require.Equal(t, "value", string(got))
	}
}

// stallMemory is a Memory whose next Do, once armed, first sleeps for stall.
type stallMemory struct {
	farmem.Memory
	stall time.Duration
	armed *atomic.Bool
}

func (m stallMemory) Do(ctx context.Context, b *farmem.Batch) error {
	if m.armed.CompareAndSwap(true, false) {
		if err := m.Memory.Runtime().Sleep(ctx, m.stall); err != nil {
			return err
		}
	}
	return m.Memory.Do(ctx, b)
}

// An Insert that finds its key only after its lease ran out (it stalled while looking) does
// not trust the block it read: its Unpin reports the lapse, and it pins again, looks again and
// then reports ErrExists. An Insert after an idle time longer than PinBudget re-pins at its
// budget check (its pin took the reading before the idle time) and commits.
func TestInsertAfterLapse(t *testing.T) {
	e := newEnv(t, local.Options{}, race.Params{})
	ctx := context.Background()
	m := e.memory(t, 0)
	var armed atomic.Bool
	sm := stallMemory{Memory: m, stall: 300 * time.Millisecond, armed: &armed}
	ao := e.ao
	ao.Lease, ao.Refresh = 100*time.Millisecond, 50*time.Millisecond
	const budget = 20 * time.Millisecond
	tab := e.tableOn(t, sm, ao, race.Options{PinBudget: budget})

	require.NoError(t, tab.Insert(ctx, []byte("key"), []byte("value")))
	armed.Store(true)
	before := tab.Stats()
	require.ErrorIs(t, tab.Insert(ctx, []byte("key"), []byte("other")), race.ErrExists)
	require.False(t, armed.Load(), "the stall happened")
	require.EqualValues(t, 1, tab.Stats().PinExpired-before.PinExpired, "the lapse was seen")
	require.EqualValues(t, 2, tab.Stats().Lookups-before.Lookups, "looked again after the lapse")

	require.NoError(t, m.Runtime().Sleep(ctx, 3*budget))
	repins := tab.Stats().Repins
	require.NoError(t, tab.Insert(ctx, []byte("later"), []byte("v")))
	require.Greater(t, tab.Stats().Repins, repins, "the idle time made the insert re-pin")
	for k, want := range map[string]string{"key": "value", "later": "v"} {
		got, err := tab.Search(ctx, []byte(k))
		require.NoError(t, err)
		require.Equal(t, want, string(got))
	}
}

// A change whose pin takes a reading older than PinBudget (the client sat idle) finds its
// deadline passed at the CAS, re-pins and looks again, and commits.
func TestChangeAfterIdleRepins(t *testing.T) {
	e := newEnv(t, local.Options{}, race.Params{})
	ctx := context.Background()
	m := e.memory(t, 0)
	const budget = 20 * time.Millisecond
	tab := e.tableOn(t, m, e.ao, race.Options{PinBudget: budget})

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
