package rdma

import (
	"fmt"
	"os"
	"sync/atomic"
	"time"
)

// Spinning before parking.
//
// A tcp reader that finds its socket empty parks its goroutine in Go's network poller: a
// client's reader waiting for its answers (rawRead), a memory node's connection loop waiting for
// the next request (serveRaw). The thread under it then sleeps, and the answer has to wake it:
// the kernel's wake-up, a wait for a CPU, on an idle virtual machine the host's wake-up of a
// halted virtual CPU, then Go's scheduler finding the goroutine. A reader that instead keeps
// reading its non-blocking socket for a few microseconds sees the answer without any of that.
//
// A spinning reader yields its CPU (sched_yield) between reads, so that a thread waiting for that
// CPU runs at once: alone on its CPU, a yield returns at once. That matters most when the two
// ends of a round trip share a CPU (the kernel puts a woken thread on its waker's CPU when no other
// is idle): a spinning client that did not yield would hold up the very node whose answer it waits
// for until its spin ran out, and the node, spinning in turn, the client (on a 2-CPU VM under
// other jobs' load, loopback round trips went from 7.3 µs parking to 110 µs that way). Yielding,
// the two hand the CPU to each other (a round trip of about 8.7 µs there); on two CPUs a round
// trip took 5.9 µs. A yield that takes long (over spinYieldMax) handed the CPU to other work,
// and the next might lose it for a whole time slice while the answer waits unread: the reader
// reads once more, then parks, which counts as a miss if that read found nothing.
//
// A lone exchange spins (a client's reader whose connection has one request outstanding, a
// node's connection whose last read brought one request: sock_unix.go, serve_unix.go) whenever
// the governor lets it. A wait with several requests in flight spins only while the CPUs look
// free (busy): it saves one wake-up per several answers, which pays where a wake-up is dear (an
// idle VM, whose halted virtual CPUs the host must wake), but where other work wants the CPUs
// each yield of its spin hands one over for a time slice, and the reads that find nothing
// cost more than the wake-up saved. The governor keeps a moving share of the yields that took
// long (over spinYieldMax) across every spin of the process; above an eighth, pipelined waits
// park at once until that record is spinBusyFor old.
//
// A reader spins only when the process's spin limit is not 0 (SetSpin, or the FARMEM_SPIN
// environment variable: a Go duration such as 50us, or "off"; default 0, off: see Cost), the
// process runs goroutines on more than one CPU (GOMAXPROCS > 1: with one, the spinning reader
// would hold up every other goroutine of the process), no other reader of the process is
// spinning (at most one spinner per process, however many connections wait), and spinning has
// been paying off: a spin that ends without an answer (a miss) makes the process's next waits
// park without spinning, one the first time and twice as many after each further miss in a row
// (up to spinSkipMax), until a spin is answered. On systems other than Linux readers never spin.
//
// Cost: a spinning reader keeps its CPU busy until its answer comes (yielding it to anyone who
// waits for it), up to the limit per wait, with a read and a yield system call about every
// microsecond; in place of that it saves parking and waking its goroutine and thread. It trades CPU
// time for latency. In cmd/farmemd/bench.sh's runs on a 2-CPU VM under other jobs' load (Intel
// Xeon, load average 3.6-10), six with a 50µs limit in both processes and twelve parking in the
// same hour, a lone 8-byte read's p50 was 5.8-6.2 µs spinning against 7.0-7.4 µs parking
// (0.73-0.82x a redis GET's in the same runs, against 0.86-1.03x). But with one read outstanding
// the spinning client used as much CPU time per read as redis's Go client in the same run (median
// 1.00x, 5.5 µs on average) where parking it used 0.77x (4.7 µs), the node about the same either
// way, and with the CPUs contended the reads per second came out level with redis's (0.91-1.03x,
// median 1.00x, against 0.58-1.21x, median 1.17x, parking). That is why spinning is off unless
// asked for: it pays where latency counts, and costs throughput where CPUs are contended. Where
// they are idle and halted virtual CPUs must be woken by the host it pays most: on the same VM with
// nothing else running, one read outstanding did 2.8-3.5 times redis's GETs/s spinning against
// 0.96-1.07 times parking (the README has the runs). Waits with several requests in flight
// spinning too (2026-11-27, both processes, 50µs, cmd/farmemd/bench.sh): with 8 outstanding on
// the idle VM 4.58x and 4.96x redis's rate (750-760k reads/s; redis did 168-180k in those runs
// and 284-292k in runs where no pipelined wait spun, so about 2.6x of that), against 0.92-0.96x
// when only lone exchanges spun. Spinning them whatever the load was worse where a background job
// kept both CPUs busy (1.10-1.16x against 1.37-1.40x, the benchmark at nice -15; 0.83-1.16x
// against 1.06-1.29x without the priority), which is what busy is for: with two CPU-bound jobs
// beside the benchmark (no priority) the pipelined waits parked (0.13 reads per batch) and the
// ratios at 8 outstanding were 1.17x and 0.58x against 1.16x and 1.36x before, within that
// load's noise. A spin that misses wastes up to the limit, and misses make the process stop
// spinning for a while.

const (
	suggestedSpin = 50 * time.Microsecond  // the limit measured above (and in the tests)
	spinYieldMax  = 20 * time.Microsecond  // a yield that takes longer ends the spin after one more read
	spinSkipMax   = 1024                   // waits parked without spinning after a run of misses, at most
	spinBusyFor   = 100 * time.Millisecond // how long the yields' record keeps pipelined waits from spinning
	spinBusyShare = 1 << 13                // a share of long yields (1/8) above which the CPUs are taken
	spinEnv       = "FARMEM_SPIN"
	procsEvery    = int64(100 * time.Millisecond) // how often GOMAXPROCS is looked at again
)

// spinGov is the process's spin governor (spin).
type spinGov struct {
	limit    atomic.Int64 // how long a wait may spin, ns; 0: never
	spinning atomic.Bool  // a reader spins now
	skip     atomic.Int32 // waits left to park without spinning
	backoff  atomic.Int32 // the skip the next miss sets (doubling from 1)
	// longShare is the share of the recent yields that took long (another thread wanted the
	// CPU), in 1/65536ths, a moving average over about 32 yields; lastYield is when the last
	// ended (nanotime). See busy.
	longShare atomic.Int32
	lastYield atomic.Int64
	procs     atomic.Int32 // GOMAXPROCS at procsAt (0: not looked at yet)
	procsAt   atomic.Int64
	yieldMax  int64 // spinYieldMax, ns

	spins, answered, spent atomic.Int64 // SpinCounts
}

var spin = spinGov{yieldMax: int64(spinYieldMax)}

func init() {
	var d time.Duration
	if s := os.Getenv(spinEnv); s != "" {
		if v, err := parseSpin(s); err == nil {
			d = v
		}
	}
	if !spinSupported {
		d = 0
	}
	spin.limit.Store(int64(d))
}

// parseSpin parses a FARMEM_SPIN value: a Go duration ("50us"), or "0" or "off".
func parseSpin(s string) (time.Duration, error) {
	if s == "off" || s == "0" {
		return 0, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d < 0 {
		return 0, fmt.Errorf("rdma: %s=%q: want a duration such as 50us, or off", spinEnv, s)
	}
	return d, nil
}

// SetSpin sets how long a tcp reader of this process (a client waiting for answers, or a memory
// node waiting for a client's next request; with several requests in flight only while the
// CPUs look free) may keep reading its empty socket, yielding its CPU between reads, before it parks; 0
// turns spinning off. The default is 0, or the FARMEM_SPIN environment variable's duration
// ("off": 0); 50µs lets most loopback answers in. Spinning trades CPU time for latency: see the
// package's section on system calls. Only one reader of a process spins at a time, never with
// GOMAXPROCS 1, and not for a while after spins that went unanswered; setting the limit ends
// that back-off. On systems other than Linux readers never spin. It returns the previous limit.
func SetSpin(d time.Duration) time.Duration {
	if !spinSupported {
		d = 0
	}
	spin.skip.Store(0)
	spin.backoff.Store(0)
	return time.Duration(spin.limit.Swap(int64(max(d, 0))))
}

// SpinCounts reports this process's tcp readers' spinning so far: the waits that spun, how many
// of them ended with bytes read rather than at the limit, and the time spent spinning (CPU time
// but for the yields to other threads).
func SpinCounts() (spins, answered int64, spent time.Duration) {
	return spin.spins.Load(), spin.answered.Load(), time.Duration(spin.spent.Load())
}

// noteYield records a yield that ended at y and took long or not in the governor's moving
// share of long yields.
func (g *spinGov) noteYield(y int64, long bool) {
	var x int32
	if long {
		x = 1 << 16
	}
	s := g.longShare.Load()
	g.longShare.Store(s + (x-s)>>5)
	g.lastYield.Store(y)
}

// busy reports whether the CPUs look taken by other work: more than an eighth of the recent
// yields took long, and the last was under spinBusyFor ago (a record older than that lets a
// wait spin again, which renews it). On a VM with nothing else running about 1 yield in 3,000
// took over 20µs (Intel Xeon, 2 cores); under another job's load nearly all do.
func (g *spinGov) busy() bool {
	return g.longShare.Load() > spinBusyShare && nanotime()-g.lastYield.Load() < int64(spinBusyFor)
}
