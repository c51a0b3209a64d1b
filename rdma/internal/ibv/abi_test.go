//go:build linux && cgo && rdma

package ibv

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/farmem/farmem/farmem"
)

// TestABI checks the C mirrors of verbs.WR and verbs.WC and the status values against the
// Go side; it needs no device.
func TestABI(t *testing.T) {
	require.NoError(t, checkABI())
}

func TestOpenWithoutDevice(t *testing.T) {
	if names, err := Devices(); err == nil && len(names) > 0 {
		t.Skip("a device exists")
	}
	_, err := Open("")
	require.ErrorIs(t, err, farmem.ErrNotSupported)
	t.Logf("as expected: %v", err)
	_, err = Open("nosuch0:1:x")
	require.ErrorIs(t, err, farmem.ErrInvalid)
}
