package ibv

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/farmem/farmem/farmem"
)

// TestDevices lists the RDMA devices, or says why there are none: no device layer in this
// build, or no RDMA support in this system.
func TestDevices(t *testing.T) {
	names, err := Devices()
	if !Available {
		require.ErrorIs(t, err, farmem.ErrNotSupported)
		t.Skipf("no device layer in this build: %v", err)
	}
	if err != nil {
		t.Skipf("no RDMA support here: %v", err)
	}
	t.Logf("RDMA devices: %q", names)
	if len(names) == 0 {
		_, err := Open("")
		require.Error(t, err, "opening a device when there is none")
		t.Skip("no RDMA device")
	}
	d, err := Open(names[0])
	if errors.Is(err, farmem.ErrNotSupported) {
		t.Skipf("device %s unusable: %v", names[0], err)
	}
	require.NoError(t, err)
	t.Logf("opened %+v", d.Attr())
	require.NoError(t, d.Close())
	require.NoError(t, d.Close(), "Close is idempotent")
}
