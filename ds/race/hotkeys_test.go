package race_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/farmem/farmem/ds/race"
	"github.com/farmem/farmem/farmem"
	"github.com/farmem/farmem/farmem/farmemtest"
	"github.com/farmem/farmem/farmem/local"
)

// hot is a workload on a handful of keys, mostly inserts and deletes, so that inserters of one
// key race each other (the tentative-slot protocol settles them) and writers race readers.
var hot = workload{Keys: 3, Ops: 500, Search: 30, Insert: 40, Update: 10, MaxVal: 40, Unknown: 5}

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
	w.Ops *= stressScale()
	err, s := runHot(t, w, 6, race.Params{FingerprintBits: 1})
	require.NoError(t, err)
	t.Logf("kills %d, conflicts %d, bad blocks %d", s.Kills, s.Conflicts, s.BadBlocks)
	require.NotZero(t, s.Kills, "no inserter of a key ever removed a competitor's tentative slot")
}

// TestCorruptBlockRejected: a KV block read that comes back damaged (one value byte flipped
// by the client's Memory, as a torn read or a block reused under a reader would be) fails its
// checksum; the operation reads again and returns the exact value, and each rejection is
// counted.
func TestCorruptBlockRejected(t *testing.T) {
	e := newEnv(t, local.Options{}, race.Params{Groups: 8})
	w := e.open(t, 0, race.Options{})
	ctx := context.Background()
	const n = 50
	for i := range uint64(n) {
		require.NoError(t, w.tab.Insert(ctx, key(i), val(i, 40)))
	}
	corrupted := 0
	next := true // damage every other block read: each operation's first, not its re-read
	r := e.openWith(t, 1, race.Options{}, func(m farmem.Memory) farmem.Memory {
		return &farmemtest.Interposer{Memory: m, After: func(_ context.Context, v farmemtest.Verb, _ uint64, err error) {
			if err != nil || v.Single || v.Posted {
				return
			}
			for _, op := range v.Batch.Ops {
				if op.Kind != farmem.OpRead {
					continue
				}
				blk, derr := race.DecodeBlock(op.Addr, op.Buf)
				if derr != nil {
					continue
				}
				if next {
					blk.Value[len(blk.Value)-1] ^= 0x10 // in op.Buf: a value byte
					corrupted++
				}
				next = !next
			}
		}}
	})
	for i := range uint64(n) {
		v, err := r.tab.Search(ctx, key(i))
		require.NoError(t, err, "key %d", i)
		require.Equal(t, val(i, 40), v, "key %d", i)
		require.NoError(t, r.tab.Update(ctx, key(i), val(i+n, 40)), "update %d", i)
	}
	for i := range uint64(n) {
		v, err := r.tab.Search(ctx, key(i))
		require.NoError(t, err)
		require.Equal(t, val(i+n, 40), v)
	}
	require.Positive(t, corrupted)
	require.Equal(t, uint64(corrupted), r.tab.Stats().BadBlocks, "every damaged block rejected, nothing else")
	audit(t, w, true) // through an undamaged client
}
