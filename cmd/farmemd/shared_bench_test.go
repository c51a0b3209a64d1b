package main

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/farmem/farmem/farmem"
)

// TestClientsBench measures several clients of one fabric (one process) reading 64 bytes each,
// one verb at a time, in parallel goroutines against one farmemd on loopback: with 1, 4 and 16
// clients (FARMEM_BENCH_CLIENTS, a list), it reports the operations per second, the CPU time per
// operation of this process and of the node (/proc/<pid>/stat) and the read and write system
// calls per operation of each (/proc/<pid>/io). Each connection mode of benchModes (a
// connection per client, and shared connections) has its own fabric, and their windows
// alternate, FARMEM_BENCH_REPS windows of FARMEM_BENCH_WINDOW each (default 5 of 300ms), so
// background load weighs on both alike. It is skipped unless FARMEM_BENCH=1.
func TestClientsBench(t *testing.T) {
	if os.Getenv("FARMEM_BENCH") != "1" {
		t.Skip("set FARMEM_BENCH=1")
	}
	ns := []int{1, 4, 16}
	if s := os.Getenv("FARMEM_BENCH_CLIENTS"); s != "" {
		ns = nil
		for _, f := range strings.Fields(strings.ReplaceAll(s, ",", " ")) {
			n, err := strconv.Atoi(f)
			require.NoError(t, err)
			ns = append(ns, n)
		}
	}
	reps, window := 5, 300*time.Millisecond
	if s := os.Getenv("FARMEM_BENCH_REPS"); s != "" {
		var err error
		reps, err = strconv.Atoi(s)
		require.NoError(t, err)
	}
	if s := os.Getenv("FARMEM_BENCH_WINDOW"); s != "" {
		var err error
		window, err = time.ParseDuration(s)
		require.NoError(t, err)
	}
	dir := t.TempDir()
	d := startDaemonUnder(t, serverWrap(), dir, 1, "64MiB", "127.0.0.1:0")
	cluster := writeCluster(t, dir, []*daemon{d}, "clients-per-node 64\n")
	ctx := context.Background()
	self, node := os.Getpid(), d.cmd.Process.Pid
	most := 0
	for _, n := range ns {
		most = max(most, n)
	}
	modes := benchModes()
	ms := make([][]farmem.Memory, len(modes))
	for k, mode := range modes {
		f := dial(t, cluster, mode.opts)
		for range most {
			m, err := f.Open(ctx, f.Hosted()[0])
			require.NoError(t, err)
			require.NoError(t, m.Read(ctx, farmem.MakeAddr(1, 64<<10), make([]byte, 64))) // connected
			ms[k] = append(ms[k], m)
		}
	}
	t.Logf("cpu: %s, %d CPUs; %d windows of %v per row, the modes alternated", cpuModel(), machineCPUs(), reps, window)
	t.Logf("%-11s %7s %10s %10s %10s %14s %14s", "mode", "clients", "ops/s", "cpu-ns/op", "node-ns/op", "client r+w/op", "node r+w/op")
	for _, n := range ns {
		type row struct {
			ops    uint64
			sc, sn ioCount
			cc, cn cpuCount
		}
		rows := make([]row, len(modes))
		for range reps {
			for k := range modes {
				r := &rows[k]
				var stop atomic.Bool
				var wg sync.WaitGroup
				var total atomic.Uint64
				r.sc.mark(t, self, true)
				r.sn.mark(t, node, true)
				r.cc.mark(self, true)
				r.cn.mark(node, true)
				for i := range n {
					wg.Add(1)
					go func(m farmem.Memory, i int) {
						defer wg.Done()
						buf := make([]byte, 64)
						a := farmem.MakeAddr(1, uint64(64<<10+i*4096))
						k := uint64(0)
						for !stop.Load() {
							if err := m.Read(ctx, a, buf); err != nil {
								t.Error(err)
								return
							}
							k++
						}
						total.Add(k)
					}(ms[k][i], i)
				}
				time.Sleep(window)
				stop.Store(true)
				wg.Wait()
				r.sc.mark(t, self, false)
				r.sn.mark(t, node, false)
				r.cc.mark(self, false)
				r.cn.mark(node, false)
				r.ops += total.Load()
			}
		}
		secs := float64(reps) * window.Seconds()
		for k, mode := range modes {
			r := rows[k]
			o := float64(r.ops)
			t.Logf("%-11s %7d %10.0f %10.0f %10.0f %14s %14s", mode.name, n, o/secs, r.cc.t.Seconds()*1e9/o, r.cn.t.Seconds()*1e9/o, r.sc.per(o), r.sn.per(o))
		}
	}
	fmt.Println()
}
