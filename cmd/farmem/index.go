package main

import (
	"strconv"
	"strings"

	"github.com/farmem/farmem/ds/maxreg"
	"github.com/farmem/farmem/kvstore"
)

// indexKind is one entry of the table --index chooses from.
type indexKind struct {
	name    string // as --index takes it; the kind's own Name()
	ordered bool   // the kind scans (an OrderedIndex), so workload E runs on it
	about   string // for --help
	kind    func() kvstore.IndexKind
	// replicated: --set replicas asked for a replicated index (it needs --sync optimistic,
	// the default then).
	replicated bool
	// replicas is --set replicas=N: the store's replication factor (kvstore.Options.Replicas),
	// which replicates its metadata and its RACE index on the same N memory nodes.
	replicas int
}

// indexKinds is the table of the store's index kinds, by --index name, the default first. An
// ordered kind (Dolphin's hybrid tree, SELCC's B-link tree) is added here with ordered true.
var indexKinds = []indexKind{
	{name: "race", about: "RACE extendible hashing, a hash index: no scans; --set replicas=3 (or 5, 7) replicates it and the store's metadata on that many memory nodes",
		kind: func() kvstore.IndexKind { return kvstore.Race{} }},
	{name: "hybrid", ordered: true, about: "Dolphin's ART/B+ hybrid tree with a 64 MiB radix cache per node, ordered, binary64 keys only (--set keyformat=binary64)",
		kind: func() kvstore.IndexKind { return kvstore.Hybrid{CacheBytes: 64 << 20} }},
	{name: "blink", ordered: true, about: "SELCC's B-link tree over coherently cached 4 KiB lines (128 per node), ordered, any keys up to 256 bytes, write-back before each acknowledgement",
		kind: func() kvstore.IndexKind { return &kvstore.Blink{} }},
	{name: "flexkv", about: "RACE with FlexKV's index proxying and KV cache, run by its manager in every process (one acts, by lease): no scans",
		kind: func() kvstore.IndexKind { return &kvstore.FlexKV{} }},
	{name: "aceso", about: "FlexKV's Aceso-like baseline: RACE on the memory nodes with an address cache, no proxying: no scans",
		kind: func() kvstore.IndexKind { return &kvstore.FlexKV{NoProxy: true} }},
	{name: "swarm", about: "SWARM-KV: a replicated RACE index of keys to Safe-Guess objects on the same memory nodes, surviving any f of 2f+1 crashed (--set replicas=3, the default, or 5, 7; needs that many --mem-nodes): no scans",
		kind: func() kvstore.IndexKind { return kvstore.Swarm{} }, replicas: 3, replicated: true},
}

// withOptions takes from set the --set entries that configure the index kind rather than the
// workload (replicas=N: the store's metadata and its RACE index replicated on N memory
// nodes, see kvstore.Options.Replicas; for swarm, its index and objects, 3 by default)
// and returns the kind with them applied and the entries left for the workload.
func (k indexKind) withOptions(set []string) (indexKind, multiFlag, error) {
	var rest multiFlag
	replicas := 0
	for _, kv := range set {
		name, v, _ := strings.Cut(kv, "=")
		if name != "replicas" {
			rest = append(rest, kv)
			continue
		}
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 7 || n > 1 && n%2 == 0 {
			return k, nil, usageErr("--set replicas=%s: want 1, 3, 5 or 7", v)
		}
		if k.name == "swarm" && n < 3 {
			return k, nil, usageErr("--set replicas=%d: the swarm index needs 3, 5 or 7 (its objects' majority is at least 2)", n)
		}
		replicas = n
	}
	if replicas > 1 {
		// Race.Replicas 0 takes Options.Replicas; kvstore's options matrix refuses the kinds
		// that are not replicated, at Open.
		k.replicas, k.replicated = replicas, k.name == "race" || k.name == "swarm"
	}
	if k.name == "swarm" {
		k = k.swarmSized(rest)
	}
	return k, rest, nil
}

// indexByName returns the entry named name, or a usage error listing the known names.
func indexByName(name string) (indexKind, error) {
	for _, k := range indexKinds {
		if k.name == name {
			return k, nil
		}
	}
	return indexKind{}, usageErr("--index %q: no such index kind (known: %s)", name, indexNames())
}

// indexNames lists the known kinds' names.
func indexNames() string {
	var s []string
	for _, k := range indexKinds {
		s = append(s, k.name)
	}
	return strings.Join(s, ", ")
}

// indexUsage describes the kinds for --help.
func indexUsage() string {
	var s []string
	for _, k := range indexKinds {
		s = append(s, k.name+" ("+k.about+")")
	}
	return "the store's index kind: " + strings.Join(s, ", ")
}

// orderedIndexNames lists the ordered kinds, or says there is none yet.
func orderedIndexNames() string {
	var s []string
	for _, k := range indexKinds {
		if k.ordered {
			s = append(s, k.name)
		}
	}
	if len(s) == 0 {
		return "none is built yet"
	}
	return "choose one with --index: " + strings.Join(s, ", ")
}

// swarmSized sizes the swarm kind's objects for the workload's values (the --set entries
// valuesize, or fieldcount × fieldlength, YCSB's defaults 10 × 100 otherwise), with four
// record slots per writer: each object keeps a lane of records per client slot of the
// fabric on each replica (kvstore.Swarm's Limits), so its size follows the values'.
func (k indexKind) swarmSized(set []string) indexKind {
	props := map[string]int{"fieldcount": 10, "fieldlength": 100}
	for _, kv := range set {
		name, v, _ := strings.Cut(kv, "=")
		if n, err := strconv.Atoi(v); err == nil && n > 0 {
			props[name] = n
		}
	}
	vs := props["fieldcount"] * props["fieldlength"]
	if props["valuesize"] > 0 {
		vs = props["valuesize"]
	}
	vs = min(vs+1, maxreg.MaxValueSize) // the kind's marker byte
	k.kind = func() kvstore.IndexKind { return kvstore.Swarm{Params: maxreg.Params{ValueSize: vs, Slots: 4}} }
	return k
}
