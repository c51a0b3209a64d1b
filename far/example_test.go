package far_test

import (
	"context"
	"fmt"

	"github.com/farmem/farmem/far"
	"github.com/farmem/farmem/farmem/local"
)

// exampleClient opens a local fabric with two memory nodes and one far.Client on it.
func exampleClient() (*far.Client, func()) {
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
	return c, func() { _ = c.Close(); _ = m.Close(); _ = f.Close() }
}

type Point struct{ X, Y, Z float64 }

// A single-writer pointer to a 24-byte struct: this client owns it and stores in one round
// trip; any client loads in one.
func ExampleNewPtr() {
	c, done := exampleClient()
	defer done()
	ctx := context.Background()
	p, err := far.NewPtr(ctx, c, Point{1, 2, 3}, far.PtrOptions[Point]{Mode: far.SingleWriter})
	if err != nil {
		panic(err)
	}
	if err := p.Store(ctx, c, Point{4, 5, 6}); err != nil {
		panic(err)
	}
	v, err := p.Load(ctx, c)
	fmt.Println(v, err, p.Mode())
	// Output: {4 5 6} <nil> single-writer
}

// LoadInto writes the value through a pointer: for a value of several words it spares the
// copies of returning it, and it costs the same round trip as Load.
func ExamplePtr_LoadInto() {
	c, done := exampleClient()
	defer done()
	ctx := context.Background()
	p, err := far.NewPtr(ctx, c, Point{1, 2, 3}, far.PtrOptions[Point]{Mode: far.SingleWriter})
	if err != nil {
		panic(err)
	}
	var v Point
	before := c.Memory().Stats()
	err = p.LoadInto(ctx, c, &v)
	fmt.Println(v, err, c.Memory().Stats().Sub(before).RoundTrips, "round trip")
	// Output: {1 2 3} <nil> 1 round trip
}

// Read-modify-write under the far lock: Update runs fn on the current value while holding the
// pointer's MCS lock, and swaps in the result.
func ExamplePtr_Update() {
	c, done := exampleClient()
	defer done()
	ctx := context.Background()
	p, err := far.NewPtr(ctx, c, Point{}, far.PtrOptions[Point]{Mode: far.Locked})
	if err != nil {
		panic(err)
	}
	for range 3 {
		if _, err := p.Update(ctx, c, func(v Point) Point { v.X++; return v }); err != nil {
			panic(err)
		}
	}
	v, _ := p.Load(ctx, c)
	fmt.Println(v.X)
	// Output: 3
}

// A value of at most 8 bytes is atomic in one round trip, and can be compared-and-swapped.
func ExamplePtr_CompareAndSwap() {
	c, done := exampleClient()
	defer done()
	ctx := context.Background()
	type state struct {
		Phase uint16
		Owner uint16
		Epoch uint32
	}
	p, err := far.NewPtr(ctx, c, state{Phase: 1}, far.PtrOptions[state]{})
	if err != nil {
		panic(err)
	}
	ok, _ := p.CompareAndSwap(ctx, c, state{Phase: 1}, state{Phase: 2, Owner: 7, Epoch: 1})
	v, _ := p.Load(ctx, c)
	fmt.Println(p.Mode(), ok, v)
	// Output: word true {2 7 1}
}

// Loads of many pointers on one node in one round trip.
func ExampleLoadMany() {
	c, done := exampleClient()
	defer done()
	ctx := context.Background()
	var ps []far.Ptr[Point]
	for i := range 4 {
		p, err := far.NewPtr(ctx, c, Point{X: float64(i)}, far.PtrOptions[Point]{Mode: far.SingleWriter, Node: 1})
		if err != nil {
			panic(err)
		}
		ps = append(ps, p)
	}
	out := make([]Point, len(ps))
	before := c.Memory().Stats()
	if err := far.LoadMany(ctx, c, ps, out); err != nil {
		panic(err)
	}
	fmt.Println(out, c.Memory().Stats().Sub(before).RoundTrips, "round trip")
	// Output: [{0 0 0} {1 0 0} {2 0 0} {3 0 0}] 1 round trip
}

func ExampleUint64() {
	c, done := exampleClient()
	defer done()
	ctx := context.Background()
	u, err := far.NewUint64(ctx, c, 0, 10)
	if err != nil {
		panic(err)
	}
	n, _ := u.Add(ctx, c, 5)
	ok, _ := u.CompareAndSwap(ctx, c, 15, 100)
	v, _ := u.Load(ctx, c)
	fmt.Println(n, ok, v)
	// Output: 15 true 100
}

func ExampleInt64() {
	c, done := exampleClient()
	defer done()
	ctx := context.Background()
	i, err := far.NewInt64(ctx, c, 0, 3)
	if err != nil {
		panic(err)
	}
	v, _ := i.Add(ctx, c, -5)
	fmt.Println(v)
	// Output: -2
}

func ExampleCounter() {
	c, done := exampleClient()
	defer done()
	ctx := context.Background()
	k, err := far.NewCounter(ctx, c, far.CounterOptions{})
	if err != nil {
		panic(err)
	}
	for range 10 {
		if err := k.Add(ctx, c, 2); err != nil {
			panic(err)
		}
	}
	v, _ := k.Read(ctx, c)
	fmt.Println(v, k.Shards(), "shards")
	// Output: 20 4 shards
}

func ExampleBinary() {
	codec, err := far.Binary[Point]()
	fmt.Println(codec.Size(), err)
	_, err = far.Binary[struct{ Name string }]()
	fmt.Println(err)
	// Output:
	// 24 <nil>
	// far: struct { Name string }.Name is string, which holds or may hold a Go pointer: far: type cannot live in far memory: farmem: invalid argument
}
