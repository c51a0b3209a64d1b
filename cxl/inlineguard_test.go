//go:build linux

package cxl_test

import (
	"context"
	"encoding/binary"
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
// Batches of signaled verbs of memory nodes take the inline path's shortcut for such batches
// (reads and writes only, "rw"; with atomics, one CAS failing its comparison, "atomic"); one
// with an unsignaled atomic takes the general inline path ("unsignaled"). Each keeps the same
// guarantees and counts what the general path counts: a read that faulted received nothing,
// an atomic's result came back, a failed comparison is a failed CAS.
func TestInlineBatchKeepsPanicOnFault(t *testing.T) {
	for _, kind := range []string{"rw", "atomic", "unsignaled"} {
		for _, hinted := range []bool{false, true} {
			name := map[bool]string{false: "Do", true: "DoHinted"}[hinted] + "/" + kind
			t.Run(name, func(t *testing.T) { inlineKeepsPanicOnFault(t, hinted, kind) })
		}
	}
}

func inlineKeepsPanicOnFault(t *testing.T, hinted bool, kind string) {
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
		if kind != "rw" {
			b.FAA(first.Add(8), 1)
			b.CAS(first.Add(16), 12345, 1) // the word is 0: the comparison fails
		}
		if kind == "unsignaled" {
			b.Unsignaled(b.FAA(first.Add(24), 1))
		}
		return &b
	}
	faults := []bool{false, true, false, true, false, false, false}[:len(batch().Ops)]
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(false))
	for _, set := range []bool{false, true} {
		debug.SetPanicOnFault(set)
		b := batch()
		require.NoError(t, do(ctx, b))
		require.Equal(t, set, debug.SetPanicOnFault(set), "the setting after a batch")
		if kind != "rw" {
			v, err := b.Result(5)
			require.NoError(t, err)
			require.Zero(t, v, "the CAS returns the word it found")
		}
	}
	if kind != "rw" {
		var w [8]byte
		require.NoError(t, m.Read(ctx, first.Add(8), w[:]))
		require.Equal(t, uint64(2), binary.LittleEndian.Uint64(w[:]), "each batch's FAA added 1")
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
		var faas, cases, in, out uint64
		switch kind {
		case "atomic":
			faas, cases, in, out = 1, 1, 16, 8+16 // the FAA's 8 bytes each way, the CAS's 16 out and 8 back
		case "unsignaled":
			faas, cases, in, out = 2, 1, 16, 8+16+8 // and the unsignaled FAA's 8 out, nothing back
		}
		require.Equal(t, faas, d.Verbs[farmem.TargetMemory][farmem.OpFAA])
		require.Equal(t, cases, d.Verbs[farmem.TargetMemory][farmem.OpCAS])
		require.Equal(t, cases, d.FailedCAS, "the CAS's comparison failed")
		require.Equal(t, 64+in, d.BytesIn, "only the read that did not fault received bytes")
		require.Equal(t, 8+out, d.BytesOut, "the write's 8 bytes")
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
