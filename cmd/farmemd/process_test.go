package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/farmem/farmem/farmem"
	"github.com/farmem/farmem/farmem/farmemtest"
	"github.com/farmem/farmem/internal/wire"
	"github.com/farmem/farmem/rdma"
)

// procFaults injects faults into farmemd processes with signals (kill -9 is a crash, SIGSTOP a
// hang, SIGCONT resumes) and into the in-process compute nodes with rdma's Injector.
type procFaults struct {
	daemons map[farmem.NodeID]*daemon
	in      *rdma.Injector
}

func (p *procFaults) Crash(n farmem.NodeID) error {
	if d := p.daemons[n]; d != nil {
		d.kill9()
		return nil
	}
	return p.in.Crash(n)
}

func (p *procFaults) Hang(n farmem.NodeID) error {
	if d := p.daemons[n]; d != nil {
		return d.stop()
	}
	return p.in.Hang(n)
}

func (p *procFaults) Resume(n farmem.NodeID) error {
	if d := p.daemons[n]; d != nil {
		return d.cmd.Process.Signal(syscall.SIGCONT)
	}
	return p.in.Resume(n)
}

// remote asks a farmemd started with --allow-faults to inject a fault.
func (p *procFaults) remote(d *daemon, f rdma.Fault) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return rdma.RemoteFault(ctx, d.addr, []byte(strings.TrimSpace(secret)), f)
}

func (p *procFaults) Partition(c farmem.ClientID, n farmem.NodeID) error {
	if d := p.daemons[n]; d != nil {
		return p.remote(d, rdma.Fault{Kind: "partition", Client: c})
	}
	return p.in.Partition(c, n)
}

func (p *procFaults) Heal(c farmem.ClientID, n farmem.NodeID) error {
	if d := p.daemons[n]; d != nil {
		return p.remote(d, rdma.Fault{Kind: "heal", Client: c})
	}
	return p.in.Heal(c, n)
}

func (p *procFaults) CrashAfter(n farmem.NodeID, ops int) error {
	if d := p.daemons[n]; d != nil {
		return p.remote(d, rdma.Fault{Kind: "crash-after", N: ops})
	}
	return p.in.CrashAfter(n, ops)
}

func (p *procFaults) CrashClient(c farmem.ClientID) error { return p.in.CrashClient(c) }

// TestConformanceProcesses runs the conformance suite with every memory node a farmemd
// process on loopback and the compute nodes in this process. The suite's tests run one after
// another and mostly wait (for processes to start, down timeouts to expire, fault windows to
// pass), so they are split over conformanceParts parallel subtests, each running its share
// (conformancePart) and skipping the rest.
func TestConformanceProcesses(t *testing.T) {
	var tickets [conformanceParts]*ticket
	for part := range tickets {
		tickets[part] = testGate.reserve(t, conformanceEst[part], false)
	}
	t.Parallel() // its own farmemd processes
	for part := range conformanceParts {
		t.Run(fmt.Sprintf("part%d", part), func(t *testing.T) {
			t.Parallel()
			tickets[part].wait()
			t.Cleanup(tickets[part].release) // (and the parent's, for a part not run)
			seen := map[string]int{}
			farmemtest.Run(t, func(t *testing.T, cfg farmemtest.Config) *farmemtest.Cluster {
				name := t.Name()[strings.LastIndexByte(t.Name(), '/')+1:]
				if p := conformancePart(seen, name); p != part {
					t.Skipf("run by part%d", p)
				}
				return openProcessCluster(t, cfg)
			})
		})
	}
}

// conformanceParts is how many parallel parts TestConformanceProcesses splits the suite into.
const conformanceParts = 4

// conformanceEst is about how long each part takes alone, for the gate.
var conformanceEst = [conformanceParts]time.Duration{3 * time.Second, 2500 * time.Millisecond, 3 * time.Second, 2500 * time.Millisecond}

// conformanceSlow places the suite's longest tests (seconds each, waiting out down timeouts
// and fault windows, or many long reads) in parts of their own.
var conformanceSlow = map[string]int{"FaultPartialWait": 0, "FaultQuorum": 1, "FaultHang": 2, "FaultPartition": 2, "Tearing": 3}

// conformancePart is the part that runs the suite's test name: its place in conformanceSlow,
// or else the next part in turn, in the order the suite's tests ask for a cluster (the same in
// every part; seen records it), so every test, a new one included, runs in exactly one part.
func conformancePart(seen map[string]int, name string) int {
	if p, ok := conformanceSlow[name]; ok {
		return p
	}
	if _, ok := seen[name]; !ok {
		seen[name] = len(seen) % conformanceParts
	}
	return seen[name]
}

// openProcessCluster is the conformance suite's cluster for cfg: farmemd processes (started
// with --allow-faults) and in-process compute nodes.
func openProcessCluster(t *testing.T, cfg farmemtest.Config) *farmemtest.Cluster {
	dir := t.TempDir()
	ds := startDaemons(t, dir, cfg.MemoryNodes, fmt.Sprint(cfg.MemorySize), "--allow-faults")
	cf := writeCluster(t, dir, ds, fmt.Sprintf("down-timeout %v\n", cfg.DownTimeout))
	pf := &procFaults{daemons: map[farmem.NodeID]*daemon{}}
	var fabs []farmem.Fabric
	var rfs []*rdma.Fabric
	for range cfg.ComputeNodes {
		f := dial(t, cf, rdma.Options{})
		fabs = append(fabs, f)
		rfs = append(rfs, f)
	}
	for _, d := range ds {
		pf.daemons[d.id] = d
	}
	pf.in = rdma.NewInjector(nil, rfs)
	// The daemons serve with rdma.Server, whose data path rdma's TestConformance drives in
	// process with the suite's default volume of torn-read checks (and where reads overlap
	// writes far more often): here the reads need only cover what separate processes add,
	// long reads and writes framed between them.
	return &farmemtest.Cluster{Fabrics: fabs, Faults: pf, TearingReads: farmemtest.DefaultTearingReads / 10}
}

// TestThreeClientProcesses: three client processes and one farmemd (and a second farmemd to
// show the rest of the cluster keeps serving): exact FAA totals, a refused secret, the node's
// checks of bounds, alignment and region key, and kill -9 and SIGSTOP reported as ErrNodeDown
// within the down timeout.
func TestThreeClientProcesses(t *testing.T) {
	parallel(t, 1800*time.Millisecond, false) // its own farmemd processes; mostly waiting out a down timeout
	dir := t.TempDir()
	ds := startDaemons(t, dir, 2, "4MiB")
	n1, n2 := ds[0], ds[1]
	cf := writeCluster(t, dir, ds, "") // default down timeout: 1s
	counter := farmem.MakeAddr(1, 64<<10)

	// Three client processes add to one word at once; a fourth holds the wrong secret.
	const each = 300
	type proc struct {
		wait func() error
		out  func() string
		errs *syncBuffer
	}
	var procs []proc
	for range 3 {
		cmd, out, errs := startClient(t, "-cluster", cf, "-addr", counter.String(), "-n", fmt.Sprint(each))
		procs = append(procs, proc{cmd.Wait, out.String, errs})
	}
	bad := writeSecret(t, dir, "wrong", "wrong-secret-but-long-enough-xx")
	cmd, _, badErrs := startClient(t, "-cluster", cf, "-secret-file", bad, "-addr", counter.String())
	err := cmd.Wait()
	var ee *exec.ExitError
	require.ErrorAs(t, err, &ee)
	require.Equal(t, 3, ee.ExitCode(), "the wrong secret is refused: %s", badErrs.String())
	require.Contains(t, badErrs.String(), "authentication failed")

	seen := map[uint64]bool{}
	var ids []farmem.ComputeID
	for i, p := range procs {
		require.NoError(t, p.wait(), "client %d: %s", i, p.errs.String())
		var rep clientReport
		require.NoError(t, json.Unmarshal([]byte(p.out()), &rep))
		require.Len(t, rep.Prevs, each)
		for _, v := range rep.Prevs {
			require.False(t, seen[v], "FAA returned %d twice", v)
			seen[v] = true
		}
		require.Equal(t, uint64(each), rep.Stats.RoundTrips, "one round trip per FAA")
		ids = append(ids, rep.Compute)
	}
	// Dense ids claimed at join: the lowest free one (a process that finished early may have
	// given its id back before the last one joined).
	for _, id := range ids {
		require.True(t, id >= 1 && id <= 3, "compute id %d is not dense", id)
	}

	f := dial(t, cf, rdma.Options{})
	m, err := f.Open(context.Background(), f.Hosted()[0])
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute) // a hang fails, not stalls
	defer cancel()
	total, err := m.FAA(ctx, counter, 0)
	require.NoError(t, err)
	require.Equal(t, uint64(3*each), total, "FAA total")
	for v := range uint64(3 * each) {
		require.True(t, seen[v], "no client got %d", v)
	}

	// The node checks every op itself: a raw client sends what a Fabric refuses to.
	raw := dialRaw(t, n1.addr)
	for _, tc := range []struct {
		name string
		op   farmem.Op
		key  uint32
		want error
	}{
		{"out of range", farmem.Op{Kind: farmem.OpRead, Addr: farmem.MakeAddr(1, 4<<20-4), Buf: make([]byte, 8)}, raw.w.Key, farmem.ErrOutOfRange},
		{"misaligned", farmem.Op{Kind: farmem.OpCAS, Addr: counter.Add(3), Swap: 1}, raw.w.Key, farmem.ErrMisaligned},
		{"wrong key", farmem.Op{Kind: farmem.OpFAA, Addr: counter, Swap: 1000}, raw.w.Key ^ 0x5a5a, rdma.ErrBadKey},
	} {
		require.ErrorIs(t, raw.one(tc.op, tc.key), tc.want, tc.name)
	}
	require.NoError(t, raw.one(farmem.Op{Kind: farmem.OpFAA, Addr: counter, Swap: 0}, raw.w.Key), "the connection goes on after refused ops")
	// And through the Fabric, which checks bounds and alignment before sending.
	require.ErrorIs(t, m.Read(ctx, farmem.MakeAddr(1, 4<<20-4), make([]byte, 8)), farmem.ErrOutOfRange)
	_, err = m.FAA(ctx, counter.Add(4), 1)
	require.ErrorIs(t, err, farmem.ErrMisaligned)
	total, err = m.FAA(ctx, counter, 0)
	require.NoError(t, err)
	require.Equal(t, uint64(3*each), total, "refused ops changed nothing")

	down := f.Topology().DownTimeout
	require.Equal(t, time.Second, down, "the default down timeout")
	other := farmem.MakeAddr(2, 64<<10)

	// kill -9 of a busy node: the ops in flight and the next ones fail with ErrNodeDown at once,
	// from the closed connection. They run on a second client whose down timeout is 30 s, so
	// that "at once" (well under it) and "after the timeout" stay apart on a machine many times
	// slower or busier than this one, where the kill alone (waiting for the process to exit)
	// can take a good part of the default second.
	const longDown = 30 * time.Second
	fk := dial(t, cf, rdma.Options{DownTimeout: longDown})
	mk, err := fk.Open(ctx, fk.Hosted()[0])
	require.NoError(t, err)
	var killed atomic.Int64
	errc := make(chan error, 1)
	go func() {
		bm, err := fk.Open(ctx, fk.Hosted()[0])
		if err != nil {
			errc <- err
			return
		}
		defer bm.Close()
		for {
			if _, err := bm.FAA(ctx, counter, 1); err != nil {
				errc <- err
				return
			}
		}
	}()
	time.Sleep(50 * time.Millisecond)
	killed.Store(time.Now().UnixNano())
	n1.kill9()
	select {
	case err := <-errc:
		took := time.Since(time.Unix(0, killed.Load()))
		require.ErrorIs(t, err, farmem.ErrNodeDown)
		t.Logf("kill -9: a busy client got ErrNodeDown %v after the kill returned", took)
		require.Less(t, took, longDown/3)
	case <-time.After(2 * longDown):
		t.Fatal("no error after kill -9")
	}
	start := time.Now()
	_, err = mk.FAA(ctx, counter, 1)
	require.ErrorIs(t, err, farmem.ErrNodeDown)
	require.Less(t, time.Since(start), longDown/3)
	_, err = m.FAA(ctx, counter, 1)
	require.ErrorIs(t, err, farmem.ErrNodeDown, "the first client too")
	_, err = m.FAA(ctx, other, 1)
	require.NoError(t, err, "the other node keeps serving")

	// The node restarts at the same address with new memory: the client fences it.
	n1b := startDaemon(t, dir, 1, "4MiB", n1.addr)
	require.Equal(t, n1.addr, n1b.addr)
	_, err = m.FAA(ctx, counter, 1)
	if errors.Is(err, farmem.ErrNodeDown) {
		_, err = m.FAA(ctx, counter, 1)
	}
	require.ErrorIs(t, err, farmem.ErrNodeLost, "a node with a new incarnation is fenced")
	require.NotErrorIs(t, err, farmem.ErrOutOfRange)

	// SIGSTOP: a hung node is reported down within the down timeout, and serves again after
	// SIGCONT.
	_, err = m.FAA(ctx, other, 1) // connected
	require.NoError(t, err)
	require.NoError(t, n2.stop())
	start = time.Now()
	_, err = m.FAA(ctx, other, 1)
	took := time.Since(start)
	require.ErrorIs(t, err, farmem.ErrNodeDown)
	t.Logf("SIGSTOP: ErrNodeDown after %v (down timeout %v)", took, down)
	require.GreaterOrEqual(t, took, down*3/4, "reported down before the timeout")
	require.Less(t, took, hangBound(down), "reported, not hung")
	require.NoError(t, n2.cmd.Process.Signal(syscall.SIGCONT))
	_, err = m.FAA(ctx, other, 1)
	require.NoError(t, err, "the resumed node serves again")
}

// hangBound is how long after an op starts a hung (SIGSTOPped) process may at the latest be
// reported down, as the conformance suite bounds it: twice the down timeout and five seconds
// of slack, so that a machine ten times slower, or both cores busy, still passes. It bounds
// the report (no hang); the time it took is logged, and the lower bound (not before the
// timeout) is asserted exactly.
func hangBound(down time.Duration) time.Duration { return 2*down + 5*time.Second }

// rawClient is a hand-driven data connection.
type rawClient struct {
	t  *testing.T
	nc net.Conn
	br *bufio.Reader
	w  wire.Welcome
	id uint64
}

func dialRaw(t *testing.T, addr string) *rawClient {
	nc, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	t.Cleanup(func() { _ = nc.Close() })
	br := bufio.NewReader(nc)
	w, err := wire.ClientHandshake(nc, br, 0, 1, wire.PurposeData, []byte(secret[:len(secret)-1]))
	require.NoError(t, err)
	return &rawClient{t: t, nc: nc, br: br, w: w}
}

// one sends a one-op batch with the given region key and returns the op's error.
func (r *rawClient) one(op farmem.Op, key uint32) error {
	r.id++
	b, start := wire.BeginFrame(nil, wire.TypeBatch, 0, r.id)
	b = wire.EndFrame(wire.AppendOp(wire.AppendBatchCount(b, 1), &op, key), start)
	_, err := r.nc.Write(b)
	require.NoError(r.t, err)
	var hdr [wire.HeaderSize]byte
	h, p, err := wire.ReadFrame(r.br, &hdr, nil, wire.DefaultMaxFrame)
	require.NoError(r.t, err)
	require.Equal(r.t, wire.TypeResult, h.Type)
	var rs wire.Results
	_, err = rs.Reset(p)
	require.NoError(r.t, err)
	st, _, _, err := rs.Next(op.Kind, len(op.Buf))
	require.NoError(r.t, err)
	return st.Err()
}

// TestComputeProcessFaults: kill -9 and SIGSTOP of a compute process are reported to its peers
// as ErrNodeDown within the down timeout, for verbs to its region and for Calls.
func TestComputeProcessFaults(t *testing.T) {
	parallel(t, 1200*time.Millisecond, false) // its own farmemd and peer processes; mostly waiting out down timeouts
	dir := t.TempDir()
	n1 := startDaemon(t, dir, 1, "4MiB", "127.0.0.1:0")
	// The lease outlasts the SIGSTOP below (two ops that each wait out the down timeout, about
	// a second, more on a busy machine): with a lease of 1 s the registry could free the stopped
	// process's id, and the second client, dialled right after SIGCONT and before the process's
	// next renewal, took it and Called itself ("no handler for method" on c2).
	cf := writeCluster(t, dir, []*daemon{n1}, "down-timeout 500ms\nlease 10s\n")
	f := dial(t, cf, rdma.Options{})
	m, err := f.Open(context.Background(), f.Hosted()[0])
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	down := f.Topology().DownTimeout

	start := func() (*daemon, farmem.NodeID) {
		cmd := exec.Command(os.Args[0], "-cluster", cf)
		cmd.Env = append(os.Environ(), "FARMEMD_TEST_ROLE=peer", noExitSleep())
		out, err := cmd.StdoutPipe()
		require.NoError(t, err)
		d := &daemon{cmd: cmd, logs: &syncBuffer{}, exited: make(chan struct{})}
		cmd.Stderr = d.logs
		require.NoError(t, cmd.Start())
		go func() { d.exit = cmd.Wait(); close(d.exited) }()
		t.Cleanup(func() { _ = cmd.Process.Signal(syscall.SIGCONT); _ = cmd.Process.Kill(); <-d.exited })
		line, err := bufio.NewReader(out).ReadString('\n')
		require.NoError(t, err, d.logs.String())
		id, err := strconv.Atoi(strings.TrimSpace(line))
		require.NoError(t, err)
		return d, farmem.ComputeID(id).Node()
	}
	peer, id := start()
	slot := farmem.MakeAddr(id, f.Topology().SharedBase())
	require.NoError(t, m.Write(ctx, slot, []byte("hello")))
	r, err := m.Call(ctx, id, 1, []byte("echo"))
	require.NoError(t, err)
	require.Equal(t, "echo", string(r))

	// SIGSTOP: verbs and Calls to the stopped process fail within the down timeout.
	require.NoError(t, peer.stop())
	for name, op := range map[string]func() error{
		"write": func() error { return m.Write(ctx, slot, []byte("x")) },
		"call":  func() error { _, err := m.Call(ctx, id, 1, nil); return err },
	} {
		began := time.Now()
		err := op()
		took := time.Since(began)
		require.ErrorIs(t, err, farmem.ErrNodeDown, name)
		t.Logf("SIGSTOP of a compute process: %s failed after %v (down timeout %v)", name, took, down)
		require.Less(t, took, hangBound(down), name)
	}
	_, err = m.FAA(ctx, farmem.MakeAddr(1, 64<<10), 1)
	require.NoError(t, err, "the memory node keeps serving")
	require.NoError(t, peer.cmd.Process.Signal(syscall.SIGCONT))
	buf := make([]byte, 5)
	require.NoError(t, m.Read(ctx, slot, buf), "the resumed process serves again")
	// The write that failed with ErrNodeDown waited in the stopped process's socket: it may
	// or may not have applied, as ErrNodeDown says.
	require.Contains(t, []string{"hello", "xello"}, string(buf))

	// kill -9: at once, from the closed connection, not by waiting out a down timeout. A
	// second client with a down timeout of 30 s tells the two apart in wall time with room for
	// a machine many times slower than this one (where the first client's 500 ms could not): it
	// talks to the process before the kill, and its verb and Call after it must fail in well
	// under its timeout.
	const longDown = 30 * time.Second
	f2 := dial(t, cf, rdma.Options{DownTimeout: longDown})
	m2, err := f2.Open(context.Background(), f2.Hosted()[0])
	require.NoError(t, err)
	require.NotEqual(t, id, f2.ComputeID().Node(), "the stopped process kept its compute id")
	r, err = m2.Call(ctx, id, 1, []byte("echo"))
	require.NoError(t, err)
	require.Equal(t, "echo", string(r))
	peer.kill9()
	began := time.Now()
	_, err = m2.Call(ctx, id, 1, nil)
	require.ErrorIs(t, err, farmem.ErrNodeDown)
	require.ErrorIs(t, m2.Read(ctx, slot, buf), farmem.ErrNodeDown)
	took := time.Since(began)
	t.Logf("kill -9 of a compute process: reported after %v (down timeout %v)", took, longDown)
	require.Less(t, took, longDown/3, "a killed process is reported from its closed connection, not after the down timeout")
	_, err = m.Call(ctx, id, 1, nil)
	require.ErrorIs(t, err, farmem.ErrNodeDown)
}
