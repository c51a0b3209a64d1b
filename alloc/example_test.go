package alloc_test

import (
	"context"
	"encoding/binary"
	"fmt"

	"github.com/farmem/farmem/alloc"
	"github.com/farmem/farmem/farmem"
	"github.com/farmem/farmem/farmem/local"
)

// A client formats the cluster (idempotent: every client may do it), opens its allocator, and
// updates a value out of place: it writes the new version to a fresh block, swings a shared
// pointer to it with CAS, and retires the old block, which comes back once no pinned reader can
// still hold it.
func Example() {
	ctx := context.Background()
	fabric, err := local.New(local.Options{Shape: local.Shape{MemoryNodes: 2}})
	if err != nil {
		panic(err)
	}
	defer fabric.Close()
	m, err := fabric.Open(ctx, fabric.Hosted()[0])
	if err != nil {
		panic(err)
	}
	defer m.Close()

	if err := alloc.FormatAll(ctx, m, alloc.FormatOptions{}); err != nil {
		panic(err)
	}
	a, err := alloc.New(ctx, m, alloc.Options{})
	if err != nil {
		panic(err)
	}
	defer a.Close()

	// The shared pointer: one word, used only with atomics.
	root, err := a.Alloc(ctx, 8, 8)
	if err != nil {
		panic(err)
	}
	update := func(value string) (old farmem.Addr, err error) {
		blk, err := a.Alloc(ctx, 64, 64)
		if err != nil {
			return 0, err
		}
		if err := m.Write(ctx, blk, []byte(value)); err != nil {
			return 0, err
		}
		if err := a.Pin(ctx); err != nil {
			return 0, err
		}
		defer func() {
			if uerr := a.Unpin(); err == nil {
				err = uerr // ErrPinExpired: what we read may be stale; retry
			}
		}()
		buf := make([]byte, 8)
		if err := m.Read(ctx, root, buf); err != nil {
			return 0, err
		}
		cur := binary.LittleEndian.Uint64(buf)
		if _, err := m.CAS(ctx, root, cur, uint64(blk)); err != nil {
			return 0, err
		}
		if cur != 0 {
			// Readers pinned now may still read the old version: retire, do not free.
			err = a.Retire(ctx, farmem.Addr(cur), 64)
		}
		return farmem.Addr(cur), err
	}
	if _, err := update("v1"); err != nil {
		panic(err)
	}
	v1, err := update("v2")
	if err != nil {
		panic(err)
	}
	fmt.Println("64-byte aligned:", v1.Offset()%64 == 0)

	// Once no client announces an epoch the old block could be read in, it is reused.
	if err := a.Quiesce(ctx); err != nil {
		panic(err)
	}
	n, err := a.Reclaim(ctx)
	if err != nil {
		panic(err)
	}
	again, err := a.Alloc(ctx, 64, 64)
	if err != nil {
		panic(err)
	}
	fmt.Println("reclaimed:", n, "reused:", again == v1)
	// Output:
	// 64-byte aligned: true
	// reclaimed: 1 reused: true
}
