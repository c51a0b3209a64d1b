package main

import (
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/farmem/farmem/bench/repro"
)

// runReproDolphin runs `farmem repro dolphin`: the full comparison, or the quick one, with the
// given seeds and workers; it prints the tables and, with out, writes them with the JSON.
func runReproDolphin(ctx context.Context, quick bool, seeds string, workers int, out string, quiet bool, stdout, stderr io.Writer) error {
	cfg := repro.DolphinFull()
	if quick {
		cfg = repro.DolphinQuick()
	}
	return runReproTables(ctx, "dolphin", seeds, workers, out, quiet, stdout, stderr,
		func(ctx context.Context, seeds []uint64, workers int, progress io.Writer) (*repro.DolphinResult, error) {
			if seeds != nil {
				cfg.Seeds = seeds
			}
			cfg.Workers = workers
			return repro.RunDolphin(ctx, cfg, progress)
		})
}

// selccFlags are the flags `farmem repro selcc` reads.
type selccFlags struct {
	quick, quiet, shermanCache, noBand bool
	seeds, out, figures                string
	workers                            int
	atomicUnit                         time.Duration
}

// runReproSelcc runs `farmem repro selcc`: the full or quick configuration, with the seeds,
// workers and figures given (and the Sherman-like tree with Sherman's cache if asked),
// printing the tables and, with out, writing them and the JSON there.
func runReproSelcc(ctx context.Context, f selccFlags, stdout, stderr io.Writer) error {
	cfg := repro.SelccFull()
	if f.quick {
		cfg = repro.SelccQuick()
	}
	if f.figures != "" {
		cfg.Figures = strings.Split(f.figures, ",")
	}
	cfg.ShermanCache = f.shermanCache
	cfg.Costs.AtomicUnit = f.atomicUnit
	if f.noBand {
		cfg.Band = nil
	}
	return runReproTables(ctx, "selcc", f.seeds, f.workers, f.out, f.quiet, stdout, stderr,
		func(ctx context.Context, seeds []uint64, workers int, progress io.Writer) (*repro.SelccResult, error) {
			if seeds != nil {
				cfg.Seeds = seeds
			}
			cfg.Workers = workers
			return repro.RunSelcc(ctx, cfg, progress)
		})
}

// tablesResult is a reproduction's result that prints as text tables and saves as JSON.
type tablesResult interface {
	WriteText(io.Writer) error
	WriteJSON(io.Writer) error
}

// runReproTables runs a reproduction whose output is tables and JSON only (dolphin, selcc):
// it checks --seeds and --workers and creates out before the run, so a bad flag costs no
// simulation; run gets the seeds (nil: the configuration's own), the workers and where
// progress goes (nil with quiet). It prints the tables and, with out, writes name.txt and
// name.json there. GOMAXPROCS is held to workers during the run (see runRepro).
func runReproTables[R tablesResult](ctx context.Context, name, seeds string, workers int, out string, quiet bool, stdout, stderr io.Writer,
	run func(ctx context.Context, seeds []uint64, workers int, progress io.Writer) (R, error)) error {
	var seedList []uint64
	if seeds != "" {
		var err error
		if seedList, err = parseUints("--seeds", seeds); err != nil {
			return err
		}
	}
	if workers < 1 {
		return usageErr("--workers %d: want at least 1", workers)
	}
	if out != "" {
		if err := os.MkdirAll(out, 0o755); err != nil {
			return usageErr("--out: %v", err)
		}
	}
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(min(workers, runtime.GOMAXPROCS(0))))
	var progress io.Writer = stderr
	if quiet {
		progress = nil
	}
	res, err := run(ctx, seedList, workers, progress)
	if errors.Is(err, repro.ErrConfig) {
		return usageErr("%v", err)
	}
	if err != nil {
		return err
	}
	if err := res.WriteText(stdout); err != nil {
		return err
	}
	if out == "" {
		return nil
	}
	if err := writeOutFile(out, name+".txt", res.WriteText); err != nil {
		return err
	}
	return writeOutFile(out, name+".json", res.WriteJSON)
}

// parseUints parses a comma-separated list of unsigned integers given to flag; a malformed one
// is a usage error naming the flag.
func parseUints(flag, list string) ([]uint64, error) {
	var ns []uint64
	for _, f := range strings.Split(list, ",") {
		n, err := strconv.ParseUint(f, 10, 64)
		if err != nil {
			return nil, usageErr("%s %q: %v", flag, list, err)
		}
		ns = append(ns, n)
	}
	return ns, nil
}

// writeOutFile creates dir/file and fills it, closing it either way.
func writeOutFile(dir, file string, fill func(io.Writer) error) error {
	f, err := os.Create(filepath.Join(dir, file))
	if err != nil {
		return err
	}
	if err := fill(f); err != nil {
		_ = f.Close()
		return err
	}
	return f.Close()
}
