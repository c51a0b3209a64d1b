package bench

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/farmem/farmem/internal/stattest"
)

func TestBuiltins(t *testing.T) {
	require.Equal(t, []string{"a", "b", "c", "d", "e", "f"}, Builtins())
	want := map[string]struct {
		p    [NumOps]float64
		dist Distribution
	}{
		"a": {[NumOps]float64{OpRead: 0.5, OpUpdate: 0.5}, DistZipfian},
		"b": {[NumOps]float64{OpRead: 0.95, OpUpdate: 0.05}, DistZipfian},
		"c": {[NumOps]float64{OpRead: 1}, DistZipfian},
		"d": {[NumOps]float64{OpRead: 0.95, OpInsert: 0.05}, DistLatest},
		"e": {[NumOps]float64{OpScan: 0.95, OpInsert: 0.05}, DistZipfian},
		"f": {[NumOps]float64{OpRead: 0.5, OpReadModifyWrite: 0.5}, DistZipfian},
	}
	for name, exp := range want {
		w, err := Builtin(name)
		require.NoError(t, err, name)
		require.Equal(t, name, w.Name)
		require.Equal(t, exp.p, w.Proportion, name)
		require.Equal(t, exp.dist, w.RequestDistribution, name)
		require.Equal(t, int64(100000), w.RecordCount)
		require.Equal(t, 1000, w.ValueSize())
		require.Equal(t, name == "e", w.NeedsScan())
		long, err := Builtin("workload" + strings.ToUpper(name))
		require.NoError(t, err)
		require.Equal(t, w.Proportion, long.Proportion)
	}
	e, _ := Builtin("e")
	require.Equal(t, 100, e.MaxScanLength)
	require.Equal(t, 1, e.MinScanLength)
	_, err := Builtin("g")
	require.ErrorIs(t, err, ErrWorkload)
	require.ErrorContains(t, err, "a, b, c, d, e, f")
	_, err = Builtin("")
	require.ErrorIs(t, err, ErrWorkload)
	text, err := BuiltinText("a")
	require.NoError(t, err)
	require.Contains(t, string(text), "readproportion=0.5")
}

func TestParseDefaultsAndSyntax(t *testing.T) {
	src := "# comment\n! also a comment\n\n" +
		"recordcount = 50\r\n" + // spaces around '=' and CRLF
		"operationcount: 7\n" + // colon
		"readproportion 0.25\n" + // whitespace separator
		"updateproportion=0.\\\n   75\n" + // continuation
		"requestdistribution=hotspot\n" +
		"hotspotdatafraction=0.1\n" +
		"table=usertable\n" // accepted, no effect
	w, err := Parse("t", strings.NewReader(src))
	require.NoError(t, err)
	require.Equal(t, int64(50), w.RecordCount)
	require.Equal(t, int64(7), w.OperationCount)
	require.Equal(t, int64(50), w.InsertCount)
	require.Equal(t, 0.25, w.Proportion[OpRead])
	require.Equal(t, 0.75, w.Proportion[OpUpdate])
	require.Equal(t, DistHotspot, w.RequestDistribution)
	require.Equal(t, 0.1, w.HotspotDataFraction)
	require.Equal(t, 0.8, w.HotspotOpnFraction)
	require.Equal(t, 10, w.FieldCount)
	require.Equal(t, 100, w.FieldLength)
	require.Equal(t, 1, w.ZeroPadding)
	require.False(t, w.OrderedInserts)
	eff := w.Effective()
	require.Equal(t, "1000", eff["maxscanlength"])
	require.Equal(t, "50", eff["insertcount"])
	require.NotContains(t, eff, "table")

	// A file with only defaults is YCSB's default workload: 95/5 reads and updates, uniform.
	d, err := Parse("empty", strings.NewReader(""))
	require.NoError(t, err)
	require.Equal(t, 0.95, d.Proportion[OpRead])
	require.Equal(t, DistUniform, d.RequestDistribution)
	require.Equal(t, int64(1000), d.RecordCount)
}

func TestParseErrors(t *testing.T) {
	cases := []struct{ src, want string }{
		{"recordcount=10\nreadproportion=0.5\nupdateproportion=0.5\nreadproportoin=1\n", "line 4: readproportoin: unknown property"},
		{"recordcount=10\nrecordcount=20\n", "line 2: recordcount given again (first on line 1)"},
		{"recordcount=ten\n", `line 1: recordcount: "ten" is not an integer`},
		{"recordcount=0\n", "recordcount: 0 is not in [1,"},
		{"readproportion=1.5\n", "line 1: readproportion: 1.5 is not in [0, 1]"},
		{"readproportion=NaN\n", `"NaN" is not a number`},
		{"readproportion=0.5\n", "the operation proportions sum to 0.55, not 1"},
		{"readproportion=0\nupdateproportion=0\n", "sum to 0, not 1"},
		{"requestdistribution=exponential\n", `"exponential" is not one of uniform, zipfian, latest, hotspot`},
		{"\n\nrecordcount\n", `line 3: "recordcount" has no value`},
		{"=5\n", `line 1: "=5" has no value`},
		{"maxscanlength=5\nminscanlength=10\n", "maxscanlength: 5 is less than minscanlength 10"},
		{"maxscanlength=99999999\n", "maxscanlength: 99999999 is not in [1, 1048576]"},
		{"fieldcount=100000\nfieldlength=100000\n", "fieldcount*fieldlength = 10000000000 is more than"},
		{"recordcount=10\ninsertstart=5\ninsertcount=6\n", "insertcount: 6 is not in [1, 5]"},
		{"requestdistribution=hotspot\nhotspotdatafraction=0.0001\n", "leaves the hot or the cold set empty"},
		{"insertorder=random\n", `insertorder: "random" is not one of hashed, ordered`},
		{"readallfields=yes\n", `readallfields: "yes" is not true or false`},
		{"scanlengthdistribution=latest\n", "scanlengthdistribution"},
		{"fieldlengthdistribution=histogram\n", "fieldlengthdistribution"},
	}
	for _, c := range cases {
		_, err := Parse("bad", strings.NewReader(c.src))
		require.Error(t, err, c.src)
		require.ErrorIs(t, err, ErrWorkload, c.src)
		require.Contains(t, err.Error(), c.want, c.src)
		require.Contains(t, err.Error(), "workload bad", c.src)
	}
	// A file too large.
	_, err := Parse("big", bytes.NewReader(make([]byte, maxFileSize+1)))
	require.ErrorIs(t, err, ErrWorkload)
}

func TestWith(t *testing.T) {
	a, err := Builtin("a")
	require.NoError(t, err)
	small, err := a.With(map[string]string{"recordcount": "100", "valuesize": "64"})
	require.NoError(t, err)
	require.Equal(t, int64(100), small.RecordCount)
	require.Equal(t, 64, small.ValueSize())
	require.Equal(t, int64(100000), a.RecordCount, "With leaves the original alone")
	require.Equal(t, "100", small.Properties()["recordcount"])

	_, err = a.With(map[string]string{"readproportion": "0.9"})
	require.ErrorIs(t, err, ErrWorkload)
	require.ErrorContains(t, err, "sum to 1.4")
	_, err = a.With(map[string]string{"recordcont": "5"})
	require.ErrorContains(t, err, "recordcont (as set): unknown property")
	_, err = a.With(map[string]string{"recordcount": "-1"})
	require.ErrorContains(t, err, "recordcount (as set): -1 is not in")

	// Errors about properties from the file keep their lines.
	f, err := Parse("f", strings.NewReader("recordcount=10\nreadproportion=0.5\nupdateproportion=0.5\n"))
	require.NoError(t, err)
	_, err = f.With(map[string]string{"insertcount": "20"})
	require.ErrorContains(t, err, "insertcount (as set): 20 is not in [1, 10]")
	require.True(t, LoadTimeProperty("recordcount"))
	require.False(t, LoadTimeProperty("readproportion"))
}

func TestWriteToRoundTrip(t *testing.T) {
	for _, name := range Builtins() {
		w, err := Builtin(name)
		require.NoError(t, err)
		var b bytes.Buffer
		_, err = w.WriteTo(&b)
		require.NoError(t, err)
		w2, err := Parse(name, &b)
		require.NoError(t, err)
		requireSameWorkload(t, w, w2)
	}
}

func requireSameWorkload(t *testing.T, a, b *Workload) {
	t.Helper()
	a2, b2 := *a, *b
	a2.props, b2.props = nil, nil
	require.Equal(t, a2, b2)
	require.Equal(t, a.Properties(), b.Properties())
}

func TestLoadWorkload(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "mine")
	require.NoError(t, os.WriteFile(path, []byte("recordcount=5\nreadproportion=1\nupdateproportion=0\n"), 0o644))
	w, err := LoadWorkload(path)
	require.NoError(t, err)
	require.Equal(t, "mine", w.Name)
	require.Equal(t, int64(5), w.RecordCount)
	w, err = LoadWorkload("c")
	require.NoError(t, err)
	require.Equal(t, 1.0, w.Proportion[OpRead])
	_, err = LoadWorkload(filepath.Join(dir, "missing"))
	require.True(t, errors.Is(err, os.ErrNotExist))
	_, err = ParseFile(filepath.Join(dir, "missing"))
	require.True(t, errors.Is(err, os.ErrNotExist))
	require.Contains(t, w.String(), "workload c: read 100%, zipfian, 100000 records of 1000 B")
}

// Operation mixes drawn by the driver match every builtin workload's proportions: a
// chi-square test over the ops with a share (p = 0.001), and no draw of an op without one. The
// same counts tested against another workload's proportions fail.
func TestOpMixMatchesWorkloads(t *testing.T) {
	const draws = 200_000
	mix := func(w *Workload, seed uint64) [NumOps]int {
		d, err := NewDriver(w)
		require.NoError(t, err)
		r := stattest.NewRand(seed)
		var counts [NumOps]int
		for range draws {
			counts[d.chooseOp(r)]++
		}
		return counts
	}
	fit := func(counts [NumOps]int, p [NumOps]float64) (x float64, df int, ok bool) {
		var cs []int
		var ps []float64
		for op := range NumOps {
			if p[op] == 0 {
				if counts[op] != 0 {
					return 0, 0, false
				}
				continue
			}
			cs = append(cs, counts[op])
			ps = append(ps, p[op])
		}
		if len(cs) == 1 {
			return 0, 0, true
		}
		return stattest.ChiSquare(cs, ps), len(cs) - 1, true
	}
	for i, name := range Builtins() {
		w, err := Builtin(name)
		require.NoError(t, err)
		counts := mix(w, uint64(i))
		x, df, ok := fit(counts, w.Proportion)
		require.True(t, ok, "workload %s drew an op it has no share of: %v", name, counts)
		if df > 0 {
			t.Logf("workload %s: %v, chi-square %.2f (df %d, critical %.1f)", name, counts, x, df, stattest.ChiSquareCritical(df))
			require.Less(t, x, stattest.ChiSquareCritical(df), "workload %s", name)
		}
	}
	// Three ops, near-equal shares; then a broken expectation.
	w, err := Parse("mix", strings.NewReader("readproportion=0.3\nupdateproportion=0.3\ninsertproportion=0.2\nscanproportion=0.1\nreadmodifywriteproportion=0.1\n"))
	require.NoError(t, err)
	counts := mix(w, 99)
	x, df, ok := fit(counts, w.Proportion)
	require.True(t, ok)
	require.Less(t, x, stattest.ChiSquareCritical(df))
	wrong := w.Proportion
	wrong[OpRead], wrong[OpUpdate] = 0.32, 0.28
	x, df, _ = fit(counts, wrong)
	require.Greater(t, x, stattest.ChiSquareCritical(df), "a 2-point shift must be detected")
}

// FuzzParse: no input panics the parser; whatever parses writes back to an equal workload.
func FuzzParse(f *testing.F) {
	for _, name := range Builtins() {
		text, _ := BuiltinText(name)
		f.Add(text)
	}
	f.Add([]byte("recordcount=1\nreadproportion=1\nupdateproportion=0\\\n\n"))
	f.Add([]byte("requestdistribution=hotspot\nhotspotdatafraction=0.5\nrecordcount=2\n"))
	f.Add([]byte("fieldlengthdistribution=zipfian\nfieldlength=3\nscanlengthdistribution=zipfian\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		w, err := Parse("fuzz", bytes.NewReader(data))
		if err != nil {
			require.ErrorIs(t, err, ErrWorkload)
			return
		}
		var b bytes.Buffer
		_, err = w.WriteTo(&b)
		require.NoError(t, err)
		w2, err := Parse("fuzz", &b)
		if err != nil {
			// A value that only parses in its original form (a trailing backslash, a value
			// with a newline after continuation) must still not panic; report it.
			t.Fatalf("written workload does not parse: %v\n%s", err, b.String())
		}
		requireSameWorkload(t, w, w2)
		// The parsed workload runs: a driver and a worker can be built, and ops drawn.
		if w.RecordCount <= 1000 && w.ValueSize() <= 1<<16 && w.MaxScanLength <= 1000 && w.FieldLength <= 1000 {
			d, err := NewDriver(w)
			require.NoError(t, err)
			wk, err := d.NewWorker(nopSession{}, WorkerOptions{Rand: stattest.NewRand(1)})
			require.NoError(t, err)
			for range 20 {
				_ = wk.Step(t.Context())
			}
		}
	})
}
