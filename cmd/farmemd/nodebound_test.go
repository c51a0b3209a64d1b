package main

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/farmem/farmem/farmem"
	"github.com/farmem/farmem/internal/wire"
)

// (d) The node-wide bound, with many clients at once: 2 authenticated adversaries pipeline
// 16 MiB reads and never read a reply, 3 others send 16 MiB writes and never read theirs, on a
// node whose two buffer budgets are --max-buffer 20MiB each. The budgets are never exceeded
// (each holds one large frame at a time; the other connections wait for it, reading nothing),
// every write is applied, every reader is closed after the write timeout, and the node's
// resident memory stays within its region and the Go memory its doc states for the whole node
// (the two budgets, each connection's buffers and the runtime's slack; farmemd makes that the
// collector's limit, so the budgets' large buffers, given back, do not double the heap).
func TestNodeBoundManyClients(t *testing.T) {
	parallel(t, 4*time.Second, true) // its own farmemd, copying 16 MiB frames
	const (
		region   = 32 << 20
		maxBuf   = 20 << 20
		readers  = 2
		writers  = 3
		perWrite = 2 // 16 MiB write frames per writer: each half of the region once
		maxConns = 16
	)
	dir := t.TempDir()
	d := startDaemon(t, dir, 1, fmt.Sprint(region), "127.0.0.1:0", "--metrics", "127.0.0.1:0",
		"--write-timeout", "1s", "--max-buffer", fmt.Sprint(maxBuf), "--max-conns", fmt.Sprint(maxConns), "--max-unauth", "16")
	maddr := metricsAddr(t, d)
	pid := d.cmd.Process.Pid
	base := rss(t, pid)
	// The writes make the region resident; the rest is the node's stated Go memory, which the
	// collector may pass by the allocation in progress (at most a largest frame).
	limit := memoryLimit(maxConns, 16, maxBuf)
	bound := base + raceShadow*(region+limit+wire.DefaultMaxFrame)

	buf := make([]byte, farmem.MaxOpBytes) // zeros: written, they still make the region's pages resident
	var writeFrames []byte
	var raws []*rawClient
	for range readers + writers {
		raws = append(raws, dialRaw(t, d.addr))
	}
	var senders sync.WaitGroup
	for i, r := range raws {
		var frames []byte
		if i >= readers {
			writeFrames = writeFrames[:0]
			for j := range perWrite {
				off := uint64(j%2) * farmem.MaxOpBytes
				writeFrames = append(writeFrames, batchFrame(uint64(j+1), r.w.Key, farmem.Op{Kind: farmem.OpWrite, Addr: farmem.MakeAddr(1, off), Buf: buf})...)
			}
			frames = append([]byte(nil), writeFrames...)
		} else {
			frames = nil
			for j := range 50 {
				frames = append(frames, batchFrame(uint64(j+1), r.w.Key, farmem.Op{Kind: farmem.OpRead, Addr: farmem.MakeAddr(1, 0), Buf: buf})...)
			}
		}
		senders.Go(func() { _, _ = r.nc.Write(frames) })
	}

	var peak int64
	var peakIn, peakOut float64
	deadline := time.Now().Add(60 * time.Second)
	for {
		peak = max(peak, rss(t, pid))
		fams := scrape(t, maddr)
		for _, b := range []string{"input", "output"} {
			held := metric(t, fams, "farmemd_buffer_bytes", "budget", b) + metric(t, fams, "farmemd_buffer_kept_bytes", "budget", b)
			require.LessOrEqual(t, held, float64(maxBuf), "the %s budget", b)
			if b == "input" {
				peakIn = max(peakIn, held)
			} else {
				peakOut = max(peakOut, held)
			}
		}
		written := metric(t, fams, "farmemd_verbs_total", "kind", "write")
		closed := metric(t, fams, "farmemd_connections_closed_total", "reason", "write_timeout")
		if written == writers*perWrite && closed >= readers {
			t.Logf("%d adversaries: %0.f writes applied, %0.f readers closed; waits for the input budget %0.f, the output budget %0.f",
				readers+writers, written, closed,
				metric(t, fams, "farmemd_buffer_waits_total", "budget", "input"), metric(t, fams, "farmemd_buffer_waits_total", "budget", "output"))
			require.Positive(t, metric(t, fams, "farmemd_buffer_waits_total", "budget", "output"), "readers waited for the output budget")
			break
		}
		select {
		case <-d.exited:
			t.Fatalf("farmemd died: %v", d.exit)
		default:
		}
		require.True(t, time.Now().Before(deadline), "after 60 s: %.0f of %d writes applied, %.0f of %d readers closed", written, writers*perWrite, closed, readers)
		time.Sleep(20 * time.Millisecond)
	}
	for _, r := range raws {
		_ = r.nc.Close()
	}
	senders.Wait()
	peak = max(peak, rss(t, pid))
	t.Logf("node RSS %d MiB at rest, peak %d MiB (region %d MiB, Go memory limit %d MiB; bound %d MiB); budgets of %d MiB held at most %.1f MiB (input), %.1f MiB (output)",
		base>>20, peak>>20, region>>20, limit>>20, bound>>20, maxBuf>>20, peakIn/(1<<20), peakOut/(1<<20))
	require.Less(t, peak, bound)
}
