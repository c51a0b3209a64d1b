package matrixtest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/farmem/farmem/alloc"
	"github.com/farmem/farmem/ds/hybrid"
	"github.com/farmem/farmem/ds/maxreg"
	"github.com/farmem/farmem/ds/qlock"
	"github.com/farmem/farmem/ds/race"
	"github.com/farmem/farmem/farmem"
	"github.com/farmem/farmem/farmem/farmemtest"
	"github.com/farmem/farmem/farmem/local"
	"github.com/farmem/farmem/kvstore"
	"github.com/farmem/farmem/kvstore/kvstoretest"
	"github.com/farmem/farmem/sim"
)

// combo is one point of the cross product the test walks: an index kind, a synchronizer and
// the store's replication factor.
type combo struct {
	index, sync string
	replicas    int
}

func (c combo) String() string { return fmt.Sprintf("%s/%s/r%d", c.index, c.sync, max(1, c.replicas)) }

// kindOf returns a fresh index kind by name, sized for short tests (small leaves and lines,
// so trees split).
func kindOf(t testing.TB, name string) kvstore.IndexKind {
	switch name {
	case "race":
		return kvstore.Race{}
	case "hybrid":
		return kvstore.Hybrid{LeafSlots: 8, CacheBytes: 1 << 16}
	case "blink":
		return &kvstore.Blink{LineSize: 1024, Frames: 32}
	case "flexkv":
		return &kvstore.FlexKV{}
	case "aceso":
		return &kvstore.FlexKV{NoProxy: true}
	case "swarm":
		return kvstore.Swarm{Params: maxreg.Params{ValueSize: 64, Slots: 4, Words: 8}}
	}
	t.Fatalf("the matrix has a kind %q this test does not build: add it to kindOf", name)
	return nil
}

// options returns c's store options.
func (c combo) options(t testing.TB, ao alloc.Options) kvstore.Options {
	sy, err := kvstore.SyncByName(c.sync)
	require.NoError(t, err)
	return kvstore.Options{Index: kindOf(t, c.index), Sync: sy, Replicas: c.replicas, Alloc: ao}
}

// crossProduct is every kind of the matrix with every synchronizer (and none), unreplicated
// and with 3 replicas.
func crossProduct() []combo {
	var out []combo
	for _, r := range kvstore.Matrix() {
		for _, s := range append(kvstore.SyncNames(), kvstore.None.Name()) {
			for _, reps := range []int{0, 3} {
				out = append(out, combo{r.Index, s, reps})
			}
		}
	}
	return out
}

// wantAllowed is what the matrix must allow, written out so that a change to the table shows
// here.
var wantAllowed = []string{
	"race/cider/r1", "race/optimistic/r1", "race/mcs/r1", "race/spin/r1", "race/optimistic/r3",
	"hybrid/optimistic/r1", "blink/none/r1",
	"flexkv/cider/r1", "flexkv/optimistic/r1", "flexkv/mcs/r1", "flexkv/spin/r1",
	"aceso/cider/r1", "aceso/optimistic/r1", "aceso/mcs/r1", "aceso/spin/r1",
	"swarm/optimistic/r1", "swarm/optimistic/r3",
	// Added since: listed last, so that each combination keeps its seed (seedIndex).
	"hybrid/cider/r1", "hybrid/mcs/r1", "hybrid/spin/r1",
}

// seedIndex is c's place in wantAllowed, from which the runs below derive its fabric's seed:
// a combination the matrix comes to allow does not move the seeds of the others.
func seedIndex(t *testing.T, c combo) int {
	i := slices.Index(wantAllowed, c.String())
	require.GreaterOrEqual(t, i, 0, "%v", c)
	return i
}

// split classifies the cross product by kvstore.Check.
func split(t *testing.T) (allowed, refused []combo) {
	for _, c := range crossProduct() {
		if kvstore.Check(c.options(t, alloc.Options{})) == nil {
			allowed = append(allowed, c)
		} else {
			refused = append(refused, c)
		}
	}
	var names []string
	for _, c := range allowed {
		names = append(names, c.String())
	}
	require.ElementsMatch(t, wantAllowed, names)
	return allowed, refused
}

// quiet are allocator options whose pins cost no round trip and whose leases outlast a test.
var quiet = alloc.Options{Lease: 10 * time.Second, Refresh: time.Second, ScanInterval: time.Millisecond}

// shortLeases are allocator options under which a paused client outlives its lease.
var shortLeases = alloc.Options{Lease: 5 * time.Millisecond, Refresh: 500 * time.Microsecond, ScanInterval: 250 * time.Microsecond}

// mix is the short workload each combination runs: 8-byte keys (which every kind takes) on a
// few keys, so that updates and deletes contend.
var mix = kvstoretest.Workload{Keys: 6, Ops: 40, Get: 35, Insert: 15, Update: 15, Put: 20, MaxVal: 48, Unknown: 4, Key: kvstoretest.Key8,
	Tolerate: tolerated}

// tolerated are the errors the faults injected here may cause beside farmem.ErrNodeDown,
// recorded as unknown outcomes: Dolphin's tree fails an operation whose pin outlived its lease
// (a paused client's) rather than retrying it as RACE does, and one whose leaf an SMO could not
// drain within its bound (hybrid.ErrBusy, under jitter on a loaded machine).
func tolerated(err error) bool {
	return errors.Is(err, alloc.ErrPinExpired) || errors.Is(err, hybrid.ErrBusy)
}

// TestMatrixRefusals: every combination the matrix does not allow fails Open on a fresh local
// fabric with a RefusalError wrapping farmem.ErrInvalid, before anything is written (the
// memory nodes stay unformatted); and the kinds' own refusals beyond the cross product.
func TestMatrixRefusals(t *testing.T) {
	t.Parallel()
	_, refused := split(t)
	require.NotEmpty(t, refused)
	ctx := context.Background()
	open := func(t *testing.T, o kvstore.Options) error {
		f, err := local.New(local.Options{Shape: local.Shape{MemoryNodes: 3, ComputeNodes: 1, MemorySize: 4 << 20}})
		require.NoError(t, err)
		defer f.Close()
		s, err := kvstore.Open(ctx, f, o)
		if err == nil {
			_ = s.Close()
			return nil
		}
		m, merr := f.Open(ctx, f.Hosted()[0])
		require.NoError(t, merr)
		defer m.Close()
		for _, n := range m.Topology().MemoryNodes() {
			_, aerr := alloc.Open(ctx, m, n)
			require.ErrorIs(t, aerr, alloc.ErrNotFormatted, "a refused Open formatted %v", n)
		}
		return err
	}
	for _, c := range refused {
		err := open(t, c.options(t, quiet))
		require.ErrorIs(t, err, farmem.ErrInvalid, "%v", c)
		var re *kvstore.RefusalError
		require.ErrorAs(t, err, &re, "%v", c)
		require.Equal(t, c.index, re.Index, "%v", c)
		require.NotEmpty(t, re.Why)
	}
	// The kinds' own refusals: a FlexKV table replicated; a RACE index asking for another
	// factor than the store's.
	for _, o := range []kvstore.Options{
		{Index: &kvstore.FlexKV{Params: raceIndexReplicas(3)}, Sync: kvstore.Optimistic},
		{Index: &kvstore.FlexKV{NoProxy: true, Params: raceIndexReplicas(3)}, Sync: kvstore.Optimistic},
		{Index: kvstore.Race{Replicas: 3}, Sync: kvstore.DefaultSync()},
	} {
		err := open(t, o)
		require.ErrorIs(t, err, farmem.ErrInvalid, "%s", o.Index.Name())
		var re *kvstore.RefusalError
		require.ErrorAs(t, err, &re)
	}
	require.ErrorIs(t, open(t, kvstore.Options{Index: kvstore.Race{Replicas: 5}, Replicas: 3}), farmem.ErrInvalid)
	// A replicated metadata store keeps an unreplicated RACE index with any synchronizer.
	require.NoError(t, kvstore.Check(kvstore.Options{Index: kvstore.Race{Replicas: 1}, Replicas: 3, Sync: kvstore.MCS(qlock.Options{})}))
}

// TestMatrixDocumented: the package README holds the matrix and its refusals as MatrixMarkdown
// renders them.
func TestMatrixDocumented(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile("../README.md")
	require.NoError(t, err)
	if !strings.Contains(strings.ReplaceAll(string(b), "\r\n", "\n"), kvstore.MatrixMarkdown()) {
		t.Fatalf("kvstore/README.md's options matrix is stale: paste there what kvstore.MatrixMarkdown() returns:\n%s", kvstore.MatrixMarkdown())
	}
}

// TestMatrixLocal: every allowed combination runs a short linearizable history on a local
// fabric with torn accesses and jitter, in strict mode, half the goroutines through the
// store's pool and half through sessions, on two compute nodes.
func TestMatrixLocal(t *testing.T) {
	t.Parallel()
	allowed, _ := split(t)
	for _, c := range allowed {
		i := seedIndex(t, c)
		t.Run(c.String(), func(t *testing.T) {
			t.Parallel()
			// SWARM-KV writes every value out of place into a new object at the same offset of
			// each replica (the symmetric heap), every client that allocates takes chunks of its
			// own there, and quiet's one-second Refresh lets retired objects be reused only a
			// second or two later: at 4 MiB a node, "symmetric: heap exhausted" failed about one
			// run in four (1 of 8 here, 4 of 12 in a helper's runs); at 16 MiB, 40 of 40 passed.
			size := uint64(4 << 20)
			if c.index == "swarm" {
				size = 16 << 20
			}
			f, err := local.New(local.Options{Shape: local.Shape{MemoryNodes: 3, ComputeNodes: 2, MemorySize: size},
				Tearing: true, Jitter: 5 * time.Microsecond, Seed: uint64(i + 1), Strict: true})
			require.NoError(t, err)
			defer f.Close()
			ctx := context.Background()
			s, err := kvstore.Open(ctx, f, c.options(t, quiet))
			require.NoError(t, err)
			require.Equal(t, c.sync, s.Sync())
			conf := s.Configuration()
			require.Equal(t, c.index, conf.Index)
			want := max(1, c.replicas)
			if c.index == "swarm" {
				want = max(3, c.replicas) // the kind's default factor
			}
			require.Equal(t, want, conf.MetaReplicas)
			require.Equal(t, want, conf.IndexReplicas, "RACE and SWARM-KV replicate the index on the metadata's nodes")
			require.Equal(t, c.index == "flexkv", conf.Proxy)
			require.Equal(t, c.index == "hybrid" || c.index == "blink", conf.Ordered)
			require.Equal(t, conf.Ordered, s.Ordered())
			h := kvstoretest.Model.NewHistory(f.Runtime())
			err = farmemtest.Parallel(f.Runtime(), 6, func(g int) error {
				if g%2 == 0 {
					return mix.Run(ctx, s, g, f.Runtime().NewRand(), h)
				}
				ss, err := s.Session(ctx)
				if err != nil {
					return err
				}
				defer ss.Close()
				return mix.Run(ctx, ss, g, f.Runtime().NewRand(), h)
			})
			require.NoError(t, err)
			require.NoError(t, s.Close())
			require.Zero(t, f.Violations(), "strict-mode violations")
			sum, verdict := h.Verify()
			t.Logf("%v", sum)
			require.NoError(t, verdict)
		})
	}
}

// TestMatrixSim: every allowed combination runs a short linearizable history on the
// simulator (torn accesses, jitter), with one session's client paused past its allocator
// lease and one crashed mid-run.
func TestMatrixSim(t *testing.T) {
	t.Parallel()
	allowed, _ := split(t)
	for _, c := range allowed {
		i := seedIndex(t, c)
		t.Run(c.String(), func(t *testing.T) {
			t.Parallel()
			simScenario(t, c, uint64(100+i))
		})
	}
}

// simScenario is TestMatrixSim's run of c on a simulator of seed seed: six goroutines run mix,
// four through sessions, of which the first's client is paused past its allocator lease and
// the second's crashed mid-run; the history must be linearizable.
func simScenario(t *testing.T, c combo, seed uint64) {
	model := sim.ConnectX6()
	model.MemoryNodes, model.ComputeNodes, model.MemorySize = 3, 2, 4<<20
	model.Tearing, model.Jitter = true, 300*time.Nanosecond
	s, err := sim.New(model, seed)
	require.NoError(t, err)
	defer s.Close()
	h := kvstoretest.Model.NewHistory(s.Runtime())
	s.Run(func() {
		// A run that takes seconds of virtual time is stuck (survivors retrying forever).
		ctx, cancel := s.Runtime().WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		st, err := kvstore.Open(ctx, s, c.options(t, shortLeases))
		require.NoError(t, err)
		var sessions []*kvstore.Session
		for range 4 {
			ss, err := st.Session(ctx)
			require.NoError(t, err)
			sessions = append(sessions, ss)
		}
		start := s.Now()
		paused := sessions[0].Memory().Info().ID
		s.At(start.Add(100*time.Microsecond), func() { _ = s.PauseClient(paused) })
		s.At(start.Add(8100*time.Microsecond), func() { _ = s.ResumeClient(paused) })
		crashed := sessions[1].Memory().Info().ID
		s.At(start.Add(300*time.Microsecond), func() { _ = s.CrashClient(crashed) })
		w := mix
		errs := make([]error, 6)
		require.NoError(t, s.Parallel(len(errs), func(g int) {
			rng := s.Runtime().NewRand()
			if g < len(sessions) {
				errs[g] = w.Run(ctx, sessions[g], g, rng, h)
				return
			}
			errs[g] = w.Run(ctx, st, g, rng, h)
		}))
		for g, err := range errs {
			require.NoError(t, err, "goroutine %d", g)
		}
		require.NoError(t, ctx.Err(), "the run ended within its virtual deadline")
		for i, ss := range sessions {
			if err := ss.Close(); i != 1 { // the crashed client cannot withdraw its announcement
				require.NoError(t, err)
			}
		}
		_ = st.Close() // holds the crashed client, whose close fails
	})
	sum, verdict := h.Verify()
	t.Logf("%v", sum)
	require.NoError(t, verdict)
}

// raceIndexReplicas are race parameters that replicate the table n ways.
func raceIndexReplicas(n int) race.Params { return race.Params{IndexReplicas: n} }
