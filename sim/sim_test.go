package sim_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/farmem/farmem/farmem"
	"github.com/farmem/farmem/farmem/farmemtest"
	"github.com/farmem/farmem/sim"
)

func open(model sim.Model, seed uint64) farmemtest.Open {
	return func(t *testing.T, cfg farmemtest.Config) *farmemtest.Cluster {
		m := model
		m.MemoryNodes, m.MemorySize, m.ComputeNodes = cfg.MemoryNodes, cfg.MemorySize, cfg.ComputeNodes
		s, err := sim.New(m, seed)
		require.NoError(t, err)
		t.Cleanup(func() { _ = s.Close() })
		c := &farmemtest.Cluster{Fabrics: []farmem.Fabric{s}, Faults: s, TearsOnPurpose: m.Tearing}
		if !m.Tearing {
			// A model that does not tear applies each access at one instant: no read can
			// overlap a write, and a tenth of the suite's default reads checks that as well
			// as all of them (TestConformanceTearing drives the torn case).
			c.TearingReads = farmemtest.DefaultTearingReads / 10
		}
		return c
	}
}

func TestConformanceIdeal(t *testing.T) {
	farmemtest.Run(t, open(sim.Model{}, 1))
}

func TestConformanceConnectX6(t *testing.T) {
	farmemtest.Run(t, open(sim.ConnectX6(), 2))
}

func TestConformanceTearing(t *testing.T) {
	m := sim.ConnectX3()
	m.Tearing = true
	m.Jitter = 200 * time.Nanosecond
	farmemtest.Run(t, open(m, 3))
}
