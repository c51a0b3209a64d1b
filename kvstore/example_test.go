package kvstore_test

import (
	"context"
	"fmt"

	"github.com/farmem/farmem/farmem/local"
	"github.com/farmem/farmem/kvstore"
)

// A store on an in-process fabric: Open formats the memory nodes and creates the store; a
// second Open of the same fabric finds it.
func Example() {
	f, err := local.New(local.Options{Shape: local.Shape{MemoryNodes: 2, ComputeNodes: 2}})
	if err != nil {
		panic(err)
	}
	defer f.Close()
	ctx := context.Background()
	s, err := kvstore.Open(ctx, f, kvstore.Options{})
	if err != nil {
		panic(err)
	}
	defer s.Close()
	_ = s.Put(ctx, []byte("greeting"), []byte("hello"))
	err = s.Insert(ctx, []byte("greeting"), []byte("again"))
	fmt.Println(err)

	other, err := kvstore.Open(ctx, f, kvstore.Options{NoCreate: true})
	if err != nil {
		panic(err)
	}
	defer other.Close()
	v, _ := other.Get(ctx, []byte("greeting"))
	fmt.Println(string(v), other.Descriptor().Index, other.Sync())

	ss, _ := other.Session(ctx) // one goroutine's client, for a hot loop
	_ = ss.Delete(ctx, []byte("greeting"))
	_ = ss.Close()
	_, err = s.Get(ctx, []byte("greeting"))
	fmt.Println(err)
	_, err = s.Scan(ctx, nil, nil, 10)
	fmt.Println(err)
	// Output:
	// kvstore: key exists
	// hello race cider
	// kvstore: key not found
	// kvstore: the store has no ordered index to scan: farmem: not supported
}
