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
// A batch of reads and writes only (plain: no atomic) takes the inline path's shortcut for such
// batches, and keeps the same guarantees, and counts what the general path counts: a read that
// faulted received nothing.
func TestInlineBatchKeepsPanicOnFault(t *testing.T) {
	for _, plain := range []bool{false, true} {
		for _, hinted := range []bool{false, true} {
			name := map[bool]string{false: "Do", true: "DoHinted"}[hinted] + map[bool]string{false: "", true: "/plain"}[plain]
			t.Run(name, func(t *testing.T) { inlineKeepsPanicOnFault(t, hinted, plain) })
		}
	}
}

func inlineKeepsPanicOnFault(t *testing.T, hinted, plain bool) {
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
		if !plain {
			b.FAA(first.Add(8), 1)
		}
		return &b
	}
	faults := []bool{false, true, false, true, false}[:len(batch().Ops)]
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
		before := m.Stats()
		require.ErrorIs(t, do(ctx, b), atomics.ErrFault)
		require.Equal(t, set, debug.SetPanicOnFault(set), "the setting after a faulting batch")
		d := m.Stats().Sub(before)
		require.Equal(t, uint64(1), d.RoundTrips)
		require.Equal(t, uint64(3), d.Verbs[farmem.TargetMemory][farmem.OpRead])
		require.Equal(t, uint64(1), d.Verbs[farmem.TargetMemory][farmem.OpWrite])
		atomic := uint64(len(faults) - 4) // 1 with the FAA: its 8 bytes each way
		require.Equal(t, 64+8*atomic, d.BytesIn, "only the read that did not fault received bytes")
		require.Equal(t, 8+8*atomic, d.BytesOut, "the write's 8 bytes")
		for i, fault := range faults {
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
