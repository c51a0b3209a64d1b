package kvstore

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/farmem/farmem/ds/race"
	"github.com/farmem/farmem/farmem"
	"github.com/farmem/farmem/farmem/localcost"
	"github.com/farmem/farmem/farmem/nodestate"
)

// FlexKV is RACE with FlexKV's index proxying and compute-side caching (Hu, Shen, Yang): a
// NodeKind whose per-node state holds the node's active partition map, its local cache of
// pairs and addresses, the partitions it proxies and their per-key directory. With NoProxy it
// is the Aceso-like baseline: RACE on the memory nodes, one CAS per update, the same address
// cache, memory and layout. Pass it by pointer (Options.Index: &FlexKV{...}); one value serves
// one store at a time.
//
// # Partitions and routing
//
// A partition is the set of subtables descending from one subtable of the table's initial
// directory (race.Params.InitialDepth, default 3 here: 8 partitions; the paper uses 8192).
// Every compute node keeps an active map: for each partition, its owner (a compute node, or
// none: the memory nodes), an epoch and a paused flag. A client counts itself in flight on the
// partition, routes by the map, and uncounts itself when done. Partitions on the memory nodes
// are served by the ordinary one-sided protocol with the store's synchronizer (CIDER by
// default), Invalidate and a delete lease. Proxied ones by index RPCs to the owner (Calls):
//
//   - Get: the proxy hashes the key, reads the candidate slots of its copy (a CPU access) and
//     returns the committed fingerprint matches with their slot addresses; the client reads
//     their blocks (one round trip). Two round trips in all, as on the memory nodes.
//   - Update, Delete, Insert are slot-resolved: the client resolves the slot on the memory
//     nodes' copy of the index (race.Resolve: the new block written in the same round trip) and
//     sends the slot's address, the word it expects and the new word. The proxy takes the
//     key's and the slot's write locks (a write finding either taken is answered busy and
//     sent again as it was, after a backoff), checks its copy holds the expected word (for an
//     insert also that the key's candidate slots hold exactly the other keys' matches the
//     client saw, so two inserts of one key cannot both commit; an update or delete whose
//     expected word a later write of the key replaced commits over that word instead, when its
//     writer knew the slot held the key less than the delete lease ago: a slot the key left
//     holds a delete word until the lease has run out, so the proxy orders the key's writes
//     rather than sending them back to resolve, and tells the writer which word it replaced), invalidates the sharers' cached pairs (see
//     "Invalidation"), sets the replaced block's valid word and writes the slot through to
//     the memory node (plain writes, one round trip), and commits with a local CAS on its
//     copy: the commit point. A proxied update issues no atomic to a
//     memory node. A commit whose reply is lost is sent again with the same words: the
//     expected-old check makes it idempotent (the copy holding the new word means committed).
//
// # Caching
//
// Each node's cache (FIFO, CacheEntries entries) holds, per key, either its pair or its
// address (race.Entry), each with its slot, or, after the node's own proxied write of the key,
// only its slot and new word (for the next write's shortcut; reads treat it as a miss). A pair is served with no round trip; an address
// with one (race.SearchCached: the block's stamp and valid word tell a stale one). Pairs are
// cached only when the proxy says so: on every index RPC it bumps the key's read or write
// counter (16 bits each, both shifted right by 2 at overflow; reads served from the cache are
// piggybacked on the next RPC), and a key whose writes are under a quarter of its reads is
// cache-worthy: the sender joins the key's sharers (a bit per compute id 1..32; nodes above 32
// are never sharers) unless a write of the key is in flight. A write takes the sharers, empties
// the list (the writer does not join it) and invalidates them all before it commits. A read
// marks its key in flight before its RPC; an invalidation arriving before the reply cancels
// the install (the race the paper names). A pair is served for PairLease from just before
// the read that fetched it; then its entry serves as an address. Addresses need no directory:
// every writer, on a proxy or on the memory nodes, sets the replaced block's valid word
// before its commit.
//
// # Invalidation
//
// Invalidations are one-way messages with a one-way acknowledgement, as the paper specifies,
// and no handler ever waits for another node's handler. A write that will commit takes the
// key's sharers. The writer's own node needs no message: before the write's RPC it turned
// its pair into an address, and it installs no pair of the key until the reply (reads begun
// meanwhile are cancelled), so the proxy drops the writer's bit (only for a request younger
// than PairLease less twice the clock skew; a write that failed with an unknown outcome keeps
// its node from installing the key's pair for PairLease after, which covers a late request).
// The proxy's own pair is dropped in place. With no other sharer the write commits in its
// handler. Otherwise the proxy records the write as pending (a ticket; its key and slot locks
// held), sends each sharer an invalidation (Memory.Send), and answers the writer "pending"
// with the ticket: the handler returns. A sharer drops the pair, cancels the installs of its
// reads in flight and sends back an acknowledgement (Memory.Send), which clears its bit in
// the proxy's record. The writer polls with commit Calls (backing off from 2µs to 1ms); the
// poll that finds every bit clear commits the write (write-through, local CAS) and answers
// ok. So a write costs the writer one extra round trip when another node shares the key.
// A sharer that is down, silent, or whose message or acknowledgement is lost (Send is at most
// once) is waited out: the write commits at its deadline, the last grant of the key plus
// PairLease plus twice the clock skew, when no pair granted before the write is served any
// more (Stats AckTimeouts counts these). No read is granted the pair while the write is
// pending. A later write meeting a ready pending write of the key or slot commits it (a
// writer that gave up); a pending write of a partition handed over is dropped uncommitted
// (its writer, if still polling, is told stale and resolves again; the hand-over's drain
// makes that a writer that gave up). Pairs are therefore never stale, with clocks within
// Options.ClockSkew.
//
// # Hand-over
//
// Proxying a partition, and returning it to the memory nodes, is a hand-over run by the
// coordinator (the lowest compute node, under a latch in its region): it pauses the partition
// on every compute node (each stops admitting operations on it at once), then waits for each
// to drain (its clients' operations on it finished, so no CAS user and no CIDER or MCS lock
// holder is left; its cache cleared): the drains overlap, and no paused node waits while
// others still admit operations contending with its own; then it has the new owner load the
// partition from the memory nodes (race.ReadPartition, refused with ErrBusy while a split
// holds it: the requester finishes the partition's splits before it asks, see Store.HandOver)
// and tells strict mode its slots are now written
// plainly, then resumes every node with the new owner and a new epoch, which every index RPC
// carries and the proxy checks. Un-proxying is the same with no owner: the memory nodes' copy
// is current (written through before every commit), so clients CAS the slots again at once.
// Store.HandOver starts one.
//
// An insert that finds its key's buckets full in a proxied partition hands the partition back
// to the memory nodes and retries there, where the subtable splits; re-proxying it is the
// manager's (or a later HandOver's) business. A proxied partition therefore never splits.
//
// # Recovery
//
// Each proxy holds a lease per partition from the coordinator (ProxyLease, fabric time) and
// serves, grants pairs and writes through only while it runs. A client that finds a proxy down
// asks the coordinator to recover its partitions; once the proxy's lease is fenced (run out,
// plus three clock skews and the fabric's down timeout, past which nothing it posted can land)
// the coordinator hands the partition back to the memory nodes without it: the memory nodes'
// copy holds every write the proxy acknowledged. A hand-over that fails before the new owner
// has loaded the partition is rolled back, one that fails after it completes (a node left
// paused asks the coordinator for the route). Counted in
// FlexStats (Recoveries, RolledBack, ResumesFailed, LeaseRefused).
//
// # Limits
//
// The coordinator's hand-over handler and its own drain (which waits for its clients' index
// RPCs to finish) each hold a Call handler, so a compute node needs more than two for those
// RPCs to be served meanwhile (the simulator's MaxHandlers): with two, a hand-over
// coordinated by a node that proxies a partition its own clients are using waits forever.
//
// A write whose sharer is silent waits up to PairLease plus twice the clock skew, holding
// its key (other writes of it are answered busy). A proxy that fails between its write-through and its commit leaves the memory node's slot ahead of
// its copy until the partition is handed back (the paper's redo). The directory is lost with
// its proxy and caches are cleared at every hand-over. A write whose proxy dies waits, bounded,
// for the partition's recovery, then reads its slot on the memory nodes: its own new word
// means it committed, the word it expected that it never will (it is sent again); otherwise
// (and for deletes) it fails with an unknown outcome. The
// coordinator (the lowest compute node) is not recovered, and compute nodes that proxy nothing
// hold no lease: a dead one makes later hand-overs roll back. Store.RunManager is FlexKV's
// manager: it decides the hand-overs (rank-aware hotness, the offload-ratio knob) and the split
// of each node's memory between its local index and its cache.
type FlexKV struct {
	// Params lay out the table at creation (race's defaults, InitialDepth 3, MetaSize
	// DefaultMetaSize and Replicas DefaultReplicas when zero).
	Params race.Params
	// Options configure each handle; the kind sets Invalidate, and DeleteLease to
	// DefaultDeleteLease when zero.
	Options race.Options
	// CacheEntries bounds each node's cache (default 4096 entries).
	CacheEntries int
	// NoProxy makes the Aceso-like baseline: no partition is ever proxied (HandOver refuses).
	NoProxy bool
	// NoKVCache caches addresses only.
	NoKVCache bool
	// PairLease bounds how long a node serves a cached pair (from just before the read that
	// fetched it, by its own clock); past it the entry serves as an address. A write whose
	// sharer does not acknowledge its invalidation commits once the lease granted last, plus
	// twice Options.ClockSkew, has passed. Default DefaultPairLease.
	PairLease time.Duration
	// ProxyLease is how long a proxy may serve a partition without renewing its lease with
	// the coordinator (it renews once half is left: one Call per partition per half lease
	// while it serves, none while idle); a proxy found down is recovered once its lease has
	// run out, plus three clock skews and the fabric's down timeout (see "Recovery"), so it
	// bounds how long a dead proxy's partitions stay unwritable. Default DefaultProxyLease.
	ProxyLease time.Duration

	lay   atomic.Pointer[race.Layout]
	mu    sync.Mutex
	nodes map[farmem.NodeID]*flexNode
}

// DefaultPairLease is FlexKV's default PairLease.
const DefaultPairLease = 100 * time.Millisecond

func (k *FlexKV) pairLease() time.Duration {
	if k.PairLease > 0 {
		return k.PairLease
	}
	return DefaultPairLease
}

// deleteLease is the delete lease of the store's slots (Options.DeleteLease, or
// DefaultDeleteLease).
func (k *FlexKV) deleteLease() time.Duration {
	if k.Options.DeleteLease > 0 {
		return k.Options.DeleteLease
	}
	return DefaultDeleteLease
}

func (k *FlexKV) clockSkew() time.Duration {
	if k.Options.ClockSkew > 0 {
		return k.Options.ClockSkew
	}
	return time.Millisecond
}

// DefaultDeleteLease is the delete lease of FlexKV's slots (the paper's T_lease).
const DefaultDeleteLease = 200 * time.Millisecond

// ErrHandOver: a hand-over could not move the partition (a split held it, or a node could not
// be paused or could not load it) and was rolled back: the partition stays where it was.
// Retry later.
var ErrHandOver = errors.New("kvstore: flexkv: hand-over rolled back, partition left where it was")

// Name implements IndexKind: "flexkv", or "aceso" with NoProxy.
func (k *FlexKV) Name() string {
	if k.NoProxy {
		return "aceso"
	}
	return "flexkv"
}

// Limits implements IndexKind (race's).
func (k *FlexKV) Limits() Limits { return Race{}.Limits() }

func (k *FlexKV) params() race.Params {
	p := k.Params
	if p.InitialDepth == 0 {
		p.InitialDepth = 3
	}
	if p.MetaSize == 0 {
		p.MetaSize = DefaultMetaSize
	}
	if p.Replicas == 0 {
		p.Replicas = DefaultReplicas
	}
	return p
}

// DefaultReplicas is how many copies of each KV block FlexKV and the Aceso baseline keep, as
// the paper's evaluation does (race.Params.Replicas; one per memory node when there are fewer).
// A Get whose block's primary memory node is down reads a backup copy (an address-cache hit
// then goes through the index); copies of a published block never disagree in their
// checksummed bytes, a copy that fails validation is skipped for the next. Updates and deletes
// of such a key fail with farmem.ErrNodeDown (the primary's valid word cannot be cleared).
const DefaultReplicas = 3

func (k *FlexKV) cacheEntries() int {
	if k.CacheEntries <= 0 {
		return 4096
	}
	return k.CacheEntries
}

func (k *FlexKV) layout() *race.Layout { return k.lay.Load() }

// Partitions is the number of partitions a store created with this kind has.
func (k *FlexKV) Partitions() int { return 1 << k.params().InitialDepth }

// PartitionOf returns key's partition (once a handle is open), or -1.
func (k *FlexKV) PartitionOf(key []byte) int {
	if l := k.layout(); l != nil {
		return l.PartitionOf(key)
	}
	return -1
}

// Stats returns node's FlexKV counters.
func (k *FlexKV) Stats(node farmem.NodeID) (FlexStats, bool) {
	k.mu.Lock()
	n := k.nodes[node]
	k.mu.Unlock()
	if n == nil {
		return FlexStats{}, false
	}
	return n.Stats(), true
}

// Owner returns the owner of partition p in node's active map (0: the memory nodes).
func (k *FlexKV) Owner(node farmem.NodeID, p int) farmem.NodeID {
	k.mu.Lock()
	n := k.nodes[node]
	k.mu.Unlock()
	if n == nil || p < 0 || p >= len(n.parts) {
		return 0
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.parts[p].owner
}

// Methods implements NodeKind.
func (k *FlexKV) Methods() farmem.MethodOwner { return farmem.OwnerFlexKV }

// OpenNode implements NodeKind.
func (k *FlexKV) OpenNode(ctx context.Context, env *nodestate.Env) (nodestate.State, error) {
	n, err := k.openNode(ctx, env)
	if err != nil {
		return nil, err
	}
	k.mu.Lock()
	if k.nodes == nil {
		k.nodes = map[farmem.NodeID]*flexNode{}
	}
	k.nodes[env.Node] = n
	k.mu.Unlock()
	return n, nil
}

// Create implements IndexKind.
func (k *FlexKV) Create(ctx context.Context, c IndexEnv) (farmem.Addr, error) {
	return race.Create(ctx, c.Memory, c.Alloc, k.params())
}

// Open implements IndexKind.
func (k *FlexKV) Open(ctx context.Context, c IndexEnv, root farmem.Addr) (Index, error) {
	n, ok := c.Node.(*flexNode)
	if !ok || n == nil {
		return nil, fmt.Errorf("kvstore: flexkv: no node state for %v: %w", c.Memory.Info().Node, farmem.ErrInvalid)
	}
	o := k.Options
	if c.Sync != nil {
		o.Sync = c.Sync
	}
	if o.Health == nil {
		o.Health = c.Health
	}
	o.Invalidate = true
	if o.DeleteLease == 0 {
		o.DeleteLease = DefaultDeleteLease
	}
	t, err := race.Open(ctx, c.Memory, c.Alloc, root, o)
	if err != nil {
		return nil, err
	}
	l := t.Layout()
	if l.Partitions() != len(n.parts) {
		_ = t.Close()
		return nil, fmt.Errorf("kvstore: flexkv: the table has %d partitions, the kind %d: %w", l.Partitions(), len(n.parts), ErrMismatch)
	}
	k.lay.CompareAndSwap(nil, l)
	return &flexIndex{k: k, n: n, t: t, m: c.Memory, rt: c.Memory.Runtime(), lay: l, price: localcost.Of(c.Memory)}, nil
}

// flexIndex is one client's handle.
type flexIndex struct {
	k   *FlexKV
	n   *flexNode
	t   *race.Table
	m   farmem.Memory
	rt  farmem.Runtime
	lay *race.Layout
	// price is what a CPU access to the node's own memory costs on a fabric that does not
	// run CPU work in real time (the simulator): each cache lookup pays one, touching the key
	// (and a pair served from the cache, its bytes), as a cache in the node's region would.
	price localcost.Price
	// unknown is the last proxied write attempt whose commit ended with an unknown outcome
	// (nil if none): settled on the memory nodes once its partition has another route.
	unknown *writeReq
}

var errStaleRoute = errors.New("kvstore: flexkv: stale route")

func (x *flexIndex) Close() error { return x.t.Close() }

// Table returns the race table behind the handle.
func (x *flexIndex) Table() *race.Table { return x.t }

func (x *flexIndex) Get(ctx context.Context, key []byte) ([]byte, error) {
	return x.AppendGet(ctx, nil, key)
}

func (x *flexIndex) AppendGet(ctx context.Context, dst, key []byte) ([]byte, error) {
	n := x.n
	n.touch(x.lay.PartitionOf(key), true)
	e, ok := n.lookup(key, x.rt.Now())
	x.price.Charge(x.rt, len(key)+len(e.value))
	if ok {
		if e.kv {
			return append(dst, e.value...), nil
		}
		v, ok, err := x.t.SearchCached(ctx, key, e.ent)
		if err != nil && (!errors.Is(err, farmem.ErrNodeDown) || ctx.Err() != nil) {
			return dst, err
		}
		// A block whose primary's node is down is read through the index, which falls back
		// to a backup copy (race's Replication); the cached address is dropped.
		if ok && err == nil {
			n.count(func(s *FlexStats) { s.AddrHits++ })
			return append(dst, v...), nil
		}
		n.count(func(s *FlexStats) { s.AddrStale++ })
		n.drop(key)
	}
	n.count(func(s *FlexStats) { s.Misses++ })
	p := x.lay.PartitionOf(key)
	var d time.Duration
	var since farmem.Time // when the operation's retries began
	for {
		owner, epoch, err := n.route(ctx, x.m, p)
		if err != nil {
			return dst, err
		}
		if owner == 0 {
			v, ent, err := x.t.SearchEntry(ctx, key)
			if err == nil {
				n.put(key, cacheEntry{at: x.rt.Now(), ent: ent, part: p})
			}
			n.done(p)
			if err != nil {
				return dst, mapRace(err)
			}
			return append(dst, v...), nil
		}
		tok := n.beginRead(key)
		start := x.rt.Now()
		reads := n.takeReads(key)
		cacheIt := false
		v, ent, err := x.t.SearchWords(ctx, key, func() ([]race.Slot, []farmem.Addr, error) {
			rep, err := x.callProxy(ctx, owner, farmem.OwnerFlexKV.Method(flexSearch), encSearch(epoch, p, reads, key))
			reads = 0
			if err != nil {
				return nil, nil, fmt.Errorf("kvstore: flexkv: search RPC: %w", err)
			}
			st, ci, words, slots, err := decSearchResp(rep)
			if err != nil {
				return nil, nil, err
			}
			if st == stStale {
				return nil, nil, errStaleRoute
			}
			cacheIt = ci
			return words, slots, nil
		})
		n.count(func(s *FlexStats) { s.Proxied++ })
		ok := err == nil
		e := cacheEntry{at: start, ent: ent, part: p}
		if ok && cacheIt {
			e.kv, e.value = true, bytes.Clone(v)
		}
		n.endRead(key, tok, ok, e)
		n.done(p)
		if errors.Is(err, errStaleRoute) {
			x.retried(ctx, p, &since)
			if err := backoff(ctx, x.rt, &d); err != nil {
				return dst, err
			}
			continue
		}
		if errors.Is(err, errProxyDown) && ctx.Err() == nil {
			// Nothing was read: wait for the partition's recovery (bounded), then again.
			if err := x.awaitRecovery(ctx, p, owner, epoch); err != nil {
				return dst, err
			}
			continue
		}
		if err != nil {
			return dst, mapRace(err)
		}
		return append(dst, v...), nil
	}
}

func (x *flexIndex) Update(ctx context.Context, key, value []byte) error {
	return x.write(ctx, wUpdate, key, value)
}

func (x *flexIndex) Delete(ctx context.Context, key []byte) error {
	return x.write(ctx, wDelete, key, nil)
}

func (x *flexIndex) Insert(ctx context.Context, key, value []byte) error {
	return x.write(ctx, wInsert, key, value)
}

// write runs an Insert, Update or Delete: on the memory nodes or through the proxy.
func (x *flexIndex) write(ctx context.Context, kind uint8, key, value []byte) error {
	n := x.n
	p := x.lay.PartitionOf(key)
	n.touch(p, false)
	var d time.Duration
	var since farmem.Time // when the operation's retries began
	for {
		owner, epoch, err := n.route(ctx, x.m, p)
		if err != nil {
			return err
		}
		if owner == 0 {
			switch kind {
			case wInsert:
				err = x.t.Insert(ctx, key, value)
			case wUpdate:
				err = x.t.Update(ctx, key, value)
			default:
				err = x.t.Delete(ctx, key)
			}
			n.done(p)
			n.drop(key)
			return mapRace(err)
		}
		begun := x.rt.Now()
		n.beginWrite(key)
		x.unknown = nil
		done, retry, full, err := x.proxied(ctx, kind, owner, epoch, p, key, value, begun)
		// A definite refusal (not found, exists, too large) committed nothing; any other
		// error may hide a request still on its way to the proxy.
		definite := errors.Is(err, race.ErrNotFound) || errors.Is(err, race.ErrExists) || errors.Is(err, race.ErrTooLarge)
		n.endWrite(key, err != nil && !definite, x.rt.Now())
		n.done(p)
		switch {
		case errors.Is(err, errProxyDown) && ctx.Err() == nil:
			// The outcome is unknown: have the partition recovered (bounded wait), then
			// settle it on the memory nodes if it can be.
			if x.awaitRecovery(ctx, p, owner, epoch) != nil {
				return err
			}
			switch committed, known := x.settle(ctx, p, owner, epoch); {
			case !known:
				return err
			case committed:
				n.drop(key)
				return nil
			}
			// It never took effect and never will: write again.
		case err != nil:
			return mapRace(err)
		case done:
			// The entry proxied() left (the key's slot and new word) stays for the next
			// write's shortcut.
			return nil
		case full:
			// The key's buckets are full and a proxied partition does not split: hand it back
			// to the memory nodes, where the insert splits the subtable.
			if err := x.handOver(ctx, p, 0); err != nil && !errors.Is(err, ErrHandOver) {
				return err
			}
		case retry:
			x.retried(ctx, p, &since)
			if err := backoff(ctx, x.rt, &d); err != nil {
				return err
			}
		}
	}
}

// lease is how long a cached slot address may serve a write: the delete lease, less the
// clock skew the table allows for.
func (x *flexIndex) lease() time.Duration {
	o := x.k.Options
	if o.DeleteLease == 0 {
		o.DeleteLease = DefaultDeleteLease
	}
	if o.ClockSkew == 0 {
		o.ClockSkew = time.Millisecond
	}
	return o.DeleteLease - o.ClockSkew
}

// shortcut tries an Update or Delete through the slot address the node's cache holds for key,
// learnt less than the lease ago: the new block's write (an update's), then the index RPC;
// no resolution on the memory nodes. The slot held the key's word when the entry was learnt,
// and a slot the key left cannot hold another key's word before the lease has run out (the
// delete lease; a proxied partition never splits, and caches are cleared at every hand-over),
// so the proxy's expected-word check can only succeed on the key's own slot. ok is false when
// there is no usable entry or the proxy's copy holds another word: the caller resolves.
func (x *flexIndex) shortcut(ctx context.Context, kind uint8, owner farmem.NodeID, epoch uint64, p int, key, value []byte, begun farmem.Time) (ok bool, err error) {
	e, found := x.n.peek(key)
	if !found || e.part != p || e.ent.Slot == 0 || !e.ent.Word.Committed() || x.rt.Now().Sub(e.at) >= x.lease() {
		return false, nil
	}
	w := writeReq{epoch: epoch, p: p, kind: kind, key: key, slot: e.ent.Slot, expect: e.ent.Word, begun: begun, learnt: e.at}
	if kind == wDelete {
		w.new = x.t.DeleteWord()
	} else if w.new, err = x.t.WriteBlock(ctx, key, value); err != nil {
		return false, err
	}
	x.n.count(func(s *FlexStats) { s.Proxied++; s.Shortcuts++ })
	st, replaced, err := x.commitQueued(ctx, owner, &w)
	if err != nil {
		x.unknown = &w
		return false, err // unknown outcome: the block is leaked, not freed
	}
	if st == stOK {
		x.wrote(ctx, &w, replaced)
		return true, nil
	}
	x.n.drop(key)
	if kind != wDelete {
		_ = x.t.FreeBlock(w.new)
	}
	return false, nil
}

// proxied runs one attempt of a write through the proxy.
func (x *flexIndex) proxied(ctx context.Context, kind uint8, owner farmem.NodeID, epoch uint64, p int, key, value []byte, begun farmem.Time) (done, retry, full bool, err error) {
	if kind != wInsert {
		if ok, err := x.shortcut(ctx, kind, owner, epoch, p, key, value, begun); err != nil || ok {
			return ok, false, false, err
		}
	}
	var val []byte
	if kind != wDelete {
		val = value
	}
	learnt := x.rt.Now() // before the resolution reads the slot
	res, err := x.t.Resolve(ctx, key, val)
	if err != nil {
		return false, false, false, err
	}
	w := writeReq{epoch: epoch, p: p, kind: kind, key: key, new: res.New, begun: begun}
	if kind != wInsert {
		w.learnt = learnt
	}
	// The memory nodes' copy may be ahead of the proxy's (a write written through and not
	// committed yet): an answer that ends the operation without a commit (exists, not found)
	// is confirmed by the proxy, whose copy is the truth, or the attempt is retried.
	confirm := func(present bool, sentinel error) (bool, bool, bool, error) {
		_ = x.t.FreeBlock(res.New)
		got, err := x.present(ctx, owner, epoch, p, key)
		switch {
		case errors.Is(err, errStaleRoute):
			return false, true, false, nil
		case err != nil:
			return false, false, false, err
		case got == present:
			return false, false, false, sentinel
		}
		return false, true, false, nil
	}
	switch kind {
	case wInsert:
		if res.Key >= 0 {
			return confirm(true, race.ErrExists)
		}
		var free []int
		for j, wd := range res.Words {
			if x.t.Reusable(wd) {
				free = append(free, j)
			}
		}
		if len(free) == 0 {
			_ = x.t.FreeBlock(res.New)
			return false, false, true, nil
		}
		j := free[x.rt.Rand().IntN(len(free))]
		w.slot, w.expect, w.others = x.lay.SlotAddr(res.Subtable, res.Index[j]), res.Words[j], res.Others()
	default:
		if res.Key < 0 {
			return confirm(false, race.ErrNotFound)
		}
		w.slot, w.expect = x.lay.SlotAddr(res.Subtable, res.Index[res.Key]), res.Words[res.Key]
		if kind == wDelete {
			w.new = x.t.DeleteWord()
		}
	}
	x.n.count(func(s *FlexStats) { s.Proxied++ })
	st, replaced, err := x.commitQueued(ctx, owner, &w)
	switch {
	case err != nil:
		// Unknown outcome: the new block may be in place; it is leaked rather than freed.
		x.unknown = &w
		return false, false, false, err
	case st == stOK:
		x.wrote(ctx, &w, replaced)
		return true, false, false, nil
	}
	// Busy, conflict (the copy holds another word) or stale: nothing committed.
	_ = x.t.FreeBlock(res.New)
	return false, true, false, nil
}

// present asks the proxy whether key is in the partition: its committed fingerprint matches,
// whose blocks are then read (two round trips).
func (x *flexIndex) present(ctx context.Context, owner farmem.NodeID, epoch uint64, p int, key []byte) (bool, error) {
	_, _, err := x.t.SearchWords(ctx, key, func() ([]race.Slot, []farmem.Addr, error) {
		rep, err := x.callProxy(ctx, owner, farmem.OwnerFlexKV.Method(flexSearch), encSearch(epoch, p, noCacheFlag, key))
		if err != nil {
			return nil, nil, fmt.Errorf("kvstore: flexkv: search RPC: %w", err)
		}
		st, _, words, slots, err := decSearchResp(rep)
		if err != nil {
			return nil, nil, err
		}
		if st == stStale {
			return nil, nil, errStaleRoute
		}
		return words, slots, nil
	})
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, race.ErrNotFound):
		return false, nil
	}
	return false, err
}

// commit sends an index write and, if its outcome is unknown (the Call failed), sends it again
// with the same words: the proxy's copy holding the new word means the first committed.
func (x *flexIndex) commit(ctx context.Context, owner farmem.NodeID, w *writeReq) (uint8, race.Slot, error) {
	req := w.enc()
	var firstErr error
	var d time.Duration
	for attempt := 0; attempt < 4; attempt++ {
		rep, err := x.callProxy(ctx, owner, farmem.OwnerFlexKV.Method(flexWrite), req)
		if err != nil {
			if firstErr == nil {
				firstErr = err
			}
			if ctx.Err() != nil {
				break
			}
			if err := backoff(ctx, x.rt, &d); err != nil {
				break
			}
			continue
		}
		st, cur, err := decWord(rep)
		if err != nil {
			return 0, 0, err
		}
		if st == stPending {
			st, cur, err = x.await(ctx, owner, uint64(cur))
			if err != nil {
				return 0, 0, err
			}
		}
		if st == stForgotten {
			return 0, 0, errTicketForgotten
		}
		if firstErr == nil {
			return st, cur, nil
		}
		switch {
		case st == stOK || st == stConflict && cur == w.new:
			// Committed by this attempt or the first: which word it replaced is not
			// known for sure (a first attempt may have replaced a later word): it is
			// leaked rather than retired.
			return stOK, 0, nil
		case st == stBusy:
			// Perhaps our first attempt, still running: ask again.
			if err := backoff(ctx, x.rt, &d); err != nil {
				return 0, 0, unknownOutcome(firstErr)
			}
			continue
		}
		break
	}
	return 0, 0, unknownOutcome(firstErr)
}

// commitQueued is commit for a write the proxy may order after the key's write in flight:
// an update or delete answered busy (another write of the key or slot holds its lock) sends
// the same request again, after a pause doubling from 2µs (as a lost CAS's), while its writer's knowledge of the slot
// is younger than the delete lease (see overrides): once that write has committed, the proxy
// commits this one over its word. Its new block is written once, and it is not resolved again.
func (x *flexIndex) commitQueued(ctx context.Context, owner farmem.NodeID, w *writeReq) (uint8, race.Slot, error) {
	var d time.Duration
	for {
		st, replaced, err := x.commit(ctx, owner, w)
		if err != nil || st != stBusy || w.kind == wInsert || w.learnt == 0 || x.rt.Now().Sub(w.learnt) >= x.lease() {
			return st, replaced, err
		}
		x.n.count(func(s *FlexStats) { s.Queued++ })
		if err := backoff(ctx, x.rt, &d); err != nil {
			return 0, 0, unknownOutcome(err)
		}
	}
}

// await polls a pending write (its ticket) with commit Calls, backing off, until the proxy
// commits it (ok) or no longer holds it (stale). Only this client waits: no proxy handler is
// held while the sharers' acknowledgements come in.
func (x *flexIndex) await(ctx context.Context, owner farmem.NodeID, ticket uint64) (uint8, race.Slot, error) {
	var d time.Duration
	req := le.AppendUint64(nil, ticket)
	for {
		if err := backoff(ctx, x.rt, &d); err != nil {
			return 0, 0, unknownOutcome(err)
		}
		rep, err := x.callProxy(ctx, owner, farmem.OwnerFlexKV.Method(flexCommit), req)
		if err != nil {
			return 0, 0, unknownOutcome(err)
		}
		st, cur, err := decWord(rep)
		if err != nil {
			return 0, 0, err
		}
		switch st {
		case stPending:
		case stForgotten:
			return 0, 0, errTicketForgotten
		default:
			return st, cur, nil
		}
	}
}

// handOverSplitTries bounds how often handOver finishes a partition's splits and asks again
// when the new owner found one holding the partition (begun, by inserts, between the finish
// and the pause).
const handOverSplitTries = 4

// handOver asks the coordinator (the lowest compute node) to move partition p to owner (0: the
// memory nodes). To a proxy, it first finishes the splits in progress in p (a table split
// region by region leaves them half done while nobody inserts into a subtable, and the new
// owner cannot load a partition holding one: race.ReadPartition): the new owner's load runs
// with every node paused, so only a split begun between the finish and the pause can still
// hold it; it is then rolled back (stSplit), and handOver finishes and asks again, up to
// handOverSplitTries times.
func (x *flexIndex) handOver(ctx context.Context, p int, owner farmem.NodeID) error {
	if x.k.NoProxy && owner != 0 {
		return fmt.Errorf("kvstore: %s never proxies: %w", x.k.Name(), farmem.ErrInvalid)
	}
	if p < 0 || p >= len(x.n.parts) {
		return fmt.Errorf("kvstore: flexkv: partition %d of %d: %w", p, len(x.n.parts), farmem.ErrInvalid)
	}
	if owner != 0 && !owner.IsCompute() {
		return fmt.Errorf("kvstore: flexkv: owner %v is not a compute node: %w", owner, farmem.ErrInvalid)
	}
	cs := x.m.Topology().ComputeNodes()
	if len(cs) == 0 {
		return fmt.Errorf("kvstore: flexkv: no compute node: %w", farmem.ErrInvalid)
	}
	var d time.Duration
	finish := owner != 0
	for tries := 0; ; {
		if finish {
			if _, err := x.t.FinishPartitionSplits(ctx, p); err != nil {
				return fmt.Errorf("kvstore: flexkv: hand-over of partition %d: finish its splits: %w", p, err)
			}
			finish = false
		}
		rep, err := x.m.Call(ctx, cs[0], farmem.OwnerFlexKV.Method(flexHandOver), ctlReq{p: p, owner: owner, root: x.t.Root()}.enc())
		if err != nil {
			return fmt.Errorf("kvstore: flexkv: hand-over of partition %d: %w", p, err)
		}
		if len(rep) == 1 && rep[0] == stBusy {
			// Another hand-over is running: wait here, not in the coordinator's handler.
			if err := backoff(ctx, x.rt, &d); err != nil {
				return err
			}
			continue
		}
		if len(rep) == 1 && rep[0] == stSplit && owner != 0 {
			if tries++; tries < handOverSplitTries {
				finish = true
				continue
			}
			return fmt.Errorf("kvstore: flexkv: hand-over of partition %d to %v: splits kept beginning there: %w", p, owner, ErrHandOver)
		}
		if len(rep) != 1 || rep[0] != stOK {
			return fmt.Errorf("kvstore: flexkv: hand-over of partition %d to %v: %w", p, owner, ErrHandOver)
		}
		return nil
	}
}

// HandOver moves partition p of a FlexKV store to compute node owner's proxy, or back to the
// memory nodes with owner 0 (see FlexKV, "Hand-over"), while operations go on. It fails with
// farmem.ErrInvalid on a store of another kind or the Aceso baseline, and with ErrHandOver if
// it was rolled back (a node failed to pause or load it, or splits kept beginning in the
// partition: to a proxy it first finishes the partition's splits in progress, one round trip
// per subtable of the partition when none is, and again after each rollback a split caused,
// up to 4 times).
func (s *Store) HandOver(ctx context.Context, p int, owner farmem.NodeID) error {
	return s.with(ctx, func(idx Index) error {
		x, ok := idx.(*flexIndex)
		if !ok {
			return fmt.Errorf("kvstore: index %s has no proxies: %w", s.opts.Index.Name(), farmem.ErrInvalid)
		}
		return x.handOver(ctx, p, owner)
	})
}

// wrote settles a committed proxied write: it retires the word the proxy says it replaced
// (none for an insert, or when the reply does not say), and leaves in the node's cache the
// key's slot and new word (a slot-only entry: this node does not know the new block's stamp,
// so reads still go to the proxy), for the next write's shortcut; a delete drops the entry.
// The entry counts as learnt when the write began, before its commit.
func (x *flexIndex) wrote(ctx context.Context, w *writeReq, replaced race.Slot) {
	if w.kind != wInsert && replaced != 0 && replaced.Committed() {
		x.t.Retire(ctx, replaced)
	}
	if w.kind == wDelete {
		x.n.drop(w.key)
		return
	}
	x.n.put(w.key, cacheEntry{at: w.begun, ent: race.Entry{Word: w.new, Slot: w.slot}, part: w.p, slotOnly: true})
}
