package kvstore_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/farmem/farmem/cxl"
	"github.com/farmem/farmem/farmem"
	"github.com/farmem/farmem/kvstore"
	"github.com/farmem/farmem/rdma"
)

// TestCXL: a store on a cxl region in a temporary file; a second compute node attached to the
// same region opens the same store and sees the same data; a child process that opens the region
// by path, racing this one to create the store, finds the same store too; and histories of both
// attachments together are linearizable.
func TestCXL(t *testing.T) {
	t.Parallel()
	r, err := cxl.CreateTemp("", "kvstore-test-*", cxl.Options{Shape: cxl.Shape{MemoryNodes: 2, MemorySize: 16 << 20, ComputeNodes: 4}})
	require.NoError(t, err)
	t.Cleanup(func() { _ = r.Close() })
	ctx := context.Background()

	// The child process races this one to create the store.
	cctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	child := exec.CommandContext(cctx, os.Args[0], "-test.run=^TestCXLChild$", "-test.count=1")
	child.Env = append(os.Environ(), "KVSTORE_CXL_CHILD="+r.Path())
	var childOut strings.Builder
	child.Stdout, child.Stderr = &childOut, &childOut
	require.NoError(t, child.Start())

	f1, err := r.Attach(cxl.OpenOptions{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = f1.Close() })
	s1 := openStore(t, f1, kvstore.Options{Alloc: quietAlloc})
	require.NoError(t, s1.Put(ctx, []byte("parent"), []byte("one")))
	require.NoError(t, child.Wait(), "child: %s", childOut.String())
	require.Contains(t, childOut.String(), fmt.Sprintf("ROOTS %v\n", s1.Descriptor().Roots), "the child found another store")
	v, err := s1.Get(ctx, []byte("child"))
	require.NoError(t, err, "the child's write")
	require.Equal(t, "hello", string(v))

	f2, err := cxl.Open(r.Path(), cxl.OpenOptions{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = f2.Close() })
	require.NotEqual(t, f1.ID(), f2.ID())
	s2 := openStore(t, f2, kvstore.Options{Alloc: quietAlloc, NoCreate: true})
	require.Equal(t, s1.Descriptor(), s2.Descriptor())
	v, err = s2.Get(ctx, []byte("parent"))
	require.NoError(t, err)
	require.Equal(t, "one", string(v))
	require.NoError(t, s2.Update(ctx, []byte("parent"), []byte("two")))
	v, err = s1.Get(ctx, []byte("parent"))
	require.NoError(t, err)
	require.Equal(t, "two", string(v))

	m, err := f2.Open(ctx, f2.Hosted()[0])
	require.NoError(t, err)
	defer m.Close()
	info, err := kvstore.Inspect(ctx, m)
	require.NoError(t, err)
	require.Equal(t, s1.Descriptor(), info.Descriptor)

	w := mix
	w.ops = 300
	require.NoError(t, lincheckStores(t, f1.Runtime(), w, []*kvstore.Store{s1, s2}, 4))
}

// TestCXLChild is TestCXL's child process: it opens the region, the store (creating it if it
// gets there first), writes a key and prints the store's roots.
func TestCXLChild(t *testing.T) {
	t.Parallel()
	path := os.Getenv("KVSTORE_CXL_CHILD")
	if path == "" {
		t.Skip("run by TestCXL")
	}
	f, err := cxl.Open(path, cxl.OpenOptions{})
	require.NoError(t, err)
	defer f.Close()
	s, err := kvstore.Open(context.Background(), f, kvstore.Options{Alloc: quietAlloc})
	require.NoError(t, err)
	defer s.Close()
	require.NoError(t, s.Put(context.Background(), []byte("child"), []byte("hello")))
	fmt.Printf("ROOTS %v\n", s.Descriptor().Roots)
}

// TestTCP: two compute processes (in this process) dial two in-process memory nodes over
// loopback TCP, one with a connection per client and one whose clients share a connection per
// node, open the same store and see each other's writes; their histories together are
// linearizable.
func TestTCP(t *testing.T) {
	t.Parallel()
	secret := []byte("kvstore-test-secret-0123456789")
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	var lines []string
	for id := range 2 {
		sv, err := rdma.NewServer(rdma.ServerOptions{Node: farmem.NodeID(id + 1), Size: 16 << 20, Secret: secret, Logger: quiet})
		require.NoError(t, err)
		t.Cleanup(func() { _ = sv.Close() })
		addr, err := sv.Listen("127.0.0.1:0")
		require.NoError(t, err)
		lines = append(lines, fmt.Sprintf("memory %d %s", id+1, addr))
	}
	cl, err := rdma.ParseCluster(strings.NewReader(strings.Join(lines, "\n") + "\n"))
	require.NoError(t, err)
	ctx := context.Background()
	var stores []*kvstore.Store
	var rt farmem.Runtime
	for i := range 2 {
		// The second process's clients share their connections to the memory nodes.
		f, err := rdma.Dial(ctx, cl, rdma.Options{Secret: secret, Logger: quiet, SharedConns: i == 1})
		require.NoError(t, err)
		t.Cleanup(func() { _ = f.Close() })
		rt = f.Runtime()
		stores = append(stores, openStore(t, f, kvstore.Options{Alloc: quietAlloc}))
	}
	require.Equal(t, stores[0].Descriptor(), stores[1].Descriptor())
	require.NoError(t, stores[0].Insert(ctx, []byte("k"), []byte("v")))
	v, err := stores[1].Get(ctx, []byte("k"))
	require.NoError(t, err)
	require.Equal(t, "v", string(v))
	w := mix
	w.ops = 100
	require.NoError(t, lincheckStores(t, rt, w, stores, 2))
}
