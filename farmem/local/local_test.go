package local_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/farmem/farmem/farmem"
	"github.com/farmem/farmem/farmem/farmemtest"
	"github.com/farmem/farmem/farmem/local"
)

func open(opts local.Options) farmemtest.Open {
	return func(t *testing.T, cfg farmemtest.Config) *farmemtest.Cluster {
		o := opts
		o.MemoryNodes, o.MemorySize, o.ComputeNodes = cfg.MemoryNodes, cfg.MemorySize, cfg.ComputeNodes
		o.DownTimeout = cfg.DownTimeout
		f, err := local.New(o)
		require.NoError(t, err)
		t.Cleanup(func() { _ = f.Close() })
		return &farmemtest.Cluster{Fabrics: []farmem.Fabric{f}, Faults: f, TearsOnPurpose: o.Tearing}
	}
}

// The two suites run side by side: each has fabrics of its own, and most of their time is
// spent waiting out the fault tests' down timeouts.

func TestConformance(t *testing.T) {
	t.Parallel()
	farmemtest.Run(t, open(local.Options{}))
}

func TestConformanceTearingJitter(t *testing.T) {
	t.Parallel()
	farmemtest.Run(t, open(local.Options{
		Tearing: true,
		Latency: 20 * time.Microsecond,
		Jitter:  20 * time.Microsecond,
	}))
}
