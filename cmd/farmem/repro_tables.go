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

// runReproDolphin runs `farmem repro dolphin`: the full comparison, or the quick one, with the
// given seeds and workers; it prints the tables and, with out, writes them with the JSON.
func runReproDolphin(ctx context.Context, quick bool, seeds string, workers int, out string, quiet bool, stdout, stderr io.Writer) error {
	cfg := repro.DolphinFull()
	if quick {
		cfg = repro.DolphinQuick()
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
	res, err := repro.RunDolphin(ctx, cfg, progress)
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
	for _, f := range []struct {
		name string
		fill func(io.Writer) error
	}{{"dolphin.txt", res.WriteText}, {"dolphin.json", res.WriteJSON}} {
		file, err := os.Create(filepath.Join(out, f.name))
		if err != nil {
			return err
		}
		if err := f.fill(file); err != nil {
			_ = file.Close()
			return err
		}
		if err := file.Close(); err != nil {
			return err
		}
	}
	return nil
}
