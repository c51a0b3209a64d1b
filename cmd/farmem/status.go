package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/farmem/farmem/alloc"
	"github.com/farmem/farmem/farmem"
	"github.com/farmem/farmem/kvstore"
	"github.com/farmem/farmem/rdma"
)

// nodeHealth is one memory node as `farmem status` reports it.
type nodeHealth struct {
	id          farmem.NodeID
	addr        string
	state       string // up, unreachable, lost, adopted
	incarnation uint64 // the node process's, as it answered (0 if unreachable)
	gen         kvstore.GenWord
	hasGen      bool
	used, size  uint64
	usedErr     string
	conns       int
	uptime      time.Duration
	why         string // why unreachable
}

func runStatus(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var ff fabricFlags
	fs := flag.NewFlagSet("farmem status", flag.ContinueOnError)
	fs.SetOutput(stderr)
	ff.register(fs, flagUse{transports: "cxl or tcp", region: "cxl: the region file to read"})
	timeout := fs.Duration("timeout", 2*time.Second, "tcp: give up on a memory node that has not answered within this")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), `usage: farmem status (--cluster FILE | --region PATH)

Shows the health of a cluster (or a region): each memory node's address, state (up,
unreachable, lost: restarted and not yet adopted, adopted: restarted, its loss acknowledged
with farmem adopt), incarnation, generation in the store and memory used; the compute
processes known; and the store's configuration. It works with memory nodes down: what it
cannot read it reports. It writes nothing, and exits 1 if a memory node is not up.

`)
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
		return usageErr("name the cluster with --cluster FILE or the region with --region PATH")
	case ff.transport != "cxl" && ff.transport != "tcp":
		return usageErr("status reads a cxl region or a tcp cluster")
	}
	if *timeout <= 0 {
		return usageErr("--timeout must be positive")
	}
	var nodes []*nodeHealth
	if ff.transport == "tcp" {
		cl, err := rdma.LoadCluster(ff.cluster)
		if err != nil {
			return err
		}
		if cl.SecretFile == "" {
			return usageErr("the cluster file %s names no secret: add a line `secret-file PATH`", ff.cluster)
		}
		secret, err := rdma.ReadSecret(cl.SecretFile)
		if err != nil {
			return err
		}
		nodes = probeNodes(ctx, cl, secret, *timeout)
	} else {
		if err := inspectRegion(ff.region, stdout); err != nil {
			return err
		}
	}
	// Attach to read the allocator headers, the generations and the store. A cluster whose
	// file states the nodes' sizes can be attached with nodes down; one that does not cannot.
	var attachErr error
	var rest bytes.Buffer
	f, err := ff.open(ctx, 1, false, io.Discard)
	if err == nil {
		defer f.Close()
		var m farmem.Memory
		if m, err = f.Open(ctx, f.Hosted()[0]); err == nil {
			defer m.Close()
			err = storeStatus(ctx, m, &nodes, &rest)
		}
	}
	if err != nil {
		attachErr = err
	}
	writeNodes(stdout, nodes, ff.cluster)
	fmt.Fprintln(stdout)
	_, _ = rest.WriteTo(stdout)
	if attachErr != nil {
		fmt.Fprintf(stdout, "could not attach to read the store and memory use: %s\n", tidy(attachErr))
		if ff.transport == "tcp" {
			fmt.Fprintln(stdout, "(with memory nodes down, a cluster file that states each node's size=... can still be attached)")
		}
	}
	var bad []string
	for _, n := range nodes {
		if n.state != "up" && n.state != "adopted" {
			bad = append(bad, fmt.Sprintf("%v %s", n.id, n.state))
		}
	}
	if len(bad) > 0 {
		return fmt.Errorf("%d of %d memory nodes up (%s)", len(nodes)-len(bad), len(nodes), strings.Join(bad, ", "))
	}
	return attachErr
}

// probeNodes asks every memory node of cl for its status, at once.
func probeNodes(ctx context.Context, cl *rdma.Cluster, secret []byte, timeout time.Duration) []*nodeHealth {
	out := make([]*nodeHealth, len(cl.Memory))
	var wg sync.WaitGroup
	for i, na := range cl.Memory {
		n := &nodeHealth{id: na.ID, addr: na.Addr, size: na.Size}
		out[i] = n
		wg.Add(1)
		go func() {
			defer wg.Done()
			cctx, cancel := context.WithTimeout(ctx, timeout)
			defer cancel()
			st, err := rdma.QueryStatus(cctx, na.Addr, secret, timeout)
			if err != nil {
				// The last part of the chain says why (connection refused, timed out, ...).
				msg := tidy(err)
				if i := strings.LastIndex(msg, ": "); i >= 0 {
					msg = msg[i+2:]
				}
				n.state, n.why = "unreachable", msg
				return
			}
			n.state, n.incarnation, n.size, n.conns, n.uptime = "up", st.Incarnation, st.Size, st.Conns, st.Uptime
		}()
	}
	wg.Wait()
	return out
}

// storeStatus prints the store's configuration and the compute processes, and fills in each
// node's generation, state and memory used.
func storeStatus(ctx context.Context, m farmem.Memory, nodes *[]*nodeHealth, w io.Writer) error {
	byID := map[farmem.NodeID]*nodeHealth{}
	for _, n := range *nodes {
		byID[n.id] = n
	}
	region := len(*nodes) == 0
	for _, id := range m.Topology().MemoryNodes() {
		n := byID[id]
		if n == nil {
			n = &nodeHealth{id: id, state: "up", addr: "-"}
			byID[id] = n
			*nodes = append(*nodes, n)
		}
		st := farmem.StatusOf(m, id)
		if n.incarnation == 0 && n.state != "unreachable" {
			n.incarnation = st.Seen
		}
		if n.state == "unreachable" {
			continue
		}
		h, err := alloc.Open(ctx, m, id)
		switch {
		case errors.Is(err, alloc.ErrNotFormatted):
			n.usedErr = "not formatted"
		case err != nil:
			n.usedErr = tidy(err)
		default:
			n.used, n.size = min(h.Bump, h.HeapLimit)-h.HeapBase, h.Size
		}
	}
	in, err := kvstore.Inspect(ctx, m)
	if err != nil || in.Word.State() != kvstore.RootReady {
		switch {
		case errors.Is(err, kvstore.ErrNoStore):
			fmt.Fprintf(w, "key-value store: none yet (the first `farmem kv put` or `farmem bench` makes it)\n\n")
		case err != nil:
			fmt.Fprintf(w, "key-value store: none found (%s)\n\n", tidy(err))
		default:
			fmt.Fprintf(w, "key-value store: none yet (root word %v)\n\n", in.Word)
		}
	} else {
		d := in.Descriptor
		fmt.Fprintf(w, "key-value store: index %s, replication %s, synchronizer %s, layout version %d, home node %v\n", d.Index, d.Replication, d.Sync, d.Version, in.Home)
		fmt.Fprintf(w, "  created %s by client %d\n\n", time.Unix(0, int64(d.Created)).UTC().Format(time.RFC3339), d.Creator)
		gens, err := kvstore.Generations(ctx, m, in.Home)
		if err != nil {
			fmt.Fprintf(w, "generations unreadable: %s\n\n", tidy(err))
		}
		for id, g := range gens {
			n := byID[id]
			if n == nil {
				continue
			}
			n.gen, n.hasGen = g, true
			if n.state != "up" || region || g == 0 {
				continue
			}
			switch {
			case g.Incarnation() != n.incarnation&(1<<48-1):
				n.state = "lost"
			case g.Generation() > 0:
				n.state = "adopted"
			}
		}
	}
	if !region {
		fmt.Fprintln(w, "compute processes")
		me := m.Info().Node
		for _, c := range m.Topology().ComputeNodes() {
			note := ""
			if c == me {
				note = " (this command)"
			}
			fmt.Fprintf(w, "  %v%s\n", c, note)
		}
		fmt.Fprintln(w)
	}
	return nil
}

func writeNodes(w io.Writer, nodes []*nodeHealth, cluster string) {
	fmt.Fprintln(w, "memory nodes")
	tw := tabwriter.NewWriter(w, 2, 8, 2, ' ', 0)
	fmt.Fprintln(tw, "  node\taddress\tstate\tincarnation\tgeneration\tused\tsize\tnote")
	for _, n := range nodes {
		inc, gen, used, size := "-", "-", "-", "-"
		if n.incarnation != 0 {
			inc = fmt.Sprintf("%#016x", n.incarnation)
		}
		if n.hasGen {
			gen = fmt.Sprint(n.gen.Generation())
		}
		if n.size != 0 {
			size = formatBytes(n.size)
		}
		note := n.why
		switch {
		case n.usedErr != "":
			note = n.usedErr
		case n.state != "unreachable" && n.size != 0:
			used = formatBytes(n.used)
		}
		if n.state == "lost" {
			note = fmt.Sprintf("restarted and lost its memory; run `farmem adopt --cluster %s %d`", cluster, n.id)
			used = "-"
		}
		fmt.Fprintf(tw, "  %v\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", n.id, n.addr, n.state, inc, gen, used, size, note)
	}
	_ = tw.Flush()
}

// formatBytes prints n in binary units.
func formatBytes(n uint64) string {
	const units = "KMGTPE"
	if n < 1024 {
		return fmt.Sprintf("%dB", n)
	}
	v, i := float64(n)/1024, 0
	for v >= 1024 && i < len(units)-1 {
		v, i = v/1024, i+1
	}
	return fmt.Sprintf("%.1f%ciB", v, units[i])
}
