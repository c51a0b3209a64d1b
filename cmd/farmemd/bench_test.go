package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"runtime"
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
// pipelined GETs, each farmem measurement interleaved with its redis reference and the whole
// comparison repeated, so the ratios come with their spread. Beside the times it counts the
// read and write system calls per operation of each process (from /proc/<pid>/io, where the
// kernel counts them) and, for the throughput rows, the CPU time per operation of each
// (/proc/<pid>/stat). Both servers are started under serverWrap (bench.sh's placements pin
// them, and this process, to CPUs; the output names the CPUs each may use). Run it with bench.sh
// (which installs redis-server when missing); it is skipped unless FARMEM_BENCH=1.
func TestLoopbackBench(t *testing.T) {
	if os.Getenv("FARMEM_BENCH") != "1" {
		t.Skip("set FARMEM_BENCH=1 (or run cmd/farmemd/bench.sh)")
	}
	redisBin, err := exec.LookPath("redis-server")
	require.NoError(t, err, "redis-server is needed beside farmemd: bench.sh installs it")
	n, reps := 10000, 5
	if s := os.Getenv("FARMEM_BENCH_OPS"); s != "" {
		n, err = strconv.Atoi(s)
		require.NoError(t, err)
	}
	if s := os.Getenv("FARMEM_BENCH_REPS"); s != "" {
		reps, err = strconv.Atoi(s)
		require.NoError(t, err)
	}
	window := time.Second

	dir := t.TempDir()
	wrap := serverWrap()
	d := startDaemonUnder(t, wrap, dir, 1, "64MiB", "127.0.0.1:0")
	f := dial(t, writeCluster(t, dir, []*daemon{d}, ""), rdma.Options{})
	ctx := context.Background()
	m, err := f.Open(ctx, f.Hosted()[0])
	require.NoError(t, err)
	base := farmem.MakeAddr(1, 64<<10)

	rc, redisPid := startRedis(t, wrap, redisBin)
	require.NoError(t, rc.set("k8", strings.Repeat("x", 8)))
	require.NoError(t, rc.set("k4k", strings.Repeat("x", 4096)))
	farmemd, redisd := d.cmd.Process.Pid, redisPid
	self := os.Getpid()

	// Latency per verb, one at a time.
	buf8, buf4k := make([]byte, 8), make([]byte, 4096)
	verbs := []struct {
		name string
		size int
		do   func() error
	}{
		{"read 8B", 8, func() error { return m.Read(ctx, base, buf8) }},
		{"read 4KiB", 4096, func() error { return m.Read(ctx, base, buf4k) }},
		{"write 8B", 8, func() error { return m.Write(ctx, base.Add(8192), buf8) }},
		{"cas", 8, func() error { _, err := m.CAS(ctx, base.Add(16384), 0, 0); return err }},
		{"faa", 8, func() error { _, err := m.FAA(ctx, base.Add(16392), 1); return err }},
		{"masked cas", 8, func() error {
			_, err := m.MaskedCAS(ctx, base.Add(16400), 0, 0xff, 1, 0xff00)
			return err
		}},
	}
	key := func(size int) string {
		if size == 4096 {
			return "k4k"
		}
		return "k8"
	}
	ks := []int{1, 8, 64}
	type lat struct{ l, r []time.Duration }
	lats := make([]lat, len(verbs))
	p50Ratios := make([][]float64, len(verbs))
	var fRates, rRates, tRatios [3][]float64
	// System calls per operation: farmem's client and node, redis's client and server.
	var sysLat [4]ioCount
	var sysTput [3][4]ioCount
	var cpuTput [3][4]cpuCount // CPU time of the same four processes in the same windows
	var latOps [2]float64
	var tputOps [3][2]float64
	for range reps {
		// Each farmem row is measured in rounds interleaved with rounds of its redis reference,
		// so background load on the machine weighs on both alike.
		for i, v := range verbs {
			var sc [4]ioCount
			l, r := interleaved(t, n, v.do, func() error { return rc.get(key(v.size), v.size) },
				func(first, before bool) {
					if i != 0 {
						return
					}
					if first {
						sc[0].mark(t, self, before)
						sc[1].mark(t, farmemd, before)
					} else {
						sc[2].mark(t, self, before)
						sc[3].mark(t, redisd, before)
					}
				})
			if i == 0 {
				for j := range sc {
					sysLat[j].add(sc[j])
				}
				latOps[0] += float64(len(l))
				latOps[1] += float64(len(r))
			}
			lats[i].l = append(lats[i].l, l...)
			lats[i].r = append(lats[i].r, r...)
			p50Ratios[i] = append(p50Ratios[i], float64(summarize(l).p50)/float64(summarize(r).p50))
		}
		// Throughput with k batches (one 8-byte read each) outstanding, against k pipelined
		// GETs, in alternating windows.
		for j, k := range ks {
			var fOps, rOps float64
			const rounds = 20 // short windows, so load on the machine weighs on both alike
			for range rounds {
				var sc [4]ioCount
				var cc [4]cpuCount
				cc[0].mark(self, true)
				cc[1].mark(farmemd, true)
				sc[0].mark(t, self, true)
				sc[1].mark(t, farmemd, true)
				rate, ops := farmemThroughput(t, m, base, k, window/rounds)
				sc[0].mark(t, self, false)
				sc[1].mark(t, farmemd, false)
				cc[0].mark(self, false)
				cc[1].mark(farmemd, false)
				fOps += rate
				cc[2].mark(self, true)
				cc[3].mark(redisd, true)
				sc[2].mark(t, self, true)
				sc[3].mark(t, redisd, true)
				rrate, rops := rc.throughput(t, "k8", 8, k, window/rounds)
				sc[2].mark(t, self, false)
				sc[3].mark(t, redisd, false)
				cc[2].mark(self, false)
				cc[3].mark(redisd, false)
				rOps += rrate
				for x := range sc {
					sysTput[j][x].add(sc[x])
					cpuTput[j][x].t += cc[x].t
				}
				tputOps[j][0] += float64(ops)
				tputOps[j][1] += float64(rops)
			}
			fRates[j] = append(fRates[j], fOps/rounds)
			rRates[j] = append(rRates[j], rOps/rounds)
			tRatios[j] = append(tRatios[j], fOps/rOps)
		}
	}

	t.Logf("cpu: %s, %d cores", cpuModel(), machineCPUs())
	t.Logf("placement: client (this process) on CPUs %s, farmemd on %s, redis-server on %s", cpusOf(self), cpusOf(farmemd), cpusOf(redisd))
	t.Logf("loopback, %d repetitions of %d ops per latency row interleaved with as many redis GETs, and of 1 s per throughput row in 20 alternating windows (rates: means over all windows); farmemd and redis-server are separate processes", reps, n)
	t.Logf("%-12s %9s %9s %9s | %-10s %9s %9s | %s", "verb", "p50", "p99", "mean", "vs", "p50", "mean", "p50 ratio: median [min-max]")
	for i, v := range verbs {
		l, r := summarize(lats[i].l), summarize(lats[i].r)
		t.Logf("%-12s %9v %9v %9v | GET %-6s %9v %9v | %s", v.name, l.p50, l.p99, l.mean,
			fmt.Sprintf("%dB", v.size), r.p50, r.mean, spread(p50Ratios[i]))
	}
	// The rates are means over all windows (each 1/20 s, so the mean rate is the pooled one):
	// farmem's and redis's are taken over the same interleaved windows, and their quotient is
	// the pooled ratio; medians of each column apart could come from different repetitions.
	t.Logf("%-12s %14s %14s  %s", "outstanding", "farmem read/s", "redis GET/s", "ratio per repetition: median [min-max]")
	for j, k := range ks {
		t.Logf("%-12d %14.0f %14.0f  %s", k, mean(fRates[j]), mean(rRates[j]), spread(tRatios[j]))
	}
	t.Logf("read+write system calls per op    client         server")
	t.Logf("  farmem read 8B, one at a time  %-14s %s", sysLat[0].per(latOps[0]), sysLat[1].per(latOps[0]))
	t.Logf("  redis GET, one at a time       %-14s %s", sysLat[2].per(latOps[1]), sysLat[3].per(latOps[1]))
	for j, k := range ks {
		t.Logf("  farmem read 8B, %2d outstanding %-14s %s", k, sysTput[j][0].per(tputOps[j][0]), sysTput[j][1].per(tputOps[j][0]))
		t.Logf("  redis GET, %2d outstanding      %-14s %s", k, sysTput[j][2].per(tputOps[j][1]), sysTput[j][3].per(tputOps[j][1]))
	}
	t.Logf("CPU µs per op (user+system)       client         server")
	for j, k := range ks {
		t.Logf("  farmem read 8B, %2d outstanding %-14s %s", k, cpuTput[j][0].per(tputOps[j][0]), cpuTput[j][1].per(tputOps[j][0]))
		t.Logf("  redis GET, %2d outstanding      %-14s %s", k, cpuTput[j][2].per(tputOps[j][1]), cpuTput[j][3].per(tputOps[j][1]))
	}
	st := m.Stats()
	t.Logf("farmem client stats: %v", st)
	spins, answered, spent := rdma.SpinCounts()
	t.Logf("farmem client spins before parking: %d, %d of them answered, %v spinning", spins, answered, spent.Round(time.Millisecond))
}

// serverWrap is the command farmemd and redis-server are started under: taskset on the CPUs
// FARMEM_BENCH_SERVER_CPUS lists (bench.sh's placements), or none.
func serverWrap() []string {
	if cpus := os.Getenv("FARMEM_BENCH_SERVER_CPUS"); cpus != "" {
		return []string{"taskset", "-c", cpus}
	}
	return nil
}

// machineCPUs counts the machine's online CPUs (runtime.NumCPU counts those this process may
// run on, which bench.sh's placements restrict).
func machineCPUs() int {
	if n := len(procFields("/proc/cpuinfo", "processor")); n > 0 {
		return n
	}
	return runtime.NumCPU()
}

// cpusOf returns the CPUs process pid may run on (its Cpus_allowed_list), or "?".
func cpusOf(pid int) string {
	if v := procFields(fmt.Sprintf("/proc/%d/status", pid), "Cpus_allowed_list"); len(v) > 0 {
		return v[0]
	}
	return "?"
}

// cpuModel names the machine's processor (/proc/cpuinfo), or "unknown".
func cpuModel() string {
	if v := procFields("/proc/cpuinfo", "model name"); len(v) > 0 {
		return v[0]
	}
	return "unknown"
}

// procFields returns the values of the "name: value" lines of the file at path (a /proc file)
// whose name is name, in order; none if it cannot be read.
func procFields(path, name string) []string {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil
	}
	var vs []string
	for _, line := range strings.Split(string(b), "\n") {
		if n, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(n) == name {
			vs = append(vs, strings.TrimSpace(v))
		}
	}
	return vs
}

// ioCount accumulates a process's read and write system calls between marks.
type ioCount struct{ r, w, r0, w0 uint64 }

// mark starts (before) or ends a counted stretch of pid's system calls.
func (c *ioCount) mark(t *testing.T, pid int, before bool) {
	r, w := procIO(t, pid)
	if before {
		c.r0, c.w0 = r, w
		return
	}
	c.r += r - c.r0
	c.w += w - c.w0
}

func (c *ioCount) add(o ioCount) { c.r, c.w = c.r+o.r, c.w+o.w }

func (c ioCount) per(ops float64) string {
	if ops == 0 {
		return "-"
	}
	return fmt.Sprintf("%.2f+%.2f", float64(c.r)/ops, float64(c.w)/ops)
}

// procIO returns the read and write system calls pid has made (syscr and syscw of
// /proc/<pid>/io; 0, 0 where the file is missing).
func procIO(t *testing.T, pid int) (r, w uint64) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/io", pid))
	if err != nil {
		return 0, 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		name, val, ok := strings.Cut(line, ": ")
		if !ok {
			continue
		}
		v, err := strconv.ParseUint(strings.TrimSpace(val), 10, 64)
		if err != nil {
			continue
		}
		switch name {
		case "syscr":
			r = v
		case "syscw":
			w = v
		}
	}
	return r, w
}

// cpuCount accumulates a process's CPU time (user and system, all its threads) between marks.
type cpuCount struct{ t, t0 time.Duration }

// mark starts (before) or ends a counted stretch of pid's CPU time.
func (c *cpuCount) mark(pid int, before bool) {
	v := procCPU(pid)
	if before {
		c.t0 = v
		return
	}
	c.t += v - c.t0
}

func (c cpuCount) per(ops float64) string {
	if ops == 0 || c.t == 0 {
		return "-"
	}
	return fmt.Sprintf("%.2f", c.t.Seconds()*1e6/ops)
}

// procCPU returns the user and system CPU time pid has used, all threads (utime and stime of
// /proc/<pid>/stat, in clock ticks of 10 ms: summed over the many short windows of a row,
// each tick lands in the window it falls in, so the total is right on average); 0 where the
// file is missing.
func procCPU(pid int) time.Duration {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	// The command name, in parentheses, may hold spaces: the fields count from its end.
	s := string(b)
	if i := strings.LastIndexByte(s, ')'); i >= 0 {
		s = s[i+1:]
	}
	f := strings.Fields(s)
	if len(f) < 13 {
		return 0
	}
	// f[0] is field 3 (state): utime and stime are fields 14 and 15.
	u, err1 := strconv.ParseUint(f[11], 10, 64)
	st, err2 := strconv.ParseUint(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0
	}
	return time.Duration(u+st) * 10 * time.Millisecond
}

func mean(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	var sum float64
	for _, x := range xs {
		sum += x
	}
	return sum / float64(len(xs))
}

func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s) == 0 {
		return 0
	}
	return s[len(s)/2]
}

// spread formats ratios as their median and range.
func spread(xs []float64) string {
	return fmt.Sprintf("%.2fx [%.2f-%.2f]", median(xs), slices.Min(xs), slices.Max(xs))
}

type latencyStats struct{ p50, p99, mean time.Duration }

// interleaved measures n calls of a and of b, alternating rounds of 500, after a warm-up.
// around, if not nil, is called before and after each round (first: a's round).
func interleaved(t *testing.T, n int, a, b func() error, around func(first, before bool)) (la, lb []time.Duration) {
	for range 200 {
		require.NoError(t, a())
		require.NoError(t, b())
	}
	la, lb = make([]time.Duration, 0, n), make([]time.Duration, 0, n)
	for len(la) < n {
		for _, c := range []struct {
			do    func() error
			ls    *[]time.Duration
			first bool
		}{{a, &la, true}, {b, &lb, false}} {
			if around != nil {
				around(c.first, true)
			}
			for range min(500, n-len(*c.ls)) {
				start := time.Now()
				err := c.do()
				*c.ls = append(*c.ls, time.Since(start))
				if err != nil {
					t.Fatal(err)
				}
			}
			if around != nil {
				around(c.first, false)
			}
		}
	}
	return la, lb
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

// farmemThroughput keeps k one-read batches outstanding for the window and returns reads/s and
// the reads done.
func farmemThroughput(t *testing.T, m farmem.Memory, a farmem.Addr, k int, window time.Duration) (float64, int) {
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
		// (t.Fatal rather than require in the timed loops: require's t.Helper walks the stack
		// on every call, a cost of the harness and not of what is measured)
		if err := ps[i].Wait(ctx, 0); err != nil {
			t.Fatal(err)
		}
		if _, err := bs[i].Result(0); err != nil {
			t.Fatal(err)
		}
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
	return float64(done) / elapsed.Seconds(), done + k
}

// redisConn is a minimal RESP client: enough for SET and GET.
type redisConn struct {
	nc net.Conn
	br *bufio.Reader
	bw *bufio.Writer
}

func startRedis(t *testing.T, wrap []string, bin string) (*redisConn, int) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	port := ln.Addr().(*net.TCPAddr).Port
	require.NoError(t, ln.Close())
	args := []string{bin, "--bind", "127.0.0.1", "--port", strconv.Itoa(port), "--save", "", "--appendonly", "no", "--protected-mode", "yes"}
	args = append(wrap[:len(wrap):len(wrap)], args...)
	cmd := exec.Command(args[0], args[1:]...)
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
	return &redisConn{nc: nc, br: bufio.NewReader(nc), bw: bufio.NewWriter(nc)}, cmd.Process.Pid
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

// throughput keeps window GETs outstanding on the connection (pipelining) for d, and returns
// GETs/s and the GETs done.
func (r *redisConn) throughput(t *testing.T, k string, n, window int, d time.Duration) (float64, int) {
	for range window {
		r.writeCmd("GET", k)
		require.NoError(t, r.bw.Flush())
	}
	done := 0
	start := time.Now()
	for {
		if err := r.readBulk(n); err != nil {
			t.Fatal(err)
		}
		done++
		if time.Since(start) >= d {
			break
		}
		r.writeCmd("GET", k)
		// Like farmem's queue pair with requests in flight, send what is queued before
		// blocking on a reply, so pipelined requests share write calls.
		if r.br.Buffered() == 0 {
			if err := r.bw.Flush(); err != nil {
				t.Fatal(err)
			}
		}
	}
	elapsed := time.Since(start)
	require.NoError(t, r.bw.Flush())
	for range window - 1 {
		require.NoError(t, r.readBulk(n))
	}
	return float64(done) / elapsed.Seconds(), done + window - 1
}
