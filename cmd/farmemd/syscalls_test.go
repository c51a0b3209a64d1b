package main

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/farmem/farmem/farmem"
	"github.com/farmem/farmem/rdma"
)

// TestSyscallsPerRoundTrip counts the read and write system calls that one verb or posted
// batch at a time costs the client process and the farmemd process, as the kernel counts them
// (syscr and syscw of /proc/<pid>/io): one write and one read on each side per round trip. A
// net.Conn read tries the socket before it waits for the poller, so a reader that waits for
// each answer would make two reads per round trip on each side; the bound below leaves room for
// the few calls the processes make besides (a log line, a lease renewal), not for a second
// read. With 8 batches kept outstanding, frames posted between waits share a write and answers
// a read, as a pipelining client's do: well under one call per batch on each side. These are
// the calls of readers that park at once: a reader that spins before it parks (rdma.SetSpin)
// makes reads that find nothing by design, so spinning is off in both processes here.
func TestSyscallsPerRoundTrip(t *testing.T) {
	dir, d, m := parkedNode(t, rdma.Options{})
	ctx := context.Background()
	parkedCalls(t, ctx, m, farmem.MakeAddr(1, 4096), d, "")
	self, node := os.Getpid(), d.cmd.Process.Pid
	measure := func(n int, do func(i int) error) (cr, cw, nr, nw float64) {
		return callsPer(t, self, node, n, do)
	}
	const k = 8

	// With readers that spin before they park, in both processes: a lone exchange spins (reads
	// that find nothing); with several requests in flight a reader spins only while its
	// process's yields return at once (rdma/spin.go), so 8 outstanding batches cost what they
	// cost above in writes (about one per 8 on each side), and in reads that much on a busy
	// machine and more on an idle one: each wait that spins reads about once a microsecond
	// until the answers come, at most for the 50µs limit, and about one wait in 8 does.
	t.Setenv("FARMEM_SPIN", "50us")
	rdma.SetSpin(50 * time.Microsecond)
	d2 := startDaemon(t, dir, 2, "16MiB", "127.0.0.1:0")
	f2 := dial(t, writeCluster(t, dir, []*daemon{d2}, ""), rdma.Options{})
	m2, err := f2.Open(ctx, f2.Hosted()[0])
	require.NoError(t, err)
	node = d2.cmd.Process.Pid
	b2 := farmem.MakeAddr(2, 4096)
	var lone farmem.Batch
	lone.Read(b2, make([]byte, 8))
	for range 50 {
		require.NoError(t, m2.Post(ctx, &lone).Wait(ctx, 0))
	}
	spins, _, _ := rdma.SpinCounts()
	cr, cw, nr, nw := measure(1000, func(int) error { return m2.Post(ctx, &lone).Wait(ctx, 0) })
	after, _, _ := rdma.SpinCounts()
	t.Logf("spinning, per posted batch, waited on before the next: client %.2f reads, %.2f writes; farmemd %.2f reads, %.2f writes; the client spun %d times", cr, cw, nr, nw, after-spins)
	if runtime.GOMAXPROCS(0) > 1 {
		require.Positive(t, after-spins, "the client spun")
	}
	cr, cw, nr, nw = outstanding(t, ctx, m2, b2, k, measure)
	t.Logf("spinning, per batch, %d outstanding: client %.2f reads, %.2f writes; farmemd %.2f reads, %.2f writes", k, cr, cw, nr, nw)
	require.LessOrEqual(t, cw, 0.2, "client writes, spinning, %d outstanding", k)
	require.LessOrEqual(t, nw, 0.2, "farmemd writes, spinning, %d outstanding", k)
	// Reads: a spin's reads are bounded by its limit (about 50 at one per microsecond, fewer
	// when yields take longer), over about one wait per 8 batches, plus the read that ends it.
	require.LessOrEqual(t, cr, 8.0, "client reads, spinning, %d outstanding", k)
	require.LessOrEqual(t, nr, 8.0, "farmemd reads, spinning, %d outstanding", k)
}

// TestSyscallsPerRoundTripShared is TestSyscallsPerRoundTrip's first part for a lone client on
// a shared connection (rdma.Options.SharedConns): it pays what a client on a connection of its
// own pays, one write and one read on each side per round trip, and a pipelining client's
// frames and answers share calls as they do there.
func TestSyscallsPerRoundTripShared(t *testing.T) {
	_, d, m := parkedNode(t, rdma.Options{SharedConns: true})
	parkedCalls(t, context.Background(), m, farmem.MakeAddr(1, 4096), d, "shared, ")
}

// parkedNode starts farmemd node 1 in a fresh directory with readers that park at once in
// both processes (spinning off in farmemd's environment and in this process until the test
// ends), dials it with o and opens a Memory of the node: what the syscall tests count calls
// over. It skips where /proc/self/io, which they read, is missing.
func parkedNode(t *testing.T, o rdma.Options) (dir string, d *daemon, m farmem.Memory) {
	t.Helper()
	if _, err := os.ReadFile("/proc/self/io"); err != nil {
		t.Skip("no /proc/self/io here:", err)
	}
	t.Setenv("FARMEM_SPIN", "off") // (farmemd's)
	prev := rdma.SetSpin(0)
	t.Cleanup(func() { rdma.SetSpin(prev) })
	dir = t.TempDir()
	d = startDaemon(t, dir, 1, "16MiB", "127.0.0.1:0")
	f := dial(t, writeCluster(t, dir, []*daemon{d}, ""), o)
	m, err := f.Open(context.Background(), f.Hosted()[0])
	require.NoError(t, err)
	return dir, d, m
}

// parkedCalls is the part of TestSyscallsPerRoundTrip made with readers that park at once, over
// m, a Memory of d's node, at a and past it (label prefixes its log lines): one write and one
// read on each side per verb or posted-and-waited batch, well under one per batch with 8
// outstanding.
func parkedCalls(t *testing.T, ctx context.Context, m farmem.Memory, a farmem.Addr, d *daemon, label string) {
	t.Helper()
	buf := make([]byte, 8)
	verbs := []func() error{
		func() error { return m.Read(ctx, a, buf) },
		func() error { return m.Write(ctx, a.Add(64), buf) },
		func() error { _, err := m.CAS(ctx, a.Add(128), 0, 0); return err },
		func() error { _, err := m.FAA(ctx, a.Add(136), 1); return err },
	}
	var posted farmem.Batch
	posted.Read(a.Add(256), make([]byte, 8))
	postWait := func() error { return m.Post(ctx, &posted).Wait(ctx, 0) }
	for range 50 { // the connection is set up and warm
		for _, v := range append(verbs, postWait) {
			require.NoError(t, v())
		}
	}
	self, node := os.Getpid(), d.cmd.Process.Pid
	measure := func(n int, do func(i int) error) (cr, cw, nr, nw float64) {
		return callsPer(t, self, node, n, do)
	}
	check := func(what string, most float64, cr, cw, nr, nw float64) {
		t.Logf("%s%s: client %.2f reads, %.2f writes; farmemd %.2f reads, %.2f writes", label, what, cr, cw, nr, nw)
		require.LessOrEqual(t, cr, most, "client reads, %s", what)
		require.LessOrEqual(t, cw, most, "client writes, %s", what)
		require.LessOrEqual(t, nr, most, "farmemd reads, %s", what)
		require.LessOrEqual(t, nw, most, "farmemd writes, %s", what)
	}
	const most = 1.2
	cr, cw, nr, nw := measure(250*len(verbs), func(i int) error { return verbs[i%len(verbs)]() })
	check("per verb, one at a time", most, cr, cw, nr, nw)
	require.GreaterOrEqual(t, nr, 1.0, "farmemd must have read every request")
	cr, cw, nr, nw = measure(1000, func(int) error { return postWait() })
	check("per posted batch, waited on before the next", most, cr, cw, nr, nw)

	// 8 batches outstanding: each wait is followed by a post.
	const k = 8
	cr, cw, nr, nw = outstanding(t, ctx, m, a, k, measure)
	check(fmt.Sprintf("per batch, %d outstanding", k), 0.5, cr, cw, nr, nw)
}

// outstanding keeps k one-read batches (at a+512 and on) posted to m, each wait followed by a
// post, and returns measure's counts over 4,000 of those waits; it waits for the last ones.
func outstanding(t *testing.T, ctx context.Context, m farmem.Memory, a farmem.Addr, k int,
	measure func(n int, do func(i int) error) (cr, cw, nr, nw float64)) (cr, cw, nr, nw float64) {
	t.Helper()
	bs := make([]farmem.Batch, k)
	ps := make([]*farmem.Pending, k)
	for i := range bs {
		bs[i].Read(a.Add(uint64(512+8*i)), make([]byte, 8))
		ps[i] = m.Post(ctx, &bs[i])
	}
	cr, cw, nr, nw = measure(4000, func(i int) error {
		if err := ps[i%k].Wait(ctx, 0); err != nil {
			return err
		}
		ps[i%k] = m.Post(ctx, &bs[i%k])
		return nil
	})
	for _, p := range ps {
		require.NoError(t, p.Wait(ctx, 0))
	}
	return cr, cw, nr, nw
}

// callsPer runs do n times and returns the read and write system calls per time of the process
// self and of the process node (syscr and syscw of /proc/<pid>/io).
func callsPer(t *testing.T, self, node, n int, do func(i int) error) (cr, cw, nr, nw float64) {
	cr0, cw0 := procIO(t, self)
	nr0, nw0 := procIO(t, node)
	for i := range n {
		if err := do(i); err != nil {
			t.Fatal(err)
		}
	}
	cr1, cw1 := procIO(t, self)
	nr1, nw1 := procIO(t, node)
	per := func(a, b uint64) float64 { return float64(b-a) / float64(n) }
	return per(cr0, cr1), per(cw0, cw1), per(nr0, nr1), per(nw0, nw1)
}
