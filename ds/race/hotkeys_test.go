package race_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/farmem/farmem/ds/race"
	"github.com/farmem/farmem/farmem/local"
)

// hot is a workload on a handful of keys, mostly inserts and deletes, so that inserters of one
// key race each other (the tentative-slot protocol settles them) and writers race readers.
var hot = workload{keys: 3, ops: 500, search: 30, insert: 40, update: 10, maxVal: 40, unknown: 5}

// runHot runs w with n clients on a fresh table and returns the history's verdict and the
// clients' summed stats.
func runHot(t *testing.T, w workload, n int, p race.Params) (error, race.Stats) {
	t.Helper()
	e := newEnv(t, local.Options{Shape: local.Shape{ComputeNodes: 2}, Tearing: true, Jitter: 5 * time.Microsecond}, p)
	cs := make([]*client, n)
	for i := range cs {
		cs[i] = e.open(t, i, race.Options{})
	}
	ctx := context.Background()
	h := kvModel.NewHistory(e.f.Runtime())
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i, c := range cs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = w.run(ctx, c, h)
		}()
	}
	wg.Wait()
	for _, err := range errs {
		require.NoError(t, err)
	}
	audit(t, cs[n-1], true)
	var sum race.Stats
	for _, c := range cs {
		s := c.tab.Stats()
		sum.Kills += s.Kills
		sum.Conflicts += s.Conflicts
		sum.BadBlocks += s.BadBlocks
	}
	_, err := h.Verify()
	return err, sum
}

func TestLinearizableHotKeys(t *testing.T) {
	w := hot
	w.ops *= stressScale()
	err, s := runHot(t, w, 6, race.Params{FingerprintBits: 1})
	require.NoError(t, err)
	t.Logf("kills %d, conflicts %d, bad blocks %d", s.Kills, s.Conflicts, s.BadBlocks)
	require.NotZero(t, s.Kills, "no inserter of a key ever removed a competitor's tentative slot")
}
