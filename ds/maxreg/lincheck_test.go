package maxreg_test

import (
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/farmem/farmem/farmem"
	"github.com/farmem/farmem/sim"
)

// mix is the lincheck workload: half writes, half reads; MAXREG_STRESS (an integer) multiplies
// its length for longer runs.
var mix = workload{ops: 250 * stressScale(), writes: 50}

func stressScale() int {
	if n, err := strconv.Atoi(os.Getenv("MAXREG_STRESS")); err == nil && n > 1 {
		return n
	}
	return 1
}

// verdict checks o with the weak specification, and with the atomic model when the register
// has one metadata word, and returns a one-line summary.
func verdict(t *testing.T, words int, o outcome) string {
	t.Helper()
	require.NoError(t, checkWeak(o.ops))
	if words == 1 {
		require.NoError(t, checkAtomic(o.ops))
	}
	s := o.stats
	return fmt.Sprintf("%d ops; writes %d (absorbed %d, CAS retries %d); reads %d: in place %d, chased %d (torn %d, stale %d), restarts %d; refresher %+v",
		len(o.ops), s.Writes, s.Absorbed, s.CASRetries, s.Reads, s.InPlace, s.Chased, s.Torn, s.Stale, s.Retries, o.refresh)
}

// TestLinearizableLocal: clients on two compute nodes write and read one register on the
// local transport with tearing and jitter (and strict mode), for k = 1, 4 and 64 metadata
// words, with Refreshers and with unsignaled refreshes; every operation's round trips are
// checked as it runs, the history against the specification, and tears must have happened.
func TestLinearizableLocal(t *testing.T) {
	var torn uint64
	defer func() { require.NotZero(t, torn, "no torn in-place copy in any run") }()
	for _, words := range []int{1, 4, 64} {
		for _, refreshers := range []bool{true, false} {
			t.Run(fmt.Sprintf("k=%d/refresher=%v", words, refreshers), func(t *testing.T) {
				o := play(t, newLocal(t, true), scenario{words: words, clients: 6, valueSize: 200, load: mix, refreshers: refreshers})
				t.Log(verdict(t, words, o))
				require.NotZero(t, o.stats.InPlace, "no read was answered in place")
				require.NotZero(t, o.stats.Chased, "no read chased a pointer")
				require.NotZero(t, o.stats.Torn+o.stats.Stale, "no in-place copy was ever torn or stale")
				torn += o.stats.Torn
			})
		}
	}
}

// pauses freezes a writer-reader client for 2ms early in the run (its verbs in flight land,
// it sees them late) and, with Refreshers, the first compute node's Refresher for 1ms, so
// that its queued copies land after newer writes installed theirs.
func pauses(s *sim.Sim, hs []*handle, refs []farmem.ClientID, start farmem.Time) {
	pause := func(id farmem.ClientID, at, d time.Duration) {
		s.At(start.Add(at), func() { _ = s.PauseClient(id) })
		s.At(start.Add(at+d), func() { _ = s.ResumeClient(id) })
	}
	pause(hs[1].m.Info().ID, 50*time.Microsecond, 2*time.Millisecond)
	if len(refs) > 0 {
		pause(refs[0], 80*time.Microsecond, time.Millisecond)
	}
}

// TestLinearizableSim is the same on the simulator (tearing and jitter on), a seed per run,
// with a client and a Refresher paused mid-run; torn in-place copies must have been seen.
func TestLinearizableSim(t *testing.T) {
	t.Parallel() // a simulation: virtual time, unmoved by other tests
	var torn uint64
	for i, run := range []struct {
		words      int
		refreshers bool
	}{{1, true}, {4, false}, {64, true}, {64, false}} {
		seed := uint64(i + 1)
		o := play(t, newSim(t, seed), scenario{words: run.words, clients: 8, valueSize: 200, load: mix, refreshers: run.refreshers, faults: pauses})
		t.Logf("k=%d, refresher %v, seed %d: %s", run.words, run.refreshers, seed, verdict(t, run.words, o))
		torn += o.stats.Torn
		var longest time.Duration
		for _, op := range o.ops {
			longest = max(longest, op.ret.Sub(op.call))
		}
		require.GreaterOrEqual(t, longest, 2*time.Millisecond, "the paused client's operation spans its pause")
	}
	require.NotZero(t, torn, "no torn in-place copy in any run")
}

// TestClientCrashMidWrite: client 0 crashes in its 20th write, after the out-of-place record
// was written and before the metadata CAS was sent; the others run on, and every history stays
// correct, on local and on the simulator, for k = 1, 4 and 64.
func TestClientCrashMidWrite(t *testing.T) {
	for _, words := range []int{1, 4, 64} {
		t.Run(fmt.Sprintf("local/k=%d", words), func(t *testing.T) {
			o := play(t, newLocal(t, true), scenario{words: words, clients: 5, valueSize: 200, load: mix, cutAt: 20, refreshers: true})
			t.Log(verdict(t, words, o))
		})
		t.Run(fmt.Sprintf("sim/k=%d", words), func(t *testing.T) {
			o := play(t, newSim(t, 7), scenario{words: words, clients: 5, valueSize: 200, load: mix, cutAt: 20})
			t.Log(verdict(t, words, o))
		})
	}
}

// TestSimDeterministic: a simulated run is a function of its seed (the register takes time,
// goroutines and randomness only from the runtime), faults and Refreshers included.
func TestSimDeterministic(t *testing.T) {
	sc := scenario{words: 4, clients: 6, valueSize: 100, load: workload{ops: 120, writes: 50}, refreshers: true, faults: pauses}
	digest := func(seed uint64) string {
		o := play(t, newSim(t, seed), sc)
		return fmt.Sprintf("%v %+v %+v %v", o.ops, o.stats, o.refresh, o.final)
	}
	a := digest(5)
	require.Equal(t, a, digest(5))
	require.NotEqual(t, a, digest(6))
}
