package bench

import (
	"bytes"
	"fmt"
	"maps"
	"math/rand/v2"
	"os/exec"
	"slices"
	"sort"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/farmem/farmem/farmem"
)

type pair struct{ k, v []byte }

// keyFormats are the workloads whose keys the ordered peers are checked under: YCSB's hashed
// and ordered string keys, and binary64.
func keyFormats(t *testing.T) map[string]*Workload {
	t.Helper()
	out := map[string]*Workload{}
	for name, props := range map[string]map[string]string{
		"string-hashed":  {},
		"string-ordered": {"insertorder": "ordered"},
		"binary64":       {"keyformat": "binary64"},
	} {
		out[name] = smallWorkload(t, "e", props)
	}
	return out
}

// orderedPeers names the ordered twins to check and opens them: the B-tree map always, redis
// with its sorted-set index when redis-server is installed.
var orderedPeers = []struct {
	name string
	open func(t *testing.T) Store
}{
	{"gomap/btree", func(t *testing.T) Store { return NewBTreeStore() }},
	{"redis/zset", func(t *testing.T) Store { return startRedisIndexedOrSkip(t) }},
}

func startRedisIndexedOrSkip(t *testing.T) *Redis {
	t.Helper()
	if _, err := exec.LookPath("redis-server"); err != nil {
		t.Skip("redis-server is not installed (apt-get install redis-server): skipping the redis peer")
	}
	r, err := StartRedis(t.Context(), RedisOptions{Index: true})
	require.NoError(t, err)
	t.Cleanup(func() { _ = r.Close() })
	return r
}

// The Scanner conformance every ordered peer passes, under every key format: records inserted
// in random order come back from any start key (present, absent, before all, past all) in
// bytewise key order with their values, as many as asked for or as remain, exactly those of
// a sorted reference; updates and failed inserts show as they should; a new session sees the
// same; an empty store scans nothing.
func TestScannerConformance(t *testing.T) {
	for format, w := range keyFormats(t) {
		for _, p := range orderedPeers {
			t.Run(format+"/"+p.name, func(t *testing.T) {
				st := p.open(t)
				require.Equal(t, p.name, st.Name())
				scannerConformance(t, st, w, 1500)
			})
		}
	}
}

func scannerConformance(t *testing.T, st Store, w *Workload, n int) {
	ctx := t.Context()
	s, err := st.Open(ctx)
	require.NoError(t, err)
	defer s.Close()
	sc, ok := s.(Scanner)
	require.True(t, ok, "%s sessions are Scanners", st.Name())

	got, err := sc.Scan(ctx, nil, 10, func(k, v []byte) { t.Fatalf("a record in an empty store: %q", k) })
	require.NoError(t, err)
	require.Zero(t, got)

	r := rand.New(rand.NewPCG(7, uint64(n)))
	var ref []pair
	for _, i := range r.Perm(n) {
		k, err := w.AppendKey(nil, int64(i))
		require.NoError(t, err)
		v := fmt.Appendf(nil, "value of %d", i)
		require.NoError(t, s.Insert(ctx, k, v))
		ref = append(ref, pair{k, v})
	}
	sortPairs(ref)

	check := func(sc Scanner, start []byte, limit int) {
		t.Helper()
		i := sort.Search(len(ref), func(i int) bool { return bytes.Compare(ref[i].k, start) >= 0 })
		want := ref[i:min(i+max(limit, 0), len(ref))]
		var seen []pair
		cnt, err := sc.Scan(ctx, start, limit, func(k, v []byte) {
			seen = append(seen, pair{bytes.Clone(k), bytes.Clone(v)})
		})
		require.NoError(t, err)
		require.Equal(t, len(want), cnt, "scan of %d from %q", limit, start)
		require.Equal(t, len(want), len(seen), "scan of %d from %q", limit, start)
		for j := range want { // (ifs rather than require.Equal: this runs for every record)
			if string(want[j].k) != string(seen[j].k) {
				t.Fatalf("record %d of a scan of %d from %q: %q, want %q", j, limit, start, seen[j].k, want[j].k)
			}
			if string(want[j].v) != string(seen[j].v) {
				t.Fatalf("value of %q: %q, want %q", want[j].k, seen[j].v, want[j].v)
			}
		}
		cnt, err = sc.Scan(ctx, start, limit, nil)
		require.NoError(t, err)
		require.Equal(t, len(want), cnt, "a scan with no visitor counts the same")
	}
	var starts [][]byte
	starts = append(starts, nil, []byte{0}, bytes.Repeat([]byte{0xff}, 9))
	for range 40 {
		k := ref[r.IntN(len(ref))].k
		starts = append(starts, k, append(bytes.Clone(k), 0), k[:len(k)-1])
		b := make([]byte, 1+r.IntN(9))
		for i := range b {
			b[i] = byte(r.Uint32())
		}
		starts = append(starts, b)
	}
	for _, start := range starts {
		for _, limit := range []int{0, 1, 2, 17, 100} {
			check(sc, start, limit)
		}
	}
	check(sc, nil, n+10)                  // everything, across redis's scan chunks
	check(sc, ref[n/3].k, RedisScanChunk) // a whole chunk from the middle

	// Updates show in scans; a failed insert changes nothing.
	for range 30 {
		i := r.IntN(len(ref))
		ref[i].v = fmt.Appendf(nil, "updated %d", r.Uint64())
		require.NoError(t, s.Update(ctx, ref[i].k, ref[i].v))
	}
	require.ErrorIs(t, s.Insert(ctx, ref[5].k, []byte("again")), ErrExists)
	check(sc, nil, n+1)
	check(sc, ref[len(ref)-3].k, 10)

	// Another session sees the same records.
	s2, err := st.Open(ctx)
	require.NoError(t, err)
	check(s2.(Scanner), ref[7].k, 50)
	require.NoError(t, s2.Close())
	_, err = s2.(Scanner).Scan(ctx, nil, 1, nil)
	require.ErrorIs(t, err, farmem.ErrClosed)
}

func sortPairs(ps []pair) {
	slices.SortFunc(ps, func(a, b pair) int { return bytes.Compare(a.k, b.k) })
}

// The ordered peers run workload E side by side through Run: every record loaded, every
// operation done, none failed.
func TestRunWithOrderedPeers(t *testing.T) {
	if _, err := exec.LookPath("redis-server"); err != nil {
		t.Skip("redis-server is not installed (apt-get install redis-server): skipping the redis peer")
	}
	for _, props := range []map[string]string{{}, {"keyformat": "binary64"}} {
		var log bytes.Buffer
		peers := OrderedPeers(t.Context(), &log)
		require.Len(t, peers, 2, log.String())
		w := smallWorkload(t, "e", maps.Clone(props))
		w, err := w.With(map[string]string{"operationcount": "3000"})
		require.NoError(t, err)
		rep, err := Run(t.Context(), Config{Workload: w, Stores: peers, Clients: 2})
		require.NoError(t, err)
		for _, name := range []string{"gomap/btree", "redis/zset"} {
			load := runRow(t, rep, name, PhaseLoad)
			require.Empty(t, load.Error)
			require.Equal(t, uint64(2000), load.Ops)
			run := runRow(t, rep, name, PhaseRun)
			require.Empty(t, run.Unsupported)
			require.Zero(t, run.Errors, run.FirstError)
			require.Equal(t, uint64(3000), run.Ops)
			require.Positive(t, run.ByOp["scan"].Ops)
		}
		for _, p := range peers {
			require.NoError(t, p.Close())
			require.NoError(t, p.Close())
		}
	}
}

// The unordered peers' sessions are not Scanners (so workload E reports them unsupported); the
// twins' are, and a closed B-tree store opens no session.
func TestPeersScanOnlyWhenOrdered(t *testing.T) {
	ctx := t.Context()
	m, err := NewMapStore().Open(ctx)
	require.NoError(t, err)
	_, ok := m.(Scanner)
	require.False(t, ok)
	b := NewBTreeStore()
	bs, err := b.Open(ctx)
	require.NoError(t, err)
	_, ok = bs.(Scanner)
	require.True(t, ok)
	require.NoError(t, bs.Insert(ctx, []byte("k"), []byte("v")))
	require.Equal(t, 1, b.Len())
	require.NoError(t, b.Close())
	require.NoError(t, b.Close())
	_, err = b.Open(ctx)
	require.ErrorIs(t, err, farmem.ErrClosed)
	_, err = bs.Read(ctx, []byte("k"))
	require.ErrorIs(t, err, farmem.ErrClosed, "a session outliving its store fails, not panics")
	_, err = bs.(Scanner).Scan(ctx, nil, 1, nil)
	require.ErrorIs(t, err, farmem.ErrClosed)

	if _, err := exec.LookPath("redis-server"); err != nil {
		t.Skip("redis-server is not installed (apt-get install redis-server): skipping the redis peer")
	}
	plain := startRedisOrSkip(t)
	ps, err := plain.Open(ctx)
	require.NoError(t, err)
	defer ps.Close()
	_, ok = ps.(Scanner)
	require.False(t, ok)
	require.Equal(t, "redis", plain.Name())
	ix := startRedisIndexedOrSkip(t)
	is, err := ix.Open(ctx)
	require.NoError(t, err)
	defer is.Close()
	_, ok = is.(Scanner)
	require.True(t, ok)
	require.Equal(t, "redis/zset", ix.Name())
	require.Equal(t, "redis/zset", DialRedisIndexed(ix.Addr()).Name())
}
