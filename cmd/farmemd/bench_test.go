package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/farmem/farmem/farmem"
	"github.com/farmem/farmem/rdma"
)

// TestLoopbackBench measures farmemd on loopback beside redis-server in the same run: latency
// per verb, and throughput with 1, 8 and 64 outstanding batches against the same number of
// pipelined GETs. Run it with bench.sh (which installs redis-server when missing); it is skipped
// unless FARMEM_BENCH=1.
func TestLoopbackBench(t *testing.T) {
	if os.Getenv("FARMEM_BENCH") != "1" {
		t.Skip("set FARMEM_BENCH=1 (or run cmd/farmemd/bench.sh)")
	}
	redisBin, err := exec.LookPath("redis-server")
	require.NoError(t, err, "redis-server is needed beside farmemd: bench.sh installs it")
	n := 20000
	if s := os.Getenv("FARMEM_BENCH_OPS"); s != "" {
		n, err = strconv.Atoi(s)
		require.NoError(t, err)
	}
	window := time.Second

	dir := t.TempDir()
	d := startDaemon(t, dir, 1, "64MiB", "127.0.0.1:0")
	f := dial(t, writeCluster(t, dir, []*daemon{d}, ""), rdma.Options{})
	ctx := context.Background()
	m, err := f.Open(ctx, f.Hosted()[0])
	require.NoError(t, err)
	base := farmem.MakeAddr(1, 64<<10)

	rc := startRedis(t, redisBin)
	require.NoError(t, rc.set("k8", strings.Repeat("x", 8)))
	require.NoError(t, rc.set("k4k", strings.Repeat("x", 4096)))

	// Latency per verb, one at a time.
	buf8, buf4k := make([]byte, 8), make([]byte, 4096)
	verbs := []struct {
		name string
		do   func() error
	}{
		{"read 8B", func() error { return m.Read(ctx, base, buf8) }},
		{"read 4KiB", func() error { return m.Read(ctx, base, buf4k) }},
		{"write 8B", func() error { return m.Write(ctx, base.Add(8192), buf8) }},
		{"cas", func() error { _, err := m.CAS(ctx, base.Add(16384), 0, 0); return err }},
		{"faa", func() error { _, err := m.FAA(ctx, base.Add(16392), 1); return err }},
		{"masked cas", func() error {
			_, err := m.MaskedCAS(ctx, base.Add(16400), 0, 0xff, 1, 0xff00)
			return err
		}},
	}
	// Each farmem row is measured in rounds interleaved with rounds of its redis reference, so
	// background load on the machine weighs on both alike.
	t.Logf("loopback, %d ops per row, interleaved with as many redis GETs; farmemd and redis-server are separate processes", n)
	t.Logf("%-12s %9s %9s %9s | %-10s %9s %9s | %s", "verb", "p50", "p99", "mean", "vs", "p50", "mean", "p50 ratio")
	for _, v := range verbs {
		size := 8
		if v.name == "read 4KiB" {
			size = 4096
		}
		key := fmt.Sprintf("k%d", size)
		if size == 4096 {
			key = "k4k"
		}
		l, r := interleaved(t, n, v.do, func() error { return rc.get(key, size) })
		t.Logf("%-12s %9v %9v %9v | GET %-6s %9v %9v | %.2fx", v.name, l.p50, l.p99, l.mean,
			fmt.Sprintf("%dB", size), r.p50, r.mean, float64(l.p50)/float64(r.p50))
	}

	// Throughput with k batches (one 8-byte read each) outstanding, against k pipelined GETs,
	// in alternating windows.
	t.Logf("%-12s %14s %14s %8s", "outstanding", "farmem read/s", "redis GET/s", "ratio")
	for _, k := range []int{1, 8, 64} {
		var fOps, rOps float64
		const rounds = 5
		for range rounds {
			fOps += farmemThroughput(t, m, base, k, window/rounds)
			rOps += rc.throughput(t, "k8", 8, k, window/rounds)
		}
		t.Logf("%-12d %14.0f %14.0f %7.2fx", k, fOps/rounds, rOps/rounds, fOps/rOps)
	}
	st := m.Stats()
	t.Logf("farmem client stats: %v", st)
}

type latencyStats struct{ p50, p99, mean time.Duration }

// interleaved measures n calls of a and of b, alternating rounds of 500, after a warm-up.
func interleaved(t *testing.T, n int, a, b func() error) (latencyStats, latencyStats) {
	for range 200 {
		require.NoError(t, a())
		require.NoError(t, b())
	}
	la, lb := make([]time.Duration, 0, n), make([]time.Duration, 0, n)
	for len(la) < n {
		for _, c := range []struct {
			do func() error
			ls *[]time.Duration
		}{{a, &la}, {b, &lb}} {
			for range min(500, n-len(*c.ls)) {
				start := time.Now()
				require.NoError(t, c.do())
				*c.ls = append(*c.ls, time.Since(start))
			}
		}
	}
	return summarize(la), summarize(lb)
}

func summarize(ls []time.Duration) latencyStats {
	slices.Sort(ls)
	var sum time.Duration
	for _, l := range ls {
		sum += l
	}
	r := func(d time.Duration) time.Duration { return d.Round(100 * time.Nanosecond) }
	return latencyStats{p50: r(ls[len(ls)/2]), p99: r(ls[len(ls)*99/100]), mean: r(sum / time.Duration(len(ls)))}
}

// farmemThroughput keeps k one-read batches outstanding for the window and returns reads/s.
func farmemThroughput(t *testing.T, m farmem.Memory, a farmem.Addr, k int, window time.Duration) float64 {
	ctx := context.Background()
	bs := make([]farmem.Batch, k)
	ps := make([]*farmem.Pending, k)
	for i := range bs {
		bs[i].Read(a.Add(uint64(i)*8), make([]byte, 8))
		ps[i] = m.Post(ctx, &bs[i])
	}
	done := 0
	start := time.Now()
	for i := 0; ; i = (i + 1) % k {
		require.NoError(t, ps[i].Wait(ctx, 0))
		_, err := bs[i].Result(0)
		require.NoError(t, err)
		done++
		if time.Since(start) >= window {
			break
		}
		ps[i] = m.Post(ctx, &bs[i])
	}
	elapsed := time.Since(start)
	for j := range ps { // drain
		require.NoError(t, ps[j].Wait(ctx, 0))
	}
	return float64(done) / elapsed.Seconds()
}

// redisConn is a minimal RESP client: enough for SET and GET.
type redisConn struct {
	nc net.Conn
	br *bufio.Reader
	bw *bufio.Writer
}

func startRedis(t *testing.T, bin string) *redisConn {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	port := ln.Addr().(*net.TCPAddr).Port
	require.NoError(t, ln.Close())
	cmd := exec.Command(bin, "--bind", "127.0.0.1", "--port", strconv.Itoa(port), "--save", "", "--appendonly", "no", "--protected-mode", "yes")
	cmd.Dir = t.TempDir()
	cmd.Stdout, cmd.Stderr = io.Discard, io.Discard
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	var nc net.Conn
	require.Eventually(t, func() bool {
		nc, err = net.Dial("tcp", addr)
		return err == nil
	}, 10*time.Second, 10*time.Millisecond, "redis-server did not start")
	t.Cleanup(func() { _ = nc.Close() })
	return &redisConn{nc: nc, br: bufio.NewReader(nc), bw: bufio.NewWriter(nc)}
}

func (r *redisConn) writeCmd(args ...string) {
	fmt.Fprintf(r.bw, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(r.bw, "$%d\r\n%s\r\n", len(a), a)
	}
}

func (r *redisConn) set(k, v string) error {
	r.writeCmd("SET", k, v)
	if err := r.bw.Flush(); err != nil {
		return err
	}
	line, err := r.br.ReadString('\n')
	if err != nil {
		return err
	}
	if line != "+OK\r\n" {
		return fmt.Errorf("SET: %q", line)
	}
	return nil
}

// readBulk reads a GET reply of n bytes.
func (r *redisConn) readBulk(n int) error {
	line, err := r.br.ReadString('\n')
	if err != nil {
		return err
	}
	if want := fmt.Sprintf("$%d\r\n", n); line != want {
		return fmt.Errorf("GET reply %q, want %q", line, want)
	}
	_, err = r.br.Discard(n + 2)
	return err
}

func (r *redisConn) get(k string, n int) error {
	r.writeCmd("GET", k)
	if err := r.bw.Flush(); err != nil {
		return err
	}
	return r.readBulk(n)
}

// throughput keeps window GETs outstanding on the connection (pipelining) for d.
func (r *redisConn) throughput(t *testing.T, k string, n, window int, d time.Duration) float64 {
	for range window {
		r.writeCmd("GET", k)
		require.NoError(t, r.bw.Flush())
	}
	done := 0
	start := time.Now()
	for {
		require.NoError(t, r.readBulk(n))
		done++
		if time.Since(start) >= d {
			break
		}
		r.writeCmd("GET", k)
		// Like farmem's queue pair with requests in flight, send what is queued before
		// blocking on a reply, so pipelined requests share write calls.
		if r.br.Buffered() == 0 {
			require.NoError(t, r.bw.Flush())
		}
	}
	elapsed := time.Since(start)
	require.NoError(t, r.bw.Flush())
	for range window - 1 {
		require.NoError(t, r.readBulk(n))
	}
	return float64(done) / elapsed.Seconds()
}
