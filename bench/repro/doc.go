// Package repro runs the papers' experiments in the simulator (package sim) and renders their
// tables (markdown), data (JSON) and plots (SVG). `farmem repro <paper>` is its command line.
//
// Every run is a function of its configuration and seed: the same configuration prints the same
// bytes, which is what lets the README's simulated figures be checked against a quick-mode
// golden (internal/figures). Progress goes to a separate writer and is the only output that
// names wall-clock time.
//
// # CIDER
//
// [RunCider] is the client sweep of CIDER's §5.2–5.3: closed-loop clients updating and searching
// zipf-distributed keys on two structures (the pointer array of bench/ptrarray and a RACE table
// of ds/race), under four pointer synchronizers (optimistic CAS from ds/ptrsync, the CAS
// spinlock, the far MCS lock and CIDER from ds/cider), at client counts up to 512. The testbed is
// [CiderModel]: sim.ConnectX6 with 8 memory nodes and 4 clients per compute node, each compute
// node on its own NIC. Keys are drawn from bench/generator.Permuted (YCSB's Zipfian ranks mapped
// onto keys by a fixed bijection; not YCSB's scrambled Zipfian). Each point is a fresh cluster,
// a fixed warm-up of virtual time and a measured window; there is no local write combining under
// any synchronizer, one seed and no confidence interval. How these choices depart from the
// paper's setup is stated beside the figures (ds/cider/README.md).
//
// Limits: a full run ([CiderFull]) takes minutes of one core; the quick configuration
// ([CiderQuick]) takes seconds and exists to pin the code behind the figures, not to reproduce
// them.
package repro
