package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime"
	"strconv"
	"strings"

	"github.com/farmem/farmem/bench/repro"
)

func runRepro(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("farmem repro", flag.ContinueOnError)
	fs.SetOutput(stderr)
	quick := fs.Bool("quick", false, "a seconds-long run with the same code paths (its figures pin the code; they reproduce nothing)")
	out := fs.String("out", "", "also write the tables (markdown), data (JSON) and plots (SVG) into this directory")
	structs := fs.String("structs", "", "cider: structures to run, of array,race (default all)")
	mixes := fs.String("mixes", "", "cider: mixes to run, of write-intensive,write-only (default all)")
	syncs := fs.String("syncs", "", "cider: synchronizers, of optimistic,spin,mcs,cider (default all)")
	clients := fs.String("clients", "", "cider: client counts, ascending (default 8 to 512)")
	seeds := fs.String("seeds", "", "the simulation's seeds, comma-separated (default 1,2,3; 1,2 with --quick)")
	dist := fs.String("dist", "", "cider: key distribution, scrambled (YCSB's, the default) or permuted")
	theta := fs.Float64("theta", 0, "cider: Zipfian skew of the permuted distribution (default 0.99)")
	keys := fs.String("keys", "", "cider: run the sweep at each of these array key counts (RACE an eighth), comma-separated, and print a key-count sensitivity table")
	atomic := fs.Duration("atomic-unit", 0, "cider, selcc: the NIC's cost of one atomic on one word (default the model's, 250ns and 400ns); sweep it to get a band")
	noLWC := fs.Bool("no-local-wc", false, "cider: run the synchronizers without local write combining (the factor analysis then runs them with it)")
	early := fs.Bool("early-credit", false, "cider: credit failed CASes as soon as they reach the threshold, not at completion as Algorithm 1 does")
	separate := fs.Bool("separate-nics", false, "cider: a NIC per compute node instead of the paper's compute nodes co-located on the memory nodes' NICs")
	workers := fs.Int("workers", runtime.NumCPU(), "cider: seeds run at once, each a simulation on its own core (the output does not depend on it)")
	quiet := fs.Bool("q", false, "no progress lines on standard error")
	figures := fs.String("figures", "", "selcc: figures to run, of 13,14,14-scale,17,18 (default all)")
	noBand := fs.Bool("no-band", false, "selcc: skip the band's reruns of the headline points over the unpinned costs")
	shermanCache := fs.Bool("sherman-cache", false, "selcc: also run Fig. 17's Sherman-like tree with Sherman's own cache (leaves' parents only, its default 1,000 MB scaled), a diagnostic")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), `usage: farmem repro [flags] PAPER

Runs a paper's experiments in the simulator and prints their tables. Deterministic: the same
flags print the same bytes. Papers: cider (CIDER §5.2-5.4, the client sweep with three seeds,
its factor analysis, its headline ratios rerun over the model's unpinned costs and a table beside the paper's figures;
budgeted at under 30 minutes on 2 cores, about 20 s with --quick); dolphin (Dolphin §IV: Table II
and Figs. 6-8 against Sherman-like and SMART-like baselines, the headline ratio over the model's
unpinned costs, beside the paper's figures; --quick, --seeds, --workers, --out, -q apply); selcc
(SELCC §7.1-7.2: Fig. 13, 14, 17 and 18 against SEL and the Sherman-like tree, with --seeds,
--workers, --out, --figures, --sherman-cache, --no-band, --atomic-unit); flexkv (FlexKV §5.2-5.3: Fig. 11, 16, 18 and 19 against the Aceso-like
store and plain RACE, with --quick, --seeds, --workers, --out); swarm (SWARM §7: Table 2 and
Figs. 5, 11, 12 and 13 against RAW and DM-ABD, with --quick, --seeds, --workers, --out).

`)
		fs.PrintDefaults()
	}
	// The paper may come first (farmem repro cider --quick) or after the flags.
	var paper string
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		paper, args = args[0], args[1:]
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	if paper == "" && fs.NArg() > 0 {
		paper = fs.Arg(0)
		fs.Parse(fs.Args()[1:]) //nolint:errcheck // flags after the paper, as before it
	}
	switch {
	case paper == "":
		fs.Usage()
		return usageErr("want one paper")
	case fs.NArg() > 0:
		return usageErr("unexpected argument %q", fs.Arg(0))
	case paper == "selcc":
		return runReproSelcc(ctx, selccFlags{quick: *quick, seeds: *seeds, workers: *workers, quiet: *quiet, out: *out, figures: *figures,
			shermanCache: *shermanCache, noBand: *noBand, atomicUnit: *atomic}, stdout, stderr)
	case paper == "dolphin":
		return runReproDolphin(ctx, *quick, *seeds, *workers, *out, *quiet, stdout, stderr)
	case paper == "flexkv":
		return runReproFlex(ctx, *quick, *seeds, *workers, *quiet, *out, stdout, stderr)
	case paper == "swarm":
		return runReproSwarm(ctx, *quick, *seeds, *workers, *quiet, *out, stdout, stderr)
	case paper != "cider":
		return usageErr("unknown paper %q (want cider, dolphin, flexkv, selcc or swarm)", paper)
	}
	cfg := repro.CiderFull()
	if *quick {
		cfg = repro.CiderQuick()
	}
	if *seeds != "" {
		var err error
		if cfg.Seeds, err = parseUints("--seeds", *seeds); err != nil {
			return err
		}
	}
	list := func(s string, dst *[]string) {
		if s != "" {
			*dst = strings.Split(s, ",")
		}
	}
	list(*structs, &cfg.Structs)
	list(*mixes, &cfg.Mixes)
	list(*syncs, &cfg.Syncs)
	if *clients != "" {
		cfg.Clients = nil
		for _, f := range strings.Split(*clients, ",") {
			n, err := strconv.Atoi(f)
			if err != nil {
				return usageErr("--clients %q: %v", *clients, err)
			}
			cfg.Clients = append(cfg.Clients, n)
		}
	}
	cfg.Costs.AtomicUnit = *atomic
	cfg.EarlyCredit = *early
	cfg.SeparateNICs = *separate
	cfg.Workers = *workers
	if *noLWC {
		cfg.LocalWC = false
	}
	if *dist != "" {
		cfg.Dist = *dist
	}
	if *theta != 0 {
		cfg.Theta = *theta
	}
	var keyCounts []uint64
	if *keys != "" {
		var err error
		if keyCounts, err = parseUints("--keys", *keys); err != nil {
			return err
		}
	}
	if *out != "" {
		if err := os.MkdirAll(*out, 0o755); err != nil {
			return usageErr("--out: %v", err)
		}
	}
	// A simulation runs one goroutine at a time: one P per worker (at most the Ps the process
	// has) avoids waking idle ones at every switch. The figures do not depend on it.
	if *workers < 1 {
		return usageErr("--workers %d: want at least 1", *workers)
	}
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(min(*workers, runtime.GOMAXPROCS(0))))
	var progress io.Writer = stderr
	if *quiet {
		progress = nil
	}
	if keyCounts != nil {
		kr, err := repro.RunCiderKeys(ctx, cfg, keyCounts, progress)
		if errors.Is(err, repro.ErrConfig) {
			return usageErr("%v", err)
		}
		if err != nil {
			return err
		}
		return kr.WriteText(stdout)
	}
	res, err := repro.RunCider(ctx, cfg, progress)
	if errors.Is(err, repro.ErrConfig) {
		return usageErr("%v", err)
	}
	if err != nil {
		return err
	}
	if err := res.WriteText(stdout); err != nil {
		return err
	}
	if *out == "" {
		return nil
	}
	return writeReproFiles(*out, "cider", res)
}

// writeReproFiles writes a result's text tables, JSON and one SVG per plot into dir.
func writeReproFiles(dir, name string, res *repro.CiderResult) error {
	write := func(file string, fill func(io.Writer) error) error { return writeOutFile(dir, file, fill) }
	if err := write(name+".txt", res.WriteText); err != nil {
		return err
	}
	if err := write(name+".json", res.WriteJSON); err != nil {
		return err
	}
	for i, p := range res.Plots() {
		c := res.Config
		file := fmt.Sprintf("%s-%s-%s.svg", name, c.Structs[i/len(c.Mixes)], c.Mixes[i%len(c.Mixes)])
		if err := write(file, p.WriteSVG); err != nil {
			return err
		}
	}
	return nil
}
