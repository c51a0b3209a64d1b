// Command farmem is farmem's command line: it benchmarks the key-value store against its
// peers, reads and writes keys, and inspects a region.
//
//	farmem bench                      YCSB workload A on a cxl region in a temporary file, beside
//	                                  a Go map and redis-server (when installed), for a few seconds
//	farmem bench --transport sim --clients 512
//	farmem bench --transport tcp --cluster cluster.txt --workload a,b,c
//	farmem kv --region /dev/shm/kv put KEY VALUE
//	farmem kv --region /dev/shm/kv get KEY
//	farmem inspect --region /dev/shm/kv
//	farmem status --cluster cluster.txt   each memory node's health; works with nodes down
//	farmem adopt --cluster cluster.txt 2  take a restarted memory node back into the store
//	farmem repro cider                CIDER's client sweep in the simulator (minutes)
//
// Run `farmem <command> -h` for a command's flags.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

const usage = `usage: farmem <command> [flags]

commands:
  bench     run a YCSB workload on the key-value store and its peers, and print a table
  kv        get, put, insert, update or delete one key
  inspect   show a region's (or a cluster's) header, allocator state and store
  status    each memory node's health, incarnation, generation and memory used, the compute
            processes and the store: works with memory nodes down
  adopt     take a memory node that restarted (and lost its memory) back into the store
  repro     run a paper's experiments in the simulator and print their tables

Run 'farmem <command> -h' for a command's flags.
`

// run executes one command and returns the process's exit code.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	var err error
	switch args[0] {
	case "bench":
		err = runBench(ctx, args[1:], stdout, stderr)
	case "kv":
		err = runKV(ctx, args[1:], stdout, stderr)
	case "inspect":
		err = runInspect(ctx, args[1:], stdout, stderr)
	case "repro":
		err = runRepro(ctx, args[1:], stdout, stderr)
	case "status":
		err = runStatus(ctx, args[1:], stdout, stderr)
	case "adopt":
		err = runAdopt(ctx, args[1:], stdout, stderr)
	case "help", "-h", "-help", "--help":
		fmt.Fprint(stdout, usage)
		return 0
	default:
		fmt.Fprintf(stderr, "farmem: unknown command %q\n\n%s", args[0], usage)
		return 2
	}
	switch {
	case err == nil:
		return 0
	case errors.Is(err, flag.ErrHelp):
		return 0
	case errors.Is(err, errUsage):
		fmt.Fprintf(stderr, "farmem %s: %s\n", args[0], strings.TrimPrefix(err.Error(), "usage: "))
		return 2
	}
	fmt.Fprintf(stderr, "farmem %s: %s\n", args[0], explain(err, clusterArg(args[1:])))
	return 1
}

// errUsage marks an error in how a command was called.
var errUsage = errors.New("usage")

func usageErr(format string, a ...any) error {
	return fmt.Errorf("%w: %s", errUsage, fmt.Sprintf(format, a...))
}

// clusterArg returns the value of a --cluster flag among args, for the commands an error
// message suggests ("" if none).
func clusterArg(args []string) string {
	for i, a := range args {
		switch {
		case a == "--cluster" || a == "-cluster":
			if i+1 < len(args) {
				return args[i+1]
			}
		case strings.HasPrefix(a, "--cluster="), strings.HasPrefix(a, "-cluster="):
			_, v, _ := strings.Cut(a, "=")
			return v
		}
	}
	return ""
}
