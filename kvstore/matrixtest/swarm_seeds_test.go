package matrixtest

import (
	"fmt"
	"testing"

	"github.com/farmem/farmem/kvstore/kvstoretest"
)

// TestMatrixSimSwarmSeeds runs TestMatrixSim's scenario for SWARM-KV (a session's client
// paused past its lease, another's crashed mid-run) on more seeds: 1015 and 1037, on which
// the crashed client had won a deleted object's unlinking and not yet removed its index
// entry, so that every later insert of the key failed after about a second (74 of the 2,000
// runs of seeds 1000-1999 failed so, until inserters removed such entries themselves with a
// conditional removal); and in a stress run seeds 1000 to 1000+2·StressScale as well.
func TestMatrixSimSwarmSeeds(t *testing.T) {
	t.Parallel()
	seeds := []uint64{1015, 1037}
	if n := uint64(kvstoretest.StressScale()); n > 1 {
		for s := uint64(1000); s < 1000+2*n; s++ {
			if s != 1015 && s != 1037 {
				seeds = append(seeds, s)
			}
		}
	}
	for _, c := range []combo{{"swarm", "optimistic", 0}, {"swarm", "optimistic", 3}} {
		for _, seed := range seeds {
			t.Run(fmt.Sprintf("%v/seed%d", c, seed), func(t *testing.T) {
				t.Parallel()
				simScenario(t, c, seed)
			})
		}
	}
}
