package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"strconv"

	"github.com/farmem/farmem/farmem"
	"github.com/farmem/farmem/kvstore"
)

func runAdopt(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var ff fabricFlags
	fs := flag.NewFlagSet("farmem adopt", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&ff.cluster, "cluster", "", "the cluster file naming the farmemd memory nodes (required)")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), `usage: farmem adopt --cluster FILE NODE

Takes memory node NODE (its id, as in the cluster file), which restarted and lost its memory,
back into the store: the keys whose entry or value lived on it are deleted (it prints how
many), the node is formatted again and takes new data, and its generation in the store goes
up. Until then, operations on those keys fail, and the others keep working. Other processes
see the adoption at their next operation. It refuses a node that lost nothing, and the
store's home node (whose loss loses the store).

`)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	if ff.cluster == "" {
		return usageErr("name the cluster with --cluster FILE")
	}
	if fs.NArg() != 1 {
		return usageErr("want one NODE, the id of the memory node to adopt")
	}
	id, err := strconv.ParseUint(fs.Arg(0), 10, 16)
	if err != nil || id == 0 || farmem.NodeID(id) > farmem.MaxMemoryNode {
		return usageErr("NODE %q: want a memory node's id, as in the cluster file", fs.Arg(0))
	}
	ff.memNodes, ff.memSize, ff.seed = 1, "1MiB", 1
	if err := ff.resolve(); err != nil {
		return err
	}
	f, err := ff.open(ctx, 1, false, io.Discard)
	if err != nil {
		return err
	}
	defer f.Close()
	s, err := kvstore.Open(ctx, f.Fabric, kvstore.Options{NoCreate: true, MaxClients: 1})
	if err != nil {
		return fmt.Errorf("open the store: %w", err)
	}
	defer s.Close()
	rep, err := s.Adopt(ctx, farmem.NodeID(id))
	if err != nil {
		return err
	}
	if rep.Already {
		fmt.Fprintf(stdout, "node %v (incarnation %#x) was adopted already, at generation %d: nothing more was lost\n", rep.Node, rep.Incarnation, rep.Generation)
		return nil
	}
	fmt.Fprintf(stdout, "adopted node %v (incarnation %#x), now at generation %d\n", rep.Node, rep.Incarnation, rep.Generation)
	fmt.Fprintf(stdout, "  keys lost: %d whose value or entry lived on it", rep.Lost)
	if len(rep.Subtables) > 0 {
		fmt.Fprintf(stdout, ", and every key of %d index subtables that lived on it", len(rep.Subtables))
	}
	fmt.Fprintln(stdout)
	return nil
}
