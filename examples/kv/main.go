// Command kv is the README's first program: it opens the key-value store on a CXL-style region
// file that outlives it (creating the region if it is missing), stores a key and reads it back.
// Run it twice, or from two shells at once: the second process finds the first one's store and
// key.
//
//	go run ./examples/kv [REGION]     default $TMPDIR/farmem-kv.region
//
// Cost: the region is 2 memory nodes of 64 MiB, allocated in the file when it is created.
package main

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log"
	"os"
	"path/filepath"

	"github.com/farmem/farmem/cxl"
	"github.com/farmem/farmem/kvstore"
)

func main() {
	path := filepath.Join(os.TempDir(), "farmem-kv.region")
	if len(os.Args) > 1 {
		path = os.Args[1]
	}
	v, err := run(context.Background(), path)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("greeting = %s\n", v)
}

func run(ctx context.Context, path string) ([]byte, error) {
	// README:begin
	// A region file that outlives this process: the next one (or another one now) opens it.
	region, err := cxl.Create(path, cxl.Options{Shape: cxl.Shape{MemoryNodes: 2, MemorySize: 64 << 20}})
	if errors.Is(err, fs.ErrExist) {
		region, err = cxl.OpenRegion(path)
	}
	if err != nil {
		return nil, err
	}
	defer region.Close()
	fabric, err := region.Attach(cxl.OpenOptions{}) // this process is one compute node
	if err != nil {
		return nil, err
	}
	defer fabric.Close()
	store, err := kvstore.Open(ctx, fabric, kvstore.Options{}) // RACE index, CIDER synchronization
	if err != nil {
		return nil, err
	}
	defer store.Close()
	if err := store.Insert(ctx, []byte("greeting"), []byte("hello")); err != nil && !errors.Is(err, kvstore.ErrExists) {
		return nil, err
	}
	v, err := store.Get(ctx, []byte("greeting"))
	// README:end
	return v, err
}
