package main

import (
	"context"
	"os"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/farmem/farmem/farmem"
	"github.com/farmem/farmem/rdma"
)

// TestSyscallsPerRoundTrip counts the read and write system calls that one verb at a time
// costs the client process and the farmemd process, as the kernel counts them (syscr and syscw
// of /proc/<pid>/io): one write and one read on each side per round trip. A net.Conn read
// tries the socket before it waits for the poller, so a reader that waits for each answer
// would make two reads per round trip on each side; the bound below leaves room for the few
// calls the processes make besides (a log line, a lease renewal), not for a second read.
func TestSyscallsPerRoundTrip(t *testing.T) {
	if _, err := os.ReadFile("/proc/self/io"); err != nil {
		t.Skip("no /proc/self/io here:", err)
	}
	dir := t.TempDir()
	d := startDaemon(t, dir, 1, "16MiB", "127.0.0.1:0")
	f := dial(t, writeCluster(t, dir, []*daemon{d}, ""), rdma.Options{})
	ctx := context.Background()
	m, err := f.Open(ctx, f.Hosted()[0])
	require.NoError(t, err)
	a := farmem.MakeAddr(1, 4096)
	buf := make([]byte, 8)
	verbs := []func() error{
		func() error { return m.Read(ctx, a, buf) },
		func() error { return m.Write(ctx, a.Add(64), buf) },
		func() error { _, err := m.CAS(ctx, a.Add(128), 0, 0); return err },
		func() error { _, err := m.FAA(ctx, a.Add(136), 1); return err },
	}
	for range 50 { // the connection is set up and warm
		for _, v := range verbs {
			require.NoError(t, v())
		}
	}
	const rounds = 250
	self, node := os.Getpid(), d.cmd.Process.Pid
	cr0, cw0 := procIO(t, self)
	nr0, nw0 := procIO(t, node)
	for range rounds {
		for _, v := range verbs {
			if err := v(); err != nil {
				t.Fatal(err)
			}
		}
	}
	cr1, cw1 := procIO(t, self)
	nr1, nw1 := procIO(t, node)
	n := float64(rounds * len(verbs))
	per := func(a, b uint64) float64 { return float64(b-a) / n }
	t.Logf("per round trip: client %.2f reads, %.2f writes; farmemd %.2f reads, %.2f writes",
		per(cr0, cr1), per(cw0, cw1), per(nr0, nr1), per(nw0, nw1))
	const most = 1.2
	require.LessOrEqual(t, per(cr0, cr1), most, "client reads per round trip")
	require.LessOrEqual(t, per(cw0, cw1), most, "client writes per round trip")
	require.LessOrEqual(t, per(nr0, nr1), most, "farmemd reads per round trip")
	require.LessOrEqual(t, per(nw0, nw1), most, "farmemd writes per round trip")
	require.GreaterOrEqual(t, per(nr0, nr1), 1.0, "farmemd must have read every request")
}
