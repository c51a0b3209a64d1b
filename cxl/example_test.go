//go:build linux

package cxl_test

import (
	"context"
	"fmt"

	"github.com/farmem/farmem/cxl"
	"github.com/farmem/farmem/farmem"
)

// One process: a memfd region with three memory nodes, one compute node, a client. Other
// processes could attach to r.Path() while r is open.
func Example() {
	r, err := cxl.Create("", cxl.Options{Shape: cxl.Shape{MemoryNodes: 3, MemorySize: 1 << 20}})
	if err != nil {
		panic(err)
	}
	defer r.Close()
	f, err := r.Attach(cxl.OpenOptions{})
	if err != nil {
		panic(err)
	}
	defer f.Close()
	ctx := context.Background()
	m, err := f.Open(ctx, f.ID())
	if err != nil {
		panic(err)
	}
	defer m.Close()
	counter := farmem.MakeAddr(2, 64<<10) // memory node 2, clear of its header
	for range 3 {
		if _, err := m.FAA(ctx, counter, 1); err != nil {
			panic(err)
		}
	}
	prev, err := m.FAA(ctx, counter, 0)
	fmt.Println(f.ID(), len(f.Topology().MemoryNodes()), prev, err)
	// Output: c1 3 3 <nil>
}
