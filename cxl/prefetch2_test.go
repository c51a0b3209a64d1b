//go:build linux

package cxl_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/farmem/farmem/cxl"
	"github.com/farmem/farmem/farmem"
)

// Prefetch2 is two Prefetch hints in one call: like Prefetch it never faults, also on a memory
// node whose pages are gone (the region's file truncated), on a compute node's region, past a
// node's end or on a node that does not exist, and it changes nothing.
func TestPrefetch2NeverFaults(t *testing.T) {
	path := filepath.Join(shmDir(t), "region")
	r, err := cxl.Create(path, small)
	require.NoError(t, err)
	defer r.Close()
	f, m := attach(t, r, cxl.OpenOptions{})
	h, ok := m.(interface {
		Prefetch2(a farmem.Addr, n int, b farmem.Addr, m int)
	})
	require.True(t, ok, "a cxl client offers Prefetch2")
	ctx := context.Background()
	at := farmem.MakeAddr(1, 64<<10)
	require.NoError(t, m.Write(ctx, at, []byte("12345678")))
	info := r.Info()
	own := f.ID() // this client's compute node
	ranges := []struct {
		a farmem.Addr
		n int
	}{
		{at, 64}, {at, 1 << 20}, {farmem.MakeAddr(2, 0), 4096}, {farmem.MakeAddr(2, 128<<10), 64}, {farmem.MakeAddr(1, info.MemorySize), 64},
		{farmem.MakeAddr(1, info.MemorySize-8), 4096}, {farmem.MakeAddr(200, 0), 64}, {0, 64},
		{farmem.MakeAddr(own, 0), 4096}, {farmem.MakeAddr(own, 1<<40), 64}, {at, 0}, {at, -1},
	}
	hintAll := func() {
		for _, x := range ranges {
			for _, y := range ranges {
				h.Prefetch2(x.a, x.n, y.a, y.n)
			}
		}
	}
	hintAll()
	w := make([]byte, 8)
	require.NoError(t, m.Read(ctx, at, w))
	require.Equal(t, "12345678", string(w))

	require.NoError(t, os.Truncate(path, int64(info.Size-info.MemorySize)))
	hintAll() // pages of the last memory node are gone: a load would fault, a hint does not
}
