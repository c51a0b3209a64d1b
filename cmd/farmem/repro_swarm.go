package main

import (
	"context"
	"io"

	"github.com/farmem/farmem/bench/repro"
)

// runReproSwarm is `farmem repro swarm`: the SWARM paper's Table 2 and Figs. 5, 11, 12 and 13
// (repro.RunSwarm), full or quick, with --seeds, --workers, --out and -q.
func runReproSwarm(ctx context.Context, quick bool, seeds string, workers int, quiet bool, out string, stdout, stderr io.Writer) error {
	cfg := repro.SwarmFull()
	if quick {
		cfg = repro.SwarmQuick()
	}
	return runReproTables(ctx, "swarm", seeds, workers, out, quiet, stdout, stderr,
		func(ctx context.Context, seeds []uint64, workers int, progress io.Writer) (*repro.SwarmResult, error) {
			if seeds != nil {
				cfg.Seeds = seeds
			}
			cfg.Workers = workers
			return repro.RunSwarm(ctx, cfg, progress)
		})
}
