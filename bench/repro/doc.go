// Package repro runs the papers' experiments in the simulator (package sim) and renders their
// tables (markdown), data (JSON) and plots (SVG). `farmem repro <paper>` is its command line.
//
// Every run is a function of its configuration and seed: the same configuration prints the same
// bytes, which is what lets the README's simulated figures be checked against a quick-mode
// golden (internal/figures; each paper's block is checked, and regenerated with -update, by its
// own test package, internal/figures/check/<paper>). Progress goes to a separate writer and is
// the only output that names wall-clock time.
//
// # CIDER
//
// [RunCider] is the client sweep of CIDER's §5.2–5.3: closed-loop clients updating and searching
// zipf-distributed keys on two structures (the pointer array of bench/ptrarray and a RACE table
// of ds/race), under four pointer synchronizers (optimistic CAS from ds/ptrsync, the CAS
// spinlock, the far MCS lock and CIDER from ds/cider), at client counts up to 512. The testbed is
// [CiderModel]: sim.ConnectX6 with 8 memory nodes and 4 clients per compute node, the compute
// nodes co-located on the memory nodes' NICs as on the paper's testbed (or, with SeparateNICs,
// each on its own NIC). Keys are drawn from YCSB's scrambled Zipfian ([Scrambled], the default)
// or from bench/generator.Permuted ([Permuted]); [RunCiderKeys] reruns a sweep at several key
// counts to show how far the figures depend on the count. Every synchronizer runs under local
// write combining (ds/cider's LocalWC) by default, as the paper runs its baselines; the factor
// analysis reruns the largest count with it the other way and CIDER without contention-aware
// routing. CIDER credits failed CASes at completion (Algorithm 1). The points the headline ratios
// are taken at are rerun at each end of every unpinned cost's range (CiderConfig.Band,
// [DefaultBand]: the atomic unit, the atomic/WRITE cost ratio, the CPU per verb, the local
// access) and [CiderResult.WritePaper]
// sets the paper's surviving figures beside the run's, with each ratio's interval and band and a
// sentence on each difference.
//
// # SELCC
//
// [RunSelcc] reproduces SELCC's §7.1.2-7.2.3 on [SelccModel] (sim.ConnectX3, 8 compute nodes of
// up to 8 clients, 8 memory nodes, 2 KB GCLs): Fig. 13 and 14, the microbenchmarks over GCLs
// (locality; zipf 0.99) against SEL (ds/selcc's no-cache mode), with the hit ratio of Fig. 14's
// read-intensive point at several GCL counts at one cache fraction; Fig. 17, the B-link tree of
// ds/blink under YCSB against the same tree over SEL and the Sherman-like tree of
// bench/baseline/sherman; and Fig. 18, the ablation (selcc's NoForwarding, EvictBatch 1,
// NoDirtyBounds). The data is scaled down at the paper's cache-to-data fractions (1/6 of the
// GCLs, 1/5 of the tree), and [SelccResult.WritePaper] sets each headline ratio, with its
// interval and its band over the unpinned costs, beside the paper's and the targets,
// with a sentence on each difference. [SelccQuick] pins the code (about 12 s of CPU);
// [SelccFull] is what ds/selcc/README.md shows.
//
// # Dolphin
//
// [RunDolphin] is the Dolphin paper's §IV: Table II (each index's compute-side cache, measured
// from the cache itself after a load, per million keys at several key counts) and Figs. 6-8
// (YCSB A against the cache budget, YCSB A and C and LOAD at the paper's 2,000 MB, range-only
// and range-write), for ds/hybrid against bench/baseline/sherman and bench/baseline/smart, on
// [DolphinModel] (sim.ConnectX6, the paper's 4 memory nodes and 4 compute nodes of 18
// clients), dense keys at 50% fill, budgets scaled per million keys. The YCSB A full-cache
// points are rerun over the band of unpinned costs, and [DolphinResult.WritePaper] sets the
// paper's figures beside the run's. Each point's seed loads its own cluster.
//
// # FlexKV
//
// [RunFlex] is FlexKV's §5.2-5.3 on [FlexModel] (sim.ConnectX3, 20 compute nodes of up to 16
// clients with several operations in flight each, 3 memory nodes, 128-byte pairs kept three
// times, each compute node's index and cache in 5% of the data): Fig. 11 (YCSB A-D over the
// client count for FlexKV run by kvstore's manager, the Aceso-like store and plain RACE),
// Fig. 16 (the ablation), Fig. 18 (B switching to A: the knob's ratio and throughput per
// period) and Fig. 19 (the proxies' load balance with and without Algorithm 1). The key count
// and the manager's period are scaled down to the simulator's speed (the package README of
// kvstore states both); [FlexResult.WritePaper] sets the paper's surviving ratios beside the
// run's. [FlexQuick] pins the code; [FlexFull] is what kvstore/README.md shows.
//
// # SWARM
//
// [RunSwarm] is the SWARM paper's §7 on [SwarmModel] (ConnectX-6 clients, ConnectX-4 memory
// nodes, one switch hop; calibrated on the paper's RAW medians): Table 2 and Fig. 5 (4 clients,
// YCSB B), Fig. 12 (16 clients on one key) and Fig. 13 (64 clients, 1-64 metadata words) for
// ds/swarm's register against RAW and DM-ABD (bench/baseline/abd), objects keyed directly (the
// paper's steady state, every location cached). Latency medians per seed, ratios with their
// intervals and a band over the CPU per verb; [SwarmResult.WriteText] sets the paper's figures
// beside them. It counts operations, not virtual time, for its warm-up and window.
//
// Measurement ([Measure]): each point runs on a fresh cluster once per seed. The warm-up lasts
// until three successive steps of virtual time agree on throughput within a tolerance (capped;
// a point that reaches the cap is starred in the tables); the window then lasts until it holds a
// minimum number of operations. A point's throughput is the mean over the seeds with the
// half-width of its 95% confidence interval (Student's t, [MeanCI]); its counters are summed
// over the seeds. How these choices depart from the paper's setup is stated beside the figures
// (ds/cider/README.md).
//
// Limits: the quick configuration ([CiderQuick]) takes about 20 s of one core and exists to pin
// the code behind the figures, not to reproduce them; the full one ([CiderFull]) is budgeted at
// under 30 minutes on 2 cores with two workers (measured: 954 s of CPU in all; the band reruns
// only the headline points), most of it in
// the collapsed points, whose warm-ups and windows stretch to converge and to reach their
// operation count. A warm-up that converges can still be a metastable state: at hundreds of
// clients CIDER under Algorithm 1 can hold steady in the start-up collapse for a seed and leave
// it for another, which shows as a wide interval.
package repro
