package main

import (
	"context"
	"io"

	"github.com/farmem/farmem/bench/repro"
)

// runReproFlex runs `farmem repro flexkv`: FlexKV's §5.2-5.3 (Fig. 11, 16, 18 and 19) in the
// simulator, with --quick, --seeds, --workers, --out and -q.
func runReproFlex(ctx context.Context, quick bool, seeds string, workers int, quiet bool, out string, stdout, stderr io.Writer) error {
	cfg := repro.FlexFull()
	if quick {
		cfg = repro.FlexQuick()
	}
	return runReproTables(ctx, "flexkv", seeds, workers, out, quiet, stdout, stderr,
		func(ctx context.Context, seeds []uint64, workers int, progress io.Writer) (*repro.FlexResult, error) {
			if seeds != nil {
				cfg.Seeds = seeds
			}
			cfg.Workers = workers
			return repro.RunFlex(ctx, cfg, progress)
		})
}
