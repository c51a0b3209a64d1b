package main

import (
	"bytes"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// farmemd --provider ibverbs reaches the provider: a build without -tags rdma refuses it and
// says why; a build with it, on a machine without an RDMA device, fails to open the device.
// Either way the daemon exits 1 with the reason, having listened nowhere. (Where a device
// exists, the daemon starts and this test only checks it shuts down cleanly.)
func TestProviderIbverbs(t *testing.T) {
	dir := t.TempDir()
	sf := writeSecret(t, dir, "secret", secret)
	addrFile := filepath.Join(dir, "addr")
	var out, errOut syncBuffer
	sig := make(chan os.Signal, 1)
	exit := make(chan int, 1)
	go func() {
		exit <- run([]string{"--id", "1", "--size", "1MiB", "--secret-file", sf, "--provider", "ibverbs",
			"--addr-file", addrFile}, &out, &errOut, sig)
	}()
	for {
		select {
		case code := <-exit:
			require.Equal(t, 1, code, errOut.String())
			require.Contains(t, errOut.String(), "ibverbs")
			require.Regexp(t, `-tags rdma|device`, errOut.String())
			require.NoFileExists(t, addrFile)
			return
		case <-time.After(10 * time.Millisecond):
			if _, err := os.Stat(addrFile); err == nil {
				sig <- syscall.SIGTERM
				require.Equal(t, 0, <-exit, errOut.String())
				t.Skip("an RDMA device exists here: the ibverbs node started and stopped")
			}
		}
	}
}

// An unknown provider is refused before anything is mapped.
func TestProviderUnknown(t *testing.T) {
	dir := t.TempDir()
	sf := writeSecret(t, dir, "secret", secret)
	var out, errOut bytes.Buffer
	require.Equal(t, 1, run([]string{"--id", "1", "--size", "1MiB", "--secret-file", sf, "--provider", "carrier-pigeon"}, &out, &errOut, nil))
	require.Contains(t, errOut.String(), "not built in")
}
