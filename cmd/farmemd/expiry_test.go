package main

import (
	"context"
	"encoding/binary"
	"errors"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/farmem/farmem/farmem"
	"github.com/farmem/farmem/rdma"
)

// TestPausedNodeAppliesNoFailedRequest pauses a farmemd (SIGSTOP) with write requests queued
// in its socket, keeps it paused until the client has reported every one of them failed, and
// resumes it: the node reads the queued frames after their expiry and refuses them, so none of
// the distinct values the client saw fail appears in memory. Each failure is reported no
// sooner than the down timeout after its post (the request's expiry).
func TestPausedNodeAppliesNoFailedRequest(t *testing.T) {
	dir := t.TempDir()
	n1 := startDaemon(t, dir, 1, "4MiB", "127.0.0.1:0")
	const down = 500 * time.Millisecond
	cf := writeCluster(t, dir, []*daemon{n1}, "down-timeout 500ms\n")
	f := dial(t, cf, rdma.Options{})
	m, err := f.Open(context.Background(), f.Hosted()[0])
	require.NoError(t, err)
	t.Cleanup(func() { _ = m.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	base := farmem.MakeAddr(1, 64<<10)
	const n = 64
	require.NoError(t, m.Write(ctx, base, make([]byte, 8*n)), "connected, the words zeroed")

	require.NoError(t, n1.stop())
	batches := make([]*farmem.Batch, n)
	pends := make([]*farmem.Pending, n)
	posted := make([]time.Time, n)
	for i := range n {
		v := make([]byte, 8)
		binary.LittleEndian.PutUint64(v, 1000+uint64(i))
		batches[i] = &farmem.Batch{}
		batches[i].Write(base.Add(8*uint64(i)), v)
		posted[i] = time.Now()
		pends[i] = m.Post(ctx, batches[i])
		if i%8 == 7 {
			time.Sleep(down / 16) // spread the posts, so their expiries differ
		}
	}
	for i := range n {
		require.NoError(t, pends[i].Wait(ctx, 0))
		took := time.Since(posted[i])
		_, err := batches[i].Result(0)
		require.ErrorIs(t, err, farmem.ErrNodeDown, "write %d to a paused node", i)
		require.GreaterOrEqual(t, took, down, "write %d reported failed before its expiry", i)
	}
	time.Sleep(down / 4) // past every expiry by a margin for the clocks (one clock here)
	require.NoError(t, n1.cmd.Process.Signal(syscall.SIGCONT))

	got := make([]byte, 8*n)
	for attempt := 0; ; attempt++ {
		err = m.Read(ctx, base, got)
		if err == nil || !errors.Is(err, farmem.ErrNodeDown) || attempt == 20 {
			break
		}
		time.Sleep(down / 10)
	}
	require.NoError(t, err, "the resumed node serves again")
	for i := range n {
		require.Zero(t, binary.LittleEndian.Uint64(got[8*i:]), "write %d was reported failed, then applied", i)
	}
	// The node did read the queued frames (they were not lost on the way) and refused them.
	require.Eventually(t, func() bool {
		return strings.Contains(n1.logs.String(), "arrived after its expiry")
	}, 10*time.Second, 10*time.Millisecond, "farmemd logged no expired batch: %s", n1.logs.String())
}
