package lincheck_test

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/farmem/farmem/farmem"
	"github.com/farmem/farmem/farmem/lincheck"
)

// op is a hand-written operation: client, call, return, input, output, outcome.
func op[I, O any](client int, call, ret farmem.Time, in I, out O, oc ...lincheck.Outcome) lincheck.Record[I, O] {
	r := lincheck.Record[I, O]{Client: client, Call: call, Return: ret, In: in, Out: out}
	if len(oc) > 0 {
		r.Outcome = oc[0]
	}
	return r
}

func legal[I, O any](t *testing.T, m *lincheck.Model[I, O], rs ...lincheck.Record[I, O]) {
	t.Helper()
	h := m.NewHistory(nil)
	h.Add(rs...)
	_, err := h.Verify()
	require.NoError(t, err)
}

func illegal[I, O any](t *testing.T, m *lincheck.Model[I, O], rs ...lincheck.Record[I, O]) *lincheck.Violation {
	t.Helper()
	h := m.NewHistory(nil)
	h.Add(rs...)
	_, err := h.Verify(lincheck.VisualizeDir(t.TempDir()))
	require.ErrorIs(t, err, lincheck.ErrNotLinearizable)
	var v *lincheck.Violation
	require.ErrorAs(t, err, &v)
	return v
}

func TestRegister(t *testing.T) {
	r := lincheck.Register[uint64]()
	m := r.Model
	// Sequential write then read.
	legal(t, m, op(0, 0, 10, r.Write(0, 5), r.Ack()), op(1, 20, 30, r.Read(0), r.Value(5)))
	illegal(t, m, op(0, 0, 10, r.Write(0, 5), r.Ack()), op(1, 20, 30, r.Read(0), r.Value(0)))
	// A read concurrent with a write may return either value, but two reads in real-time
	// order may not go back.
	legal(t, m, op(0, 0, 100, r.Write(0, 5), r.Ack()), op(1, 10, 20, r.Read(0), r.Value(0)))
	legal(t, m, op(0, 0, 100, r.Write(0, 5), r.Ack()), op(1, 10, 20, r.Read(0), r.Value(5)))
	illegal(t, m, op(0, 0, 100, r.Write(0, 5), r.Ack()),
		op(1, 10, 20, r.Read(0), r.Value(5)), op(2, 30, 40, r.Read(0), r.Value(0)))
	// Closed intervals: touching operations are concurrent.
	legal(t, m, op(0, 0, 10, r.Write(0, 5), r.Ack()), op(1, 10, 20, r.Read(0), r.Value(0)))
	// A read of a value never written.
	illegal(t, m, op(0, 0, 10, r.Read(0), r.Value(9)))
	// Registers are independent: key 1's write is not seen by key 0.
	illegal(t, m, op(0, 0, 10, r.Write(1, 5), r.Ack()), op(1, 20, 30, r.Read(0), r.Value(5)))
	// CAS.
	legal(t, m, op(0, 0, 10, r.CAS(0, 0, 7), r.Swapped(true)), op(0, 20, 30, r.CAS(0, 0, 8), r.Swapped(false)),
		op(1, 40, 50, r.Read(0), r.Value(7)))
	illegal(t, m, op(0, 0, 10, r.CAS(0, 1, 7), r.Swapped(true)))
	// The lost update: two concurrent CASes from the same value cannot both succeed.
	legal(t, m, op(0, 0, 10, r.CAS(0, 0, 1), r.Swapped(true)), op(1, 5, 15, r.CAS(0, 0, 2), r.Swapped(false)))
	v := illegal(t, m, op(0, 0, 10, r.CAS(0, 0, 1), r.Swapped(true)), op(1, 5, 15, r.CAS(0, 0, 2), r.Swapped(true)))
	require.Len(t, v.Ops, 2)
}

func TestKV(t *testing.T) {
	kv := lincheck.KV[string, int]()
	m := kv.Model
	legal(t, m,
		op(0, 0, 10, kv.Get("a"), kv.Missing()),
		op(0, 20, 30, kv.Insert("a", 1), kv.OK()),
		op(0, 40, 50, kv.Insert("a", 2), kv.Exists()),
		op(0, 60, 70, kv.Update("b", 2), kv.Missing()),
		op(0, 80, 90, kv.Delete("b"), kv.Missing()),
		op(0, 100, 110, kv.Update("a", 3), kv.OK()),
		op(0, 120, 130, kv.Get("a"), kv.Found(3)),
		op(0, 140, 150, kv.Delete("a"), kv.OK()),
		op(0, 160, 170, kv.Get("a"), kv.Missing()),
		op(0, 180, 190, kv.Put("a", 4), kv.OK()),
		op(0, 200, 210, kv.Put("a", 5), kv.OK()),
		op(0, 220, 230, kv.Get("a"), kv.Found(5)),
	)
	// The invalid-operation results are checked.
	illegal(t, m, op(0, 0, 10, kv.Insert("a", 1), kv.OK()), op(0, 20, 30, kv.Insert("a", 2), kv.OK()))
	illegal(t, m, op(0, 0, 10, kv.Update("a", 1), kv.OK()))
	illegal(t, m, op(0, 0, 10, kv.Delete("a"), kv.OK()))
	illegal(t, m, op(0, 0, 10, kv.Put("a", 1), kv.OK()), op(0, 20, 30, kv.Get("a"), kv.Missing()))
	illegal(t, m, op(0, 0, 10, kv.Put("a", 1), kv.OK()), op(0, 20, 30, kv.Delete("a"), kv.Missing()))
	// A stale value: the get began after the put of 2 returned.
	v := illegal(t, m,
		op(0, 0, 10, kv.Put("a", 1), kv.OK()),
		op(0, 20, 30, kv.Put("a", 2), kv.OK()),
		op(1, 40, 50, kv.Get("a"), kv.Found(1)),
		op(1, 40, 50, kv.Get("b"), kv.Missing()))
	require.Equal(t, "key a", v.Partition)
	require.Contains(t, v.Report, "get(a) -> 1   <-- the model returns 2")
}

func TestMaxRegister(t *testing.T) {
	mr := lincheck.MaxRegister(cmp.Compare[uint64])
	m := mr.Model
	legal(t, m,
		op(0, 0, 10, mr.Write(0, 5), uint64(0)),
		op(0, 20, 30, mr.Write(0, 3), uint64(0)),
		op(1, 40, 50, mr.Read(0), uint64(5)),
		op(1, 60, 70, mr.Write(0, 9), uint64(0), lincheck.Done),
		op(1, 80, 90, mr.Read(0), uint64(9)))
	// Going backwards.
	illegal(t, m, op(0, 0, 10, mr.Write(0, 5), uint64(0)), op(0, 20, 30, mr.Write(0, 3), uint64(0)), op(1, 40, 50, mr.Read(0), uint64(3)))
	illegal(t, m, op(0, 0, 100, mr.Write(0, 5), uint64(0)), op(1, 10, 20, mr.Read(0), uint64(5)), op(1, 30, 40, mr.Read(0), uint64(0)))
	// A tuple order (timestamp, writer), as SWARM's registers hold.
	type ts struct{ clock, writer uint64 }
	tr := lincheck.MaxRegister(func(a, b ts) int {
		return cmp.Or(cmp.Compare(a.clock, b.clock), cmp.Compare(a.writer, b.writer))
	})
	legal(t, tr.Model, op(0, 0, 10, tr.Write(0, ts{2, 1}), ts{}), op(1, 0, 10, tr.Write(0, ts{2, 0}), ts{}),
		op(2, 20, 30, tr.Read(0), ts{2, 1}))
	illegal(t, tr.Model, op(0, 0, 10, tr.Write(0, ts{2, 1}), ts{}), op(1, 0, 10, tr.Write(0, ts{2, 0}), ts{}),
		op(2, 20, 30, tr.Read(0), ts{2, 0}))
}

func TestSet(t *testing.T) {
	s := lincheck.Set[string]()
	m := s.Model
	legal(t, m,
		op(0, 0, 10, s.Add("x"), true),
		op(0, 20, 30, s.Add("x"), false),
		op(1, 40, 50, s.Contains("x"), true),
		op(1, 40, 50, s.Contains("y"), false),
		op(1, 60, 70, s.Remove("x"), true),
		op(1, 80, 90, s.Remove("x"), false),
		op(1, 100, 110, s.Contains("x"), false))
	illegal(t, m, op(0, 0, 10, s.Add("x"), true), op(1, 20, 30, s.Add("x"), true))
	illegal(t, m, op(0, 0, 10, s.Add("x"), true), op(1, 20, 30, s.Contains("x"), false))
	illegal(t, m, op(0, 0, 10, s.Remove("x"), true))
}

func TestCounter(t *testing.T) {
	c := lincheck.Counter()
	legal(t, c.Model, op(0, 0, 10, c.Add(0, 1), uint64(0)), op(1, 5, 15, c.Add(0, 1), uint64(1)), op(2, 20, 30, c.Read(0), uint64(2)))
	// Two increments that both saw 0: one update was lost.
	illegal(t, c.Model, op(0, 0, 10, c.Add(0, 1), uint64(0)), op(1, 5, 15, c.Add(0, 1), uint64(0)))
}

func TestClassify(t *testing.T) {
	for _, c := range []struct {
		err      error
		definite []error
		want     lincheck.Outcome
	}{
		{nil, nil, lincheck.OK},
		{fmt.Errorf("x: %w", farmem.ErrNodeDown), nil, lincheck.Unknown},
		{context.DeadlineExceeded, nil, lincheck.Unknown},
		{fmt.Errorf("x: %w", context.Canceled), lincheck.Rejections, lincheck.Unknown},
		{farmem.ErrClosed, lincheck.Rejections, lincheck.Unknown},
		// An error wrapping both a rejection and a down node stays unknown.
		{fmt.Errorf("%w: %w", farmem.ErrAborted, farmem.ErrNodeDown), lincheck.Rejections, lincheck.Unknown},
		{fmt.Errorf("x: %w", farmem.ErrOutOfRange), lincheck.Rejections, lincheck.Failed},
		// Without being told, a rejection is unknown: sound for operations of several verbs.
		{farmem.ErrOutOfRange, nil, lincheck.Unknown},
		{errors.New("something else"), lincheck.Rejections, lincheck.Unknown},
	} {
		require.Equal(t, c.want, lincheck.Classify(c.err, c.definite...), "%v", c.err)
	}
}

// An operation with an unknown outcome may take effect at any instant after its call, or never;
// recording it as failed when it did take effect makes a correct history fail.
func TestUnknownOutcome(t *testing.T) {
	r := lincheck.Register[uint64]()
	m := r.Model
	write := func(oc lincheck.Outcome) lincheck.Record[lincheck.RegisterInput[uint64], lincheck.RegisterOutput[uint64]] {
		return op(0, 0, 10, r.Write(0, 1), r.Ack(), oc)
	}
	seen := op(1, 20, 30, r.Read(0), r.Value(1))
	legal(t, m, write(lincheck.Unknown), seen)
	v := illegal(t, m, write(lincheck.Failed), seen)
	require.Contains(t, v.Report, "read(0) -> 1   <-- the model returns 0")
	// It may take effect after later operations of anyone, its own client's included.
	legal(t, m, write(lincheck.Unknown), op(0, 20, 30, r.Read(0), r.Value(0)), op(1, 40, 50, r.Read(0), r.Value(1)))
	// Or never.
	legal(t, m, write(lincheck.Unknown), op(1, 20, 30, r.Read(0), r.Value(0)), op(1, 40, 50, r.Read(0), r.Value(0)))
	// But not before its call.
	illegal(t, m, op(1, 0, 5, r.Read(0), r.Value(1)), op(0, 10, 20, r.Write(0, 1), r.Ack(), lincheck.Unknown))
	// And once seen, it stays.
	illegal(t, m, write(lincheck.Unknown), op(1, 20, 30, r.Read(0), r.Value(1)), op(1, 40, 50, r.Read(0), r.Value(0)))
	// An unknown read tells nothing, whatever its recorded output.
	legal(t, m, op(0, 0, 10, r.Read(0), r.Value(42), lincheck.Unknown))
	// A Done read's output is not checked either.
	legal(t, m, op(0, 0, 10, r.Read(0), r.Value(42), lincheck.Done))
	// An unknown CAS succeeds or fails as the state at its linearization point says.
	legal(t, m, op(0, 0, 10, r.CAS(0, 0, 3), r.Swapped(false), lincheck.Unknown), op(1, 20, 30, r.Read(0), r.Value(3)))
	illegal(t, m, op(0, 0, 10, r.CAS(0, 1, 3), r.Swapped(false), lincheck.Unknown), op(1, 20, 30, r.Read(0), r.Value(3)))
}

// An operation called but never ended, as by a client that crashed, counts as unknown.
func TestPendingIsUnknown(t *testing.T) {
	r := lincheck.Register[uint64]()
	h := r.NewHistory(nil)
	_ = h.Client(1).Call(r.Write(0, 7)) // the client crashed: never ended
	h.Client(2).Call(r.Read(0)).Return(r.Value(7))
	s, err := h.Verify()
	require.NoError(t, err)
	require.Equal(t, 1, s.Unknown)
	require.Equal(t, 1, s.OK)
	require.Equal(t, lincheck.Unknown, h.Records()[0].Outcome)
}

func TestRecordingAPI(t *testing.T) {
	r := lincheck.Register[uint64]()
	h := r.NewHistory(nil)
	c := h.Client(3)
	require.Same(t, c, h.Client(3))
	require.Equal(t, 3, c.ID())
	require.Equal(t, lincheck.OK, c.Call(r.Write(0, 1)).End(r.Ack(), nil))
	require.Equal(t, lincheck.Unknown, c.Call(r.Write(0, 2)).End(r.Ack(), fmt.Errorf("w: %w", farmem.ErrNodeDown)))
	require.Equal(t, lincheck.Failed, c.Call(r.Write(0, 3)).End(r.Ack(), farmem.ErrMisaligned, lincheck.Rejections...))
	c.Call(r.Read(0)).Done()
	c.Call(r.Write(0, 4)).Fail()
	c.Call(r.Write(0, 5)).Unknown()
	recs := h.Records()
	require.Len(t, recs, 6)
	for i, want := range []lincheck.Outcome{lincheck.OK, lincheck.Unknown, lincheck.Failed, lincheck.Done, lincheck.Failed, lincheck.Unknown} {
		require.Equal(t, want, recs[i].Outcome, "op %d", i)
		require.Equal(t, 3, recs[i].Client)
		require.LessOrEqual(t, recs[i].Call, recs[i].Return+0*farmem.Time(i))
	}
	for i := 1; i < len(recs); i++ {
		require.LessOrEqual(t, recs[i-1].Call, recs[i].Call)
	}
	s, err := h.Verify()
	require.NoError(t, err)
	require.Equal(t, lincheck.Summary{Ops: 6, OK: 1, Done: 1, Failed: 2, Unknown: 2, Checked: 3, Partitions: 1, Largest: 3, Elapsed: s.Elapsed}, s)
	var zero lincheck.Op[lincheck.RegisterInput[uint64], lincheck.RegisterOutput[uint64]]
	zero.Return(r.Ack()) // a zero handle records nothing
	require.Len(t, h.Records(), 6)
}

func TestMisuse(t *testing.T) {
	r := lincheck.Register[uint64]()
	h := r.NewHistory(nil)
	o := h.Client(0).Call(r.Write(0, 1))
	o.Return(r.Ack())
	o.Return(r.Ack())
	_, err := h.Verify()
	require.ErrorIs(t, err, lincheck.ErrMisuse)
	require.Contains(t, err.Error(), "ended operation 0 (write(0, 1)) twice")

	h = r.NewHistory(nil)
	h.Add(op(0, 10, 5, r.Write(0, 1), r.Ack()))
	_, err = h.Verify()
	require.ErrorIs(t, err, lincheck.ErrMisuse)

	bad := lincheck.NewModel(lincheck.Spec[int, int, int]{Name: "empty"})
	_, err = bad.NewHistory(nil).Verify()
	require.ErrorIs(t, err, lincheck.ErrMisuse)
}

// A checker timeout is a failure, not a pass.
func TestTimeoutFails(t *testing.T) {
	r := lincheck.Register[uint64]()
	h := r.NewHistory(nil)
	// Many concurrent writes and a read of a value none wrote: proving it illegal means trying
	// every subset of the writes.
	for i := range 24 {
		h.Add(op(i, 0, 1000, r.Write(0, uint64(i+1)), r.Ack()))
		h.Add(op(100+i, 1, 999, r.Read(0), r.Value(uint64(i+1))))
	}
	h.Add(op(200, 500, 600, r.Read(0), r.Value(999)))
	_, err := h.Verify(lincheck.Timeout(50 * time.Millisecond))
	require.ErrorIs(t, err, lincheck.ErrTimeout)
	require.Contains(t, err.Error(), "counts as a failure")
}

// fakeT captures what Check does to a test.
type fakeT struct {
	testing.TB
	dir    string
	failed string
}

func (f *fakeT) Helper()                           {}
func (f *fakeT) Name() string                      { return "TestFake/sub" }
func (f *fakeT) ArtifactDir() string               { return f.dir }
func (f *fakeT) Logf(string, ...any)               {}
func (f *fakeT) Fatalf(format string, args ...any) { f.failed = fmt.Sprintf(format, args...) }

func TestCheckFailsTheTestWithReport(t *testing.T) {
	t.Setenv(lincheck.EnvDir, "")
	kv := lincheck.KV[int, int]()
	h := kv.NewHistory(nil)
	// Noise on other keys and earlier on the failing key, then one stale read.
	tm := farmem.Time(0)
	for i := range 200 {
		h.Add(op(i%4, tm, tm+15, kv.Put(i%7, i), kv.OK()))
		tm += 10
	}
	h.Add(op(9, tm+100, tm+110, kv.Put(100, 1), kv.OK()))
	h.Add(op(9, tm+120, tm+130, kv.Put(100, 2), kv.OK()))
	for i := range 50 {
		h.Add(op(5, tm+140+farmem.Time(i), tm+141+farmem.Time(i), kv.Get(100), kv.Found(2)))
	}
	h.Add(op(6, tm+200, tm+210, kv.Get(100), kv.Found(1)))
	ft := &fakeT{TB: t, dir: t.TempDir()}
	h.Check(ft)
	require.NotEmpty(t, ft.failed)
	t.Log(ft.failed)
	require.Contains(t, ft.failed, "not linearizable: partition key 100")
	// Shrunk to the two puts and the stale get: the other reads of the key are dropped.
	require.Contains(t, ft.failed, "minimal counterexample, 3 ops")
	require.Contains(t, ft.failed, "get(100) -> 1   <-- the model returns 2")
	require.Contains(t, ft.failed, "client 9     [0s, 10ns]               put(100, 1) -> ok")
	var files []string
	for _, l := range strings.Split(ft.failed, "\n") {
		if f, ok := strings.CutPrefix(l, "visualization: "); ok {
			files = append(files, f)
		}
	}
	require.Len(t, files, 2)
	for _, f := range files {
		require.True(t, strings.HasPrefix(f, ft.dir), f)
		require.Contains(t, f, "TestFake_sub")
		b, err := os.ReadFile(f)
		require.NoError(t, err)
		require.Contains(t, string(b), "<html")
		require.Contains(t, string(b), "put(100, 2)")
	}

	// A correct history does not fail.
	ok := kv.NewHistory(nil)
	ok.Add(op(0, 0, 10, kv.Put(1, 1), kv.OK()), op(1, 20, 30, kv.Get(1), kv.Found(1)))
	ft = &fakeT{TB: t, dir: t.TempDir()}
	s := ok.Check(ft)
	require.Empty(t, ft.failed)
	require.Equal(t, 2, s.Checked)
}

// The counterexample is cut at the violation: later operations are not listed.
func TestShrinkCutsAfterViolation(t *testing.T) {
	r := lincheck.Register[uint64]()
	h := r.NewHistory(nil)
	h.Add(op(0, 0, 10, r.Write(0, 1), r.Ack()), op(1, 20, 30, r.Read(0), r.Value(2)))
	for i := range 100 {
		tm := farmem.Time(40 + 20*i)
		h.Add(op(2, tm, tm+10, r.Write(0, uint64(i+10)), r.Ack()))
	}
	_, err := h.Verify()
	var v *lincheck.Violation
	require.ErrorAs(t, err, &v)
	require.Len(t, v.Ops, 2, v.Report)
}
