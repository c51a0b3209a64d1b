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
func runHot(t *testing.T, w workload, n int, p race.Params, defects ...string) (error, race.Stats) {
	t.Helper()
	e := newEnv(t, local.Options{Shape: local.Shape{ComputeNodes: 2}, Tearing: true, Jitter: 5 * time.Microsecond}, p)
	cs := make([]*client, n)
	for i := range cs {
		cs[i] = e.open(t, i, race.Options{})
		for _, d := range defects {
			race.SetDefectForTest(cs[i].tab, d)
		}
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
	if len(defects) == 0 {
		audit(t, cs[n-1], true)
	}
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

// TestBrokenInsertCaught: without the tentative slot and the re-read that settles concurrent
// inserters of one key, two of them both succeed, which the check must catch.
func TestBrokenInsertCaught(t *testing.T) {
	for range 10 {
		err, _ := runHot(t, hot, 6, race.Params{FingerprintBits: 1}, "no-tentative")
		if err != nil {
			t.Logf("caught: %v", err)
			return
		}
	}
	t.Fatal("inserts without the duplicate check passed the linearizability check 10 times")
}

// TestBrokenReuseCaught: old blocks freed at once instead of retired through the allocator's
// epochs are reused while readers still read them. The checksum rejects the torn ones (tearing
// is on, and the test requires it saw some), but a block reused whole for a later write of the
// same key passes it, and the check must catch the value it returns.
func TestBrokenReuseCaught(t *testing.T) {
	w := hot
	w.update, w.insert = 30, 20
	caught, torn := false, uint64(0)
	for range 10 {
		err, s := runHot(t, w, 6, race.Params{FingerprintBits: 1}, "no-retire")
		torn += s.BadBlocks
		if err != nil {
			caught = true
			t.Logf("caught: %.300v", err)
		}
		if caught && torn > 0 {
			return
		}
	}
	t.Fatalf("immediate reuse: caught %v, torn blocks rejected %d", caught, torn)
}
