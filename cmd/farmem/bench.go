package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/farmem/farmem/bench"
	"github.com/farmem/farmem/farmem"
	"github.com/farmem/farmem/kvstore"
	"github.com/farmem/farmem/sim"
)

type benchFlags struct {
	fabric    fabricFlags
	workloads string
	clients   int
	duration  optDuration
	warmup    optDuration
	skipLoad  bool
	process   string
	records   int64
	sweep     string
	peers     string
	sync      string
	index     string
	proxy     string    // --proxy (bench_proxy.go)
	idx       indexKind // --index, resolved
	json      bool
	svg       string
	metric    string
	set       multiFlag
	replicas  int
	matrix    bool
	kvCache   bool
}

// multiFlag collects a repeated flag.
type multiFlag []string

func (m *multiFlag) String() string     { return strings.Join(*m, ",") }
func (m *multiFlag) Set(v string) error { *m = append(*m, v); return nil }

func runBench(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var bf benchFlags
	fs := flag.NewFlagSet("farmem bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	bf.fabric.register(fs, flagUse{transports: "local, cxl, tcp or sim", creates: true, tuning: true,
		region: "cxl: the region file, created if missing (default a temporary region)"})
	fs.StringVar(&bf.workloads, "workload", "a", "YCSB workloads to run, by name (a-f) or workload file, comma-separated")
	fs.IntVar(&bf.clients, "clients", 4, "clients (workers), each with its own session")
	fs.Var(&bf.duration, "duration", "measured time of each run, a `duration` (default 3s; on sim, 2ms of virtual time)")
	fs.Var(&bf.warmup, "warmup", "unmeasured time before each run, a `duration` (default 500ms; on sim, 200us of virtual time)")
	fs.BoolVar(&bf.skipLoad, "skip-load", false, "do not load the records (the store holds them already; found on its own when it does)")
	fs.StringVar(&bf.process, "process", "", "i/n: this is process i (0-based) of n running at once; each loads and uses its own 1/n of the records")
	fs.Int64Var(&bf.records, "records", 0, "records to load (default the workload's recordcount)")
	fs.StringVar(&bf.sweep, "sweep", "", "run once per value of a parameter, e.g. clients=1,2,4,8")
	fs.StringVar(&bf.peers, "peers", "", "peers to run beside the store: gomap, redis (when installed), none (default gomap,redis; none on sim or with --cluster); a workload that scans gets their ordered twins, gomap/btree and redis/zset")
	fs.StringVar(&bf.sync, "sync", "", "the store's pointer synchronizer: "+strings.Join(kvstore.SyncNames(), ", ")+", or none for an index that takes none (default the store's, or the index kind's for a new store; kvstore's options matrix says which kind takes which)")
	fs.StringVar(&bf.index, "index", indexKinds[0].name, indexUsage())
	fs.StringVar(&bf.proxy, "proxy", "", proxyUsage())
	fs.BoolVar(&bf.json, "json", false, "print the report as JSON instead of a table")
	fs.StringVar(&bf.svg, "svg", "", "write a plot of the sweep to this SVG file")
	fs.StringVar(&bf.metric, "metric", string(bench.MetricThroughput), "the metric the SVG plots")
	fs.Var(&bf.set, "set", "override a workload property, name=value (repeatable)")
	fs.BoolVar(&bf.kvCache, "kv-cache", true, "flexkv: cache pairs on the compute nodes as well as addresses (false: addresses only)")
	fs.BoolVar(&bf.matrix, "matrix", false, "run every combination of --index, --sync and --replicas (1, 3) that the store's options matrix allows, on each workload (default a,b,c,e; e only on ordered kinds), with binary64 keys and no peers, on a fresh fabric per run (on cxl of one compute id unless --compute-nodes says otherwise, so that FlexKV proxies), and print one table of Mops/s, round trips, verbs and bytes per operation")
	fs.IntVar(&bf.replicas, "replicas", 0, "the store's replication factor r, 1, 3, 5 or 7: its metadata and its RACE index on r memory nodes, surviving any (r-1)/2 of them crashed (the same as --set replicas=r)")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), `usage: farmem bench [flags]
       farmem bench --cluster FILE [--process I/N] [--skip-load]

Runs YCSB workloads on the key-value store over a fabric, beside its peers, and prints a table.
With no flags: workload A on a cxl region in a temporary file, 4 clients, 3 seconds.
A store that holds the records already (a second run on a cluster or region) is not loaded
again. It exits 1 if any operation failed or the load did not complete, and says how many.

A workload that scans (E) runs on the peers' ordered twins (gomap/btree, redis/zset) and on
the store only if its index (--index) is ordered; otherwise the store's row says it needs an
ordered index, and the command exits 1 only if no store could run the workload.
--set keyformat=binary64 makes keys the 8-byte big-endian key number plus one (in key order,
so inserts are ordered) instead of YCSB's "user..." names.

`)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usageErr("unexpected argument %q", fs.Arg(0))
	}
	if err := bf.fabric.resolve(); err != nil {
		return err
	}
	if bf.clients < 1 {
		return usageErr("--clients %d: want at least 1", bf.clients)
	}
	onSim := bf.fabric.transport == "sim"
	if !bf.duration.set {
		bf.duration.d = 3 * time.Second
		if onSim {
			bf.duration.d = 2 * time.Millisecond
		}
	}
	if !bf.warmup.set {
		bf.warmup.d = 500 * time.Millisecond
		if onSim {
			bf.warmup.d = 200 * time.Microsecond
		}
	}
	if bf.duration.d <= 0 || bf.warmup.d < 0 {
		return usageErr("--duration must be positive and --warmup not negative")
	}
	part, parts, err := parseProcess(bf.process)
	if err != nil {
		return err
	}
	if onSim && (parts > 1 || bf.skipLoad) {
		return usageErr("--process and --skip-load are for a shared store, not the simulator's fresh one")
	}
	var sweep bench.Sweep
	if bf.sweep != "" {
		var err error
		if sweep, err = bench.ParseSweep(bf.sweep); err != nil {
			return usageErr("--sweep: %v", err)
		}
		if onSim && sweep.Param != "clients" {
			return usageErr("on sim, --sweep takes clients only")
		}
	}
	if bf.matrix {
		if err := bf.matrixFlags(fs); err != nil {
			return err
		}
		return bf.runMatrix(ctx, stdout, stderr)
	}
	syncOpt, err := bf.syncOption()
	if err != nil {
		return err
	}
	if err := bf.withProxy(); err != nil {
		return err
	}
	if bf.idx, err = indexByName(bf.index); err != nil {
		return err
	}
	if bf.idx, err = bf.idx.withKVCache(bf.kvCache); err != nil {
		return err
	}
	if bf.replicas != 0 {
		bf.set = append(bf.set, fmt.Sprintf("replicas=%d", bf.replicas))
	}
	if bf.idx, bf.set, err = bf.idx.withOptions(bf.set); err != nil {
		return err
	}
	if syncOpt == nil && bf.idx.replicated {
		syncOpt = kvstore.Optimistic // the only synchronizer of a replicated index
	}
	// The plot's path is checked before the benchmark runs, not after: the file is created now
	// and removed again if the run fails.
	var svg *os.File
	if bf.svg != "" {
		if !slices.Contains(bench.Metrics(), bench.Metric(bf.metric)) {
			return usageErr("--metric %q: want one of %v", bf.metric, bench.Metrics())
		}
		if svg, err = os.Create(bf.svg); err != nil {
			return usageErr("--svg: %v", err)
		}
		defer func() {
			if svg != nil {
				_ = svg.Close()
				_ = os.Remove(bf.svg)
			}
		}()
	}
	var reports []*bench.Report
	var descs []string
	for _, name := range strings.Split(bf.workloads, ",") {
		w, err := bf.workload(strings.TrimSpace(name))
		if err != nil {
			return err
		}
		if w, err = splitRecords(w, part, parts); err != nil {
			return err
		}
		var r *bench.Report
		var desc string
		if onSim {
			r, desc, err = bf.runSim(ctx, w, sweep, syncOpt, stderr)
		} else {
			r, desc, err = bf.runReal(ctx, w, sweep, syncOpt, stderr)
		}
		if err != nil {
			return fmt.Errorf("workload %s: %w", w.Name, err)
		}
		reports = append(reports, r)
		descs = append(descs, desc)
		if !bf.json {
			fmt.Fprintf(stdout, "workload %s on %s; %d clients, %v measured after %v warm-up\n", w.Name, desc, bf.clients, bf.duration.d, bf.warmup.d)
			if err := r.WriteTable(stdout); err != nil {
				return err
			}
			fmt.Fprintln(stdout)
		}
		bf.explainUnsupported(r, w, stderr)
	}
	if bf.json {
		out := struct {
			Fabrics []string        `json:"fabrics"`
			Reports []*bench.Report `json:"reports"`
		}{descs, reports}
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(out); err != nil {
			return err
		}
	}
	if svg != nil {
		if err := reports[0].WriteSVG(svg, bench.Metric(bf.metric)); err != nil {
			return err
		}
		f := svg
		svg = nil
		if err := f.Close(); err != nil {
			_ = os.Remove(bf.svg)
			return err
		}
		fmt.Fprintf(stderr, "farmem: wrote %s\n", bf.svg)
	}
	return failures(reports)
}

func (bf *benchFlags) syncOption() (kvstore.Sync, error) {
	if bf.sync == "" {
		return nil, nil
	}
	s, err := kvstore.SyncByName(bf.sync)
	if err != nil {
		return nil, usageErr("--sync %q: want one of %s, none", bf.sync, strings.Join(kvstore.SyncNames(), ", "))
	}
	return s, nil
}

func (bf *benchFlags) workload(name string) (*bench.Workload, error) {
	w, err := bench.LoadWorkload(name)
	if err != nil {
		return nil, usageErr("--workload: %v", err)
	}
	set := map[string]string{}
	if bf.records > 0 {
		set["recordcount"] = strconv.FormatInt(bf.records, 10)
	}
	for _, kv := range bf.set {
		k, v, ok := strings.Cut(kv, "=")
		if !ok {
			return nil, usageErr("--set %q: want name=value", kv)
		}
		set[k] = v
	}
	if len(set) > 0 {
		if w, err = w.With(set); err != nil {
			return nil, usageErr("--set: %v", err)
		}
	}
	return w, nil
}

// maxClients is the largest client count a run needs, over the sweep too.
func (bf *benchFlags) maxClients(sweep bench.Sweep) (int, error) {
	n := bf.clients
	if sweep.Param == "clients" {
		for _, v := range sweep.Values {
			c, err := strconv.Atoi(v)
			if err != nil || c < 1 {
				return 0, usageErr("--sweep clients=%s: want positive counts", v)
			}
			n = max(n, c)
		}
	}
	return n, nil
}

// runReal runs one workload on a real-time fabric, the store and its peers side by side.
func (bf *benchFlags) runReal(ctx context.Context, w *bench.Workload, sweep bench.Sweep, syncOpt kvstore.Sync, log io.Writer) (*bench.Report, string, error) {
	clients, err := bf.maxClients(sweep)
	if err != nil {
		return nil, "", err
	}
	f, err := bf.fabric.open(ctx, clients, true, log)
	if err != nil {
		return nil, "", err
	}
	defer f.Close()
	store, err := kvstore.Open(ctx, f.Fabric, kvstore.Options{Sync: syncOpt, Replicas: bf.idx.replicas, Index: bf.idx.kind()})
	if err != nil {
		return nil, "", fmt.Errorf("open the store: %w", err)
	}
	defer store.Close()
	if err := awaitProcesses(ctx, f, bf.process, bf.idx.name, log); err != nil {
		return nil, "", err
	}
	defer startManager(ctx, store, bf.idx.name, log)()
	stores := []bench.Store{bench.KVStore(store, "kvstore/"+bf.fabric.transport)}
	peers, err := bf.peerStores(ctx, w.NeedsScan() || sweep.Param == "scanproportion", log)
	if err != nil {
		return nil, "", err
	}
	for _, p := range peers {
		defer p.Close()
	}
	stores = append(stores, peers...)
	cfg := bench.Config{
		Workload: w, Stores: stores, Clients: bf.clients, Duration: bf.duration.d, Warmup: bf.warmup.d,
		Sweep: sweep, Seed: bf.fabric.seed, SkipLoad: bf.skipLoad,
	}
	if !cfg.SkipLoad {
		loaded, err := recordsLoaded(ctx, store, w)
		if err != nil {
			return nil, "", err
		}
		if loaded {
			if len(peers) > 0 {
				return nil, "", fmt.Errorf("the store holds the records already but the peers do not: pass --peers none (or --skip-load to run them unloaded)")
			}
			fmt.Fprintf(log, "farmem: the store holds records %d..%d already: not loading them again\n", w.InsertStart, w.InsertStart+w.InsertCount-1)
			cfg.SkipLoad = true
		}
	}
	if bench.IsTerminal(os.Stderr) {
		cfg.Progress = os.Stderr
	}
	r, err := bench.Run(ctx, cfg)
	if err != nil {
		return nil, "", err
	}
	return r, f.desc + bf.indexDesc() + ", sync " + store.Sync(), nil
}

// peerStores starts the peers --peers names: the Go map and redis, or, for a workload that
// scans (ordered), their ordered twins (gomap/btree, and redis/zset with its sorted-set index),
// since a peer without an ordered index cannot run it.
func (bf *benchFlags) peerStores(ctx context.Context, ordered bool, log io.Writer) ([]bench.Store, error) {
	want := bf.peers
	if want == "" {
		want = "gomap,redis"
		if bf.fabric.cluster != "" {
			want = "none" // the store is remote: comparing it with in-process peers says little
		}
	}
	if want == "none" {
		return nil, nil
	}
	names := strings.Split(want, ",")
	for _, n := range names {
		if n != "gomap" && n != "redis" {
			return nil, usageErr("--peers %q: want gomap, redis or none", want)
		}
	}
	all := bench.Peers
	if ordered {
		all = bench.OrderedPeers
	}
	var out []bench.Store
	for _, p := range all(ctx, log) {
		base, _, _ := strings.Cut(p.Name(), "/") // gomap/btree is the gomap peer's twin
		if slices.Contains(names, base) {
			out = append(out, p)
		} else {
			_ = p.Close()
		}
	}
	return out, nil
}

// runSim runs one workload on the simulator: one fresh simulated cluster per point of a
// client sweep, each client a closed loop of the workload's operations on its own session.
func (bf *benchFlags) runSim(ctx context.Context, w *bench.Workload, sweep bench.Sweep, syncOpt kvstore.Sync, log io.Writer) (*bench.Report, string, error) {
	if bf.peers != "" && bf.peers != "none" {
		return nil, "", usageErr("--peers: peers run in real time, the simulator in virtual time; they cannot share a table")
	}
	size, err := bf.fabric.size()
	if err != nil {
		return nil, "", err
	}
	// The simulator runs one goroutine at a time: one P avoids waking an idle one at every
	// handoff, which costs more than it gives.
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	points := []string{strconv.Itoa(bf.clients)}
	if sweep.Param == "clients" {
		points = sweep.Values
	}
	report := &bench.Report{Workload: w.Name, Sweep: sweep.Param}
	var desc string
	for _, p := range points {
		n, err := strconv.Atoi(p)
		if err != nil || n < 1 {
			return nil, "", usageErr("--sweep clients=%s: want positive counts", p)
		}
		row, d, err := bf.simPoint(ctx, w, n, size, syncOpt)
		if err != nil {
			return nil, "", fmt.Errorf("%d clients: %w", n, err)
		}
		if sweep.Param != "" {
			row.Point = p
		}
		report.Rows = append(report.Rows, row)
		desc = d
	}
	return report, desc, nil
}

// simClientsPerNode is how many clients each simulated compute node runs (the papers' testbeds
// ran a few clients per CN on many CNs).
const simClientsPerNode = 8

func (bf *benchFlags) simPoint(ctx context.Context, w *bench.Workload, clients int, size uint64, syncOpt kvstore.Sync) (bench.Row, string, error) {
	model := sim.ConnectX6()
	model.MemoryNodes, model.MemorySize = bf.fabric.memNodes, size
	model.MaxHandlers = 2
	model.ClientsPerNode = simClientsPerNode + model.MaxHandlers + 1 // one slot for the store's setup client
	kind := bf.idx.kind()
	if _, ok := kind.(kvstore.NodeKind); ok {
		// and the kind's node state on each compute node (farmem/nodestate): one client, two
		// for blink, whose SELCC cluster keeps node state of its own.
		model.ClientsPerNode += 2
	}
	model.ComputeNodes = max(1, (clients+simClientsPerNode-1)/simClientsPerNode)
	s, err := sim.New(model, bf.fabric.seed)
	if err != nil {
		return bench.Row{}, "", err
	}
	defer s.Close()
	store, err := kvstore.Open(ctx, s, kvstore.Options{Sync: syncOpt, Replicas: bf.idx.replicas, MaxClients: 1, Index: kind})
	if err != nil {
		return bench.Row{}, "", fmt.Errorf("open the store: %w", err)
	}
	defer store.Close()
	desc := fmt.Sprintf("sim (%s model, %d memory nodes, %d compute nodes of %d clients)%s, sync %s, virtual time",
		model.Name, model.MemoryNodes, model.ComputeNodes, simClientsPerNode, bf.indexDesc(), store.Sync())
	if w.NeedsScan() && !store.Ordered() {
		// The row bench.Run makes for a store that cannot run the workload, not a run whose
		// every scan fails.
		return bench.Row{Store: "kvstore/sim", Workload: w.Name, Phase: bench.PhaseRun, Clients: clients,
			Unsupported: fmt.Sprintf("kvstore/sim: workload %s %v", w.Name, bench.ErrNeedsOrderedIndex)}, desc, nil
	}
	d, err := bench.NewDriver(w)
	if err != nil {
		return bench.Row{}, "", err
	}
	workers := make([]*bench.Worker, clients)
	res, err := s.RunClosedLoop(sim.ClosedLoop{
		Clients: clients, Warmup: bf.warmup.d, Duration: bf.duration.d,
		Start: func(ctx context.Context, m farmem.Memory, i int) (sim.OpFunc, error) {
			ss, err := store.SessionOn(ctx, m)
			if err != nil {
				return nil, err
			}
			wk, err := d.NewWorker(bench.KVSession(ss, store.Ordered()), bench.WorkerOptions{
				Rand: m.Runtime().Rand(), Now: bench.FabricClock(m.Runtime()),
				Warmup: bf.warmup.d, Duration: bf.duration.d,
			})
			if err != nil {
				return nil, err
			}
			if err := wk.Load(ctx, i, clients); err != nil {
				return nil, err
			}
			workers[i] = wk
			return wk.Step, nil
		},
	})
	if err != nil {
		return bench.Row{}, "", err
	}
	row := bench.Summarize("kvstore/sim", bench.PhaseRun, res.Window, workers)
	row.Clients = clients
	return row, desc, nil
}

// indexDesc names the index kind in a run's description, when it is not the default one.
func (bf *benchFlags) indexDesc() string {
	if bf.idx.name == indexKinds[0].name {
		return ""
	}
	return ", index " + bf.idx.name
}

// explainUnsupported tells why the store could not run a workload that scans: its index
// kind, and the kinds that would (or that none is built yet). The table's note says what
// bench.Run found; this says what to do about it.
func (bf *benchFlags) explainUnsupported(r *bench.Report, w *bench.Workload, log io.Writer) {
	for _, row := range r.Rows {
		if row.Unsupported != "" && strings.HasPrefix(row.Store, "kvstore/") {
			fmt.Fprintf(log, "farmem: %s cannot run workload %s: it scans, which needs an ordered index, and the store's index %s is not one (%s)\n",
				row.Store, w.Name, bf.idx.name, orderedIndexNames())
			return
		}
	}
}
