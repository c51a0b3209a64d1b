package kvstore

import (
	"context"
	"fmt"

	"github.com/farmem/farmem/alloc"
	"github.com/farmem/farmem/ds/ptrsync"
	"github.com/farmem/farmem/farmem"
	"github.com/farmem/farmem/farmem/nodestate"
	"github.com/farmem/farmem/farmem/replmem"
)

// Index is one client's handle on a map from byte-string keys to byte-string values in far
// memory: what the store is built on. Like the client's farmem.Memory it belongs to one
// goroutine at a time. Every operation must be linearizable, and must report the map's answers
// with this package's sentinels (wrapped or not): ErrNotFound from Get, Update and Delete of an
// absent key, ErrExists from Insert of a present one. Keys and values passed in are the
// caller's and may be reused once the call returns; a value returned is the caller's.
// The store checks keys and values against the kind's Limits before calling. An operation that
// fails for want of far memory returns an error wrapping farmem.ErrNoSpace and must have had no
// effect: the store may run it again once it has reclaimed memory.
type Index interface {
	Get(ctx context.Context, key []byte) ([]byte, error)
	Insert(ctx context.Context, key, value []byte) error
	Update(ctx context.Context, key, value []byte) error
	Delete(ctx context.Context, key []byte) error
	// Close releases the handle (not the client's Memory or Allocator). It is idempotent.
	Close() error
}

// AppendGetter is an Index whose Get can append the value to a buffer of the caller's:
// Store.AppendGet and Session.AppendGet use it, so that a caller reusing its buffer reads with no
// allocation; on an index without it they append what Get returned.
type AppendGetter interface {
	// AppendGet is Get that appends the value to dst and returns the extended slice (dst
	// itself with an error).
	AppendGet(ctx context.Context, dst, key []byte) ([]byte, error)
}

// OrderedIndex is an Index that keeps its keys in order and scans them: Dolphin's hybrid tree
// and SELCC's B-link tree will be ones. Store.Scan needs it and otherwise returns
// ErrNoOrderedIndex.
type OrderedIndex interface {
	Index
	// Scan returns the pairs whose keys are in [from, to), ascending by key (bytewise), at most
	// limit of them (limit <= 0: no limit). An empty from starts at the first key; a nil to has
	// no upper bound. A scan need not be atomic: each key's report (its value, or its absence)
	// must be what a Get linearized at some instant within the scan would return, the
	// guarantee lincheck.KV checks.
	Scan(ctx context.Context, from, to []byte, limit int) ([]Pair, error)
}

// Pair is a key and its value.
type Pair struct {
	Key, Value []byte
}

// Limits are the sizes an index accepts.
type Limits struct {
	// MaxKey is the longest key, in bytes (keys are at least 1 byte long).
	MaxKey int
	// MaxKV is the largest len(key)+len(value).
	MaxKV int
}

// IndexEnv is what an IndexKind is handed to create or open an index with: one pooled client's
// far resources, its Memory, its Allocator (placement, deferred free through epochs:
// blocks an index unlinks must be retired, not freed, and every operation that dereferences
// them must run pinned) and its pointer synchronizer.
type IndexEnv struct {
	Memory farmem.Memory
	Alloc  *alloc.Allocator
	// Sync is the synchronizer Options.Sync built for this handle (one per handle); an index
	// that makes no pointer changes through one ignores it.
	Sync ptrsync.Synchronizer
	// Node is the state of Memory's compute node, for a NodeKind (what its OpenNode returned
	// there); nil for other kinds, and in Create.
	Node nodestate.State
	// Health is the replica suspicion shared by the store's handles on Memory's compute node
	// (replmem.Health), for an index replicated with farmem/replmem; nil in Create.
	Health *replmem.Health
	// Fabric is the fabric the store runs on, for state an index kind shares among all the
	// process's handles on it (SWARM-KV's per-node lanes); nil in Create.
	Fabric farmem.Fabric
}

// IndexKind creates and opens one kind of index. The store records Name in its descriptor, and
// a store is reopened only with the kind that created it.
//
// To plug a new structure in (say a ds/hybrid tree): write a kind in this package whose Create
// builds an empty instance with the client's allocator and returns the address of its root
// (anything the structure's Open can start from), whose Open returns a handle implementing
// Index (and OrderedIndex, if it scans) that maps the structure's own not-found and exists
// errors to ErrNotFound and ErrExists, and whose Limits state its key and value sizes. Select it
// with Options.Index; nothing else in the store changes.
type IndexKind interface {
	// Name identifies the kind: at most 16 bytes, recorded in the store's descriptor.
	Name() string
	// Limits are the key and value sizes the index accepts.
	Limits() Limits
	// Create builds an empty index in far memory and returns its root address.
	Create(ctx context.Context, c IndexEnv) (farmem.Addr, error)
	// Open returns c's handle on the index at root.
	Open(ctx context.Context, c IndexEnv, root farmem.Addr) (Index, error)
}

// Replicator combines several instances of an index into one replicated index: SWARM's
// replication (write to a replica set, read a quorum) goes here. The store creates Replicas
// instances of its index kind when it is created, records their roots in its descriptor, opens
// one handle on each per client, and hands them to Combine; the Index it returns is what the
// store's operations use (an OrderedIndex if scans are to work). NoReplication, the default,
// has one instance and uses it as is.
//
// A structure that replicates internally (SWARM-KV's In-n-Out objects under one index) plugs in
// as an IndexKind under NoReplication instead. Instances are placed by the index kind through
// the client's allocator; a replicator that needs instances on disjoint nodes needs a kind that
// places them so (alloc.Allocator.AllocOn).
type Replicator interface {
	// Name identifies the scheme: at most 16 bytes, recorded in the store's descriptor.
	Name() string
	// Replicas is the number of index instances, 1..MaxReplicas.
	Replicas() int
	// Combine returns one client's replicated view over its handles on the instances
	// (replicas[i] is instance i's). It takes ownership of the handles: closing the result
	// closes them.
	Combine(replicas []Index) (Index, error)
}

// NoReplication is the default Replicator: one instance, used as is.
type NoReplication struct{}

// Name implements Replicator.
func (NoReplication) Name() string { return "none" }

// Replicas implements Replicator.
func (NoReplication) Replicas() int { return 1 }

// Combine implements Replicator.
func (NoReplication) Combine(replicas []Index) (Index, error) {
	if len(replicas) != 1 {
		return nil, fmt.Errorf("kvstore: no replication over %d instances: %w", len(replicas), farmem.ErrInvalid)
	}
	return replicas[0], nil
}
