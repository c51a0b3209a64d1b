package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// The test binary doubles as the farmem command: re-executed with FARMEM_TEST_MAIN set, it
// runs the CLI on its arguments instead of the tests.
func TestMain(m *testing.M) {
	if os.Getenv("FARMEM_TEST_MAIN") == "1" {
		main()
	}
	os.Exit(m.Run())
}

// farmemProcess starts the CLI as a child process.
func farmemProcess(ctx context.Context, t *testing.T, args ...string) *exec.Cmd {
	t.Helper()
	exe, err := os.Executable()
	require.NoError(t, err)
	cmd := exec.CommandContext(ctx, exe, args...)
	// A child built with the race detector sleeps a second at exit by default (its
	// atexit_sleep_ms option): without it, 40 short-lived children take 40 s of idle time.
	cmd.Env = append(os.Environ(), "FARMEM_TEST_MAIN=1", "GORACE="+os.Getenv("GORACE")+" atexit_sleep_ms=0")
	return cmd
}

// Two processes that create the same region at the same moment both succeed: the one that
// loses the race to publish it opens the winner's region. Five rounds: started together, the
// two race to publish in every round (a loser that failed instead of opening the winner's
// region failed 20 rounds of 20).
func TestKVConcurrentCreate(t *testing.T) {
	const rounds = 5
	dir := t.TempDir()
	began := time.Now()
	for round := range rounds {
		region := filepath.Join(dir, fmt.Sprintf("r%d.region", round))
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		var wg sync.WaitGroup
		errs := make([]error, 2)
		outs := make([]bytes.Buffer, 2)
		for i := range 2 {
			cmd := farmemProcess(ctx, t, "kv", "--region", region, "--mem-size", "4MiB",
				"put", fmt.Sprintf("k%d", i), fmt.Sprintf("v%d", i))
			cmd.Stdout, cmd.Stderr = &outs[i], &outs[i]
			require.NoError(t, cmd.Start())
			wg.Add(1)
			go func() {
				defer wg.Done()
				errs[i] = cmd.Wait()
			}()
		}
		wg.Wait()
		cancel()
		for i := range 2 {
			require.NoError(t, errs[i], "round %d, process %d: %s", round, i, outs[i].String())
		}
		for i := range 2 {
			out, errOut, code := cli(t, "kv", "--region", region, "get", fmt.Sprintf("k%d", i))
			require.Equal(t, 0, code, "round %d: %s", round, errOut)
			require.Equal(t, fmt.Sprintf("v%d\n", i), out)
		}
	}
	t.Logf("%d rounds of two processes creating one region: all succeeded, in %v", rounds, time.Since(began))
}

// Size flags say which bound a bad size breaks; output paths are checked before any work.
func TestFlagErrorsComeFirst(t *testing.T) {
	for _, c := range []struct{ size, want string }{
		{"1PiB", "too large"},
		{"300TiB", "too large"},
		{"512KiB", "too small"},
		{"0", "too small"},
		{"lots", "not a size"},
		{"12QiB", "not a size"},
	} {
		_, errOut, code := cli(t, "kv", "--region", filepath.Join(t.TempDir(), "r"), "--mem-size", c.size, "put", "k", "v")
		require.Equal(t, 2, code, "%s: %s", c.size, errOut)
		require.Contains(t, errOut, c.want, c.size)
	}

	// A plot path in a missing directory, or an unknown metric, fails at once: the benchmark
	// (ten seconds here) never starts, so no table is printed.
	for _, args := range [][]string{
		{"--svg", "/nonexistent/dir/x.svg"},
		{"--svg", filepath.Join(t.TempDir(), "x.svg"), "--metric", "happiness"},
	} {
		out, errOut, code := cli(t, append([]string{"bench", "--transport", "local", "--mem-size", "16MiB",
			"--records", "100", "--duration", "10s", "--peers", "none"}, args...)...)
		require.Equal(t, 2, code, "%v: %s", args, errOut)
		require.Empty(t, out, "%v", args)
		require.Contains(t, errOut, map[bool]string{true: "--svg", false: "--metric"}[len(args) == 2])
	}
}
