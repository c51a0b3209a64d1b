package farcoll_test

import (
	"context"
	"fmt"

	"github.com/farmem/farmem/far"
	"github.com/farmem/farmem/far/farcoll"
	"github.com/farmem/farmem/farmem"
	"github.com/farmem/farmem/farmem/local"
	"github.com/farmem/farmem/kvstore"
)

func exampleFabric() (*local.Fabric, *far.Client, func()) {
	f, err := local.New(local.Options{Shape: local.Shape{MemoryNodes: 2}})
	if err != nil {
		panic(err)
	}
	m, err := f.Open(context.Background(), f.Hosted()[0])
	if err != nil {
		panic(err)
	}
	c, err := far.NewClient(context.Background(), m, far.Options{})
	if err != nil {
		panic(err)
	}
	return f, c, func() { _ = c.Close(); _ = m.Close(); _ = f.Close() }
}

// An array over two memory nodes: a range that spans both is one round trip.
func ExampleArray() {
	_, c, done := exampleFabric()
	defer done()
	ctx := context.Background()
	a, err := farcoll.NewArray(ctx, c, 10, farcoll.ArrayOptions[int64]{Nodes: []farmem.NodeID{1, 2}})
	if err != nil {
		panic(err)
	}
	if err := a.WriteRange(ctx, c, 3, []int64{30, 40, 50, 60}); err != nil {
		panic(err)
	}
	out := make([]int64, 10)
	before := c.Memory().Stats()
	if err := a.ReadRange(ctx, c, 0, out); err != nil {
		panic(err)
	}
	fmt.Println(out, c.Memory().Stats().Sub(before).RoundTrips, "round trip")
	// Output: [0 0 0 30 40 50 60 0 0 0] 1 round trip
}

type Account struct {
	Balance int64
	Frozen  bool
}

// A typed map over kvstore: string keys, fixed-size struct values, no hand encoding.
func ExampleMap() {
	f, _, done := exampleFabric()
	defer done()
	ctx := context.Background()
	s, err := kvstore.Open(ctx, f, kvstore.Options{})
	if err != nil {
		panic(err)
	}
	defer s.Close()
	m, err := farcoll.NewMap[string, Account](s, nil, nil)
	if err != nil {
		panic(err)
	}
	if err := m.Put(ctx, "alice", Account{Balance: 100}); err != nil {
		panic(err)
	}
	v, err := m.Get(ctx, "alice")
	fmt.Println(v, err)
	_, err = m.Get(ctx, "bob")
	fmt.Println(err)
	// Output:
	// {100 false} <nil>
	// kvstore: key not found
}

func ExampleQueue() {
	_, c, done := exampleFabric()
	defer done()
	ctx := context.Background()
	q, err := farcoll.NewQueue(ctx, c, 2, farcoll.QueueOptions[uint32]{})
	if err != nil {
		panic(err)
	}
	fmt.Println(q.Enqueue(ctx, c, 1), q.Enqueue(ctx, c, 2), q.Enqueue(ctx, c, 3))
	a, _ := q.Dequeue(ctx, c)
	b, _ := q.Dequeue(ctx, c)
	_, err = q.Dequeue(ctx, c)
	fmt.Println(a, b, err)
	// Output:
	// <nil> <nil> farcoll: queue full
	// 1 2 farcoll: queue empty
}
