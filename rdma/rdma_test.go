package rdma

import (
	"context"
	"io"
	"log/slog"
	"os"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/farmem/farmem/farmem"
	"github.com/farmem/farmem/farmem/farmemtest"
)

var testSecret = []byte("test-cluster-secret-0123456789")

func testLogger() *slog.Logger {
	if os.Getenv("FARMEM_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

// startServers starts n in-process memory nodes of size bytes on loopback.
func startServers(t testing.TB, n int, size uint64) ([]*Server, *Cluster) {
	t.Helper()
	return startProviderServers(t, n, size, "")
}

// startProviderServers starts n in-process memory nodes of size bytes on loopback, serving
// provider's data path.
func startProviderServers(t testing.TB, n int, size uint64, provider string) ([]*Server, *Cluster) {
	t.Helper()
	cl := &Cluster{}
	var servers []*Server
	for i := range n {
		s, err := NewServer(ServerOptions{Node: farmem.NodeID(i + 1), Size: size, Secret: testSecret, Logger: testLogger(), Provider: provider})
		require.NoError(t, err)
		addr, err := s.Listen("127.0.0.1:0")
		require.NoError(t, err)
		t.Cleanup(func() { _ = s.Close() })
		servers = append(servers, s)
		cl.Memory = append(cl.Memory, NodeAddr{ID: s.Node(), Addr: addr})
	}
	return servers, cl
}

func dialN(t testing.TB, cl *Cluster, n int, opts Options) []*Fabric {
	t.Helper()
	var fs []*Fabric
	for range n {
		o := opts
		if o.Secret == nil {
			o.Secret = testSecret
		}
		if o.Logger == nil {
			o.Logger = testLogger()
		}
		if os.Getenv("FARMEM_TEST_SHARED") == "1" {
			o.SharedConns = true // the whole suite over shared connections
		}
		f, err := Dial(context.Background(), cl, o)
		require.NoError(t, err)
		t.Cleanup(func() { _ = f.Close() })
		fs = append(fs, f)
	}
	return fs
}

func TestConformance(t *testing.T) {
	t.Parallel() // mostly waiting for down timeouts: overlap it with the other suites
	conformance(t, Options{})
}

// The conformance suite with the fabrics' clients sharing their connections to memory nodes:
// faults, round trips and order as with a connection per client.
func TestConformanceShared(t *testing.T) {
	t.Parallel()
	conformance(t, Options{SharedConns: true})
}

func conformance(t *testing.T, opts Options) {
	farmemtest.Run(t, func(t *testing.T, cfg farmemtest.Config) *farmemtest.Cluster {
		servers, cl := startServers(t, cfg.MemoryNodes, cfg.MemorySize)
		cl.DownTimeout = cfg.DownTimeout
		fs := dialN(t, cl, cfg.ComputeNodes, opts)
		var fabs []farmem.Fabric
		for _, f := range fs {
			fabs = append(fabs, f)
		}
		return &farmemtest.Cluster{Fabrics: fabs, Faults: NewInjector(servers, fs)}
	})
}
