package kvstore

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/farmem/farmem/alloc"
	"github.com/farmem/farmem/ds/ptrsync"
	"github.com/farmem/farmem/ds/race"
	"github.com/farmem/farmem/farmem"
)

// # The options matrix
//
// A store is composed of an index kind (Options.Index), the synchronizer of its far pointers
// (Options.Sync), a replication factor (Options.Replicas, and the RACE index's own
// Race.Replicas), FlexKV's proxying and KV cache (fields of the FlexKV kind) and each kind's
// compute-side cache. Not every combination means something: Matrix is the one table of which
// kind takes which, and Open refuses every other combination before it writes anything, with
// an error wrapping farmem.ErrInvalid that says why (RefusalError). Refusals lists the
// refusals the table implies, one per line, which the package README renders.
//
// An index kind with no row in the table (one a user plugs in) is not checked: it takes any
// synchronizer and defaults to DefaultSync, as before the table.

// None is the synchronizer of an index that changes no far pointer through one: SELCC's B-link
// tree, whose lines are written under SELCC's coherence latches. It builds no synchronizer
// (IndexEnv.Sync is nil); an index that needs one refuses it at Open (Matrix).
var None Sync = noneSync{}

type noneSync struct{}

func (noneSync) Name() string { return "none" }

func (noneSync) New(context.Context, farmem.Memory, int) (ptrsync.Synchronizer, error) {
	return nil, nil
}

// KindRow is one index kind's row of the options matrix: what it takes of each option.
type KindRow struct {
	// Index is the kind's Name().
	Index string
	// Paper names the structure's source.
	Paper string
	// Syncs are the synchronizers the kind accepts, its default (what a store created with a
	// nil Options.Sync records) first.
	Syncs []string
	// SyncWhy says why the others are refused ("" when the kind takes them all).
	SyncWhy string
	// IndexReplicas are the replication factors of the index itself (1: not replicated).
	IndexReplicas []int
	// ReplicasWhy says what replication the kind has and why other factors are refused.
	ReplicasWhy string
	// Proxy and KVCache: the kind proxies partitions of its index on compute nodes (FlexKV),
	// and keeps values in a compute-side cache coherent with far memory.
	Proxy, KVCache bool
	// Cache describes the kind's compute-side cache ("" for none).
	Cache string
	// Ordered: the kind scans (an OrderedIndex).
	Ordered bool
	// Own lists the kind's own refusals beyond the columns above, for the table of refusals;
	// refuse enforces them.
	Own []Refusal
	// refuse holds the kind's own refusals (nil: none): it gets the options after defaults and
	// the synchronizer's name.
	refuse func(o Options, sync string) error
}

// matrix is the options matrix, the default kind first. A kind added to the store adds its
// row here: its columns, its own refusals as lines (Own) and as a function (refuse). SWARM-KV's
// row is one more entry whose refuse wraps the function of its refusals that its kind exports,
// and whose Own lines state them.
var matrix = []KindRow{
	{
		Index: "race", Paper: "RACE hashing (Zuo et al., ATC'21)",
		Syncs:         []string{"cider", "optimistic", "mcs", "spin"},
		SyncWhy:       "RACE's slots are far pointers changed by CAS through a synchronizer",
		IndexReplicas: []int{1, 3, 5, 7},
		ReplicasWhy:   "Race.Replicas (0: Options.Replicas) replicates the index on the store's metadata nodes; another factor than the store's (except 1) is refused",
		Own: []Refusal{
			{"race", "Race.Replicas > 1 with sync cider, mcs, spin", "the lock words of CIDER, MCS and the spinlock live outside the replicated memory: use optimistic"},
			{"race", "Race.Replicas r > 1 with Options.Replicas s > 1, r != s", "one factor replicates metadata and index on the same nodes; Race.Replicas 1 keeps the index unreplicated"},
		},
		refuse: refuseRace,
	},
	{
		Index: "hybrid", Paper: "Dolphin's hybrid ART/B+ tree",
		Syncs:         []string{"optimistic", "cider", "mcs", "spin"},
		SyncWhy:       "the tree's large-value pointer words are CAS-swapped through a synchronizer (optimistic: the tree's own loop; CIDER, MCS, spin: under its lock table hashed by key)",
		IndexReplicas: []int{1},
		ReplicasWhy:   "the tree is not replicated: Options.Replicas > 1, which promises every word of the store survives f crashed nodes, is refused",
		Cache:         "radix cache per compute node (Hybrid.CacheBytes)",
		Ordered:       true,
	},
	{
		Index: "blink", Paper: "SELCC's B-link tree",
		Syncs:         []string{"none"},
		SyncWhy:       "the tree changes no far pointer by CAS: its lines are written under SELCC's coherence latches, so a pointer synchronizer would be ignored, and is refused",
		IndexReplicas: []int{1},
		ReplicasWhy:   "SELCC's lines are not replicated: Options.Replicas > 1 is refused",
		Cache:         "SELCC's coherent line cache per compute node (Blink.Frames)",
		Ordered:       true,
	},
	{
		Index: "flexkv", Paper: "FlexKV (RACE with index proxying)",
		Syncs:         []string{"cider", "optimistic", "mcs", "spin"},
		SyncWhy:       "partitions on the memory nodes change RACE slots by CAS through a synchronizer; proxied ones commit on their proxy",
		IndexReplicas: []int{1},
		ReplicasWhy:   "a proxy writes slots through to one memory node's copy, not to a replicated index's quorum: Options.Replicas > 1 and Params.IndexReplicas > 1 are refused (KV blocks keep FlexKV's own copies, Params.Replicas)",
		Proxy:         true, KVCache: true,
		Cache:  "pairs and addresses per compute node (FlexKV.CacheEntries; NoKVCache: addresses only)",
		Own:    []Refusal{{"flexkv", "Params.IndexReplicas > 1", flexReplicatedWhy}},
		refuse: refuseFlexKV,
	},
	{
		Index: "aceso", Paper: "FlexKV's Aceso-like baseline (FlexKV.NoProxy)",
		Syncs:         []string{"cider", "optimistic", "mcs", "spin"},
		SyncWhy:       "RACE slots changed by CAS through a synchronizer",
		IndexReplicas: []int{1},
		ReplicasWhy:   "as flexkv",
		Cache:         "addresses per compute node (FlexKV.CacheEntries)",
		Own:           []Refusal{{"aceso", "Params.IndexReplicas > 1", flexReplicatedWhy}},
		refuse:        refuseFlexKV,
	},
	{
		Index: "swarm", Paper: "SWARM-KV (replicated In-n-Out objects, SWARM)",
		Syncs:         []string{"optimistic"},
		SyncWhy:       "updates write the key's replicated object and never reach the index, a replicated RACE table that only the optimistic synchronizer changes (lock words of the others live outside the replicated memory)",
		IndexReplicas: []int{3, 5, 7},
		ReplicasWhy:   "the index, the objects and the store's metadata live on the same 2f+1 memory nodes: 3, 5 or 7 (the zero value takes 3)",
		Cache:         "key-to-object location cache per client",
		Own: []Refusal{
			{"swarm", "Options.Replicas 1, or a factor other than Swarm.Replicas", "one factor replicates metadata, index and objects on the same nodes"},
			{"swarm", "Options.Replication over several instances", "the kind replicates its index and objects itself"},
			{"swarm", "Index.Replicas > 1", "the index's KV blocks are replicated with it, not copied"},
			{"swarm", "Params.ValueSize 1", "no room for a value beside the tombstone marker"},
			{"swarm", "fewer memory nodes than replicas", "every object has a copy on each of the 2f+1 nodes"},
			{"swarm", "a KV cache (FlexKV's)", "updates bypass the index, so no cache beside it could be invalidated: FlexKV's cache is a kind of its own, never composed with this one"},
		},
		refuse: func(o Options, _ string) error {
			if s, ok := swarmKind(o.Index); ok {
				return s.Refuse(o, nil)
			}
			return nil
		},
	},
}

// Matrix returns the options matrix: one row per index kind the store knows, the default
// first.
func Matrix() []KindRow {
	out := slices.Clone(matrix)
	for i := range out {
		out[i].refuse = nil
		out[i].Syncs = slices.Clone(out[i].Syncs)
		out[i].IndexReplicas = slices.Clone(out[i].IndexReplicas)
		out[i].Own = slices.Clone(out[i].Own)
	}
	return out
}

// rowOf returns kind's row, if it has one.
func rowOf(kind string) (KindRow, bool) {
	for _, r := range matrix {
		if r.Index == kind {
			return r, true
		}
	}
	return KindRow{}, false
}

// DefaultSyncOf returns the synchronizer a store of index kind kind is created with when
// Options.Sync is nil: the first of its row's Syncs, or DefaultSync's for a kind without a
// row.
func DefaultSyncOf(kind string) string {
	if r, ok := rowOf(kind); ok {
		return r.Syncs[0]
	}
	return DefaultSync().Name()
}

// syncToCreate is the synchronizer a store created with o records: Options.Sync's, else the
// kind's default (optimistic for a replicated RACE index, the only one it takes).
func (o Options) syncToCreate() string {
	if o.Sync != nil {
		return o.Sync.Name()
	}
	if r, ok := o.Index.(Race); ok && max(r.Params.IndexReplicas, r.Replicas) > 1 {
		return Optimistic.Name()
	}
	return DefaultSyncOf(o.Index.Name())
}

// RefusalError is Open's answer to an incoherent combination of options: the index kind, the
// option refused and why. It wraps farmem.ErrInvalid.
type RefusalError struct {
	Index  string
	Option string
	Why    string
}

func (e *RefusalError) Error() string {
	return fmt.Sprintf("kvstore: index %s refuses %s: %s", e.Index, e.Option, e.Why)
}

// Unwrap returns farmem.ErrInvalid.
func (e *RefusalError) Unwrap() error { return farmem.ErrInvalid }

// Check returns the RefusalError (or the replication factor's error, also wrapping
// farmem.ErrInvalid) that Open would return for o's combination of index kind (nil: Race{}),
// synchronizer (nil: the kind's default), replication factors and kind options, or nil if the
// matrix allows it. It reads no fabric: a store that exists may still be refused for what it
// records, or fail with ErrMismatch.
func Check(o Options) error {
	if o.Index == nil {
		o.Index = Race{}
	}
	if o.Replicas < 0 || o.Replicas > alloc.MaxMetaReplicas || o.Replicas > 1 && o.Replicas%2 == 0 {
		return fmt.Errorf("kvstore: replication factor %d, want an odd number up to %d: %w", o.Replicas, alloc.MaxMetaReplicas, farmem.ErrInvalid)
	}
	o, err := o.withIndexReplicas(nil)
	if err != nil {
		return err
	}
	return checkMatrix(o, o.syncToCreate())
}

// checkMatrix refuses the combination of o (after defaults) and the synchronizer named sync
// that the matrix does not allow.
func checkMatrix(o Options, sync string) error {
	kind := o.Index.Name()
	r, ok := rowOf(kind)
	if !ok {
		return nil
	}
	if !slices.Contains(r.Syncs, sync) {
		return &RefusalError{Index: kind, Option: "sync " + sync, Why: r.SyncWhy + " (takes " + strings.Join(r.Syncs, ", ") + ")"}
	}
	if o.Replicas > 1 && !slices.Contains(r.IndexReplicas, o.Replicas) {
		return &RefusalError{Index: kind, Option: fmt.Sprintf("replicas %d", o.Replicas), Why: r.ReplicasWhy}
	}
	if r.refuse != nil {
		return r.refuse(o, sync)
	}
	return nil
}

// refuseRace: a replicated RACE index takes the optimistic synchronizer only.
func refuseRace(o Options, sync string) error {
	r, ok := o.Index.(Race)
	if !ok {
		return nil
	}
	ir := r.Params.IndexReplicas
	if ir == 0 {
		ir = r.Replicas
	}
	if ir > 1 && sync != Optimistic.Name() {
		return &RefusalError{Index: "race", Option: fmt.Sprintf("sync %s with %d index replicas", sync, ir),
			Why: "CIDER's, MCS's and the spinlock's lock words live outside the replicated memory, neither replicated nor reachable at the table's addresses: use optimistic"}
	}
	return nil
}

// refuseFlexKV: FlexKV's table is not replicated.
func refuseFlexKV(o Options, sync string) error {
	k, ok := o.Index.(*FlexKV)
	if !ok || k.Params.IndexReplicas <= 1 {
		return nil
	}
	return &RefusalError{Index: k.Name(), Option: fmt.Sprintf("index replicas %d", k.Params.IndexReplicas), Why: flexReplicatedWhy}
}

const flexReplicatedWhy = "a proxy writes slots through to one memory node's copy, not to a replicated index's quorum"

// Refusal is one line of the table of refusals: a kind, the option it refuses, and why.
type Refusal struct {
	Index, Option, Why string
}

// Refusals lists every refusal the matrix implies, kind by kind, for documentation: the
// synchronizers a kind does not take, the replication factors, and the kinds' own.
func Refusals() []Refusal {
	all := SyncNames()
	all = append(all, None.Name())
	var out []Refusal
	for _, r := range matrix {
		var no []string
		for _, s := range all {
			if !slices.Contains(r.Syncs, s) {
				no = append(no, s)
			}
		}
		if len(no) > 0 {
			out = append(out, Refusal{r.Index, "sync " + strings.Join(no, ", "), r.SyncWhy})
		}
		if !slices.Contains(r.IndexReplicas, 3) {
			out = append(out, Refusal{r.Index, "Options.Replicas 3, 5, 7", r.ReplicasWhy})
		}
		if !slices.ContainsFunc(proxyKinds, func(p struct{ proxy, kind string }) bool { return p.kind == r.Index }) {
			out = append(out, Refusal{r.Index, "proxy flexkv, aceso (farmem bench --proxy)", proxyWhy})
		}
		out = append(out, r.Own...)
	}
	return out
}

// MatrixMarkdown renders Matrix and Refusals as the two Markdown tables of the package README.
func MatrixMarkdown() string {
	var b strings.Builder
	b.WriteString("| index | structure | synchronizers (default first) | index replicas | proxying | KV cache | compute-side cache | scans |\n")
	b.WriteString("|---|---|---|---|---|---|---|---|\n")
	yes := func(v bool) string {
		if v {
			return "yes"
		}
		return "no"
	}
	for _, r := range Matrix() {
		reps := make([]string, len(r.IndexReplicas))
		for i, n := range r.IndexReplicas {
			reps[i] = fmt.Sprint(n)
		}
		cache := r.Cache
		if cache == "" {
			cache = "none"
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s | %s | %s |\n", r.Index, r.Paper, strings.Join(r.Syncs, ", "),
			strings.Join(reps, ", "), yes(r.Proxy), yes(r.KVCache), cache, yes(r.Ordered))
	}
	b.WriteString("\n| index | refused at Open | why |\n|---|---|---|\n")
	for _, f := range Refusals() {
		fmt.Fprintf(&b, "| %s | %s | %s |\n", f.Index, f.Option, f.Why)
	}
	return b.String()
}

// Configuration is what a store is composed of, as its descriptor records it (Describe) and
// the matrix reads it.
type Configuration struct {
	// Index, Sync and Replication are the recorded names.
	Index, Sync, Replication string
	// MetaReplicas is the metadata's replication factor (1: the home node alone).
	MetaReplicas int
	// IndexReplicas is the index's own replication factor (1: not replicated).
	IndexReplicas int
	// Proxy, KVCache, Cache and Ordered are the kind's row (false and "" for a kind without
	// one). KVCache is what the kind offers; FlexKV.NoKVCache, a per-process choice, is not
	// recorded.
	Proxy, KVCache bool
	Cache          string
	Ordered        bool
}

// Describe returns the configuration a descriptor records.
func Describe(d Descriptor) Configuration {
	c := Configuration{Index: d.Index, Sync: d.Sync, Replication: d.Replication, MetaReplicas: d.replicas(), IndexReplicas: 1}
	for _, root := range d.Roots {
		if d.Index != "race" {
			break // only RACE roots encode a replication factor
		}
		c.IndexReplicas = max(c.IndexReplicas, race.IndexReplicasOf(root))
	}
	if d.Index == "swarm" {
		c.IndexReplicas = c.MetaReplicas // the index lives on the metadata's nodes
	}
	if r, ok := rowOf(d.Index); ok {
		c.Proxy, c.KVCache, c.Cache, c.Ordered = r.Proxy, r.KVCache, r.Cache, r.Ordered
	}
	return c
}

// Configuration returns the store's configuration (Describe of its descriptor).
func (s *Store) Configuration() Configuration { return Describe(s.desc) }
