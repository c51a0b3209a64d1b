// Package bench is farmem's benchmark harness: YCSB's core workloads A to F over the generators
// of bench/generator, load and run phases over any Store, per-worker HDR histograms merged into
// a Report, and the report as a table, JSON or SVG plots of a sweep.
//
// # Workloads and generators
//
// The six core workloads are embedded (Builtin("a") ... Builtin("f")); LoadWorkload also reads
// a file in YCSB's property format (ParseFile), and Workload.With overrides properties. The key
// choosers are YCSB's, from package bench/generator (whose doc states the law each draws):
// ScrambledZipfian for "zipfian", Latest, Hotspot and Uniform; scan and field lengths use its
// Zipfian and Uniform. Keys are named as YCSB names them: "user" and the key number hashed with
// FNVHash64, so consecutive inserts scatter over the key order (insertorder=ordered leaves the
// number unhashed). keyformat=binary64 (a farmem property) makes each key the 8-byte
// big-endian key number plus one instead, never its hash: nonzero, below 2^63, in numeric
// order bytewise, the dense integer keys Dolphin's layout is built for; its inserts are
// therefore in key order (insertorder=hashed with it is an error). Workload.AppendKey turns a
// key number into a key in either format. Every generator takes its randomness from the
// *rand.Rand passed in, so a run on the simulator is a function of its seed.
//
// A scan (workload E) is YCSB's CoreWorkload's: its start key is the key of a record chosen by
// the workload's key chooser (as a read's is), its length is drawn from minscanlength to
// maxscanlength (scanlengthdistribution uniform or zipfian), and the store returns up to that
// many records from the start key on, in bytewise key order.
//
// # Stores
//
// A Store is a system under test; the harness opens one Session per worker. Sessions that are
// Scanners serve YCSB's scans (workload E needs an ordered index: a store without one is
// reported as unsupported, not failed); sessions that are Costers have their far-memory costs
// (farmem.Stats deltas) reported per operation. The peers (Peers) are MapStore (a Go map behind
// a sync.RWMutex: the local limit) and Redis (redis-server on loopback, spoken to in RESP).
// Their ordered twins (OrderedPeers), whose sessions are Scanners, are BTreeStore (a B-tree,
// github.com/google/btree, behind a sync.RWMutex) and Redis with its sorted-set index
// (RedisOptions.Index: ZADD on insert, ZRANGEBYLEX then MGET for a scan, see RedisIndexKey).
//
// # Running
//
// Run loads every store and runs the workload on each in turn, on the wall clock, for a
// duration or an operation count, at each point of an optional Sweep (clients=1,2,4,...). The
// same workload runs on the simulator through a Driver and its Workers: in sim's StartFunc,
// open a session on the client's Memory, load a part of the records with Worker.Load, and
// return Worker.Step as the client's operation:
//
//	d, _ := bench.NewDriver(w)
//	workers := make([]*bench.Worker, n)
//	res, err := s.RunClosedLoop(sim.ClosedLoop{Clients: n, Duration: time.Second,
//		Start: func(ctx context.Context, m farmem.Memory, i int) (sim.OpFunc, error) {
//			sess := ... // a Session over m
//			wk, err := d.NewWorker(sess, bench.WorkerOptions{Rand: m.Runtime().Rand(),
//				Now: bench.FabricClock(m.Runtime()), Duration: time.Second})
//			if err != nil {
//				return nil, err
//			}
//			if err := wk.Load(ctx, i, n); err != nil {
//				return nil, err
//			}
//			workers[i] = wk
//			return wk.Step, nil
//		}})
//	row := bench.Summarize("kvstore/sim", bench.PhaseRun, res.Window, workers)
//
// (The closed loop starts every client's first operation at the same virtual instant, so each
// worker's window, which starts at its first Step, is the loop's.)
package bench
