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

	"github.com/farmem/farmem/bench/repro"
)

// runReproSelcc runs `farmem repro selcc`: the full or quick configuration, with the seeds and
// workers given, printing the tables and, with out, writing them and the JSON there.
func runReproSelcc(ctx context.Context, quick bool, seeds string, workers int, quiet bool, out string, stdout, stderr io.Writer) error {
	cfg := repro.SelccFull()
	if quick {
		cfg = repro.SelccQuick()
	}
	if seeds != "" {
		cfg.Seeds = nil
		for _, f := range strings.Split(seeds, ",") {
			n, err := strconv.ParseUint(f, 10, 64)
			if err != nil {
				return usageErr("--seeds %q: %v", seeds, err)
			}
			cfg.Seeds = append(cfg.Seeds, n)
		}
	}
	if workers < 1 {
		return usageErr("--workers %d: want at least 1", workers)
	}
	cfg.Workers = workers
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(min(workers, runtime.GOMAXPROCS(0))))
	var progress io.Writer = stderr
	if quiet {
		progress = nil
	}
	res, err := repro.RunSelcc(ctx, cfg, progress)
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
	if err := os.MkdirAll(out, 0o755); err != nil {
		return usageErr("--out: %v", err)
	}
	for file, fill := range map[string]func(io.Writer) error{"selcc.txt": res.WriteText, "selcc.json": res.WriteJSON} {
		f, err := os.Create(filepath.Join(out, file))
		if err != nil {
			return err
		}
		if err := fill(f); err != nil {
			_ = f.Close()
			return err
		}
		if err := f.Close(); err != nil {
			return err
		}
	}
	return nil
}
