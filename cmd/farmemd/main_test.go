package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/farmem/farmem/farmem"
	"github.com/farmem/farmem/rdma"
)

// The test binary doubles as the daemon and as a client process: re-executed with
// FARMEMD_TEST_ROLE set, it runs that instead of the tests.
func TestMain(m *testing.M) {
	switch os.Getenv("FARMEMD_TEST_ROLE") {
	case "daemon":
		sig := make(chan os.Signal, 1)
		signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
		os.Exit(run(os.Args[1:], os.Stdout, os.Stderr, sig))
	case "client":
		os.Exit(clientMain(os.Args[1:]))
	case "peer":
		os.Exit(peerMain(os.Args[1:]))
	}
	flag.Parse()
	explicit := false
	flag.Visit(func(f *flag.Flag) { explicit = explicit || f.Name == "test.parallel" })
	if explicit {
		// The gate admits tests as they arrive, as many at once as -parallel says.
		testGate.all = flag.Lookup("test.parallel").Value.(flag.Getter).Get().(int)
	} else {
		// The gate (gate_test.go) decides how many run at once, longest first; Go's limit
		// (GOMAXPROCS, two in CI) is raised out of its way.
		testGate.ordered = true
		_ = flag.Set("test.parallel", strconv.Itoa(1000))
	}
	os.Exit(m.Run())
}

const secret = "farmemd-test-secret-0123456789\n"

// syncBuffer collects a child's output while it runs.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// daemon is a farmemd process.
type daemon struct {
	id   farmem.NodeID
	addr string
	cmd  *exec.Cmd
	logs *syncBuffer
	// addrFile is where the process writes the address it listens on, once it does.
	addrFile string

	exited chan struct{} // closed when the process has been reaped
	exit   error
}

func writeSecret(t testing.TB, dir, name, text string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	require.NoError(t, os.WriteFile(p, []byte(text), 0o600))
	return p
}

// startDaemon starts farmemd as a separate process and waits until it listens.
func startDaemon(t testing.TB, dir string, id farmem.NodeID, size, listen string, extra ...string) *daemon {
	t.Helper()
	return startDaemonUnder(t, nil, dir, id, size, listen, extra...)
}

// startDaemons starts farmemd processes for nodes 1..n, all of size, on loopback, and waits
// until every one listens: they start at once, so the wait is about one process's start-up
// (the race detector's runtime makes that tens of milliseconds), not n of them. Each listens
// on a port below the kernel's ephemeral range (restartableAddr), tried again elsewhere if
// another listener holds it.
func startDaemons(t testing.TB, dir string, n int, size string, extra ...string) []*daemon {
	t.Helper()
	ds := make([]*daemon, n)
	for i := range ds {
		ds[i] = spawnDaemon(t, nil, dir, farmem.NodeID(i+1), size, restartableAddr(), extra...)
	}
	for i := range ds {
		for try := 0; ; try++ {
			err := ds[i].listening()
			if err == nil {
				break
			}
			if try < 10 && strings.Contains(ds[i].logs.String(), "address already in use") {
				ds[i] = spawnDaemon(t, nil, dir, farmem.NodeID(i+1), size, restartableAddr(), extra...)
				continue
			}
			t.Fatal(err)
		}
	}
	return ds
}

// restartableAddr is a loopback address for a farmemd that may be restarted at it: a port
// below the kernel's ephemeral range. A port the kernel picks for a listener (port 0) comes
// from the range it also gives outgoing connections as their local ports, so with many
// connections opened meanwhile one of them may hold the port by the time the process
// restarts there (bind: address already in use).
func restartableAddr() string {
	lo := 32768
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		_, _ = fmt.Sscan(string(b), &lo)
	}
	span := min(lo-1024, 16384)
	if span < 1024 {
		return "127.0.0.1:0"
	}
	return fmt.Sprintf("127.0.0.1:%d", lo-1-rand.IntN(span))
}

// startDaemonUnder is startDaemon with the process started by the command wrap (its
// arguments then farmemd's; none: farmemd itself), such as ip netns exec.
func startDaemonUnder(t testing.TB, wrap []string, dir string, id farmem.NodeID, size, listen string, extra ...string) *daemon {
	t.Helper()
	d := spawnDaemon(t, wrap, dir, id, size, listen, extra...)
	d.awaitListening(t)
	return d
}

// spawnDaemon starts farmemd (under wrap, if any) without waiting for it to listen.
func spawnDaemon(t testing.TB, wrap []string, dir string, id farmem.NodeID, size, listen string, extra ...string) *daemon {
	t.Helper()
	secretFile := filepath.Join(dir, "secret")
	if _, err := os.Stat(secretFile); err != nil {
		writeSecret(t, dir, "secret", secret)
	}
	addrFile := filepath.Join(dir, fmt.Sprintf("addr-%d-%d", id, time.Now().UnixNano()))
	args := append([]string{"--id", fmt.Sprint(uint16(id)), "--size", size, "--secret-file", secretFile,
		"--addr-file", addrFile, "--listen", listen, "--log-level", "debug"}, extra...)
	cmd := exec.Command(os.Args[0], args...)
	if len(wrap) > 0 {
		cmd = exec.Command(wrap[0], append(append(wrap[1:len(wrap):len(wrap)], os.Args[0]), args...)...)
	}
	cmd.Env = append(os.Environ(), "FARMEMD_TEST_ROLE=daemon", noExitSleep())
	d := &daemon{id: id, cmd: cmd, logs: &syncBuffer{}, exited: make(chan struct{}), addrFile: addrFile}
	cmd.Stderr = d.logs
	require.NoError(t, cmd.Start())
	go func() {
		d.exit = cmd.Wait()
		close(d.exited)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGCONT)
		_ = cmd.Process.Kill()
		d.wait()
		if t.Failed() {
			t.Logf("farmemd n%d logs:\n%s", id, d.logs.String())
		}
	})
	return d
}

// awaitListening waits until the daemon has written the address it listens on, and sets addr.
func (d *daemon) awaitListening(t testing.TB) {
	t.Helper()
	if err := d.listening(); err != nil {
		t.Fatal(err)
	}
}

// listening waits until the daemon has written the address it listens on and sets addr, or
// says why it did not.
func (d *daemon) listening() error {
	deadline := time.Now().Add(30 * time.Second)
	for {
		b, err := os.ReadFile(d.addrFile)
		if err == nil {
			d.addr = strings.TrimSpace(string(b))
			return nil
		}
		select {
		case <-d.exited:
			return fmt.Errorf("farmemd n%d exited (%v): %s", d.id, d.exit, d.logs.String())
		case <-time.After(2 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("farmemd n%d did not start: %s", d.id, d.logs.String())
		}
	}
}

func (d *daemon) wait() error {
	<-d.exited
	return d.exit
}

// stop sends SIGSTOP and returns once the kernel reports the process stopped, so nothing it
// does afterwards can be a leftover of before the signal.
func (d *daemon) stop() error {
	if err := d.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		return err
	}
	stat := fmt.Sprintf("/proc/%d/stat", d.cmd.Process.Pid)
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		b, err := os.ReadFile(stat)
		if err != nil {
			return err
		}
		// The state follows the parenthesized command name.
		if i := bytes.LastIndexByte(b, ')'); i >= 0 && i+2 < len(b) && (b[i+2] == 'T' || b[i+2] == 't') {
			return nil
		}
	}
	return fmt.Errorf("farmemd n%d did not stop", d.id)
}

// kill9 kills the daemon with SIGKILL and reaps it, so its sockets are gone on return.
func (d *daemon) kill9() {
	_ = d.cmd.Process.Signal(syscall.SIGKILL)
	_ = d.wait()
}

func quietLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// writeCluster writes a cluster file naming the daemons and returns its path.
func writeCluster(t testing.TB, dir string, ds []*daemon, extra string) string {
	t.Helper()
	var b strings.Builder
	for _, d := range ds {
		fmt.Fprintf(&b, "memory %d %s\n", d.id, d.addr)
	}
	b.WriteString("secret-file secret\n" + extra)
	p := filepath.Join(dir, fmt.Sprintf("cluster-%d", time.Now().UnixNano()))
	require.NoError(t, os.WriteFile(p, []byte(b.String()), 0o644))
	return p
}

func dial(t testing.TB, clusterFile string, opts rdma.Options) *rdma.Fabric {
	t.Helper()
	cl, err := rdma.LoadCluster(clusterFile)
	require.NoError(t, err)
	if opts.Logger == nil {
		opts.Logger = quietLogger()
	}
	f, err := rdma.Dial(context.Background(), cl, opts)
	require.NoError(t, err)
	t.Cleanup(func() { _ = f.Close() })
	return f
}

func TestStatusAndShutdown(t *testing.T) {
	dir := t.TempDir()
	d := startDaemon(t, dir, 3, "8MiB", "127.0.0.1:0", "--backing", "file:"+filepath.Join(dir, "mem"), "--log-format", "json")
	var out, errOut bytes.Buffer
	require.Equal(t, 0, run([]string{"status", "--addr", d.addr, "--secret-file", filepath.Join(dir, "secret")}, &out, &errOut, nil), errOut.String())
	var st rdma.NodeStatus
	require.NoError(t, json.Unmarshal(out.Bytes(), &st))
	require.Equal(t, farmem.NodeID(3), st.Node)
	require.Equal(t, uint64(8<<20), st.Size)
	require.True(t, st.Healthy)
	require.Contains(t, st.Backing, "file:")

	err := rdma.RemoteFault(context.Background(), d.addr, []byte(strings.TrimSpace(secret)), rdma.Fault{Kind: "crash-after"})
	require.ErrorIs(t, err, farmem.ErrNotSupported, "fault injection is off unless --allow-faults")

	bad := writeSecret(t, dir, "bad", "not-the-cluster-secret-xxxxxx")
	errOut.Reset()
	require.Equal(t, 1, run([]string{"status", "--addr", d.addr, "--secret-file", bad}, &out, &errOut, nil))
	require.Contains(t, errOut.String(), "authentication failed")

	require.NoError(t, d.cmd.Process.Signal(syscall.SIGTERM))
	require.NoError(t, d.wait(), "exit status after SIGTERM")
	logs := d.logs.String()
	require.Contains(t, logs, `"msg":"shutting down"`, "structured (JSON) logs")
	require.Contains(t, logs, `"msg":"connection refused: authentication failed`)
	require.Contains(t, logs, `"msg":"closed"`)
}

func TestBadFlags(t *testing.T) {
	dir := t.TempDir()
	sf := writeSecret(t, dir, "secret", secret)
	for _, args := range [][]string{
		{"--size", "1M", "--secret-file", sf}, // no id
		{"--id", "1", "--secret-file", sf},    // no size
		{"--id", "1", "--size", "1M"},         // no secret
		{"--id", "1", "--size", "1M", "--secret-file", sf, "--backing", "tape"},
		{"--id", "1", "--size", "1M", "--secret-file", sf, "--backing", "devdax:/dev/nonexistent-dax"},
		{"--id", "1", "--size", "1M", "--secret-file", sf, "--provider", "carrier-pigeon"},
		{"--id", "1", "--size", "1M", "--secret-file", writeSecret(t, dir, "short", "short")},
		{"--id", "1", "--size", "1M", "--secret-file", sf, "--max-buffer", "lots"},
		{"--id", "1", "--size", "1M", "--secret-file", sf, "--max-unauth", "-1"},
		{"--id", "1", "--size", "1M", "--secret-file", sf, "--metrics", "256.0.0.1:0"},
	} {
		var out, errOut bytes.Buffer
		require.NotEqual(t, 0, run(args, &out, &errOut, nil), "%v", args)
		require.NotEmpty(t, errOut.String(), "%v: says why", args)
	}
}

// clientMain is a client process: it joins the cluster, runs FAAs on one word, and prints the
// values it got as JSON. It exits 3 if the cluster refused its secret.
func clientMain(args []string) int {
	fs := flag.NewFlagSet("client", flag.ContinueOnError)
	clusterFile := fs.String("cluster", "", "cluster file")
	secretFile := fs.String("secret-file", "", "secret file (default: the cluster's)")
	addr := fs.String("addr", "", "the word to add to")
	n := fs.Int("n", 100, "FAAs to run")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	fail := func(err error) int {
		fmt.Fprintln(os.Stderr, "client:", err)
		if errors.Is(err, rdma.ErrAuth) {
			return 3
		}
		return 1
	}
	cl, err := rdma.LoadCluster(*clusterFile)
	if err != nil {
		return fail(err)
	}
	var opts rdma.Options
	opts.Logger = quietLogger()
	if *secretFile != "" {
		if opts.Secret, err = rdma.ReadSecret(*secretFile); err != nil {
			return fail(err)
		}
	}
	a, err := farmem.ParseAddr(*addr)
	if err != nil {
		return fail(err)
	}
	ctx := context.Background()
	f, err := rdma.Dial(ctx, cl, opts)
	if err != nil {
		return fail(err)
	}
	defer f.Close()
	m, err := f.Open(ctx, f.Hosted()[0])
	if err != nil {
		return fail(err)
	}
	out := clientReport{Compute: f.ComputeID()}
	for range *n {
		prev, err := m.FAA(ctx, a, 1)
		if err != nil {
			return fail(err)
		}
		out.Prevs = append(out.Prevs, prev)
	}
	out.Stats = m.Stats()
	if err := json.NewEncoder(os.Stdout).Encode(out); err != nil {
		return fail(err)
	}
	return 0
}

type clientReport struct {
	Compute farmem.ComputeID
	Prevs   []uint64
	Stats   farmem.Stats
}

// startClient runs clientMain in a new process.
func startClient(t *testing.T, args ...string) (*exec.Cmd, *bytes.Buffer, *syncBuffer) {
	t.Helper()
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(os.Environ(), "FARMEMD_TEST_ROLE=client", noExitSleep())
	var out bytes.Buffer
	errOut := &syncBuffer{}
	cmd.Stdout, cmd.Stderr = &out, errOut
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	return cmd, &out, errOut
}

// peerMain is a compute process that serves its region and an echo handler (method 1) until it
// is killed; it prints its compute id once ready.
func peerMain(args []string) int {
	fs := flag.NewFlagSet("peer", flag.ContinueOnError)
	clusterFile := fs.String("cluster", "", "cluster file")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	cl, err := rdma.LoadCluster(*clusterFile)
	if err != nil {
		fmt.Fprintln(os.Stderr, "peer:", err)
		return 1
	}
	f, err := rdma.Dial(context.Background(), cl, rdma.Options{Logger: quietLogger()})
	if err != nil {
		fmt.Fprintln(os.Stderr, "peer:", err)
		return 1
	}
	if err := f.Handle(f.Hosted()[0], 1, func(_ context.Context, _ farmem.Memory, _ farmem.ClientID, req []byte) ([]byte, error) {
		return req, nil
	}); err != nil {
		fmt.Fprintln(os.Stderr, "peer:", err)
		return 1
	}
	fmt.Println(f.ComputeID())
	select {}
}

// noExitSleep is the environment entry that spares a child built with the race detector the
// second it sleeps at exit by default (its atexit_sleep_ms option), keeping any other options.
func noExitSleep() string {
	return "GORACE=" + os.Getenv("GORACE") + " atexit_sleep_ms=0"
}
