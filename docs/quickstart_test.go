// Package docs_test runs the cluster quick start of docs/cluster.md: the sample cluster file,
// the secret, three farmemd on loopback started by docs/start-cluster.sh, concurrent benches,
// a key from another process, and a memory node killed, restarted and adopted.
package docs_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/farmem/farmem/bench"
	"github.com/farmem/farmem/bench/generator"
	"github.com/farmem/farmem/rdma"
)

// The sample cluster file parses, and names three memory nodes with stated sizes (so that
// commands work while one is down) and a secret file.
func TestClusterExampleParses(t *testing.T) {
	cl, err := rdma.LoadCluster("cluster.example")
	require.NoError(t, err)
	require.Len(t, cl.Memory, 3)
	for _, m := range cl.Memory {
		require.NotZero(t, m.Size, "memory %v states its size", m.ID)
	}
	require.Equal(t, "secret", filepath.Base(cl.SecretFile))
}

type quickstart struct {
	t       *testing.T
	dir     string // the cluster directory (cluster.txt, secret, logs, pids)
	bin     string
	env     []string
	cluster string
}

// run runs one command of the quick start in the cluster directory's parent, like a user in a
// shell, and returns its output and exit code.
func (q *quickstart) run(ctx context.Context, name string, args ...string) (stdout, stderr string, code int) {
	q.t.Helper()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir, cmd.Env = filepath.Dir(q.dir), q.env
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	if ee, ok := err.(*exec.ExitError); ok {
		return out.String(), errb.String(), ee.ExitCode()
	}
	require.NoError(q.t, err, "%s %v", name, args)
	return out.String(), errb.String(), 0
}

func (q *quickstart) farmem(ctx context.Context, args ...string) (string, string, int) {
	return q.run(ctx, filepath.Join(q.bin, "farmem"), args...)
}

func (q *quickstart) pid(id int) int {
	b, err := os.ReadFile(filepath.Join(q.dir, fmt.Sprintf("n%d.pid", id)))
	require.NoError(q.t, err)
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	require.NoError(q.t, err)
	return pid
}

// nodeState returns node id's state in `farmem status`'s table, and the command's exit code.
func (q *quickstart) nodeState(ctx context.Context, id int) (string, int, string) {
	out, errOut, code := q.farmem(ctx, "status", "--cluster", q.cluster)
	for _, l := range strings.Split(out, "\n") {
		f := strings.Fields(l)
		if len(f) >= 3 && f[0] == fmt.Sprintf("n%d", id) {
			return f[2], code, out + errOut
		}
	}
	return "", code, out + errOut
}

// waitState polls `farmem status` until node id is in state want.
func (q *quickstart) waitState(ctx context.Context, id int, want string) string {
	q.t.Helper()
	var last string
	for {
		st, _, out := q.nodeState(ctx, id)
		if st == want {
			return out
		}
		last = out
		select {
		case <-ctx.Done():
			q.t.Fatalf("node %d never became %s; last status:\n%s", id, want, last)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// freeAddrs returns n loopback addresses with free ports.
func freeAddrs(t *testing.T, n int) []string {
	var out []string
	for range n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		out = append(out, ln.Addr().String())
		require.NoError(t, ln.Close())
	}
	return out
}

// The quick start's commands, as docs/cluster.md gives them, with two changes it states: free
// ports in place of the sample file's 7071-7073 (which another process on the machine may
// hold), and benches shortened by flags (fewer records and clients, a shorter run, no warm-up).
func TestQuickStart(t *testing.T) {
	if runtime.GOOS != "linux" && runtime.GOOS != "darwin" {
		t.Skip("the start script is a POSIX shell script")
	}
	// A generous bound: the steps take about 20 s on an idle 2-core machine, and CI runs them
	// beside every other package's tests, with the binaries possibly built from a cold cache.
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	// Each step's start is logged with the time since the test began, so a failure shows where
	// the time went.
	start := time.Now()
	step := func(what string) { t.Logf("%6.1fs  %s", time.Since(start).Seconds(), what) }
	root, err := filepath.Abs("..")
	require.NoError(t, err)
	work := t.TempDir()
	q := &quickstart{t: t, dir: filepath.Join(work, "farmem-cluster"), bin: filepath.Join(work, "bin")}
	q.cluster = "farmem-cluster/cluster.txt"

	// go build -o bin/ ./cmd/farmem ./cmd/farmemd
	step("go build -o bin/ ./cmd/farmem ./cmd/farmemd")
	build := exec.CommandContext(ctx, filepath.Join(runtime.GOROOT(), "bin", "go"), "build", "-o", q.bin+"/", "./cmd/farmem", "./cmd/farmemd")
	build.Dir = root
	out, err := build.CombinedOutput()
	require.NoError(t, err, "%s", out)
	q.env = append(os.Environ(), "PATH="+q.bin+string(os.PathListSeparator)+os.Getenv("PATH"))

	// The sample file, on free ports.
	sample, err := os.ReadFile("cluster.example")
	require.NoError(t, err)
	text := string(sample)
	for i, a := range freeAddrs(t, 3) {
		text = strings.Replace(text, fmt.Sprintf("127.0.0.1:707%d", i+1), a, 1)
	}
	require.NoError(t, os.MkdirAll(q.dir, 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(q.dir, "cluster.txt"), []byte(text), 0o644))

	// farmemd secret > farmem-cluster/secret
	step("farmemd secret > farmem-cluster/secret")
	secret, errOut, code := q.run(ctx, filepath.Join(q.bin, "farmemd"), "secret")
	require.Equal(t, 0, code, errOut)
	require.NoError(t, os.WriteFile(filepath.Join(q.dir, "secret"), []byte(secret), 0o600))

	// docs/start-cluster.sh farmem-cluster
	step("docs/start-cluster.sh farmem-cluster")
	_, errOut, code = q.run(ctx, filepath.Join(root, "docs", "start-cluster.sh"), "farmem-cluster")
	require.Equal(t, 0, code, errOut)
	t.Cleanup(func() {
		for id := 1; id <= 3; id++ {
			if b, err := os.ReadFile(filepath.Join(q.dir, fmt.Sprintf("n%d.pid", id))); err == nil {
				if pid, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil {
					_ = syscall.Kill(pid, syscall.SIGTERM)
				}
			}
		}
	})
	for id := 1; id <= 3; id++ {
		q.waitState(ctx, id, "up")
	}

	// Two benches at once, twice in a row: the second pair finds its records loaded. Each
	// process uses the records it loaded, and a client's blocks go to memory node
	// (client id - 1) mod 3: with three clients (the guide's default is four) every process's
	// records are on all three nodes, so the kill below always hits some of them.
	step("Two benches at once, twice in a row")
	benchArgs := func(i int) []string {
		return []string{"bench", "--cluster", q.cluster, "--process", fmt.Sprintf("%d/2", i),
			"--records", "4000", "--clients", "3", "--duration", "300ms", "--warmup", "0s"}
	}
	for round := range 2 {
		var wg sync.WaitGroup
		res := make([][3]string, 2)
		for i := range 2 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				o, e, c := q.farmem(ctx, benchArgs(i)...)
				res[i] = [3]string{o, e, strconv.Itoa(c)}
			}()
		}
		wg.Wait()
		for i, r := range res {
			require.Equal(t, "0", r[2], "round %d, process %d:\n%s\n%s", round, i, r[0], r[1])
			require.Contains(t, r[0], "kvstore/tcp")
			if round == 1 {
				require.Contains(t, r[1], "not loading them again", "round 2, process %d", i)
			}
		}
	}

	// A key from a third process, read by a fourth.
	step("A key from a third process")
	_, errOut, code = q.farmem(ctx, "kv", "--cluster", q.cluster, "put", "greeting", "hello")
	require.Equal(t, 0, code, errOut)
	out2, errOut, code := q.farmem(ctx, "kv", "--cluster", q.cluster, "get", "greeting")
	require.Equal(t, 0, code, errOut)
	require.Equal(t, "hello\n", out2)

	// Kill memory node 3 while a bench runs: once the bench's ops reach it, SIGKILL.
	step("Kill memory node 3 while a bench runs")
	secretPath := filepath.Join(q.dir, "secret")
	n3 := regexp.MustCompile(`memory 3 (\S+)`).FindStringSubmatch(text)[1]
	opsOf := func() uint64 {
		o, _, c := q.run(ctx, filepath.Join(q.bin, "farmemd"), "status", "--addr", n3, "--secret-file", secretPath)
		require.Equal(t, 0, c)
		var st struct {
			Ops uint64 `json:"ops"`
		}
		require.NoError(t, json.Unmarshal([]byte(o), &st))
		return st.Ops
	}
	before := opsOf()
	type result struct {
		out, err string
		code     int
	}
	done := make(chan result, 1)
	go func() {
		args := benchArgs(0)
		// --duration: long enough for node 3 to serve 500 of its operations on a slow machine
		// (here it serves tens of thousands in the first second, so a machine ten times slower
		// still has room); after the kill the rest of it runs in failures, at a core's worth of
		// CPU, so no longer than that.
		args[len(args)-3] = "3s"
		o, e, c := q.farmem(ctx, args...)
		done <- result{o, e, c}
	}()
	for opsOf() < before+500 {
		select {
		case r := <-done:
			t.Fatalf("the bench ended before node 3 served 500 of its operations (exit %d):\n%s\n%s", r.code, r.out, r.err)
		case <-time.After(50 * time.Millisecond):
		}
	}
	require.NoError(t, syscall.Kill(q.pid(3), syscall.SIGKILL))
	r := <-done
	require.Equal(t, 1, r.code, "a bench that lost a node fails:\n%s\n%s", r.out, r.err)
	m := regexp.MustCompile(`(\d+) of (\d+) operations failed`).FindStringSubmatch(r.err)
	require.NotNil(t, m, r.err)
	failed, _ := strconv.Atoi(m[1])
	require.Positive(t, failed, r.err)
	t.Logf("the bench that lost node 3 exited %d: %s of %s operations failed", r.code, m[1], m[2])

	// farmem status: down (unreachable), then lost once it restarts, then adopted.
	step("farmem status")
	st, code, statusOut := q.nodeState(ctx, 3)
	require.Equal(t, "unreachable", st, statusOut)
	require.Equal(t, 1, code, "status fails while a node is down")

	// With node 3 down, kv still works for what does not need it: a put finds room on the
	// nodes that answer (a key whose index slot lives on node 3 fails, naming it).
	step("kv with node 3 down")
	var put string
	for i := 0; i < 8 && put == ""; i++ {
		k := fmt.Sprintf("outage%d", i)
		_, e, c := q.farmem(ctx, "kv", "--cluster", q.cluster, "put", k, "v"+k)
		if c != 0 {
			require.Regexp(t, `n3|node 3`, e, "put %s", k)
			continue
		}
		put = k
	}
	require.NotEmpty(t, put, "no put succeeded with node 3 down")
	t.Logf("with node 3 down: put of %s succeeded", put)
	o, e, c := q.farmem(ctx, "kv", "--cluster", q.cluster, "get", put)
	require.Equal(t, 0, c, e)
	require.Equal(t, "v"+put+"\n", o)
	_, errOut, code = q.run(ctx, filepath.Join(root, "docs", "start-cluster.sh"), "farmem-cluster", "3")
	require.Equal(t, 0, code, errOut)
	statusOut = q.waitState(ctx, 3, "lost")
	require.Contains(t, statusOut, "farmem adopt --cluster "+q.cluster+" 3")

	// Before the adoption, a key that lived on node 3 says so, and one elsewhere still reads.
	step("Before the adoption, a key")
	w, err := bench.LoadWorkload("a")
	require.NoError(t, err)
	var sawLost, sawValue bool
	for k := int64(0); k < 4000 && !(sawLost && sawValue); k += 37 {
		key := string(generator.AppendKey(nil, k, w.ZeroPadding, w.OrderedInserts))
		o, e, c := q.farmem(ctx, "kv", "--cluster", q.cluster, "get", key)
		require.NotContains(t, e, "no store here yet", key)
		switch {
		case c == 0:
			require.NotEmpty(t, o)
			sawValue = true
		case strings.Contains(e, "memory node 3 restarted and lost its memory"):
			require.Contains(t, e, "farmem adopt --cluster "+q.cluster+" 3")
			sawLost = true
		default:
			t.Fatalf("get %s: exit %d: %s", key, c, e)
		}
	}
	require.True(t, sawLost, "some record lived on node 3")
	require.True(t, sawValue, "some record lived elsewhere")

	out3, errOut, code := q.farmem(ctx, "adopt", "--cluster", q.cluster, "3")
	require.Equal(t, 0, code, errOut)
	require.Contains(t, out3, "adopted node n3")
	st, code, statusOut = q.nodeState(ctx, 3)
	require.Equal(t, "adopted", st, statusOut)
	require.Equal(t, 0, code, statusOut)
	// After it, the node takes new data, and what lived elsewhere still reads.
	step("After it, the node takes new data")
	_, errOut, code = q.farmem(ctx, "kv", "--cluster", q.cluster, "put", "after", "adoption")
	require.Equal(t, 0, code, errOut)
	out2, errOut, code = q.farmem(ctx, "kv", "--cluster", q.cluster, "get", "after")
	require.Equal(t, 0, code, errOut)
	require.Equal(t, "adoption\n", out2)
}
