package rdma

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/farmem/farmem/farmem"
	"github.com/farmem/farmem/farmem/farmemtest"
	"github.com/farmem/farmem/rdma/internal/ibv"
)

// TestIbverbsHardware runs the conformance suite on the ibverbs provider over a real RDMA
// device (the first one, or $FARMEM_IBV_DEVICE), with memory nodes and compute processes in
// this process talking through the NIC's loopback. It skips, saying why, when the build has
// no ibverbs provider (no -tags rdma) or the system has no RDMA device.
func TestIbverbsHardware(t *testing.T) {
	if _, ok := providers["ibverbs"]; !ok {
		t.Skipf("no ibverbs provider in this build: %s", unavailable["ibverbs"])
	}
	names, err := ibv.Devices()
	if err != nil {
		t.Skipf("no RDMA support on this system: %v", err)
	}
	if len(names) == 0 {
		t.Skip("no RDMA device (ibv_get_device_list is empty)")
	}
	if _, err := providers["ibverbs"].(*verbsProvider).device(""); err != nil {
		if errors.Is(err, farmem.ErrNotSupported) {
			t.Skipf("RDMA devices %q, but none usable: %v", names, err)
		}
		require.NoError(t, err)
	}
	t.Logf("RDMA devices: %q", names)
	farmemtest.Run(t, func(t *testing.T, cfg farmemtest.Config) *farmemtest.Cluster {
		servers, cl := startProviderServers(t, cfg.MemoryNodes, cfg.MemorySize, "ibverbs")
		cl.DownTimeout = cfg.DownTimeout
		fs := dialN(t, cl, cfg.ComputeNodes, Options{Provider: "ibverbs"})
		var fabs []farmem.Fabric
		for _, f := range fs {
			fabs = append(fabs, f)
		}
		return &farmemtest.Cluster{Fabrics: fabs, Faults: NewInjector(servers, fs)}
	})
}
