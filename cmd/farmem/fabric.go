package main

import (
	"context"
	"crypto/rand"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"strings"

	"github.com/farmem/farmem/cxl"
	"github.com/farmem/farmem/farmem"
	"github.com/farmem/farmem/farmem/local"
	"github.com/farmem/farmem/numaemu"
	"github.com/farmem/farmem/rdma"
)

// fabricFlags choose and shape the fabric a command runs on.
type fabricFlags struct {
	transport string
	region    string
	cluster   string
	memNodes  int
	compute   int // compute ids of a region this command creates (0: cxl's default, 8)
	memSize   string
	policy    string
	profile   string
	seed      uint64
	shared    bool // tcp: clients share one connection per memory node (rdma.Options.SharedConns)
}

// flagUse says which of the fabric flags a command honours, so that its -h lists only those.
type flagUse struct {
	// transports lists the transports the command takes, for --transport's text.
	transports string
	// region is --region's text ("" leaves the flag out).
	region string
	// creates: the command creates a region or cluster (--mem-nodes, --mem-size), with
	// defaultSize as --mem-size's default.
	creates     bool
	defaultSize string
	// tuning: the command attaches to a region's data path (--policy, --profile, --seed).
	tuning bool
}

func (ff *fabricFlags) register(fs *flag.FlagSet, u flagUse) {
	ff.memNodes, ff.memSize, ff.policy, ff.seed = 2, u.defaultSize, "coherent", 1
	if ff.memSize == "" {
		ff.memSize = "512MiB"
	}
	fs.StringVar(&ff.transport, "transport", "", "the fabric: "+u.transports+" (default cxl, or tcp with --cluster)")
	if u.region != "" {
		fs.StringVar(&ff.region, "region", "", u.region)
	}
	fs.StringVar(&ff.cluster, "cluster", "", "tcp: the cluster file naming the farmemd memory nodes (see docs/cluster.md)")
	if u.creates {
		fs.IntVar(&ff.memNodes, "mem-nodes", 2, "memory nodes of a region or cluster this command creates")
		fs.IntVar(&ff.compute, "compute-nodes", 0, "cxl: compute ids of a region this command creates, i.e. processes that attach at once (default 8); a FlexKV store hands partitions over only while every one of them is attached")
		fs.StringVar(&ff.memSize, "mem-size", ff.memSize, "size of each memory node this command creates")
	}
	if u.tuning {
		fs.StringVar(&ff.policy, "policy", "coherent", "cxl: access policy, coherent or uncached")
		fs.StringVar(&ff.profile, "profile", "", "cxl: latency profile to inject ("+profileNames()+")")
		fs.Uint64Var(&ff.seed, "seed", 1, "seed of the fabric's random sources")
		fs.BoolVar(&ff.shared, "shared-conns", false, "tcp: the command's clients share one connection per memory node (pays with about 8 or more busy clients; see package rdma's doc, \"Shared connections\")")
	}
}

// sharedDesc is what the fabric's description says of --shared-conns.
func (ff *fabricFlags) sharedDesc() string {
	if ff.shared {
		return ", shared connections"
	}
	return ""
}

func profileNames() string {
	var names []string
	for _, p := range numaemu.Profiles() {
		names = append(names, p.Name)
	}
	return strings.Join(names, ", ")
}

// resolve settles the transport from the flags given.
func (ff *fabricFlags) resolve() error {
	if ff.transport == "" {
		ff.transport = "cxl"
		if ff.cluster != "" {
			ff.transport = "tcp"
		}
	}
	switch ff.transport {
	case "local", "cxl", "tcp", "sim":
	default:
		return usageErr("unknown transport %q (want local, cxl, tcp or sim)", ff.transport)
	}
	if ff.region != "" && ff.transport != "cxl" {
		return usageErr("--region is for --transport cxl")
	}
	if ff.cluster != "" && ff.transport != "tcp" {
		return usageErr("--cluster is for --transport tcp")
	}
	if ff.shared && ff.transport != "tcp" {
		return usageErr("--shared-conns is for --transport tcp")
	}
	if ff.memNodes < 1 || ff.memNodes > 64 {
		return usageErr("--mem-nodes %d: want 1 to 64", ff.memNodes)
	}
	return nil
}

// Bounds of --mem-size: a memory node smaller than minMemSize cannot hold the allocator's
// tables and a store; one larger than maxMemSize has offsets an Addr cannot carry.
const (
	minMemSize = 1 << 20
	maxMemSize = farmem.MaxOffset + 1
)

// size parses --mem-size and says which bound a bad one breaks.
func (ff *fabricFlags) size() (uint64, error) {
	n, err := rdma.ParseSize(ff.memSize)
	switch {
	case err != nil:
		return 0, usageErr("--mem-size %q: not a size (want a number with an optional K, M, G, T, P or E suffix, like 256MiB)", ff.memSize)
	case n < minMemSize:
		return 0, usageErr("--mem-size %q: too small (a memory node needs at least 1MiB)", ff.memSize)
	case n > maxMemSize:
		return 0, usageErr("--mem-size %q: too large (a memory node's offsets are 48 bits: at most 256TiB)", ff.memSize)
	}
	return n, nil
}

// openedFabric is a fabric with what it takes to release it.
type openedFabric struct {
	farmem.Fabric
	// desc says in a few words what it is, for reports.
	desc    string
	closers []func() error
	// attached counts the compute nodes attached to the fabric now, in any process (nil when
	// the transport cannot tell: only cxl's region table can).
	attached func() (int, error)
}

func (o *openedFabric) Close() error {
	err := o.Fabric.Close()
	for i := len(o.closers) - 1; i >= 0; i-- {
		if e := o.closers[i](); err == nil {
			err = e
		}
	}
	return err
}

// open opens a real-time fabric (local, cxl or tcp) with room for clients clients on its
// hosted compute node(s). create says a missing region may be created.
func (ff *fabricFlags) open(ctx context.Context, clients int, create bool, log io.Writer) (*openedFabric, error) {
	size, err := ff.size()
	if err != nil {
		return nil, err
	}
	// The store opens a client per worker, plus Call handlers; leave room.
	slots := max(64, clients+16)
	switch ff.transport {
	case "local":
		f, err := local.New(local.Options{Shape: local.Shape{MemoryNodes: ff.memNodes, MemorySize: size, ClientsPerNode: slots}, Seed: ff.seed})
		if err != nil {
			return nil, err
		}
		return &openedFabric{Fabric: f, desc: fmt.Sprintf("local, %d memory nodes of %s", ff.memNodes, ff.memSize)}, nil
	case "cxl":
		return ff.openCXL(clients, slots, size, create, log)
	case "tcp":
		return ff.openTCP(ctx, size, log)
	}
	return nil, usageErr("transport %s has no real-time fabric", ff.transport)
}

func (ff *fabricFlags) openCXL(clients, slots int, size uint64, create bool, log io.Writer) (*openedFabric, error) {
	var policy cxl.Policy
	switch ff.policy {
	case "coherent":
		policy = cxl.Coherent
	case "uncached":
		policy = cxl.Uncached
	default:
		return nil, usageErr("--policy %q: want coherent or uncached", ff.policy)
	}
	oo := cxl.OpenOptions{Policy: policy, Seed: ff.seed}
	if ff.profile != "" {
		p, err := numaemu.ProfileByName(ff.profile)
		if err != nil {
			return nil, usageErr("--profile %q: want one of %s", ff.profile, profileNames())
		}
		oo.Profile = &p
	}
	ro := cxl.Options{Shape: cxl.Shape{MemoryNodes: ff.memNodes, MemorySize: size, ClientsPerNode: slots, ComputeNodes: ff.compute}}
	var (
		r    *cxl.Region
		err  error
		desc string
	)
	switch {
	case ff.region == "":
		if r, err = cxl.CreateTemp("", "farmem-*.region", ro); err != nil {
			return nil, err
		}
		desc = fmt.Sprintf("cxl %s, temporary region %s, %d memory nodes of %s", ff.policy, r.Path(), ff.memNodes, ff.memSize)
	default:
		if _, statErr := os.Stat(ff.region); statErr != nil && create {
			// Said before the file is allocated, not after: it is allocated in full.
			fmt.Fprintf(log, "farmem: creating region %s: %d memory nodes of %s, a file of at least %s allocated in full (--mem-nodes and --mem-size choose)\n",
				ff.region, ff.memNodes, ff.memSize, formatBytes(uint64(ff.memNodes)*size))
		}
		var created bool
		if r, created, err = openOrCreateRegion(ff.region, ro, create); err != nil {
			return nil, err
		}
		if created {
			fmt.Fprintf(log, "farmem: created region %s: a file of %s\n", ff.region, formatBytes(r.Info().Size))
		}
		desc = fmt.Sprintf("cxl %s, region %s", ff.policy, ff.region)
	}
	f, err := r.Attach(oo)
	if err != nil {
		_ = r.Close()
		return nil, err
	}
	if ff.profile != "" {
		desc += ", profile " + ff.profile
	}
	attached := func() (int, error) {
		st, err := r.Status()
		n := 0
		for _, c := range st.Compute {
			if c.Live {
				n++
			}
		}
		return n, err
	}
	return &openedFabric{Fabric: f, desc: desc, closers: []func() error{r.Close}, attached: attached}, nil
}

// openOrCreateRegion opens the region at path or, when create allows it and none is there,
// creates it (created reports which). A region another process publishes at the same moment is
// opened instead: Create publishes a region only once it is formatted, atomically, so losing
// that race is the same as finding the region there.
func openOrCreateRegion(path string, ro cxl.Options, create bool) (r *cxl.Region, created bool, err error) {
	if _, err := os.Stat(path); err == nil || !create {
		r, err := cxl.OpenRegion(path)
		return r, false, err
	}
	r, err = cxl.Create(path, ro)
	if errors.Is(err, fs.ErrExist) {
		r, err = cxl.OpenRegion(path)
		return r, false, err
	}
	return r, err == nil, err
}

func (ff *fabricFlags) openTCP(ctx context.Context, size uint64, log io.Writer) (*openedFabric, error) {
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	if ff.cluster != "" {
		cl, err := rdma.LoadCluster(ff.cluster)
		if err != nil {
			return nil, err
		}
		if cl.SecretFile == "" {
			return nil, usageErr("the cluster file %s names no secret: add a line `secret-file PATH` (make one with `farmemd secret > PATH`)", ff.cluster)
		}
		f, err := rdma.Dial(ctx, cl, rdma.Options{Seed: ff.seed, Logger: quiet, SharedConns: ff.shared})
		if err != nil {
			return nil, err
		}
		return &openedFabric{Fabric: f, desc: "tcp, cluster " + ff.cluster + ff.sharedDesc()}, nil
	}
	// No cluster: memory nodes in this process, on loopback, with a fresh secret.
	secret := make([]byte, 32)
	if _, err := readRandom(secret); err != nil {
		return nil, err
	}
	o := &openedFabric{desc: fmt.Sprintf("tcp on loopback, %d in-process memory nodes of %s%s", ff.memNodes, ff.memSize, ff.sharedDesc())}
	var text strings.Builder
	for id := 1; id <= ff.memNodes; id++ {
		srv, err := rdma.NewServer(rdma.ServerOptions{Node: farmem.NodeID(id), Size: size, Secret: secret, Logger: quiet})
		if err != nil {
			o.closeAll()
			return nil, err
		}
		o.closers = append(o.closers, srv.Close)
		addr, err := srv.Listen("127.0.0.1:0")
		if err != nil {
			o.closeAll()
			return nil, err
		}
		fmt.Fprintf(&text, "memory %d %s\n", id, addr)
	}
	cl, err := rdma.ParseCluster(strings.NewReader(text.String()))
	if err != nil {
		o.closeAll()
		return nil, err
	}
	f, err := rdma.Dial(ctx, cl, rdma.Options{Secret: secret, Seed: ff.seed, Logger: quiet, SharedConns: ff.shared})
	if err != nil {
		o.closeAll()
		return nil, err
	}
	o.Fabric = f
	fmt.Fprintf(log, "farmem: started %d memory nodes on loopback (pass --cluster to use farmemd processes)\n", ff.memNodes)
	return o, nil
}

func (o *openedFabric) closeAll() {
	for i := len(o.closers) - 1; i >= 0; i-- {
		_ = o.closers[i]()
	}
}

func readRandom(b []byte) (int, error) { return rand.Read(b) }
