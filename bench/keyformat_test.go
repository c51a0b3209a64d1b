package bench

import (
	"bytes"
	"context"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/farmem/farmem/bench/generator"
	"github.com/farmem/farmem/internal/stattest"
)

// keyformat is a load-time property: string by default, binary64 keys are the key numbers
// themselves and so imply ordered inserts; binary64 with hashed inserts, or an unknown
// format, is an error naming the property.
func TestKeyFormatProperty(t *testing.T) {
	e, err := Builtin("e")
	require.NoError(t, err)
	require.Equal(t, generator.KeyString, e.KeyFormat)
	require.False(t, e.OrderedInserts, "YCSB's default insertorder is hashed")
	require.Equal(t, "string", e.Effective()["keyformat"])
	require.True(t, LoadTimeProperty("keyformat"))

	b, err := e.With(map[string]string{"keyformat": "binary64"})
	require.NoError(t, err)
	require.Equal(t, generator.KeyBinary64, b.KeyFormat)
	require.True(t, b.OrderedInserts)
	require.Equal(t, "ordered", b.Effective()["insertorder"])
	b2, err := e.With(map[string]string{"keyformat": "binary64", "insertorder": "ordered"})
	require.NoError(t, err)
	require.True(t, b2.OrderedInserts)

	_, err = e.With(map[string]string{"keyformat": "binary64", "insertorder": "hashed"})
	require.ErrorIs(t, err, ErrWorkload)
	require.ErrorContains(t, err, "insertorder")
	require.ErrorContains(t, err, "not their hashes")
	_, err = e.With(map[string]string{"keyformat": "binary64", "zeropadding": "12"})
	require.ErrorContains(t, err, "zeropadding (as set): binary64 keys have no digits to pad")
	_, err = e.With(map[string]string{"keyformat": "int"})
	require.ErrorIs(t, err, ErrWorkload)
	require.ErrorContains(t, err, `keyformat (as set): "int" is not one of string, binary64`)

	// A driver will not change the key format under a loaded store.
	ordered, err := e.With(map[string]string{"insertorder": "ordered"})
	require.NoError(t, err)
	d, err := NewDriver(ordered)
	require.NoError(t, err)
	_, err = d.With(b2)
	require.ErrorIs(t, err, ErrWorkload)
	require.ErrorContains(t, err, "keyformat differs (binary64, was string)")

	k, err := b.AppendKey([]byte("x"), 41)
	require.NoError(t, err)
	require.Equal(t, []byte{'x', 0, 0, 0, 0, 0, 0, 0, 42}, k)
	k, err = e.AppendKey(nil, 41)
	require.NoError(t, err)
	require.Equal(t, generator.KeyName(41, 1, false), string(k))
}

// scanRecorder wraps a session of an ordered store and records what the worker asks of it,
// beside a sorted reference of the keys present.
type scanRecorder struct {
	Session
	sc      Scanner
	keys    [][]byte // sorted
	inserts [][]byte // in order
	scans   []scanCall
}

type scanCall struct {
	start      []byte
	n, got     int
	want       int // what the reference says the scan returns
	startKnown bool
}

func (r *scanRecorder) Insert(ctx context.Context, k, v []byte) error {
	if err := r.Session.Insert(ctx, k, v); err != nil {
		return err
	}
	k = bytes.Clone(k)
	r.inserts = append(r.inserts, k)
	i, _ := slices.BinarySearchFunc(r.keys, k, bytes.Compare)
	r.keys = slices.Insert(r.keys, i, k)
	return nil
}

func (r *scanRecorder) Scan(ctx context.Context, start []byte, n int, visit func(k, v []byte)) (int, error) {
	got, err := r.sc.Scan(ctx, start, n, visit)
	i := sort.Search(len(r.keys), func(i int) bool { return bytes.Compare(r.keys[i], start) >= 0 })
	known := i < len(r.keys) && bytes.Equal(r.keys[i], start)
	r.scans = append(r.scans, scanCall{start: bytes.Clone(start), n: n, got: got,
		want: min(n, len(r.keys)-i), startKnown: known})
	return got, err
}

// Workload E as YCSB's CoreWorkload runs it, under both key formats, on the B-tree peer: the
// load inserts key numbers 0..recordcount-1 and the run's inserts continue from recordcount
// (binary64 keys strictly increasing throughout, as ordered inserts are); every scan starts
// at the key of a record already inserted, chosen by the workload's key chooser (the hottest
// start is its hottest key), asks for a length drawn uniformly from minscanlength to
// maxscanlength (or Zipfian, shortest first), and returns what a sorted reference holds from
// there.
func TestWorkloadEScanSemantics(t *testing.T) {
	for format, w := range keyFormats(t) {
		t.Run(format, func(t *testing.T) {
			const ops = 6000
			w, err := w.With(map[string]string{"operationcount": "6000"})
			require.NoError(t, err)
			rec := runRecorded(t, w, ops)

			for i, k := range rec.inserts {
				want, err := w.AppendKey(nil, int64(i))
				require.NoError(t, err)
				require.Equal(t, want, k, "insert %d: the key numbers in order, load then run", i)
				if w.KeyFormat == generator.KeyBinary64 && i > 0 {
					require.Equal(t, 1, bytes.Compare(k, rec.inserts[i-1]), "binary64: insert %d's key follows the one before", i)
				}
			}
			require.Greater(t, len(rec.inserts), int(w.RecordCount), "the run inserted")
			stattest.RequireBinomial(t, "scans", len(rec.scans), ops, 0.95)
			stattest.RequireBinomial(t, "inserts", len(rec.inserts)-int(w.RecordCount), ops, 0.05)

			starts := map[string]int{}
			lens := make([]int, w.MaxScanLength+1)
			for _, s := range rec.scans {
				require.True(t, s.startKnown, "scan from %q: the key of an inserted record", s.start)
				require.Equal(t, s.want, s.got, "scan of %d from %q", s.n, s.start)
				require.True(t, s.n >= w.MinScanLength && s.n <= w.MaxScanLength, "scan length %d", s.n)
				lens[s.n]++
				starts[string(s.start)]++
			}
			probs := make([]float64, w.MaxScanLength)
			for i := range probs {
				probs[i] = 1 / float64(w.MaxScanLength)
			}
			require.Less(t, stattest.ChiSquare(lens[1:], probs), stattest.ChiSquareCritical(len(probs)-1),
				"scan lengths uniform over 1..%d", w.MaxScanLength)

			// The chooser is YCSB's scrambled Zipfian over the records plus twice the expected
			// inserts; its hottest key among the loaded records (a key past them is drawn
			// again until inserted) is the most frequent scan start.
			z := generator.NewScrambledZipfian(0, w.RecordCount+int64(float64(ops)*0.05*2)) // as the Driver builds it
			item := int64(0)
			for z.Fold(item) >= w.RecordCount {
				item++
			}
			hot, err := w.AppendKey(nil, z.Fold(item))
			require.NoError(t, err)
			best := ""
			for k, c := range starts {
				if best == "" || c > starts[best] {
					best = k
				}
			}
			require.Equal(t, string(hot), best)
		})
	}
	t.Run("zipfian-lengths", func(t *testing.T) {
		w := smallWorkload(t, "e", map[string]string{"keyformat": "binary64", "scanlengthdistribution": "zipfian",
			"operationcount": "3000"})
		rec := runRecorded(t, w, 3000)
		lens := make([]int, w.MaxScanLength+1)
		for _, s := range rec.scans {
			require.Equal(t, s.want, s.got)
			lens[s.n]++
		}
		z := generator.NewZipfianRange(int64(w.MinScanLength), int64(w.MaxScanLength), generator.ZipfianTheta)
		stattest.RequireBinomial(t, "scans of the shortest length", lens[w.MinScanLength], len(rec.scans), z.Prob(0))
		require.Equal(t, slices.Max(lens), lens[w.MinScanLength], "the shortest length is the most frequent")
	})
}

// runRecorded loads w into a B-tree peer through one worker and runs ops steps.
func runRecorded(t *testing.T, w *Workload, ops int) *scanRecorder {
	t.Helper()
	ctx := t.Context()
	st := NewBTreeStore()
	defer st.Close()
	s, err := st.Open(ctx)
	require.NoError(t, err)
	rec := &scanRecorder{Session: s, sc: s.(Scanner)}
	d, err := NewDriver(w)
	require.NoError(t, err)
	wk, err := d.NewWorker(rec, WorkerOptions{Rand: rand.New(rand.NewPCG(3, 4))})
	require.NoError(t, err)
	require.NoError(t, wk.Load(ctx, 0, 1))
	require.Len(t, rec.inserts, int(w.RecordCount))
	for range ops {
		require.NoError(t, wk.Step(ctx))
	}
	require.Equal(t, st.Len(), len(rec.keys))
	require.True(t, strings.HasPrefix(st.Name(), "gomap"))
	return rec
}
