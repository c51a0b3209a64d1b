package local_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/farmem/farmem/farmem"
	"github.com/farmem/farmem/farmem/local"
)

// TestRestartVerbPostedBeforeAdopt: a batch posted to a node's old incarnation that arrives
// only once the node has restarted and been adopted fails with ErrNodeLost: its read returns
// nothing of the new memory and its write does not land there (a restart is atomic to verbs:
// a verb reaches only the incarnation adopted when it was posted). The batch's latency holds
// it on its way while the test restarts and adopts the node.
func TestRestartVerbPostedBeforeAdopt(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	const latency = time.Second // half of it out: far more than a Restart and Adopt take
	f, err := local.New(local.Options{Shape: local.Shape{MemorySize: 4096}, Latency: latency})
	require.NoError(t, err)
	t.Cleanup(func() { _ = f.Close() })
	m, err := f.Open(ctx, f.Hosted()[0])
	require.NoError(t, err)
	defer m.Close()
	a, w := farmem.MakeAddr(1, 64), farmem.MakeAddr(1, 128)
	require.NoError(t, m.Write(ctx, a, []byte("old incarnation")))

	got := make([]byte, 15)
	b := new(farmem.Batch)
	b.Read(a, got)
	b.Write(w, []byte("late write"))
	b.FAA(farmem.MakeAddr(1, 256), 1)
	p := m.Post(ctx, b)
	require.NoError(t, f.Restart(1))
	require.NoError(t, f.Adopt(ctx, 1))
	require.False(t, p.OpDone(0), "the batch arrived before the restart and the adoption (the test's premise)")

	require.NoError(t, p.Wait(ctx, len(b.Ops)))
	for i := range b.Ops {
		_, err := b.Result(i)
		require.ErrorIs(t, err, farmem.ErrNodeLost, "op %d", i)
	}
	require.Equal(t, make([]byte, 15), got, "the read returned nothing")

	// The new memory is as the restart left it, and verbs posted after the adoption reach it.
	wgot, word := make([]byte, 10), make([]byte, 8)
	b = new(farmem.Batch)
	b.Read(w, wgot)
	b.Read(farmem.MakeAddr(1, 256), word)
	b.Read(a, got)
	require.NoError(t, m.Do(ctx, b))
	require.Equal(t, make([]byte, 10), wgot, "the late write did not land in the new memory")
	require.Zero(t, binary.LittleEndian.Uint64(word), "nor did the late FAA")
	require.Equal(t, make([]byte, 15), got)
}

// TestRestartAtomicToApplyingVerbs: a restart waits for the verbs applying to the node when it
// begins, and no verb applies across it. One client writes a long range, word by word with
// the processor yielded between words (Tearing), and the node restarts once the write has
// begun and before it ends: the write lands wholly in the old incarnation's memory, which the
// restart then wipes, and nothing of it in the new one. Another client reads a long range of
// the old memory over and over meanwhile (a batch, then a single Read, in turn): every read
// that succeeds returns the old contents whole, never a range half wiped.
func TestRestartAtomicToApplyingVerbs(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	const size = 1 << 20
	f, err := local.New(local.Options{Shape: local.Shape{MemorySize: 4 * size}, Tearing: true})
	require.NoError(t, err)
	t.Cleanup(func() { _ = f.Close() })
	open := func() farmem.Memory {
		m, err := f.Open(ctx, f.Hosted()[0])
		require.NoError(t, err)
		t.Cleanup(func() { _ = m.Close() })
		return m
	}
	wm, rm, probe := open(), open(), open()
	old := bytes.Repeat([]byte{0xA5}, size)
	src, dst := farmem.MakeAddr(1, 0), farmem.MakeAddr(1, 2*size)
	require.NoError(t, wm.Write(ctx, src, old))

	var stop atomic.Bool
	var reads, lost atomic.Int64
	readErr := make(chan error, 1)
	go func() {
		buf := make([]byte, size)
		for i := 0; !stop.Load(); i++ {
			clear(buf)
			var err error
			if i%2 == 0 {
				b := new(farmem.Batch)
				b.Read(src, buf[:size/2])
				b.Read(src.Add(size/2), buf[size/2:])
				err = rm.Do(ctx, b)
			} else {
				err = rm.Read(ctx, src, buf)
			}
			switch {
			case err == nil && !bytes.Equal(buf, old):
				readErr <- errHalfWiped(buf)
				return
			case err == nil:
				reads.Add(1)
			case errors.Is(err, farmem.ErrNodeLost):
				lost.Add(1)
			default:
				readErr <- err
				return
			}
		}
		readErr <- nil
	}()
	for reads.Load() == 0 {
		time.Sleep(100 * time.Microsecond)
	}

	newer := bytes.Repeat([]byte{0x5A}, size)
	wrote := make(chan error, 1)
	go func() { wrote <- wm.Write(ctx, dst, newer) }()
	// Restart once the write has begun (its first word is there) and before it ended (its
	// last word is not).
	var w [8]byte
	for {
		require.NoError(t, probe.Read(ctx, dst.Add(size-8), w[:]))
		require.Zero(t, binary.LittleEndian.Uint64(w[:]), "the write ended before the restart (the test's premise)")
		require.NoError(t, probe.Read(ctx, dst, w[:]))
		if binary.LittleEndian.Uint64(w[:]) != 0 {
			break
		}
		time.Sleep(10 * time.Microsecond)
	}
	require.NoError(t, f.Restart(1))
	require.NoError(t, <-wrote, "the write applied wholly to the old incarnation")
	// The reader stops at its first read that failed or met a half-wiped range, or after one
	// failed with ErrNodeLost.
	for lost.Load() == 0 && len(readErr) == 0 {
		time.Sleep(100 * time.Microsecond)
	}
	stop.Store(true)
	require.NoError(t, <-readErr)
	t.Logf("%d whole reads of the old memory, %d failed with ErrNodeLost", reads.Load(), lost.Load())

	require.NoError(t, f.Adopt(ctx, 1))
	got := make([]byte, size)
	require.NoError(t, probe.Read(ctx, dst, got))
	require.Equal(t, make([]byte, size), got, "nothing of the old incarnation's write is in the new memory")
	require.NoError(t, probe.Read(ctx, src, got))
	require.Equal(t, make([]byte, size), got)
}

// errHalfWiped describes a read that returned a range partly wiped.
func errHalfWiped(buf []byte) error {
	zero := 0
	for _, c := range buf {
		if c == 0 {
			zero++
		}
	}
	return fmt.Errorf("a read that succeeded returned %d zero bytes of %d: a range half wiped", zero, len(buf))
}
