package matrixtest

import (
	"fmt"
	"testing"
)

// TestMatrixSimBlinkSeeds runs TestMatrixSim's scenario for SELCC's B-link tree (a session's
// client paused past its lease, another's crashed mid-run) on twelve more seeds: the crashed
// client's latches go to its node (selcc's takeover) and the other clients run to the end.
// Seeds 100-111 hung (the survivors re-sent invalidations to a frame the crashed client had
// latched) or read a torn value before the takeover and the simulator's fix for unaligned torn
// writes.
func TestMatrixSimBlinkSeeds(t *testing.T) {
	t.Parallel()
	c := combo{index: "blink", sync: "none"}
	for seed := uint64(100); seed < 112; seed++ {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) {
			t.Parallel()
			simScenario(t, c, seed)
		})
	}
}
