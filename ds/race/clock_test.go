package race_test

import (
	"context"
	"sync/atomic"
	"testing"

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
	a, err := alloc.New(ctx, cm, e.ao)
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
