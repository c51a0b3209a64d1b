package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/farmem/farmem/alloc"
	"github.com/farmem/farmem/cxl"
	"github.com/farmem/farmem/farmem"
	"github.com/farmem/farmem/kvstore"
)

func runInspect(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var ff fabricFlags
	fs := flag.NewFlagSet("farmem inspect", flag.ContinueOnError)
	fs.SetOutput(stderr)
	ff.register(fs, flagUse{transports: "cxl or tcp", region: "cxl: the region file to read"})
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: farmem inspect (--region PATH | --cluster FILE)\n\nShows a region's header and compute nodes (cxl), each memory node's allocator header, its\nincarnation, state and store generation (restarts), and the key-value store found on the\nfabric: its configuration (index kind, synchronizer, metadata and index replicas, proxying,\ncaches: kvstore's options matrix) and each memory node's part in it. It attaches as a compute node to read them and writes nothing else.\n`farmem status` is the shorter health view, and works with memory nodes down.\n\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usageErr("unexpected argument %q", fs.Arg(0))
	}
	if err := ff.resolve(); err != nil {
		return err
	}
	switch {
	case ff.transport == "cxl" && ff.region == "":
		return usageErr("name the region with --region PATH")
	case ff.transport == "tcp" && ff.cluster == "":
		return usageErr("name the cluster with --cluster FILE")
	case ff.transport != "cxl" && ff.transport != "tcp":
		return usageErr("inspect reads a cxl region or a tcp cluster")
	}
	if ff.transport == "cxl" {
		if err := inspectRegion(ff.region, stdout); err != nil {
			return err
		}
	}
	f, err := ff.open(ctx, 1, false, stderr)
	if err != nil {
		return err
	}
	defer f.Close()
	m, err := f.Open(ctx, f.Hosted()[0])
	if err != nil {
		return err
	}
	defer m.Close()
	if err := inspectNodes(ctx, m, stdout); err != nil {
		return err
	}
	if err := inspectLives(ctx, m, stdout); err != nil {
		return err
	}
	return inspectStore(ctx, m, stdout)
}

func inspectRegion(path string, w io.Writer) error {
	r, err := cxl.OpenRegion(path)
	if err != nil {
		return err
	}
	defer r.Close()
	in := r.Info()
	fmt.Fprintf(w, "region %s\n", in.Path)
	tw := tabwriter.NewWriter(w, 2, 8, 2, ' ', 0)
	fmt.Fprintf(tw, "  backing\t%v\n  mapped\t%d bytes (pages of %d)\n", in.Backing, in.Size, in.PageSize)
	fmt.Fprintf(tw, "  memory nodes\t%d of %d bytes\n", in.MemoryNodes, in.MemorySize)
	fmt.Fprintf(tw, "  compute ids\t%d, each %d client slots (%d for handlers) of %d bytes, shared area %d bytes\n",
		in.MaxComputeNodes, in.ClientsPerNode, in.MaxHandlers, in.SliceSize, in.SharedSize)
	fmt.Fprintf(tw, "  mailboxes\t%d of %d bytes per compute node\n", in.Mailboxes, in.MailboxSize)
	fmt.Fprintf(tw, "  down timeout\t%v\n", in.DownTimeout)
	if err := tw.Flush(); err != nil {
		return err
	}
	st, err := r.Status()
	if err != nil {
		return err
	}
	fmt.Fprintln(w, "compute ids used since the region was made (live ones hold it now)")
	tw = tabwriter.NewWriter(w, 2, 8, 2, ' ', 0)
	fmt.Fprintln(tw, "  id\tstate\tpid\tgeneration\tlease ends\tbusy mailboxes")
	used := 0
	for _, c := range st.Compute {
		if c.Free && c.Gen == 0 {
			continue
		}
		used++
		state := "released"
		switch {
		case c.Live:
			state = "live"
		case c.Crashed:
			state = "crashed"
		case !c.Free:
			state = "expired"
		}
		ends := "-"
		if !c.Expires.IsZero() && !c.Free {
			ends = c.Expires.Format(time.RFC3339Nano)
		}
		fmt.Fprintf(tw, "  %d\t%s\t%d\t%d\t%s\t%d\n", c.ID, state, c.PID, c.Gen, ends, len(c.Mailboxes))
	}
	if used == 0 {
		fmt.Fprintln(tw, "  (none)")
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(w)
	return nil
}

func inspectNodes(ctx context.Context, m farmem.Memory, w io.Writer) error {
	fmt.Fprintln(w, "memory nodes (alloc headers)")
	tw := tabwriter.NewWriter(w, 2, 8, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "  node\tsize\tchunk\tclients\theap used\theap size\tsymmetric used\thome\tepoch\t")
	for _, id := range m.Topology().MemoryNodes() {
		h, err := alloc.Open(ctx, m, id)
		switch {
		case errors.Is(err, alloc.ErrNotFormatted):
			fmt.Fprintf(tw, "  %v\t(not formatted)\t\t\t\t\t\t\t\t\n", id)
			continue
		case err != nil:
			fmt.Fprintf(tw, "  %v\t(%v)\t\t\t\t\t\t\t\t\n", id, err)
			continue
		}
		heapUsed := min(h.Bump, h.HeapLimit) - h.HeapBase
		sym, epoch := "", ""
		if id == h.Home {
			sym = fmt.Sprint(h.SymBump - h.SymBase)
			epoch = fmt.Sprint(h.Epoch)
		}
		fmt.Fprintf(tw, "  %v\t%d\t%d\t%d\t%d\t%d\t%s\t%v\t%s\t\n", id, h.Size, h.ChunkSize, h.MaxClients, heapUsed, h.HeapLimit-h.HeapBase, sym, h.Home, epoch)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(w)
	return nil
}

func inspectStore(ctx context.Context, m farmem.Memory, w io.Writer) error {
	in, err := kvstore.Inspect(ctx, m)
	if err != nil {
		fmt.Fprintf(w, "key-value store: none found (%v)\n", err)
		return nil
	}
	fmt.Fprintf(w, "key-value store (root word at %v: %v)\n", in.Root, in.Word)
	if in.Word.State() != kvstore.RootReady {
		return nil
	}
	d := in.Descriptor
	fmt.Fprintf(w, "  index %s, replication %s, layout version %d\n", d.Index, d.Replication, d.Version)
	fmt.Fprintf(w, "  roots %v\n", d.Roots)
	fmt.Fprintf(w, "  created %s by client %d\n", time.Unix(0, int64(d.Created)).Format(time.RFC3339), d.Creator)
	return inspectConfiguration(ctx, m, in, w)
}
