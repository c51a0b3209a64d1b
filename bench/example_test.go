package bench_test

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/farmem/farmem/bench"
)

// Workload B over the Go map and redis-server (when installed), swept over client counts, as
// a table on stdout and a throughput plot.
func ExampleRun() {
	ctx := context.Background()
	w, err := bench.LoadWorkload("b") // or a path to a YCSB workload file
	if err != nil {
		panic(err)
	}
	w, err = w.With(map[string]string{"recordcount": "10000", "valuesize": "64"})
	if err != nil {
		panic(err)
	}
	stores := bench.Peers(ctx, os.Stderr) // the Go map, and redis if installed
	defer func() {
		for _, s := range stores {
			s.Close()
		}
	}()
	sweep, _ := bench.ParseSweep("clients=1,2,4")
	cfg := bench.Config{Workload: w, Stores: stores, Duration: time.Second, Sweep: sweep}
	if bench.IsTerminal(os.Stderr) {
		cfg.Progress = os.Stderr
	}
	rep, err := bench.Run(ctx, cfg)
	if err != nil {
		panic(err)
	}
	rep.WriteTable(os.Stdout)
	f, _ := os.Create("throughput.svg")
	defer f.Close()
	if err := rep.WriteSVG(f, bench.MetricThroughput); err != nil {
		fmt.Println(err)
	}
}
