package ptrsync_test

import (
	"context"
	"encoding/binary"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/farmem/farmem/ds/ptrsync"
	"github.com/farmem/farmem/farmem"
	"github.com/farmem/farmem/farmem/local"
)

// word is a Target over one pointer word whose value is key << 32 | version: Same is a
// comparison (free), Install a CAS (one round trip). Before each of its first len(race)
// Installs, a competitor (another client) CASes the pointer to race[i], so the test decides
// what each CAS finds.
type word struct {
	m, rival farmem.Memory
	ptr      farmem.Addr
	key, old uint64
	version  uint64
	deadline farmem.Time
	race     []uint64

	installs, sames int
}

func (w *word) Kind() ptrsync.Kind    { return ptrsync.Update }
func (w *word) Pointer() farmem.Addr  { return w.ptr }
func (w *word) Lock() farmem.Addr     { return 0 }
func (w *word) LockBytes() []byte     { return nil }
func (w *word) Old() uint64           { return w.old }
func (w *word) Deadline() farmem.Time { return w.deadline }
func (w *word) Memory() farmem.Memory { return w.m }

func (w *word) Same(_ context.Context, v uint64) (bool, error) {
	w.sames++
	return v>>32 == w.key, nil
}

func (w *word) Install(ctx context.Context, exp uint64) (uint64, uint64, error) {
	if w.installs < len(w.race) {
		cur := w.read(ctx)
		if _, err := w.rival.CAS(ctx, w.ptr, cur, w.race[w.installs]); err != nil {
			return 0, 0, err
		}
	}
	w.installs++
	nw := w.key<<32 | w.version
	prev, err := w.m.CAS(ctx, w.ptr, exp, nw)
	return prev, nw, err
}

func (w *word) read(ctx context.Context) uint64 {
	var b [8]byte
	if err := w.rival.Read(ctx, w.ptr, b[:]); err != nil {
		return 0
	}
	return binary.LittleEndian.Uint64(b[:])
}

func newWord(t *testing.T) *word {
	t.Helper()
	ctx := context.Background()
	f, err := local.New(local.Options{Shape: local.Shape{MemorySize: 4 << 20}})
	require.NoError(t, err)
	t.Cleanup(func() { _ = f.Close() })
	comp := f.Topology().ComputeNodes()[0]
	m, err := f.Open(ctx, comp)
	require.NoError(t, err)
	rival, err := f.Open(ctx, comp)
	require.NoError(t, err)
	t.Cleanup(func() {
		_ = m.Close()
		_ = rival.Close()
	})
	w := &word{m: m, rival: rival, ptr: farmem.MakeAddr(f.Topology().MemoryNodes()[0], 1<<20), key: 7, version: 100}
	w.old = w.key<<32 | 1
	_, err = rival.CAS(ctx, w.ptr, 0, w.old)
	require.NoError(t, err)
	w.deadline = m.Runtime().Now().Add(time.Hour)
	return w
}

// TestOptimisticOutcomes checks each row of the package doc's cost table: the outcome, the
// Installs and Sames, the client's round trips (one per Install here) and the counters.
func TestOptimisticOutcomes(t *testing.T) {
	ctx := context.Background()
	cases := []outcomeCase{
		{name: "uncontended", out: ptrsync.Committed, installs: 1},
		{name: "after 1 failed CAS", race: []uint64{7<<32 | 2}, out: ptrsync.Committed, installs: 2, sames: 1, failed: 1},
		{name: "after 2 failed CASes", race: []uint64{7<<32 | 2, 7<<32 | 3}, out: ptrsync.Committed, installs: 3, sames: 2, failed: 2, severe: 1},
		{name: "another key's word", race: []uint64{7<<32 | 2, 9<<32 | 1}, out: ptrsync.Retry, installs: 2, sames: 2, failed: 2},
		{name: "empty pointer", race: []uint64{7<<32 | 2, 0}, out: ptrsync.Retry, installs: 2, sames: 1, failed: 2},
		{name: "past the deadline", pastDeadline: true, out: ptrsync.Retry},
	}
	for _, c := range cases {
		for _, straight := range []bool{false, true} {
			name := c.name
			if straight {
				name += ", straight"
			}
			t.Run(name, func(t *testing.T) { optimisticOutcome(ctx, t, c, straight) })
		}
	}
}

// outcomeCase is a row of TestOptimisticOutcomes.
type outcomeCase = struct {
	name             string
	race             []uint64 // what the competitor installs before each CAS
	pastDeadline     bool
	out              ptrsync.Outcome
	installs, sames  int
	failed           uint64
	severe           uint64
	replacedIsLatest bool
}

// optimisticOutcome runs c through Commit or, straight, through PlanStraight and
// CommitStraight with the first step (the deadline check and the CAS from Old) made here, as a
// structure makes it: either way the outcome, the verbs and the counters are c's.
func optimisticOutcome(ctx context.Context, t *testing.T, c outcomeCase, straight bool) {
	w := newWord(t)
	w.race = c.race
	if c.pastDeadline {
		w.deadline = w.m.Runtime().Now() - 1
	}
	o := ptrsync.NewOptimistic()
	require.Zero(t, o.LockSize())
	before := w.m.Stats()
	var res ptrsync.Result
	var err error
	if straight {
		p, ok := o.PlanStraight(ptrsync.Update, w.key)
		require.True(t, ok, "every optimistic commit is straight")
		require.Equal(t, ptrsync.Plan{}, p)
		s := ptrsync.Step{Old: w.old, Checked: w.m.Runtime().Now()}
		if s.Late = s.Checked > w.deadline; !s.Late {
			s.Found, s.New, s.Err = w.Install(ctx, w.old)
		}
		res, err = o.CommitStraight(ctx, w, s)
		if c.out == ptrsync.Committed && len(c.race) == 0 {
			require.Equal(t, s.Checked, res.CheckedAt, "the step's reading")
		}
	} else {
		require.Equal(t, ptrsync.Plan{}, o.Plan(ptrsync.Update, w.key), "the block is written early, no entry read")
		res, err = o.Commit(ctx, w)
	}
	require.NoError(t, err)
	d := w.m.Stats().Sub(before)
	require.Equal(t, c.out, res.Outcome)
	require.Equal(t, c.installs, w.installs, "Installs")
	require.Equal(t, c.sames, w.sames, "Sames")
	require.Equal(t, uint64(c.installs), d.RoundTrips, "round trips: one per Install")
	s := o.Stats()
	require.Equal(t, ptrsync.Stats{Commits: 1, Retries: b2u(c.out == ptrsync.Retry), Optimistic: b2u(c.out != ptrsync.Retry),
		CASes: uint64(c.installs), FailedCAS: c.failed, Severe: c.severe}, s)
	require.Equal(t, int(c.failed), o.Last().Retries)
	if c.out == ptrsync.Committed {
		// Replaced is the last word the CAS expected: Old, or the competitor's last.
		want := w.old
		if len(c.race) > 0 {
			want = c.race[len(c.race)-1]
		}
		require.Equal(t, want, res.Replaced)
		require.Equal(t, w.key<<32|w.version, w.read(ctx))
		require.Equal(t, ptrsync.Committed, o.Last().Outcome)
	}
}

func b2u(b bool) uint64 {
	if b {
		return 1
	}
	return 0
}

// TestExecuteHints: Execute from a word other than Old confirms it first (a hint of another
// key's word is refused with no CAS), a zero hint is refused at once, and the word seen at the
// last CAS is what a lock holder may pass on.
func TestExecuteHints(t *testing.T) {
	ctx := context.Background()
	w := newWord(t)
	var st ptrsync.Stats
	res, seen, fails, err := ptrsync.Execute(ctx, w, 0, &st, nil)
	require.NoError(t, err)
	require.Equal(t, ptrsync.Retry, res.Outcome)
	require.Zero(t, seen+uint64(fails)+st.CASes)
	require.Zero(t, w.installs+w.sames)

	res, _, _, err = ptrsync.Execute(ctx, w, 9<<32|4, &st, nil)
	require.NoError(t, err)
	require.Equal(t, ptrsync.Retry, res.Outcome, "a hint of another key")
	require.Equal(t, 1, w.sames)
	require.Zero(t, w.installs)

	// A stale hint of the key: its CAS fails, finds Old, which is the key's, and commits over it.
	var told []int
	res, seen, fails, err = ptrsync.Execute(ctx, w, 7<<32|5, &st, func(n int) { told = append(told, n) })
	require.NoError(t, err)
	require.Equal(t, ptrsync.Committed, res.Outcome)
	require.Equal(t, w.old, res.Replaced)
	require.Equal(t, w.key<<32|w.version, seen, "the word installed")
	require.Equal(t, 1, fails)
	require.Equal(t, []int{1}, told)
	require.Equal(t, ptrsync.Stats{CASes: 2, FailedCAS: 1}, st)
}

func TestKeyHash(t *testing.T) {
	// FNV-1a's published test vectors.
	require.Equal(t, uint64(0xcbf29ce484222325), ptrsync.KeyHash(nil))
	require.Equal(t, uint64(0xaf63dc4c8601ec8c), ptrsync.KeyHash([]byte("a")))
	require.Equal(t, "update", ptrsync.Update.String())
	require.Equal(t, "combined", ptrsync.Combined.String())
}
