package main

import (
	"context"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/farmem/farmem/alloc"
	"github.com/farmem/farmem/ds/race"
	"github.com/farmem/farmem/kvstore"
)

// longFaults runs the replicated-store fault scenarios at the lengths (a 5 s SIGSTOP,
// longer partitions, every kill order, each phase of load at least longPhase) instead of the
// short defaults that keep the package's tests under 30 s with -race.
var longFaults = flag.Bool("farmemd.long-faults", false, "run the replicated-store fault scenarios at full length")

// storeKind is an index kind the replicated-store fault scenarios run with: a store whose
// index and metadata are replicated on 3 memory nodes, so any one of them may crash,
// pause or be cut off. The scenarios are written against kvstore's API alone, so another
// replicated kind is one more row of replicatedKinds.
type storeKind struct {
	name string
	opts func() kvstore.Options
}

// replicatedKinds are the kinds the scenarios run with: RACE with its index replicated
// (race.Params.IndexReplicas from Options.Replicas).
func replicatedKinds() []storeKind {
	return []storeKind{{name: "race", opts: func() kvstore.Options {
		return kvstore.Options{
			Replicas: 3,
			Alloc:    alloc.Options{Lease: 30 * time.Second, Refresh: time.Second},
			Index:    kvstore.Race{Params: race.Params{Groups: 8}},
		}
	}}}
}

// opSample is one operation of a storeLoad: when it started and how long it took.
type opSample struct {
	at  time.Time
	lat time.Duration
}

// storeLoad runs writers on stores: each puts its own keys in turn (a new version each time)
// and reads each back at once, counting failures and recording every operation's latency
// and, per key, the last acknowledged version.
type storeLoad struct {
	keysPer int
	stop    atomic.Bool
	ops     atomic.Int64
	failed  atomic.Int64
	first   atomic.Value
	wg      sync.WaitGroup

	// done[w] counts writer w's operations that returned, failed or not.
	done []atomic.Int64

	mu      sync.Mutex
	samples []opSample
	// acked[w][k] is writer w's last acknowledged version of key k (0: none).
	acked [][]int
	// unknown[w][k] are the versions of key k whose puts failed since the last acknowledged
	// one: their outcome is unknown (a failed write may have taken effect), so reading one
	// back is no loss.
	unknown [][][]int
}

func loadKey(w, k int) []byte { return fmt.Appendf(nil, "w%d-k%d", w, k) }
func loadVal(w, v int) []byte { return restartVal(w*1_000_000+v, 24) }

// loadPace is the pause each writer of a storeLoad makes between one put and read-back and
// the next, unless -farmemd.long-faults runs them flat out: the scenarios need operations in
// flight through every fault and every phase, not as many as the processors allow, and writers
// running flat out take a processor from everything else the package runs meanwhile. (Under
// load, where an operation takes milliseconds, it changes little.)
const loadPace = time.Millisecond

// startLoad starts one writer per store of stores (a store may appear more than once).
func startLoad(stores []*kvstore.Store, keysPer int) *storeLoad {
	pace := loadPace
	if *longFaults {
		pace = 0
	}
	l := &storeLoad{keysPer: keysPer, acked: make([][]int, len(stores)), unknown: make([][][]int, len(stores)),
		done: make([]atomic.Int64, len(stores))}
	ctx := context.Background()
	for w, s := range stores {
		l.acked[w] = make([]int, keysPer)
		l.unknown[w] = make([][]int, keysPer)
		l.wg.Go(func() {
			for v := 1; !l.stop.Load(); v++ {
				if v > 1 && pace > 0 {
					time.Sleep(pace)
				}
				k := v % keysPer
				key := loadKey(w, k)
				t0 := time.Now()
				err := s.Put(ctx, key, loadVal(w, v))
				l.record(w, t0, err, func() string { return fmt.Sprintf("put %s: %v", key, err) })
				l.mu.Lock()
				if err != nil {
					l.unknown[w][k] = append(l.unknown[w][k], v)
					l.mu.Unlock()
					continue
				}
				l.acked[w][k], l.unknown[w][k] = v, nil
				l.mu.Unlock()
				t0 = time.Now()
				got, err := s.Get(ctx, key)
				if err == nil && string(got) != string(loadVal(w, v)) {
					err = fmt.Errorf("not the value just written")
				}
				l.record(w, t0, err, func() string { return fmt.Sprintf("get %s: %v", key, err) })
			}
		})
	}
	return l
}

func (l *storeLoad) record(w int, t0 time.Time, err error, what func() string) {
	lat := time.Since(t0)
	l.ops.Add(1)
	l.done[w].Add(1)
	if err != nil {
		l.failed.Add(1)
		l.first.CompareAndSwap(nil, what())
	}
	l.mu.Lock()
	l.samples = append(l.samples, opSample{t0, lat})
	l.mu.Unlock()
}

// phase lets the load run for d and logs what it did meanwhile.
func (l *storeLoad) phase(t *testing.T, name string, d time.Duration) {
	before := l.ops.Load()
	time.Sleep(d)
	t.Logf("%s: %d operations, %d failed so far", name, l.ops.Load()-before, l.failed.Load())
}

// loadStall bounds how long until waits for the writers' operations: far past any fault's
// down timeouts and retries, so that only a hung operation reaches it.
const loadStall = time.Minute

// longPhase is the shortest a phase of until lasts with -farmemd.long-faults.
const longPhase = time.Second

// until lets the load run until every writer has had n more operations return (failed or
// not) and then ready holds (nil: at once), or, if ready does not come, until d has passed
// since the call (with -farmemd.long-faults, at least longPhase in any case); it logs what the
// load did meanwhile. Writers that make no progress for loadStall fail the test.
func (l *storeLoad) until(t *testing.T, name string, n int64, d time.Duration, ready func() bool) {
	t.Helper()
	start := time.Now()
	var least time.Duration
	if *longFaults {
		least = longPhase
	}
	before := l.ops.Load()
	from := make([]int64, len(l.done))
	for w := range l.done {
		from[w] = l.done[w].Load()
	}
	progressed := func() bool {
		for w := range l.done {
			if l.done[w].Load()-from[w] < n {
				return false
			}
		}
		return true
	}
	for !progressed() || time.Since(start) < least || (ready != nil && !ready() && time.Since(start) < d) {
		require.Less(t, time.Since(start), loadStall, "%s: writers stalled", name)
		time.Sleep(5 * time.Millisecond)
	}
	t.Logf("%s: %d operations in %v, %d failed so far", name, l.ops.Load()-before, time.Since(start).Round(time.Millisecond), l.failed.Load())
}

// recovered returns a condition for until: whether, since fault, a bin of recoveryBin has
// ended whose operations (by start) had a median latency of at most 1.25 base, as recovery
// measures it. Each bin is examined once, when it has ended.
func (l *storeLoad) recovered(base time.Duration, fault time.Time) func() bool {
	at, back := fault, false
	return func() bool {
		for ; !back && at.Add(recoveryBin).Before(time.Now()); at = at.Add(recoveryBin) {
			p, n := l.p50(at, at.Add(recoveryBin))
			back = n > 0 && p <= base*5/4
		}
		return back
	}
}

// halt stops the writers and waits for them.
func (l *storeLoad) halt() {
	l.stop.Store(true)
	l.wg.Wait()
}

// p50 is the median latency of the operations started in [from, to).
func (l *storeLoad) p50(from, to time.Time) (time.Duration, int) {
	l.mu.Lock()
	var xs []time.Duration
	for _, s := range l.samples {
		if !s.at.Before(from) && s.at.Before(to) {
			xs = append(xs, s.lat)
		}
	}
	l.mu.Unlock()
	if len(xs) == 0 {
		return 0, 0
	}
	slices.Sort(xs)
	return xs[(len(xs)-1)/2], len(xs)
}

// recoveryBin is the width of the bins recovery measures the median in.
const recoveryBin = 50 * time.Millisecond

// recovery reports how long after fault the median latency came back to base's level (within
// a quarter: the bins are short and the machine shared): the start of the first bin of
// recoveryBin, from fault on and before to, whose operations (by start) have a median of at
// most 1.25 base (-1 if none did). It logs that, the worst median of the non-empty bins before
// it, the slowest operation in flight at the fault or started after it, and the throughput
// from fault to to against that of as long a time before the fault. It measures; it asserts
// nothing (a slower machine moves every number).
func (l *storeLoad) recovery(t *testing.T, what string, base time.Duration, fault, to time.Time) time.Duration {
	var worst time.Duration
	back := time.Duration(-1)
	for at := fault; at.Before(to); at = at.Add(recoveryBin) {
		p, n := l.p50(at, at.Add(recoveryBin))
		if n == 0 {
			continue
		}
		if p <= base*5/4 {
			back = at.Sub(fault)
			break
		}
		worst = max(worst, p)
	}
	span := to.Sub(fault)
	var slowest time.Duration
	var slowestAt time.Duration
	during, before := 0, 0
	l.mu.Lock()
	for _, s := range l.samples {
		end := s.at.Add(s.lat)
		if !end.Before(fault) && s.at.Before(to) && s.lat > slowest {
			slowest, slowestAt = s.lat, s.at.Sub(fault)
		}
		switch {
		case !end.Before(fault) && end.Before(to):
			during++
		case !end.Before(fault.Add(-span)) && end.Before(fault):
			before++
		}
	}
	l.mu.Unlock()
	if back >= 0 {
		t.Logf("%s: p50 back to the pre-fault level (%v) %v after the fault (bins of %v; worst bin p50 before it %v)", what, base, back, recoveryBin, worst)
	} else {
		t.Logf("%s: p50 not back to the pre-fault level (%v) within %v (worst bin p50 %v)", what, base, span, worst)
	}
	t.Logf("%s: slowest operation %v (started %v from the fault); %d operations returned in the %v from the fault, %d in as long before it",
		what, slowest.Round(time.Millisecond), slowestAt.Round(time.Millisecond), during, span.Round(time.Millisecond), before)
	return back
}

// describeVal names the writer and version whose value (loadVal) v is, if it is one.
func describeVal(v []byte) string {
	if len(v) != 24 {
		return fmt.Sprintf("%d bytes, no writer's value", len(v))
	}
	// restartVal stores i*2654435761+7: invert the odd multiplier modulo 2^64.
	const mul = 2654435761
	inv := uint64(mul)
	for range 6 {
		inv *= 2 - mul*inv
	}
	i := int((binary.LittleEndian.Uint64(v) - 7) * inv)
	if i <= 0 || i/1_000_000 >= 1000 || string(v) != string(restartVal(i, 24)) {
		return "no writer's value"
	}
	return fmt.Sprintf("writer %d's version %d", i/1_000_000, i%1_000_000)
}

// snapshot returns each writer's last acknowledged version of each key.
func (l *storeLoad) snapshot() [][]int {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make([][]int, len(l.acked))
	for w := range l.acked {
		out[w] = slices.Clone(l.acked[w])
	}
	return out
}

// everyKeyWritten reports whether every writer has had a write of each of its keys
// acknowledged.
func (l *storeLoad) everyKeyWritten() bool {
	for _, ks := range l.snapshot() {
		if slices.Contains(ks, 0) {
			return false
		}
	}
	return true
}

// verify halts the load and checks that no operation failed and that every acknowledged
// write reads back from s, which serves every writer's keys: a key reads back as its last
// acknowledged version or as a later one whose put failed (outcome unknown; counted apart).
// A loss is logged with what was read instead: an error, or which version.
func (l *storeLoad) verify(t *testing.T, s *kvstore.Store) {
	l.halt()
	ctx := context.Background()
	lost, applied := 0, 0
	for w := range l.acked {
		for k, v := range l.acked[w] {
			if v == 0 && len(l.unknown[w][k]) == 0 {
				continue
			}
			got, err := s.Get(ctx, loadKey(w, k))
			switch {
			case v == 0 && errors.Is(err, kvstore.ErrNotFound):
			case err == nil && string(got) == string(loadVal(w, v)):
			case err == nil && slices.ContainsFunc(l.unknown[w][k], func(u int) bool { return string(got) == string(loadVal(w, u)) }):
				applied++
			case err != nil:
				lost++
				t.Logf("writer %d key %d (version %d acknowledged): %v", w, k, v, err)
			default:
				lost++
				t.Logf("writer %d key %d (version %d acknowledged, %v failed since): read %s", w, k, v, l.unknown[w][k], describeVal(got))
			}
		}
	}
	t.Logf("%d operations, %d failed (first: %v; %d failed puts read back), %d acknowledged writes lost",
		l.ops.Load(), l.failed.Load(), l.first.Load(), applied, lost)
	require.Zero(t, l.failed.Load(), "failed operations")
	require.Zero(t, lost, "lost acknowledged writes")
}
