package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/stretchr/testify/require"

	"github.com/farmem/farmem/farmem"
	"github.com/farmem/farmem/internal/wire"
	"github.com/farmem/farmem/rdma"
)

// These tests play an adversary against real farmemd processes: they write raw frames with
// internal/wire, as a client holding the secret but not following the protocol's manners (or a
// stranger without it) would, and watch the node from outside: its resident memory, its
// metrics, and an honest client beside.

// rssGrowth is the bound these tests hold a node's resident memory to: at most 64 MiB over its
// resident memory at rest, whatever the adversary sends (the region's pages they read are not
// resident: an anonymous region reads as the shared zero page until written). Under the race
// detector, whose shadow memory multiplies what the process touches, the bound scales with it.
const rssGrowth = raceShadow * 64 << 20

// rss returns a process's resident memory (VmRSS) in bytes.
func rss(t *testing.T, pid int) int64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	require.NoError(t, err)
	for line := range strings.SplitSeq(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			require.NoError(t, err, line)
			return kb << 10
		}
	}
	t.Fatalf("no VmRSS in /proc/%d/status", pid)
	return 0
}

var metricsLine = regexp.MustCompile(`msg="serving metrics" addr=(\S+)`)

// metricsAddr waits for the daemon to log the address of its metrics endpoint.
func metricsAddr(t *testing.T, d *daemon) string {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		if m := metricsLine.FindStringSubmatch(d.logs.String()); m != nil {
			return m[1]
		}
	}
	t.Fatalf("farmemd n%d logged no metrics address: %s", d.id, d.logs.String())
	return ""
}

// scrape reads and parses the daemon's metrics in the Prometheus text format.
func scrape(t *testing.T, addr string) map[string]*dto.MetricFamily {
	t.Helper()
	cl := http.Client{Timeout: 20 * time.Second}
	resp, err := cl.Get("http://" + addr + "/metrics")
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	require.NoError(t, err)
	return fams
}

// metric returns the value of the sample of family name whose labels include want (NaN-free:
// a missing family or sample fails the test).
func metric(t *testing.T, fams map[string]*dto.MetricFamily, name string, want ...string) float64 {
	t.Helper()
	f := fams[name]
	require.NotNil(t, f, "no metric family %s", name)
next:
	for _, m := range f.GetMetric() {
		for i := 0; i+1 < len(want); i += 2 {
			ok := false
			for _, l := range m.GetLabel() {
				if l.GetName() == want[i] && l.GetValue() == want[i+1] {
					ok = true
				}
			}
			if !ok {
				continue next
			}
		}
		switch {
		case m.GetCounter() != nil:
			return m.GetCounter().GetValue()
		case m.GetGauge() != nil:
			return m.GetGauge().GetValue()
		case m.GetUntyped() != nil:
			return m.GetUntyped().GetValue()
		}
	}
	t.Fatalf("no sample of %s with labels %v", name, want)
	return 0
}

// batchFrame is a Batch frame of ops naming region key.
func batchFrame(id uint64, key uint32, ops ...farmem.Op) []byte {
	b, start := wire.BeginFrame(nil, wire.TypeBatch, 0, id)
	b = wire.AppendBatchCount(b, len(ops))
	for i := range ops {
		b = wire.AppendOp(b, &ops[i], key)
	}
	return wire.EndFrame(b, start)
}

// readResult reads one Result frame answering ops and returns each op's error.
func (r *rawClient) readResult(ops []farmem.Op) []error {
	r.t.Helper()
	var hdr [wire.HeaderSize]byte
	_ = r.nc.SetReadDeadline(time.Now().Add(30 * time.Second))
	h, p, err := wire.ReadFrame(r.br, &hdr, nil, wire.DefaultMaxFrame)
	require.NoError(r.t, err)
	require.Equal(r.t, wire.TypeResult, h.Type)
	var rs wire.Results
	n, err := rs.Reset(p)
	require.NoError(r.t, err)
	require.Equal(r.t, len(ops), n)
	errs := make([]error, n)
	for i := range ops {
		st, _, data, err := rs.Next(ops[i].Kind, len(ops[i].Buf))
		require.NoError(r.t, err)
		errs[i] = st.Err()
		if st == wire.StatusOK && ops[i].Kind == farmem.OpRead {
			copy(ops[i].Buf, data)
		}
	}
	require.NoError(r.t, rs.End())
	return errs
}

// (a) One frame of 4096 reads of 16 MiB asks for 64 GiB of results: the node refuses every op
// (the ones past the frame limit with ErrReplyTooLarge), builds no reply, keeps its resident
// memory within rssGrowth, keeps serving the connection, and counts the refusal in its
// metrics. The same for the 48-read frame that once produced a 768 MiB reply.
func TestOversizedReplyRefused(t *testing.T) {
	parallel(t, 800*time.Millisecond, false) // each drives its own farmemd
	const region = 32 << 20
	dir := t.TempDir()
	d := startDaemon(t, dir, 1, fmt.Sprint(region), "127.0.0.1:0", "--metrics", "127.0.0.1:0")
	maddr := metricsAddr(t, d)
	raw := dialRaw(t, d.addr)
	base := rss(t, d.cmd.Process.Pid)

	// The ops share one buffer: only its length is encoded, and no read is served.
	buf := make([]byte, farmem.MaxOpBytes)
	for _, n := range []int{48, farmem.MaxBatchOps} {
		ops := make([]farmem.Op, n)
		for i := range ops {
			ops[i] = farmem.Op{Kind: farmem.OpRead, Addr: farmem.MakeAddr(1, 0), Buf: buf}
		}
		frame := batchFrame(uint64(n), raw.w.Key, ops...)
		require.LessOrEqual(t, len(frame), 80<<10, "a small frame")
		_, err := raw.nc.Write(frame)
		require.NoError(t, err)
		errs := raw.readResult(ops)
		tooLarge := 0
		for i, err := range errs {
			require.Error(t, err, "op %d of %d", i, n)
			if errors.Is(err, rdma.ErrReplyTooLarge) {
				tooLarge++
			} else {
				require.ErrorIs(t, err, farmem.ErrAborted, "op %d of %d", i, n)
			}
		}
		// One 16 MiB result fits the 17 MiB limit; every later one crosses it.
		require.Equal(t, n-1, tooLarge, "ops refused for the reply's size")
		require.ErrorIs(t, errs[1], farmem.ErrInvalid, "ErrReplyTooLarge wraps ErrInvalid")
	}
	peak := rss(t, d.cmd.Process.Pid)
	t.Logf("oversized replies: node RSS %d MiB at rest, %d MiB after (region %d MiB; bound: %d MiB over rest)",
		base>>20, peak>>20, region>>20, rssGrowth>>20)
	require.Less(t, peak, base+rssGrowth)

	// The connection goes on: a write, a read of it, and the largest single read, which fits.
	msg := []byte("still serving")
	w := farmem.Op{Kind: farmem.OpWrite, Addr: farmem.MakeAddr(1, 4096), Buf: msg}
	_, err := raw.nc.Write(batchFrame(9000, raw.w.Key, w))
	require.NoError(t, err)
	require.NoError(t, raw.readResult([]farmem.Op{w})[0])
	big := farmem.Op{Kind: farmem.OpRead, Addr: farmem.MakeAddr(1, 0), Buf: buf}
	_, err = raw.nc.Write(batchFrame(9001, raw.w.Key, big))
	require.NoError(t, err)
	require.NoError(t, raw.readResult([]farmem.Op{big})[0])
	require.Equal(t, msg, big.Buf[4096:4096+len(msg)])

	// A stranger with the wrong secret.
	nc, err := net.Dial("tcp", d.addr)
	require.NoError(t, err)
	_, err = wire.ClientHandshake(nc, bufio.NewReader(nc), 0, 2, wire.PurposeData, []byte("not-the-cluster-secret"))
	require.Error(t, err)
	_ = nc.Close()

	fams := scrape(t, maddr)
	require.Equal(t, 2.0, metric(t, fams, "farmemd_batches_refused_total", "reason", "reply_too_large"))
	require.Equal(t, 0.0, metric(t, fams, "farmemd_batches_refused_total", "reason", "bad_op"))
	require.Equal(t, 1.0, metric(t, fams, "farmemd_verbs_total", "kind", "write"))
	require.Equal(t, float64(len(msg)), metric(t, fams, "farmemd_verb_bytes_total", "kind", "write"))
	require.Equal(t, 1.0, metric(t, fams, "farmemd_verbs_total", "kind", "read"))
	require.Equal(t, float64(farmem.MaxOpBytes), metric(t, fams, "farmemd_verb_bytes_total", "kind", "read"))
	require.Equal(t, 1.0, metric(t, fams, "farmemd_connections", "state", "authenticated"))
	require.Equal(t, 1.0, metric(t, fams, "farmemd_connections_refused_total", "reason", "auth"))
	require.Equal(t, float64(region), metric(t, fams, "farmemd_region_bytes"))
	require.Equal(t, float64(64<<20), metric(t, fams, "farmemd_buffer_limit_bytes"))
	require.Greater(t, metric(t, fams, "farmemd_network_bytes_total", "direction", "out"), float64(farmem.MaxOpBytes))
	require.Greater(t, metric(t, fams, "process_resident_memory_bytes"), 0.0)
	require.Equal(t, 0.0, metric(t, fams, "farmemd_output_queued_bytes"))
}

// (b) 1000 pipelined batches, each one 16 MiB read, with no reply ever read: the node stops
// reading the connection when its socket is full, holds one reply, closes the connection after
// its write timeout, and stays up with its resident memory within rssGrowth; an honest
// client works throughout.
func TestPipelinedReadsNotRead(t *testing.T) {
	parallel(t, 2300*time.Millisecond, false) // each drives its own farmemd
	const region = 32 << 20
	dir := t.TempDir()
	d := startDaemon(t, dir, 1, fmt.Sprint(region), "127.0.0.1:0", "--metrics", "127.0.0.1:0", "--write-timeout", "1s")
	maddr := metricsAddr(t, d)
	cf := writeCluster(t, dir, []*daemon{d}, "down-timeout 10s\n")
	f := dial(t, cf, rdma.Options{})
	m, err := f.Open(context.Background(), f.Hosted()[0])
	require.NoError(t, err)
	defer m.Close()
	pid := d.cmd.Process.Pid
	base := rss(t, pid)

	// The honest client: a write and a read of 4 KiB, over and over.
	stop := make(chan struct{})
	var lat []time.Duration
	var honestErr error
	var honestOps atomic.Int64
	var honest sync.WaitGroup
	honest.Go(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		buf, got := make([]byte, 4096), make([]byte, 4096)
		at := farmem.MakeAddr(1, region-8192)
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			buf[0], buf[4095] = byte(i), byte(i>>8)
			began := time.Now()
			if err := m.Write(ctx, at, buf); err != nil {
				honestErr = err
				return
			}
			if err := m.Read(ctx, at, got); err != nil {
				honestErr = err
				return
			}
			lat = append(lat, time.Since(began))
			honestOps.Add(1)
			if got[0] != buf[0] || got[4095] != buf[4095] {
				honestErr = fmt.Errorf("read back %d,%d, wrote %d,%d", got[0], got[4095], buf[0], buf[4095])
				return
			}
			time.Sleep(time.Millisecond)
		}
	})

	for honestOps.Load() == 0 && honestErr == nil {
		time.Sleep(time.Millisecond)
	}
	// The honest client's connections: its membership lease and its data path.
	authed := metric(t, scrape(t, maddr), "farmemd_connections", "state", "authenticated")
	raw := dialRaw(t, d.addr)
	var frames []byte
	buf := make([]byte, farmem.MaxOpBytes) // only its length is encoded
	for i := range 1000 {
		frames = append(frames, batchFrame(uint64(i+1), raw.w.Key, farmem.Op{Kind: farmem.OpRead, Addr: farmem.MakeAddr(1, 0), Buf: buf})...)
	}
	go func() { _, _ = raw.nc.Write(frames) }()

	// Watch the node until it closes the connection that does not read.
	var peak int64
	var peakQueued float64
	deadline := time.Now().Add(25 * time.Second)
	for {
		peak = max(peak, rss(t, pid))
		fams := scrape(t, maddr)
		peakQueued = max(peakQueued, metric(t, fams, "farmemd_output_queued_bytes"))
		if metric(t, fams, "farmemd_connections_closed_total", "reason", "write_timeout") >= 1 {
			break
		}
		select {
		case <-d.exited:
			t.Fatalf("farmemd died: %v", d.exit)
		default:
		}
		require.True(t, time.Now().Before(deadline), "the node never closed the connection that does not read")
		time.Sleep(20 * time.Millisecond)
	}
	// Keep the honest client going a little after the close, then stop it.
	time.Sleep(200 * time.Millisecond)
	close(stop)
	honest.Wait()
	require.NoError(t, honestErr, "the honest client")

	// The adversary finds its connection closed once it reads what reached its socket.
	_ = raw.nc.SetReadDeadline(time.Now().Add(20 * time.Second))
	n, err := io.Copy(io.Discard, raw.br)
	if err != nil {
		require.ErrorIs(t, err, syscall.ECONNRESET)
	}
	fams := scrape(t, maddr)
	require.Equal(t, 0.0, metric(t, fams, "farmemd_output_queued_bytes"), "nothing left queued")
	require.Equal(t, authed, metric(t, fams, "farmemd_connections", "state", "authenticated"), "only the honest client's")
	// The reads served to the adversary: all the node served, less the honest client's one per
	// round.
	served := metric(t, fams, "farmemd_verbs_total", "kind", "read") - float64(honestOps.Load())
	peak = max(peak, rss(t, pid))

	require.NotEmpty(t, lat)
	slices.Sort(lat)
	p99 := lat[len(lat)*99/100]
	t.Logf("1000 pipelined 16 MiB reads, never read: node RSS %d MiB at rest, peak %d MiB (region %d MiB; bound: %d MiB over rest); "+
		"peak queued output %.1f MiB; %d bytes reached the adversary before the close; %0.f of its reads served",
		base>>20, peak>>20, region>>20, rssGrowth>>20, peakQueued/(1<<20), n, served)
	t.Logf("honest client meanwhile: %d write+read round pairs, p50 %v, p99 %v, max %v", len(lat), lat[len(lat)/2], p99, lat[len(lat)-1])
	require.Less(t, peak, base+rssGrowth)
	require.LessOrEqual(t, peakQueued, float64(wire.DefaultMaxFrame+wire.HeaderSize+rdma.ConnBufferBound), "one large reply queued at a time")
	require.Less(t, served, 1000.0, "the node stopped reading the connection")
	require.GreaterOrEqual(t, served, 1.0)
	select {
	case <-d.exited:
		t.Fatalf("farmemd died: %v", d.exit)
	default:
	}
}

// (c) As many silent connections as the descriptor limit allows, while a client that holds the
// secret connects: it gets in every time, the node's handshake budget pushes the silent ones
// out, and the log lines they cause are rate-limited.
func TestSilentFloodDoesNotLockOut(t *testing.T) {
	parallel(t, 3*time.Second, false) // each drives its own farmemd
	const budget = 256                // the node's default handshake budget
	var lim syscall.Rlimit
	require.NoError(t, syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim))
	if lim.Cur < lim.Max {
		lim.Cur = lim.Max
		_ = syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim)
		require.NoError(t, syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim))
	}
	// Leave room for this process's other descriptors, and stop at 4096 (16 times the budget),
	// within one loopback port range and the package's time budget.
	n := min(int(lim.Cur)-512, 4096)
	if n < 4*budget {
		t.Skipf("RLIMIT_NOFILE %d allows %d connections, under 4x the node's handshake budget of %d: too few to mean anything", lim.Cur, n, budget)
	}
	dir := t.TempDir()
	d := startDaemon(t, dir, 1, "4MiB", "127.0.0.1:0", "--metrics", "127.0.0.1:0", "--log-level", "info")
	maddr := metricsAddr(t, d)
	sec := []byte(strings.TrimSpace(secret))

	var opened, failed atomic.Int64
	conns := make(chan net.Conn, n)
	var flood sync.WaitGroup
	t.Cleanup(func() {
		flood.Wait()
		close(conns)
		for c := range conns {
			_ = c.Close()
		}
	})
	began := time.Now()
	const workers = 8
	for w := range workers {
		flood.Go(func() {
			for i := w; i < n; i += workers {
				c, err := net.DialTimeout("tcp", d.addr, 10*time.Second)
				if err != nil {
					failed.Add(1)
					continue
				}
				opened.Add(1)
				conns <- c
			}
		})
	}
	honest := func(when string) {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		t0 := time.Now()
		st, err := rdma.QueryStatus(ctx, d.addr, sec, 20*time.Second)
		require.NoError(t, err, "an honest client %s", when)
		require.Equal(t, farmem.NodeID(1), st.Node)
		t.Logf("honest client %s (%d silent connections opened): in after %v", when, opened.Load(), time.Since(t0))
	}
	for opened.Load() < int64(n/3) && time.Since(began) < 20*time.Second {
		time.Sleep(time.Millisecond)
	}
	honest("during the flood")
	flood.Wait()
	honest("after the flood")
	cf := writeCluster(t, dir, []*daemon{d}, "")
	f := dial(t, cf, rdma.Options{})
	mm, err := f.Open(context.Background(), f.Hosted()[0])
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	_, err = mm.FAA(ctx, farmem.MakeAddr(1, 64), 1)
	require.NoError(t, err, "a Fabric dials and serves with the silent connections still open")
	mm.Close()
	elapsed := time.Since(began)

	fams := scrape(t, maddr)
	evicted := metric(t, fams, "farmemd_connections_refused_total", "reason", "evicted")
	timedOut := metric(t, fams, "farmemd_connections_refused_total", "reason", "handshake_timeout")
	t.Logf("RLIMIT_NOFILE %d: %d silent connections opened (%d failed to connect) in %v; the node evicted %.0f and timed out %.0f",
		lim.Cur, opened.Load(), failed.Load(), elapsed, evicted, timedOut)
	require.Equal(t, 0.0, metric(t, fams, "farmemd_connections_refused_total", "reason", "busy"))
	require.LessOrEqual(t, metric(t, fams, "farmemd_connections", "state", "handshaking"), float64(budget))
	require.GreaterOrEqual(t, evicted+timedOut, float64(opened.Load()-budget), "silent connections were pushed out or timed out")

	// The silent connections left in the budget time out (2 s by default).
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		timedOut = metric(t, scrape(t, maddr), "farmemd_connections_refused_total", "reason", "handshake_timeout")
		if timedOut >= budget/2 {
			break
		}
		require.True(t, time.Now().Before(deadline), "only %.0f silent connections timed out", timedOut)
	}
	elapsed = time.Since(began)
	t.Logf("then %.0f timed out in their handshake", timedOut)

	// Each eviction and timeout is counted, but the log shows at most 5 lines per kind per 10 s.
	logs := d.logs.String()
	windows := int(elapsed/(10*time.Second)) + 2
	for _, line := range []string{"unauthenticated connection closed", "connection refused: bad hello"} {
		got := strings.Count(logs, line)
		require.LessOrEqual(t, got, 5*windows, "%q lines", line)
	}
}
