package selcc_test

import (
	"context"
	"fmt"

	"github.com/farmem/farmem/alloc"
	"github.com/farmem/farmem/ds/selcc"
	"github.com/farmem/farmem/farmem/local"
)

// Two compute nodes share a line: the first writes it (a miss, then hits), the second reads it
// (the first downgrades and forwards the line).
func Example() {
	ctx := context.Background()
	f, _ := local.New(local.Options{Shape: local.Shape{ComputeNodes: 2}})
	defer f.Close()
	c, err := selcc.Open(ctx, f, selcc.Options{LineSize: 256})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer c.Close()
	nodes := f.Topology().ComputeNodes()
	m1, _ := f.Open(ctx, nodes[0])
	defer m1.Close()
	m2, _ := f.Open(ctx, nodes[1])
	defer m2.Close()
	_ = alloc.FormatAll(ctx, m1, alloc.FormatOptions{})
	a, _ := alloc.New(ctx, m1, alloc.Options{})
	defer a.Close()

	w, _ := c.Client(ctx, m1)
	g, _ := w.Alloc(ctx, a)
	before := m1.Stats().RoundTrips
	for i := range 3 {
		gd, _ := w.Lock(ctx, g)
		_ = gd.WriteUint64(ctx, 0, uint64(i+1))
		_ = gd.Unlock(ctx)
	}
	fmt.Println("writer round trips for 3 writes:", m1.Stats().RoundTrips-before)

	r, _ := c.Client(ctx, m2)
	gd, _ := r.RLock(ctx, g)
	v, _ := gd.ReadUint64(ctx, 0)
	_ = gd.Unlock(ctx)
	fmt.Println("reader sees:", v, "messages sent:", m2.Stats().Messages)
	// Output:
	// writer round trips for 3 writes: 1
	// reader sees: 3 messages sent: 1
}
