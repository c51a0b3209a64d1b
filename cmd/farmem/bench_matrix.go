package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/farmem/farmem/bench"
	"github.com/farmem/farmem/kvstore"
)

// matrixCombo is one combination of options kvstore's matrix allows, as --matrix runs it.
type matrixCombo struct {
	idx  indexKind // with its replicas set
	sync string
}

func (c matrixCombo) String() string {
	return fmt.Sprintf("--index %s --sync %s --replicas %d", c.idx.name, c.sync, max(1, c.idx.replicas))
}

// matrixCombos returns every combination of --index, --sync and --replicas (1 or 3) that
// kvstore.Check allows, in the order of the --index table and kvstore.SyncNames.
func matrixCombos() []matrixCombo {
	var out []matrixCombo
	for _, k := range indexKinds {
		for _, s := range append(kvstore.SyncNames(), kvstore.None.Name()) {
			for _, r := range []int{1, 3} {
				sy, err := kvstore.SyncByName(s)
				if err != nil {
					continue
				}
				o := kvstore.Options{Index: k.kind(), Sync: sy}
				if r > 1 {
					o.Replicas = r
				}
				if kvstore.Check(o) != nil {
					continue
				}
				c := matrixCombo{idx: k, sync: s}
				if r > 1 {
					c.idx.replicas, c.idx.replicated = r, true
				}
				if slices.ContainsFunc(out, func(o matrixCombo) bool { return o.String() == c.String() }) {
					continue // a kind replicated by default (swarm) is the same store at --replicas 1 and 3
				}
				out = append(out, c)
			}
		}
	}
	return out
}

// matrixFlags checks the flags --matrix runs with: it chooses the index, synchronizer and
// replicas itself, and needs a fresh store per run.
func (bf *benchFlags) matrixFlags(fs *flag.FlagSet) error {
	var bad []string
	workload, compute := false, false
	fs.Visit(func(f *flag.Flag) {
		switch f.Name {
		case "compute-nodes":
			compute = true
		case "index", "proxy", "sync", "replicas", "kv-cache", "sweep", "svg", "metric", "json", "process", "skip-load", "region", "cluster", "peers":
			bad = append(bad, "--"+f.Name)
		case "workload":
			workload = true
		}
	})
	if len(bad) > 0 {
		return usageErr("--matrix chooses the index, synchronizer and replicas itself on a fresh fabric per run: drop %s", strings.Join(bad, ", "))
	}
	if !workload {
		bf.workloads = "a,b,c,e"
	}
	if !compute {
		// One process runs every store: a region of one compute id lets FlexKV hand its
		// partitions over (it does only while every compute id's process is attached).
		bf.fabric.compute = 1
	}
	return nil
}

// runMatrix is `farmem bench --matrix`: every allowed combination on each workload, one run
// each on the chosen fabric (a fresh region or simulated cluster per run), binary64 keys (which
// every kind takes), no peers; one table of throughput and costs per operation.
func (bf *benchFlags) runMatrix(ctx context.Context, stdout, stderr io.Writer) error {
	onSim := bf.fabric.transport == "sim"
	names := strings.Split(bf.workloads, ",")
	bf.set = append(bf.set, "keyformat=binary64")
	bf.peers = "none"
	combos := matrixCombos()
	fmt.Fprintf(stdout, "options matrix on %s: %d combinations x workloads %s; %d clients, %v measured after %v warm-up, binary64 keys\n",
		bf.fabric.transport, len(combos), bf.workloads, bf.clients, bf.duration.d, bf.warmup.d)
	tw := tabwriter.NewWriter(stdout, 2, 8, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "index\tsync\treplicas\twl\tMops/s\tRT/op\tverbs/op\tbytes/op\tfailed\t")
	var reports []*bench.Report
	var failed []error
	for _, c := range combos {
		if c.idx.replicas > bf.fabric.memNodes {
			fmt.Fprintf(stderr, "farmem: skipping %v: it needs %d memory nodes (--mem-nodes %d)\n", c, c.idx.replicas, bf.fabric.memNodes)
			continue
		}
		bf.idx = c.idx
		sy, err := kvstore.SyncByName(c.sync)
		if err != nil {
			return err
		}
		for _, name := range names {
			w, err := bf.workload(strings.TrimSpace(name))
			if err != nil {
				return err
			}
			reps := fmt.Sprint(max(1, c.idx.replicas))
			if w.NeedsScan() && !c.idx.ordered {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t-\t-\t-\t-\t(no scans)\t\n", c.idx.name, c.sync, reps, w.Name)
				continue
			}
			var r *bench.Report
			if onSim {
				r, _, err = bf.runSim(ctx, w, bench.Sweep{}, sy, stderr)
			} else {
				r, _, err = bf.runReal(ctx, w, bench.Sweep{}, sy, stderr)
			}
			if err != nil {
				// One combination that cannot run here (say, out of memory at this size)
				// does not hide the others: its row says so and the command fails at the end.
				failed = append(failed, fmt.Errorf("%v, workload %s: %w", c, w.Name, err))
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t-\t-\t-\t-\t(did not run: below)\t\n", c.idx.name, c.sync, reps, w.Name)
				continue
			}
			reports = append(reports, r)
			i := slices.IndexFunc(r.Rows, func(row bench.Row) bool {
				return strings.HasPrefix(row.Store, "kvstore/") && row.Phase == bench.PhaseRun
			})
			if i < 0 {
				return fmt.Errorf("%v, workload %s: no run row for the store", c, w.Name)
			}
			row := r.Rows[i]
			rt, verbs, bytes := "-", "-", "-"
			if row.Costs != nil {
				rt, verbs, bytes = fmt.Sprintf("%.2f", row.Costs.RoundTrips), fmt.Sprintf("%.2f", row.Costs.Verbs), fmt.Sprintf("%.0f", row.Costs.Bytes())
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%.3f\t%s\t%s\t%s\t%d\t\n", c.idx.name, c.sync, reps, w.Name, row.Throughput/1e6, rt, verbs, bytes, row.Errors)
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if onSim {
		fmt.Fprintln(stdout, "on sim no FlexKV manager runs (it runs in real time), so flexkv proxies no partition and its rows are aceso's")
	}
	for _, err := range failed {
		fmt.Fprintf(stdout, "did not run: %v\n", err)
	}
	if len(failed) > 0 {
		return fmt.Errorf("%d of the matrix's runs did not complete (the first: %w)", len(failed), failed[0])
	}
	return failures(reports)
}
