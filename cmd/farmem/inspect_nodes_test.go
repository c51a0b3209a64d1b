package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/farmem/farmem/farmem"
	"github.com/farmem/farmem/kvstore"
	"github.com/farmem/farmem/rdma"
)

// TestInspectClusterRestarts: inspect on a tcp cluster shows each memory node's incarnation,
// state and generation; after node 2 restarted and the store adopted it, node 2 is at
// generation 1 with its new incarnation, node 3 down, node 1 at generation 0.
func TestInspectClusterRestarts(t *testing.T) {
	dir := t.TempDir()
	secret := "inspect-test-secret-0123456789"
	require.NoError(t, os.WriteFile(filepath.Join(dir, "secret"), []byte(secret), 0o600))
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	servers := make([]*rdma.Server, 3)
	var lines []string
	for i := range servers {
		s, err := rdma.NewServer(rdma.ServerOptions{Node: farmem.NodeID(i + 1), Size: 8 << 20, Secret: []byte(secret), Logger: quiet})
		require.NoError(t, err)
		t.Cleanup(func() { _ = s.Close() })
		addr, err := s.Listen("127.0.0.1:0")
		require.NoError(t, err)
		servers[i] = s
		lines = append(lines, fmt.Sprintf("memory %d %s size=8MiB", i+1, addr))
	}
	cf := filepath.Join(dir, "cluster")
	require.NoError(t, os.WriteFile(cf, []byte(strings.Join(lines, "\n")+"\nsecret-file secret\ndown-timeout 2s\n"), 0o644))
	ctx := context.Background()
	cl, err := rdma.LoadCluster(cf)
	require.NoError(t, err)
	f, err := rdma.Dial(ctx, cl, rdma.Options{Logger: quiet})
	require.NoError(t, err)
	defer f.Close()
	s, err := kvstore.Open(ctx, f, kvstore.Options{})
	require.NoError(t, err)
	defer s.Close()
	require.NoError(t, s.Put(ctx, []byte("k"), []byte("v")))

	// Node 2 restarts at its address; the store adopts it.
	addr2 := servers[1].Addr()
	require.NoError(t, servers[1].Close())
	s2, err := rdma.NewServer(rdma.ServerOptions{Node: 2, Size: 8 << 20, Secret: []byte(secret), Logger: quiet})
	require.NoError(t, err)
	t.Cleanup(func() { _ = s2.Close() })
	_, err = s2.Listen(addr2)
	require.NoError(t, err)
	var rep kvstore.AdoptReport
	require.Eventually(t, func() bool { rep, err = s.Adopt(ctx, 2); return err == nil }, 20*time.Second, 20*time.Millisecond)
	require.Equal(t, uint64(1), rep.Generation)
	st2, err := f.Status(ctx, 2)
	require.NoError(t, err)
	require.NoError(t, servers[2].Close())

	out, errOut, code := cli(t, "inspect", "--cluster", cf)
	t.Logf("inspect:\n%s", out)
	require.Equal(t, 0, code, errOut)
	require.Contains(t, out, "memory nodes (restarts)")
	row := func(n int) []string {
		for _, l := range strings.Split(out, "\n") {
			f := strings.Fields(l)
			if len(f) >= 4 && f[0] == fmt.Sprintf("n%d", n) && (f[1] == "up" || f[1] == "down" || f[1] == "lost") {
				return f
			}
		}
		t.Fatalf("no restarts row for n%d in:\n%s", n, out)
		return nil
	}
	r1, r2, r3 := row(1), row(2), row(3)
	require.Equal(t, []string{"up", "0"}, []string{r1[1], r1[3]}, "%v", r1)
	require.Equal(t, []string{"up", fmt.Sprintf("%#016x", st2.Incarnation), "1"}, r2[1:4], "%v", r2)
	require.Equal(t, fmt.Sprintf("...%012x", st2.Incarnation&(1<<48-1)), r2[4])
	require.Equal(t, "down", r3[1], "%v", r3)
}
