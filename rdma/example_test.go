package rdma_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"

	"github.com/farmem/farmem/farmem"
	"github.com/farmem/farmem/rdma"
)

// A memory node (what farmemd runs) and a compute process that dials it through a cluster
// file, both in one process here for the example.
func ExampleDial() {
	secret := []byte("an example cluster secret")
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	node, err := rdma.NewServer(rdma.ServerOptions{Node: 1, Size: 1 << 20, Secret: secret, Logger: quiet})
	if err != nil {
		panic(err)
	}
	defer node.Close()
	addr, err := node.Listen("127.0.0.1:0")
	if err != nil {
		panic(err)
	}

	cl, err := rdma.ParseCluster(strings.NewReader("memory 1 " + addr + "\ndown-timeout 500ms\n"))
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	f, err := rdma.Dial(ctx, cl, rdma.Options{Secret: secret, Logger: quiet})
	if err != nil {
		panic(err)
	}
	defer f.Close()
	m, err := f.Open(ctx, f.Hosted()[0])
	if err != nil {
		panic(err)
	}
	counter := farmem.MakeAddr(1, 64<<10) // clear of the node header
	for range 3 {
		if _, err := m.FAA(ctx, counter, 1); err != nil {
			panic(err)
		}
	}
	v, err := m.FAA(ctx, counter, 0)
	fmt.Println(f.ComputeID(), v, err, m.Stats().RoundTrips)
	// Output: 1 3 <nil> 4
}
