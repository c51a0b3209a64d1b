package nodearea_test

import (
	"context"
	"fmt"

	"github.com/farmem/farmem/alloc/nodearea"
	"github.com/farmem/farmem/farmem/local"
)

// Two clients of one compute node share a block of the node's shared area and the latch over
// its first word; nothing they do reaches a memory node.
func Example() {
	f, err := local.New(local.Options{})
	if err != nil {
		panic(err)
	}
	defer f.Close()
	ctx := context.Background()
	node := f.Hosted()[0]
	m1, _ := f.Open(ctx, node)
	m2, _ := f.Open(ctx, node)

	a, err := nodearea.Open(ctx, m1)
	if err != nil {
		panic(err)
	}
	blk, err := a.AllocZeroed(ctx, 64) // a latch word and 56 bytes it protects
	if err != nil {
		panic(err)
	}
	l1, _ := nodearea.NewLatch(m1, blk)
	l2, _ := nodearea.NewLatch(m2, blk)

	_ = l1.Lock(ctx)
	ok, _ := l2.TryLock(ctx)
	fmt.Println("second client got it while the first held it:", ok)
	_ = l1.Unlock(ctx)
	ok, _ = l2.TryLock(ctx)
	fmt.Println("after the release:", ok)
	_ = l2.Unlock(ctx)
	_ = a.Free(ctx, blk, 64)

	st := m1.Stats().Add(m2.Stats())
	fmt.Println("round trips:", st.RoundTrips)
	// Output:
	// second client got it while the first held it: false
	// after the release: true
	// round trips: 0
}
