package kvstore

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"github.com/farmem/farmem/alloc"
	"github.com/farmem/farmem/ds/maxreg"
	"github.com/farmem/farmem/ds/ptrsync"
	"github.com/farmem/farmem/ds/race"
	"github.com/farmem/farmem/ds/swarm"
	"github.com/farmem/farmem/farmem"
	"github.com/farmem/farmem/farmem/replmem"
)

// Swarm is SWARM-KV (§5 of "SWARM: Replicating Shared Disaggregated-Memory Data in No Time"):
// a replicated index maps each key to an object, a Safe-Guess register (ds/swarm) over
// In-n-Out replicas (ds/maxreg) placed at one offset of the allocator's symmetric area on the
// 2f+1 memory nodes of the index, and the value lives in the object. The zero value is usable
// (3 replicas, the defaults below); select it with Options.Index = Swarm{} (or &Swarm{}), or
// `--index swarm --set replicas=3` on the command line.
//
// # Index and objects
//
// The index is a RACE table replicated on the store's Replicas metadata nodes
// (race.Params.IndexReplicas over farmem/replmem: linearizable words surviving any f of
// them), mapping each key to its object's offset, plus one reserved entry recording the
// objects' parameters (maxreg.Params), so that every process opens objects alike. An object
// is one symmetric block per replica: the register (swarm.Size) and, after it, one life word
// in the index's replicated memory (a replmem word: ALIVE; DEAD once a Delete won the object;
// UNLINKED once one client won the right to remove its index entry).
// Each client handle caches the objects it has located (key → offset and an open register
// handle, with the register's per-replica caches: SWARM-KV's location cache), one entry per
// key touched, unbounded.
//
// # Operations
//
//   - Get: the cached object's register read (Safe-Guess READ: 1 round trip when its tuple
//     is VERIFIED and an in-place copy is valid). A tombstone read through the cache drops
//     the entry and locates the key again in the index (a client with a stale cache sees the
//     deletion and retries); read through a fresh lookup it means ErrNotFound.
//   - Update: the register's write (Safe-Guess WRITE, 1 round trip on its fast path), never
//     the index. It cannot overtake a tombstone (swarm.Register.WriteBelow): a write that
//     meets one unpublishes its guess and had no effect, and the update retries as a Get does.
//   - Insert: a new object is allocated, formatted, written (its value, then its life word
//     ALIVE), then published in the index with RACE's Insert, which decides among racing
//     inserters. If the key is indexed already: ErrExists when its object is live (the new
//     object is retired); if that object holds a tombstone, the insert unlinks it (below),
//     whatever became of its deleter, and tries again.
//   - Delete: the object's life word is CASed ALIVE→DEAD in the replicated memory: the one
//     Delete that wins it (two racing deletes of one object cannot both succeed, and a max
//     register cannot tell them apart) writes the tombstone, a VERIFIED tuple at
//     swarm.FinalTS that no write can overtake (swarm.Register.WriteFinal), then unlinks. A
//     Delete that loses makes sure the tombstone is in (reading it, or writing one), then
//     returns ErrNotFound, or, if it came through a stale cache and the index names another
//     object, retries on that one.
//   - Unlink: the Delete that won, once its tombstone is in, CASes the life word DEAD→UNLINKED
//     (the removal has begun) and removes the index entry with RACE's compare-and-delete
//     (race.Table.DeleteIf): the entry goes only if it still names the object. An Insert that
//     read the object's tombstone does the same, whether it wins the life word (the deleter
//     stalled or died before) or finds it UNLINKED already (the winner may have died before
//     its removal): an entry naming a dead object is never left for one client alone to
//     remove. A removal that finds the key absent, or naming another object, had nothing left
//     to do.
//
// Why the conditional removal is safe, whoever runs it and however late: an object's offset
// is indexed at most once (a new object is retired unindexed only when RACE's Insert
// refused it, and indexed objects are never reclaimed), and no client writes an entry naming
// an object except its inserter's RACE insert, which never replaces an entry; so an entry
// naming the object is the one its inserter wrote, and the CAS of DeleteIf, from the very
// slot word whose block it read, removes that entry or nothing. Every remover read the
// tombstone first (the Delete that won wrote it), and a tombstone is final, so the key is
// already absent in the abstract map while the entry names the object: removing the entry
// changes no answer. A newer object's entry, inserted after the removal by anyone (or before
// it, by an Insert that found the key absent), names another offset and is never touched:
// neither a remover that comes back late (a paused deleter) nor two removers racing (one
// removes, the other finds the key absent or naming the newer object) can take it.
//
// Linearization: Insert at its RACE insert; Delete at the first tombstone the object's
// register orders (within the winner's interval, since losers write theirs only after the
// winner's CAS); Get and Update at their register operation, or, when they find a
// tombstone through a fresh lookup, at a moment between the tombstone and the entry's
// removal (the read of the entry). Deleted objects are never reused, so a stale cache always
// finds the tombstone.
//
// # Round trips
//
// With the key's object cached, uncontended, every node up: Get 1 (SwarmGetRoundTrips),
// Update and Put of a present key 1 (SwarmUpdateRoundTrips). On a cache miss a Get or Update
// adds the index's Search (2) and the register's Open (2). Insert: the object's format
// (swarm.Format: its lock words and its replicas' headers), Open, a write, the life word's
// replicated write, and the index's replicated Insert (race.ReplicatedInsertRoundTrips);
// Delete: the life word's two CASes (2 each), the tombstone (1) and the index's conditional
// removal (race.ReplicatedDeleteIfRoundTrips, a Delete's). An Insert that finds a deleted
// object indexed adds the index's Search, the object's Open and read (1), the life word's
// CAS and the removal, then inserts again. A crashed replica costs no round trip once suspected:
// the register waits for a majority, the index's memory for f+1 replicas.
//
// # Memory per object
//
// An object is swarm.Size(Params) bytes per replica, rounded to 256, plus 256 for its life
// word: dominated by a lane of Params.Slots records (32 bytes plus ValueSize) per writer.
// Writers are compute nodes (maxreg.Params.PerNode: a lane shared by the node's clients, who
// take turns on it with a latch word in their node's region; ds/swarm's "Memory per
// register" restates the protocol's safety for it), not clients as in the paper
// (PerClientLanes). With the defaults (1024-byte values, 4 slots) and 8 clients per compute
// node, per object and replica: 5,504 bytes at 4 clients (one node), 35,136 at 64, 272,576
// at 512 (64 nodes), against 18,176, 272,576 and 2,168,512 with a lane per client; so 1,000
// objects take about 260 MiB per memory node at 512 clients, where per-client lanes needed 2 GiB.
// A warm Update still takes one round trip (the latch is two verbs to the node's own region);
// a node's updates of one key queue behind each other.
//
// # Refusals
//
// Updates never touch the index, so the store refuses at Open, with errors wrapping
// farmem.ErrInvalid, what cannot be coherent with it (Swarm.Refuse, the one place they are
// decided): fewer than 3 replicas (Options.Replicas or Replicas 1: the objects need a
// majority of 2f+1 ≥ 3; the store's metadata factor must equal the kind's, since the index
// lives on the metadata nodes); fewer memory nodes than replicas; a synchronizer other than
// Optimistic (the index is a replicated RACE table, whose pointer changes only the
// optimistic synchronizer makes; lock-based synchronizers keep lock state outside the
// replicated memory, and updates, which never reach the index, would not take their locks
// anyway); an Options.Replication over several instances (the kind replicates internally);
// and objects whose values cannot hold the kind's own marker byte. No value cache can sit
// beside the index: the kind is the index, and a kind that caches values beside RACE (FlexKV's
// KV cache, which updates of the objects would bypass) cannot be combined with it.
//
// # Limits
//
// Values are at most Params.ValueSize-1 bytes (a marker byte tells values from tombstones);
// keys as RACE's, one byte less (a prefix keeps the reserved entry apart). Only clients of
// compute nodes 1..Params.Writers write (with PerClientLanes, clients with ids
// 1..Params.Writers; the default covers every compute node of the topology at creation);
// others fail with an error wrapping farmem.ErrInvalid, and so do their gets that must write
// back another writer's value (a write-back copies the value into the reader's own lane:
// maxreg's "Buffers"). Objects are opened with
// swarm.Options.EarlyReuse: a writer never waits for one of its buffers to age (above Slots
// writes of one key per maxreg ReuseDelay, reads of it are lock-free). Deleted objects and
// their index memory are never reclaimed (as in the paper, whose §5.4 recycling was not
// built). A memory node that restarted empty is adopted
// while the store runs (Store.Adopt; swarm_adopt.go): the store's register handles leave it
// out of their quorums until every indexed object's replica and life word are copied onto
// it, then count it again, so the next crash is tolerated; the adoption copies each object
// after the index's repopulation (a few round trips per object), and each process adopts for
// its own clients. Not covered there: an operation of a client paused from before the crash
// until after the adoption (see swarm.Repopulate), or one in flight when the fence began
// (its handle's caches of the lost replica are forgotten only between operations). A
// replica unreachable while an object was created (paused or cut off, not crashed) holds an
// unformatted block there (maxreg.FormatReplicatedQuorum); the first Open that meets it
// formats it from the replicas that answer (swarm.Heal: a Skew's pause, then a few round
// trips), if the block is still all zero (a block reused after a failed insert, holding
// another register's header, is not healed). The index's words written meanwhile reach such
// a replica through replmem's catch-up copies: another crash before they do makes the key
// fail with ErrNoQuorum, never answer wrongly.
type Swarm struct {
	// Replicas is 2f+1, 3, 5 or 7: the index and every object on that many memory nodes (the
	// store's metadata nodes). 0 takes Options.Replicas when above 1, else 3; the store's
	// Options.Replicas 0 is then set to it.
	Replicas int
	// Params are the objects' register parameters, recorded at creation (an existing store
	// keeps its own). Zero fields take: ValueSize DefaultSwarmValueSize, Writers the
	// topology's largest compute id (every client slot of its compute nodes with
	// PerClientLanes), Words min(Writers, 64), and maxreg's defaults for the rest; PerNode is
	// set unless PerClientLanes is.
	Params maxreg.Params
	// PerClientLanes keeps the paper's layout, a lane of record buffers per client on every
	// object (Params.PerNode false): an object then takes Writers lanes per replica, one per
	// client slot of the fabric, which does not fit many objects at hundreds of clients. By
	// default the lanes are per compute node (see "Memory per object").
	PerClientLanes bool
	// Index lays out the index's RACE table at creation (race's defaults; IndexReplicas is
	// set from Replicas).
	Index race.Params
}

// DefaultSwarmValueSize is Swarm's object value size when Params.ValueSize is 0: values up to
// 1023 bytes (YCSB's default 1000-byte records fit).
const DefaultSwarmValueSize = 1024

// Round trips of a Swarm store's operations on a client whose location cache holds the key,
// uncontended, every replica up (asserted in the package's tests).
const (
	SwarmGetRoundTrips    = 1
	SwarmUpdateRoundTrips = 1
)

// Values of an object's register: a marker byte, then the value.
const (
	swarmTomb byte = 0
	swarmLive byte = 1
)

// Life word values (in the index's replicated memory): ALIVE, then DEAD (a Delete won the
// object), then UNLINKED (one client won the right to remove the index entry naming it).
const (
	swarmAlive    uint64 = 1
	swarmDead     uint64 = 2
	swarmUnlinked uint64 = 3
)

// swarmParamsKey is the reserved index key holding the objects' parameters; user keys are
// prefixed with swarmKeyPrefix.
var swarmParamsKey = []byte{0}

const swarmKeyPrefix byte = 1

// Name implements IndexKind: "swarm".
func (Swarm) Name() string { return "swarm" }

// Limits implements IndexKind: keys as RACE's less the prefix byte, values below the
// objects' ValueSize (the one Params asks for; an existing store's own is checked per call).
func (s Swarm) Limits() Limits {
	mk := min(race.MaxKey, race.MaxKV-swarmRefSize) - 1
	vs := s.Params.ValueSize
	if vs == 0 {
		vs = DefaultSwarmValueSize
	}
	return Limits{MaxKey: mk, MaxKV: mk + vs - 1}
}

// replicas returns the kind's factor against the store's (o: Options.Replicas).
func (s Swarm) replicas(o int) int {
	switch {
	case s.Replicas != 0:
		return s.Replicas
	case o > 1:
		return o
	}
	return 3
}

// Refuse returns nil if o (the store's options, as given to Open, with Index a Swarm) can be
// coherent with SWARM-KV, else a *RefusalError (wrapping farmem.ErrInvalid) saying why (see "Refusals"
// in the type's doc). t is the fabric's topology (nil: the memory-node count is not checked).
func (s Swarm) Refuse(o Options, t *farmem.Topology) error {
	bad := func(option, format string, a ...any) error {
		return &RefusalError{Index: "swarm", Option: option, Why: fmt.Sprintf(format, a...)}
	}
	r := s.replicas(o.Replicas)
	switch {
	case r < 3 || r > 7 || r%2 == 0:
		return bad(fmt.Sprintf("replicas %d", r), "SWARM-KV's objects and index need 2f+1 = 3, 5 or 7 memory nodes (a majority of at least 2)")
	case o.Replicas == 1:
		return bad("Options.Replicas 1", "the index lives on the store's metadata nodes, which must be the objects' %d replicas", r)
	case o.Replicas > 1 && o.Replicas != r:
		return bad(fmt.Sprintf("replicas %d with Swarm.Replicas %d", o.Replicas, r), "one factor replicates metadata, index and objects on the same nodes: leave one of them 0")
	case o.Sync != nil && o.Sync.Name() != Optimistic.Name():
		return bad("sync "+o.Sync.Name(), "the index is a replicated RACE table, changed only by the optimistic synchronizer, and updates never reach it (Options.Sync = kvstore.Optimistic or nil)")
	case o.Replication != nil && o.Replication.Replicas() != 1:
		return bad(fmt.Sprintf("Options.Replication %s over %d instances", o.Replication.Name(), o.Replication.Replicas()), "the kind replicates its index and objects itself")
	case s.Params.ValueSize == 1:
		return bad("Params.ValueSize 1", "it leaves no room for a value beside the tombstone marker")
	case s.Index.Replicas > 1:
		return bad(fmt.Sprintf("Index.Replicas %d", s.Index.Replicas), "the index's KV blocks are replicated with it, not copied")
	}
	if t != nil {
		if n := len(t.MemoryNodes()); n < r {
			return bad(fmt.Sprintf("replicas %d", r), "the fabric has %d memory nodes", n)
		}
	}
	return nil
}

// swarmKind returns o's Index as a Swarm, if it is one.
func swarmKind(k IndexKind) (Swarm, bool) {
	switch x := k.(type) {
	case Swarm:
		return x, true
	case *Swarm:
		if x != nil {
			return *x, true
		}
	}
	return Swarm{}, false
}

// withSwarm settles a Swarm store's options (Refuse, then Options.Replicas and the symmetric
// area, where the index and the objects live: as a replicated RACE index's).
func (o Options) withSwarm(t *farmem.Topology) (Options, bool, error) {
	s, ok := swarmKind(o.Index)
	if !ok {
		return o, false, nil
	}
	if err := s.Refuse(o, t); err != nil {
		return o, true, err
	}
	if t == nil {
		// Check: no fabric to size the symmetric area for.
		s.Replicas = s.replicas(o.Replicas)
		o.Index = s
		o.Replicas = s.Replicas
		return o, true, nil
	}
	r := s.replicas(o.Replicas)
	s.Replicas = r
	o.Index = s
	if o.Replicas == 0 {
		o.Replicas = r
		if o.Format.Replicas == 0 {
			o.Format.Replicas = r
		}
	}
	if o.Format.SymmetricSize == 0 {
		smallest := uint64(farmem.MaxOffset + 1)
		for _, id := range t.MemoryNodes() {
			if n, ok := t.Node(id); ok {
				smallest = min(smallest, n.Size)
			}
		}
		o.Format.SymmetricSize = smallest - smallest/replicatedIndexSymFraction
	}
	return o, true, nil
}

// objectParams returns the objects' parameters for a store created on t.
func (s Swarm) objectParams(t *farmem.Topology) maxreg.Params {
	p := s.Params
	if p.ValueSize == 0 {
		p.ValueSize = DefaultSwarmValueSize
	}
	p.PerNode = !s.PerClientLanes
	if p.Writers == 0 {
		var top farmem.ComputeID
		for _, n := range t.ComputeNodes() {
			top = max(top, n.ComputeID())
		}
		if p.PerNode {
			p.Writers = max(1, int(top))
		} else {
			p.Writers = min(maxreg.MaxWriters, max(1, int(top)*max(1, t.ClientsPerNode)))
		}
	}
	if p.Words == 0 {
		p.Words = min(p.Writers, maxreg.DefaultWords)
	}
	return p
}

// Create implements IndexKind: the replicated RACE table, with the objects' parameters in
// its reserved entry; returns the table's root.
func (s Swarm) Create(ctx context.Context, c IndexEnv) (farmem.Addr, error) {
	ip := s.Index
	ip.IndexReplicas = s.replicas(0)
	p := s.objectParams(c.Memory.Topology())
	if swarm.Size(p) == 0 {
		return 0, fmt.Errorf("kvstore: swarm: object parameters %+v: %w", p, farmem.ErrInvalid)
	}
	root, err := race.Create(ctx, c.Memory, c.Alloc, ip)
	if err != nil {
		return 0, err
	}
	t, err := race.Open(ctx, c.Memory, c.Alloc, root, race.Options{Sync: ptrsync.NewOptimistic()})
	if err != nil {
		return 0, err
	}
	defer t.Close()
	if err := t.Insert(ctx, swarmParamsKey, encodeSwarmParams(p)); err != nil {
		return 0, fmt.Errorf("kvstore: swarm: record the object parameters: %w", err)
	}
	return root, nil
}

// Open implements IndexKind.
func (s Swarm) Open(ctx context.Context, c IndexEnv, root farmem.Addr) (Index, error) {
	if err := checkReplicatedSync(root, c.Sync); err != nil {
		return nil, err
	}
	r := race.IndexReplicasOf(root)
	if r < 3 {
		return nil, fmt.Errorf("kvstore: swarm: the index at %v is not replicated: %w", root, ErrBadRoot)
	}
	sy := c.Sync
	if sy == nil {
		sy = ptrsync.NewOptimistic()
	}
	t, err := race.Open(ctx, c.Memory, c.Alloc, root, race.Options{Sync: sy, Health: c.Health})
	if err != nil {
		return nil, err
	}
	enc, err := t.Search(ctx, swarmParamsKey)
	if err == nil {
		var p maxreg.Params
		if p, err = decodeSwarmParams(enc); err == nil && p.PerNode && c.Fabric == nil {
			// Handles of one node must share the lanes' state: without the fabric to key it
			// by, each handle would take its node's lanes as its own.
			err = fmt.Errorf("per-node lanes need IndexEnv.Fabric: %w", farmem.ErrInvalid)
		}
		if err == nil {
			rm := t.Replicated()
			x := &swarmIndex{m: c.Memory, a: c.Alloc, t: t, rm: rm, p: p, nodes: rm.Replicas(),
				size: swarmObjectSize(p), cache: map[string]*swarmObj{}}
			if p.PerNode {
				x.lanes, x.unref = swarmLanesOf(c.Fabric)
			}
			x.view = swarmViewOf(c.Health, c.Fabric, c.Memory, x.nodes)
			x.fm = &fencedMemory{Memory: c.Memory, v: x.view}
			x.epoch, x.gens = x.view.Epoch(), x.view.gens()
			return x, nil
		}
	}
	_ = t.Close()
	return nil, fmt.Errorf("kvstore: swarm: the object parameters: %w", err)
}

// swarmObjectSize returns the register's bytes on each replica, rounded to 256 (the
// symmetric area's granule a replicated index keeps its blocks aligned to).
func swarmObjectSize(p maxreg.Params) uint64 { return (swarm.Size(p) + 255) &^ 255 }

// swarmBlockSize is an object's symmetric block: the register and the life word's group.
func swarmBlockSize(p maxreg.Params) uint64 { return swarmObjectSize(p) + 256 }

// Encoding of the reserved entry: a version, then the parameters; version 2 adds a flags
// byte (bit 0: Params.PerNode). Version 1 records (per-client lanes) are still read.
const (
	swarmParamsV1      = 1
	swarmParamsVersion = 2
	swarmParamsV1Size  = 1 + 4*4 + 3*8
)

func encodeSwarmParams(p maxreg.Params) []byte {
	b := make([]byte, 1, swarmParamsV1Size+1)
	b[0] = swarmParamsVersion
	for _, v := range []int{p.Words, p.Slots, p.ValueSize, p.Writers} {
		b = binary.LittleEndian.AppendUint32(b, uint32(v))
	}
	for _, d := range []time.Duration{p.Tick, p.Lease, p.Skew} {
		b = binary.LittleEndian.AppendUint64(b, uint64(d))
	}
	var flags byte
	if p.PerNode {
		flags |= 1
	}
	return append(b, flags)
}

func decodeSwarmParams(b []byte) (maxreg.Params, error) {
	ok := len(b) == swarmParamsV1Size && b[0] == swarmParamsV1 ||
		len(b) == swarmParamsV1Size+1 && b[0] == swarmParamsVersion && b[swarmParamsV1Size]&^1 == 0
	if !ok {
		v := -1
		if len(b) > 0 {
			v = int(b[0])
		}
		return maxreg.Params{}, fmt.Errorf("kvstore: swarm: parameters record of %d bytes, version %d: %w", len(b), v, ErrBadRoot)
	}
	u := func(i int) int { return int(binary.LittleEndian.Uint32(b[1+4*i:])) }
	d := func(i int) time.Duration { return time.Duration(binary.LittleEndian.Uint64(b[17+8*i:])) }
	p := maxreg.Params{Words: u(0), Slots: u(1), ValueSize: u(2), Writers: u(3), Tick: d(0), Lease: d(1), Skew: d(2)}
	p.PerNode = len(b) > swarmParamsV1Size && b[swarmParamsV1Size]&1 != 0
	return p, nil
}

// swarmRefSize is an index entry's value: the object's symmetric offset.
const swarmRefSize = 8

// swarmObj is a cached object: its offset and this client's register handle on it.
type swarmObj struct {
	off alloc.SymOffset
	reg *swarm.Register
}

// swarmIndex is one client's handle on a Swarm store: the index table and the location
// cache.
type swarmIndex struct {
	m     farmem.Memory
	a     *alloc.Allocator
	t     *race.Table
	rm    *replmem.Memory
	p     maxreg.Params
	nodes []farmem.NodeID
	size  uint64
	cache map[string]*swarmObj
	// fm is m as the register handles see it: ops to a replica whose node restarted and is not
	// repopulated yet fail (swarm_adopt.go); view is the store's view it consults, epoch the
	// view's epoch when the cache was last valid.
	fm    *fencedMemory
	view  *swarmView
	epoch uint64
	gens  map[farmem.NodeID]uint64 // the view's gens when the cache was last valid
	// lanes is the process's lane state for objects with per-node lanes (shared by every
	// handle on the fabric, swarm_lanes.go); unref releases this handle's reference.
	lanes *maxreg.Lanes
	unref func()
}

func (x *swarmIndex) ikey(key []byte) []byte {
	return append([]byte{swarmKeyPrefix}, key...)
}

// lifeAddr is the object's life word on the index's virtual node.
func (x *swarmIndex) lifeAddr(o *swarmObj) farmem.Addr {
	return farmem.MakeAddr(x.rm.Virtual(), (uint64(o.off)+x.size)/replmem.Stride)
}

func (x *swarmIndex) addrs(off alloc.SymOffset) []farmem.Addr {
	as := make([]farmem.Addr, len(x.nodes))
	for i, n := range x.nodes {
		as[i] = off.On(n)
	}
	return as
}

// open opens this client's handle on the object at off.
func (x *swarmIndex) open(ctx context.Context, off alloc.SymOffset) (*swarmObj, error) {
	opts := swarm.Options{EarlyReuse: true, Lanes: x.lanes}
	reg, err := swarm.Open(ctx, x.fm, x.addrs(off), opts)
	if errors.Is(err, maxreg.ErrNotFormatted) {
		// A replica unreachable when the object was created: format it now (swarm_adopt.go).
		if herr := x.heal(ctx, off); herr == nil {
			reg, err = swarm.Open(ctx, x.fm, x.addrs(off), opts)
		}
	}
	if err != nil {
		return nil, err
	}
	return &swarmObj{off: off, reg: reg}, nil
}

// drop forgets key's cache entry if it is o.
func (x *swarmIndex) drop(key []byte, o *swarmObj) {
	if c, ok := x.cache[string(key)]; ok && c == o {
		delete(x.cache, string(key))
		_ = o.reg.Close()
	}
}

// locate returns key's object, from the cache (cached true) or the index (then cached);
// ErrNotFound if the index has no entry.
func (x *swarmIndex) locate(ctx context.Context, key []byte) (o *swarmObj, cached bool, err error) {
	if e := x.view.Epoch(); e != x.epoch {
		x.forgetFenced(e)
	}
	if o, ok := x.cache[string(key)]; ok {
		return o, true, nil
	}
	o, err = x.lookup(ctx, key)
	return o, false, err
}

// lookup reads key's entry in the index and opens (and caches) its object.
func (x *swarmIndex) lookup(ctx context.Context, key []byte) (*swarmObj, error) {
	ref, err := x.t.Search(ctx, x.ikey(key))
	if err != nil {
		return nil, mapRace(err)
	}
	if len(ref) != swarmRefSize {
		return nil, fmt.Errorf("kvstore: swarm: an index entry of %d bytes: %w", len(ref), ErrBadRoot)
	}
	off := alloc.SymOffset(binary.LittleEndian.Uint64(ref))
	if c, ok := x.cache[string(key)]; ok {
		if c.off == off {
			return c, nil
		}
		x.drop(key, c)
	}
	o, err := x.open(ctx, off)
	if err != nil {
		return nil, err
	}
	x.cache[string(key)] = o
	return o, nil
}

// read reads o's register: its value, or deleted (a tombstone).
func (x *swarmIndex) read(ctx context.Context, o *swarmObj) (val []byte, deleted bool, err error) {
	v, err := o.reg.Read(ctx)
	switch {
	case err != nil:
		return nil, false, err
	case len(v) == 0:
		// An object is indexed only once its value is at a majority.
		return nil, false, fmt.Errorf("kvstore: swarm: an indexed object at %#x is empty: %w", uint64(o.off), ErrBadRoot)
	case v[0] == swarmTomb:
		return nil, true, nil
	}
	return v[1:], false, nil
}

func (x *swarmIndex) Get(ctx context.Context, key []byte) ([]byte, error) {
	for {
		o, cached, err := x.locate(ctx, key)
		if err != nil {
			return nil, err
		}
		v, deleted, err := x.read(ctx, o)
		if err != nil {
			return nil, err
		}
		if !deleted {
			return v, nil
		}
		x.drop(key, o)
		if !cached {
			return nil, ErrNotFound
		}
	}
}

func (x *swarmIndex) checkValue(value []byte) error {
	if len(value)+1 > x.p.ValueSize {
		return fmt.Errorf("%w: a value of %d bytes, the store's objects hold at most %d", ErrTooLarge, len(value), x.p.ValueSize-1)
	}
	return nil
}

func (x *swarmIndex) Update(ctx context.Context, key, value []byte) error {
	if err := x.checkValue(value); err != nil {
		return err
	}
	v := append([]byte{swarmLive}, value...)
	for {
		o, cached, err := x.locate(ctx, key)
		if err != nil {
			return err
		}
		err = o.reg.WriteBelow(ctx, v, swarm.FinalTS)
		if !errors.Is(err, swarm.ErrCeiling) {
			return err
		}
		x.drop(key, o)
		if !cached {
			return ErrNotFound
		}
	}
}

func (x *swarmIndex) Insert(ctx context.Context, key, value []byte) error {
	if err := x.checkValue(value); err != nil {
		return err
	}
	o, err := x.create(ctx, value)
	if err != nil {
		return err
	}
	ref := binary.LittleEndian.AppendUint64(nil, uint64(o.off))
	for {
		err := x.t.Insert(ctx, x.ikey(key), ref)
		if err == nil {
			if c, ok := x.cache[string(key)]; ok {
				x.drop(key, c)
			}
			x.cache[string(key)] = o
			return nil
		}
		switch {
		case errors.Is(err, farmem.ErrNoSpace):
			x.discard(ctx, o) // the index is unchanged
			return mapRace(err)
		case !errors.Is(err, race.ErrExists):
			// The entry may have been published (an unknown outcome): the object is kept.
			_ = o.reg.Close()
			return mapRace(err)
		}
		old, err := x.lookup(ctx, key)
		if errors.Is(err, ErrNotFound) {
			continue // unlinked meanwhile
		}
		if err != nil {
			_ = o.reg.Close()
			return err
		}
		_, deleted, err := x.read(ctx, old)
		if err != nil {
			_ = o.reg.Close()
			return err
		}
		if !deleted {
			x.discard(ctx, o)
			return ErrExists
		}
		x.drop(key, old)
		// Its tombstone is in (the read returned it): remove the entry if it still names
		// old, whether or not its deleter is alive to, then insert again. Each turn of the
		// loop either inserts, or finds a live object, or removes an entry of an object
		// deleted since the previous turn (a newer one than it found there).
		if err := x.unlink(ctx, key, old); err != nil {
			_ = o.reg.Close()
			return err
		}
	}
}

// create allocates, formats and writes a new object holding value, LIVE, not yet indexed.
func (x *swarmIndex) create(ctx context.Context, value []byte) (*swarmObj, error) {
	bs := swarmBlockSize(x.p)
	off, err := x.a.AllocSymmetric(ctx, bs, 64)
	if err != nil {
		return nil, fmt.Errorf("kvstore: swarm: allocate an object: %w", err)
	}
	if uint64(off)%256 != 0 {
		_ = x.a.FreeSymmetric(off, bs)
		return nil, fmt.Errorf("kvstore: swarm: object block at %#x is not 256-aligned: %w", uint64(off), farmem.ErrInvalid)
	}
	fail := func(err error) (*swarmObj, error) {
		_ = x.a.RetireSymmetric(ctx, off, bs)
		return nil, err
	}
	if err := swarm.FormatQuorum(ctx, x.m, x.addrs(off), x.p); err != nil {
		return fail(err)
	}
	o, err := x.open(ctx, off)
	if err != nil {
		return fail(err)
	}
	if err := o.reg.Write(ctx, append([]byte{swarmLive}, value...)); err != nil {
		_ = o.reg.Close()
		return fail(err)
	}
	var w [8]byte
	binary.LittleEndian.PutUint64(w[:], swarmAlive)
	if err := x.rm.Write(ctx, x.lifeAddr(o), w[:]); err != nil {
		_ = o.reg.Close()
		return fail(err)
	}
	return o, nil
}

// discard retires an object that no index entry ever named.
func (x *swarmIndex) discard(ctx context.Context, o *swarmObj) {
	_ = o.reg.Close()
	_ = x.a.RetireSymmetric(ctx, o.off, swarmBlockSize(x.p))
}

// tombstone makes sure o holds a tombstone: read first (a helper's tombstone may be in),
// written if not.
func (x *swarmIndex) tombstone(ctx context.Context, o *swarmObj, read bool) error {
	if read {
		_, deleted, err := x.read(ctx, o)
		if err != nil || deleted {
			return err
		}
	}
	return o.reg.WriteFinal(ctx, []byte{swarmTomb}, swarm.FinalTS)
}

func (x *swarmIndex) Delete(ctx context.Context, key []byte) error {
	for {
		o, cached, err := x.locate(ctx, key)
		if err != nil {
			return err
		}
		prev, err := x.rm.CAS(ctx, x.lifeAddr(o), swarmAlive, swarmDead)
		if cached && errors.Is(err, replmem.ErrNotWritten) {
			// Through a stale cache, o may be an object unlinked before a node's adoption,
			// whose life word the adoption did not copy (it copies what the index names):
			// after one more crash it has no quorum. No replica was written (the CAS's lock
			// round failed), so the index decides, as for any stale cache.
			x.drop(key, o)
			continue
		}
		if err != nil {
			return fmt.Errorf("kvstore: swarm: delete: the life word of the object at %#x: %w", uint64(o.off), err)
		}
		if prev == swarmAlive {
			if err := x.tombstone(ctx, o, false); err != nil {
				return err
			}
			x.drop(key, o)
			return x.unlink(ctx, key, o)
		}
		if prev != swarmDead && prev != swarmUnlinked {
			return fmt.Errorf("kvstore: swarm: object at %#x has life word %#x: %w", uint64(o.off), prev, ErrBadRoot)
		}
		// Another Delete won: its tombstone (or ours) is in before we answer.
		if err := x.tombstone(ctx, o, true); err != nil {
			return err
		}
		x.drop(key, o)
		if !cached {
			return ErrNotFound
		}
		// Through a stale cache: the index may name a newer object (the loop's lookup).
	}
}

// unlink removes key's index entry if it still names o, a deleted object whose tombstone is
// in: it CASes o's life word DEAD→UNLINKED (the removal has begun; a word found UNLINKED
// already means another client won it, and may have died before removing the entry), then
// removes the entry with RACE's compare-and-delete on o's offset. Finding the key absent, or
// naming another object, means the entry is gone already. See "Why the conditional removal
// is safe" in Swarm's doc.
func (x *swarmIndex) unlink(ctx context.Context, key []byte, o *swarmObj) error {
	prev, err := x.rm.CAS(ctx, x.lifeAddr(o), swarmDead, swarmUnlinked)
	if err != nil {
		return fmt.Errorf("kvstore: swarm: unlink: the life word of the object at %#x: %w", uint64(o.off), err)
	}
	if prev != swarmDead && prev != swarmUnlinked {
		return fmt.Errorf("kvstore: swarm: unlink: a tombstoned object at %#x has life word %#x: %w", uint64(o.off), prev, ErrBadRoot)
	}
	err = x.t.DeleteIf(ctx, x.ikey(key), binary.LittleEndian.AppendUint64(nil, uint64(o.off)))
	if err != nil && !errors.Is(err, race.ErrNotFound) && !errors.Is(err, race.ErrChanged) {
		return fmt.Errorf("kvstore: swarm: unlink a deleted key: %w", mapRace(err))
	}
	return nil
}

// Close implements Index: the register handles and the table.
func (x *swarmIndex) Close() error {
	for k, o := range x.cache {
		_ = o.reg.Close()
		delete(x.cache, k)
	}
	if x.unref != nil {
		x.unref()
		x.unref = nil
	}
	return x.t.Close()
}

// Table returns the index's RACE table (for Audit, Info and Stats).
func (x *swarmIndex) Table() *race.Table { return x.t }
