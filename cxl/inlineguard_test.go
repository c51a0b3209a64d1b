//go:build linux

package cxl_test

import (
	"context"
	"os"
	"path/filepath"
	"runtime/debug"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/farmem/farmem/atomics"
	"github.com/farmem/farmem/cxl"
	"github.com/farmem/farmem/farmem"
)

// A batch run inline guards against memory faults once for the whole batch, and leaves the
// goroutine's panic-on-fault setting as the caller had it, whether the batch faulted or not;
// the ops after a faulting one still run; DoHinted (Do without the batch's prefetches) the same.
func TestInlineBatchKeepsPanicOnFault(t *testing.T) {
	for _, hinted := range []bool{false, true} {
		t.Run(map[bool]string{false: "Do", true: "DoHinted"}[hinted], func(t *testing.T) { inlineKeepsPanicOnFault(t, hinted) })
	}
}

func inlineKeepsPanicOnFault(t *testing.T, hinted bool) {
	path := filepath.Join(shmDir(t), "region")
	r, err := cxl.Create(path, small)
	require.NoError(t, err)
	defer r.Close()
	_, m := attach(t, r, cxl.OpenOptions{})
	ctx := context.Background()
	do := m.Do
	if hinted {
		h, ok := m.(interface {
			DoHinted(context.Context, *farmem.Batch) error
		})
		require.True(t, ok, "a cxl client offers DoHinted")
		do = h.DoHinted
	}
	last := farmem.MakeAddr(2, 128<<10)
	first := farmem.MakeAddr(1, 64<<10)
	batch := func() *farmem.Batch {
		var b farmem.Batch
		b.Read(first, make([]byte, 64))
		b.Read(last, make([]byte, 64))
		b.Write(first, []byte("12345678"))
		b.Read(last, make([]byte, 8))
		b.FAA(first.Add(8), 1)
		return &b
	}
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(false))
	for _, set := range []bool{false, true} {
		debug.SetPanicOnFault(set)
		require.NoError(t, do(ctx, batch()))
		require.Equal(t, set, debug.SetPanicOnFault(set), "the setting after a batch")
	}

	info := r.Info()
	require.NoError(t, os.Truncate(path, int64(info.Size-info.MemorySize)))
	for _, set := range []bool{false, true} {
		debug.SetPanicOnFault(set)
		b := batch()
		require.ErrorIs(t, do(ctx, b), atomics.ErrFault)
		require.Equal(t, set, debug.SetPanicOnFault(set), "the setting after a faulting batch")
		for i, fault := range []bool{false, true, false, true, false} {
			_, err := b.Result(i)
			if fault {
				require.ErrorIs(t, err, atomics.ErrFault, "op %d", i)
				require.ErrorIs(t, err, farmem.ErrNodeDown, "op %d", i)
			} else {
				require.NoError(t, err, "op %d", i)
			}
		}
	}
}
