//go:build linux

package cxl_test

import (
	"flag"
	"os"
	"runtime"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/farmem/farmem/cxl"
	"github.com/farmem/farmem/farmem/farmemtest"
	"github.com/farmem/farmem/farmem/transport"
)

// testDownTimeout is the down timeout (and lease) of the regions tests create.
const testDownTimeout = time.Second

// open builds a farmemtest cluster: one memfd region, each compute node a fabric handle of
// this process, attached to the region as a separate process would be.
func open(policy cxl.Policy) farmemtest.Open {
	return func(t *testing.T, cfg farmemtest.Config) *farmemtest.Cluster {
		r, err := cxl.Create("", cxl.Options{
			Shape:       transport.Shape{MemoryNodes: cfg.MemoryNodes, MemorySize: cfg.MemorySize, ComputeNodes: cfg.ComputeNodes + 1, SliceSize: 4 << 10, SharedSize: 64 << 10},
			DownTimeout: cfg.DownTimeout,
		})
		require.NoError(t, err)
		t.Cleanup(func() { _ = r.Close() })
		cl := &farmemtest.Cluster{}
		for range cfg.ComputeNodes {
			f, err := r.Attach(cxl.OpenOptions{Policy: policy})
			require.NoError(t, err)
			t.Cleanup(func() { _ = f.Close() })
			cl.Fabrics = append(cl.Fabrics, f)
		}
		cl.Faults = cl.Fabrics[0].(transport.FaultInjector)
		return cl
	}
}

// The two policies' suites run side by side: each has regions of its own, and most of their
// time is spent waiting out the fault tests' down timeouts. TestHangComputeNode, which also
// waits, runs beside them: Go's default limit of parallel tests (GOMAXPROCS, two in CI) would
// make it wait for one of them to end, so TestMain raises the limit to three unless -parallel
// is given.

func TestMain(m *testing.M) {
	flag.Parse()
	explicit := false
	flag.Visit(func(f *flag.Flag) { explicit = explicit || f.Name == "test.parallel" })
	if !explicit {
		_ = flag.Set("test.parallel", strconv.Itoa(max(3, runtime.GOMAXPROCS(0))))
	}
	os.Exit(m.Run())
}

func TestConformanceCoherent(t *testing.T) {
	t.Parallel()
	farmemtest.Run(t, open(cxl.Coherent))
}

func TestConformanceUncached(t *testing.T) {
	t.Parallel()
	farmemtest.Run(t, open(cxl.Uncached))
}
