package kvstore

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/farmem/farmem/alloc/nodearea"
	"github.com/farmem/farmem/ds/race"
	"github.com/farmem/farmem/farmem"
	"github.com/farmem/farmem/farmem/nodestate"
)

// flexNode is FlexKV's state on one compute node: the node's view of the partition map (its
// active map), its local cache (pairs and addresses), the partitions it proxies, and, on the
// coordinator, the hand-over serialization. mu guards the Go maps and is held for map
// accesses only, never across a verb or a wait.
type flexNode struct {
	kind  *FlexKV
	node  farmem.NodeID
	latch farmem.Addr // the coordinator's hand-over latch (a word of this node's region)

	mu      sync.Mutex
	parts   []routeState // by partition
	proxied map[int]*proxyPart
	cache   map[string]*cacheEntry
	fifo    []string // insertion order of cache keys (FIFO eviction); stale names are skipped
	marks   map[string]*readMark
	epoch   uint64 // the coordinator's last epoch
	stats   FlexStats
	pending map[uint64]*pendingWrite // this proxy's writes awaiting acknowledgements, by ticket
	// noInstall fences keys whose proxied write failed with an unknown outcome: reads begun
	// before the time install no pair.
	noInstall map[string]farmem.Time
	finished  ticketBook   // tickets of pending writes committed and not yet polled (bounded)
	ticket    uint64       // the last ticket issued
	coord     []coordPart  // on the coordinator: each partition's settled route and lease
	mgr       mgrCounters  // the manager's counters and memory split (flexkv_manager_node.go)
	mgrLease  managerLease // on the coordinator: the manager's lease
	// leaving is set by Store.Leave: the node loads no partition, answers no manager, and, as
	// the coordinator, runs only hand-overs to the memory nodes.
	leaving atomic.Bool
}

// pendingWrite is a validated proxied write whose key and slot locks are held while the
// sharers' acknowledgements come in (one-way messages). It commits once every sharer has
// acknowledged, or once the pairs granted to them have expired (deadline), whichever first;
// the commit is run by whichever handler first finds it ready: the writer's polling commit
// Call, or a later write meeting its locks.
type pendingWrite struct {
	ticket    uint64
	w         writeReq
	pp        *proxyPart
	local     farmem.Addr // the slot's word in this node's copy
	waiting   uint32      // sharers not yet acknowledged
	deadline  farmem.Time // from then no sharer serves a pair granted before the write
	finishing bool        // a handler is running the commit
	posted    bool        // a write-through of it failed: it may land (outcome unknown)
}

// routeState is one partition in a node's active map.
type routeState struct {
	owner  farmem.NodeID // 0: on the memory nodes
	epoch  uint64
	paused bool
	// pausedFor is the attempt epoch of the hand-over that paused the partition here.
	pausedFor uint64
	// pausedAt is when it was paused (this node's clock): a node paused longer than the down
	// timeout asks the coordinator for the settled route.
	pausedAt farmem.Time
	// resumedFor is the attempt epoch of the last hand-over whose route this node applied.
	resumedFor uint64
	inflight   int // this node's operations routed to the partition and not finished
}

// cacheEntry is a cached pair (kv) or a cached address, with the slot that named it.
type cacheEntry struct {
	at    farmem.Time // when the entry was learnt: its slot address is used for writes until at+DeleteLease
	kv    bool
	value []byte
	ent   race.Entry
	part  int
	reads uint64 // reads served from the cache since the last RPC for the key (piggybacked)
	// slotOnly: the entry names the key's slot and committed word for the shortcut of writes
	// (left by this node's own proxied write, whose block's stamp it does not know); reads
	// treat it as a miss.
	slotOnly bool
}

// readMark counts invalidations of a key that arrive while proxied reads of it are in flight,
// and this node's proxied writes of it in flight (no pair is installed while one is).
type readMark struct {
	refs   int
	inval  uint64
	writes int
}

// proxyPart is a partition this node proxies: its subtables' slot copies in the node's region
// (the index buffer) and the per-key directory (the metadata buffer).
type proxyPart struct {
	epoch uint64
	until farmem.Time // this proxy's lease on the partition, by its clock
	// writing counts write-throughs in flight: dropping the partition waits for them.
	writing int
	subs    []proxySub
	keys    map[string]bool      // keys with a write in flight
	slots   map[farmem.Addr]bool // slots (memory-node addresses) with a write in flight
	meta    map[string]*keyMeta
}

// proxySub is one subtable of a proxied partition.
type proxySub struct {
	mn     farmem.Addr // on the memory node
	header uint64
	local  farmem.Addr // the copy of its slot array in this node's region
	size   uint64
}

// keyMeta is a key's directory entry: sharers (a bit per compute id 1..32) and counters.
type keyMeta struct {
	sharers       uint32
	reads, writes uint16
	granted       farmem.Time // when a sharer was last granted the pair (this node's clock)
}

// FlexStats count one node's FlexKV work.
type FlexStats struct {
	// KVHits and AddrHits count reads served from the cache (no round trip) and through a
	// cached address (one); Misses the others.
	KVHits, AddrHits, AddrStale, Misses uint64
	// Proxied counts index operations this node's clients sent to a proxy; Served those this
	// node's proxy served; Commits its local CASes.
	Proxied, Served, Commits uint64
	// Shortcuts counts writes sent with a cached slot address (no resolution).
	Shortcuts uint64
	// Overrides counts updates and deletes this node's proxy committed over a word that a
	// later write of the key had put in place of the one they expected (no resolution
	// again: the proxy orders the key's writes).
	Overrides uint64
	// Queued counts this node's proxied updates and deletes answered busy (their key locked by
	// another write) and sent again as they were, to be ordered after it.
	Queued uint64
	// AckTimeouts counts writes committed at their deadline with an acknowledgement missing
	// (the sharer's pair lease having run out).
	AckTimeouts uint64
	// Conflicts counts proxied writes answered busy or conflict; Invalidations the pairs this
	// node's cache dropped on a proxy's invalidation or before its own client's write; Refused
	// the installs a racing invalidation or write cancelled.
	Conflicts, Invalidations, Refused uint64
	// HandOvers counts hand-overs this node coordinated (recoveries included), RolledBack
	// those it rolled back (a pause or load failed), ResumesFailed the nodes a completed one
	// could not resume (they resume by asking for the route), Recoveries the partitions it
	// took back from a proxy found down once its lease was fenced.
	HandOvers, RolledBack, ResumesFailed, Recoveries uint64
	// Loads counts partitions this node loaded to proxy them.
	Loads uint64
	// Settled counts this node's writes whose proxy failed with their outcome unknown and
	// that were settled on the memory nodes once the partition had another route.
	Settled uint64
	// LeaseRefused counts index RPCs this node's proxy answered stale because its lease on
	// the partition had run out and could not be renewed.
	LeaseRefused uint64
	// Remote counts the index RPCs (searches, writes, commit polls) this node's clients sent
	// to another compute node's proxy: with one compute node per process (cxl, tcp), the
	// index operations proxied across processes.
	Remote uint64
}

func (k *FlexKV) openNode(ctx context.Context, env *nodestate.Env) (*flexNode, error) {
	n := &flexNode{kind: k, node: env.Node, proxied: map[int]*proxyPart{}, cache: map[string]*cacheEntry{},
		marks: map[string]*readMark{}, pending: map[uint64]*pendingWrite{}, noInstall: map[string]farmem.Time{}, parts: make([]routeState, 1<<k.params().InitialDepth), coord: make([]coordPart, 1<<k.params().InitialDepth)}
	n.mgr.parts = make([]atomic.Uint32, len(n.parts))
	area, err := nodearea.Open(ctx, env.Memory)
	if err != nil {
		return nil, fmt.Errorf("kvstore: flexkv: node area: %w", err)
	}
	if n.latch, err = area.AllocZeroed(ctx, 8); err != nil {
		return nil, fmt.Errorf("kvstore: flexkv: latch: %w", err)
	}
	hs := map[uint8]farmem.Handler{flexSearch: n.onSearch, flexWrite: n.onWrite, flexInval: n.onInval,
		flexPause: n.onPause, flexLoad: n.onLoad, flexResume: n.onResume, flexHandOver: n.onHandOver,
		flexInvalAck: n.onInvalAck, flexCommit: n.onCommit, flexRenew: n.onRenew, flexRoute: n.onRoute,
		flexRecover: n.onRecover, flexMgrStats: n.onMgrStats, flexMgrSplit: n.onMgrSplit, flexMgrElect: n.onMgrElect,
		flexDrain: n.onDrain}
	for _, id := range slices.Sorted(func(yield func(uint8) bool) {
		for id := range hs {
			if !yield(id) {
				return
			}
		}
	}) {
		if err := env.Handle(id, hs[id]); err != nil {
			return nil, err
		}
	}
	return n, nil
}

// Close implements nodestate.State. The partition copies live in the node's region, which
// outlives the state; nothing else needs releasing.
func (n *flexNode) Close() error { return nil }

// Stats returns the node's counters.
func (n *flexNode) Stats() FlexStats {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.stats
}

// --- routing (clients) ---

// route admits an operation on partition p: it waits while p is paused, counts the operation
// in flight and returns p's owner and epoch. Every route is followed by done. A partition
// paused for longer than the fabric's down timeout (a hand-over that could not resume this
// node) asks the coordinator for its settled route, then again every down timeout; when that
// Call fails with farmem.ErrNodeDown or farmem.ErrClosed (the coordinator unreachable, or this
// client's own node crashed) the operation fails with it, having done nothing.
func (n *flexNode) route(ctx context.Context, m farmem.Memory, p int) (farmem.NodeID, uint64, error) {
	rt := m.Runtime()
	var d time.Duration
	var asked farmem.Time
	for {
		n.mu.Lock()
		ps := &n.parts[p]
		if !ps.paused {
			ps.inflight++
			o, e := ps.owner, ps.epoch
			n.mu.Unlock()
			return o, e, nil
		}
		since := ps.pausedAt
		n.mu.Unlock()
		now := rt.Now()
		if down := m.Topology().DownTimeout; now.Sub(since) >= down && now.Sub(asked) >= down {
			asked = now
			if err := n.askRoute(ctx, m, p); errors.Is(err, farmem.ErrNodeDown) || errors.Is(err, farmem.ErrClosed) {
				// Paused past the down timeout and the coordinator unreachable (or this
				// client's own node crashed): report it rather than wait without bound.
				// Nothing of the operation was done.
				return 0, 0, fmt.Errorf("kvstore: flexkv: partition %d paused and its route unknown: %w", p, err)
			}
			continue
		}
		if err := shortBackoff(ctx, rt, &d); err != nil {
			return 0, 0, err
		}
	}
}

func (n *flexNode) done(p int) {
	n.mu.Lock()
	n.parts[p].inflight--
	n.mu.Unlock()
}

// backoff sleeps for d (starting at 2µs) and doubles it, up to 1ms.
func backoff(ctx context.Context, rt farmem.Runtime, d *time.Duration) error {
	if *d == 0 {
		*d = 2 * time.Microsecond
	}
	if err := rt.Sleep(ctx, *d); err != nil {
		return err
	}
	*d = min(2**d, time.Millisecond)
	return nil
}

// shortBackoff sleeps for d (starting at 2µs) and doubles it, up to 16µs: the pause of an
// operation waiting on a paused partition (a hand-over, some tens of microseconds on the
// simulator's fabric) and of a hand-over's drain. Longer pauses would idle every client of a
// hot partition long after its hand-over ended.
func shortBackoff(ctx context.Context, rt farmem.Runtime, d *time.Duration) error {
	if *d == 0 {
		*d = 2 * time.Microsecond
	}
	if err := rt.Sleep(ctx, *d); err != nil {
		return err
	}
	*d = min(2**d, 16*time.Microsecond)
	return nil
}

// --- the cache (clients) ---

func (n *flexNode) lookup(key []byte, now farmem.Time) (cacheEntry, bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	e, ok := n.cache[string(key)]
	if !ok || e.slotOnly {
		return cacheEntry{}, false
	}
	if e.kv && now.Sub(e.at) >= n.kind.pairLease() {
		// The pair's lease has run out: a proxy whose invalidation went unanswered may commit
		// past it. Keep its address (one round trip, checked by the block's valid word).
		e.kv, e.value = false, nil
	}
	if !e.kv && e.reads >= FlushReads && !n.kind.NoKVCache && !n.kind.NoProxy && n.parts[e.part].owner != 0 {
		// Enough reads of a proxied key went unseen: send them to the proxy with a read RPC,
		// whose answer may let this node cache the pair (the paper's flush, with an answer).
		return cacheEntry{}, false
	}
	e.reads++
	if e.kv {
		n.stats.KVHits++
	}
	return *e, true
}

// FlushReads is how many reads served from a node's cache without the proxy (pairs and
// addresses) a key accumulates before the next read of it goes to the proxy with them.
const FlushReads = 32

// peek returns key's entry without counting a read.
func (n *flexNode) peek(key []byte) (cacheEntry, bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	e, ok := n.cache[string(key)]
	if !ok {
		return cacheEntry{}, false
	}
	return *e, true
}

// takeReads returns and clears the key's read count, to piggyback on an RPC.
func (n *flexNode) takeReads(key []byte) uint64 {
	n.mu.Lock()
	defer n.mu.Unlock()
	if e, ok := n.cache[string(key)]; ok {
		r := e.reads
		e.reads = 0
		return r
	}
	return 0
}

// put installs an entry, evicting the oldest past the capacity.
func (n *flexNode) put(key []byte, e cacheEntry) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.putLocked(string(key), e)
}

func (n *flexNode) putLocked(k string, e cacheEntry) {
	if _, ok := n.cache[k]; !ok {
		n.fifo = append(n.fifo, k)
	}
	n.cache[k] = &e
	n.evictLocked()
	if len(n.fifo) > 4*n.capacity() {
		// Drop names of entries gone since (invalidated or replaced).
		live := n.fifo[:0]
		seen := map[string]bool{}
		for _, f := range n.fifo {
			if _, ok := n.cache[f]; ok && !seen[f] {
				seen[f] = true
				live = append(live, f)
			}
		}
		n.fifo = live
	}
}

func (n *flexNode) drop(key []byte) {
	n.mu.Lock()
	delete(n.cache, string(key))
	n.mu.Unlock()
}

// beginRead marks a proxied read of key in flight and returns the key's invalidation count.
func (n *flexNode) beginRead(key []byte) uint64 {
	n.mu.Lock()
	defer n.mu.Unlock()
	m := n.marks[string(key)]
	if m == nil {
		m = &readMark{}
		n.marks[string(key)] = m
	}
	m.refs++
	return m.inval
}

// endRead ends it; if install is set and no invalidation of the key arrived since beginRead
// returned tok, it installs e (under the same lock, so no invalidation can slip between).
func (n *flexNode) endRead(key []byte, tok uint64, install bool, e cacheEntry) {
	n.mu.Lock()
	defer n.mu.Unlock()
	m := n.marks[string(key)]
	if install {
		if until, ok := n.noInstall[string(key)]; ok && e.at >= until {
			delete(n.noInstall, string(key))
		}
		if _, fenced := n.noInstall[string(key)]; m.inval == tok && m.writes == 0 && !fenced {
			n.putLocked(string(key), e)
		} else {
			n.stats.Refused++
		}
	}
	if m.refs--; m.refs == 0 {
		delete(n.marks, string(key))
	}
}

// beginWrite starts a proxied write of key by a client of this node. The node invalidates its
// own pair itself, so the proxy need not message the writer's node: the pair becomes an
// address (kept for the write's shortcut), the reads in flight may not install theirs, and
// no read installs one until endWrite, which cancels the installs of the reads begun
// meanwhile (they may have been granted the old value before the proxy locked the key).
func (n *flexNode) beginWrite(key []byte) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if e, ok := n.cache[string(key)]; ok && e.kv {
		e.kv, e.value = false, nil
		n.stats.Invalidations++
	}
	m := n.marks[string(key)]
	if m == nil {
		m = &readMark{}
		n.marks[string(key)] = m
	}
	m.refs++
	m.writes++
	m.inval++
}

// endWrite ends a write begun with beginWrite. When its outcome is unknown (failed), its
// request may still reach the proxy later, which then trusts this node to hold no pair only
// while the request is younger than the pair lease less twice the clock skew (see onWrite):
// so reads begun before now plus the pair lease install no pair.
func (n *flexNode) endWrite(key []byte, failed bool, now farmem.Time) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if failed {
		n.noInstall[string(key)] = now.Add(n.kind.pairLease())
	}
	m := n.marks[string(key)]
	m.writes--
	m.inval++
	if m.refs--; m.refs == 0 {
		delete(n.marks, string(key))
	}
}

// invalidate drops key's cached pair and marks the reads of it in flight.
func (n *flexNode) invalidate(key []byte) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.invalidateLocked(key)
}

func (n *flexNode) invalidateLocked(key []byte) {
	if e, ok := n.cache[string(key)]; ok && e.kv {
		delete(n.cache, string(key))
		n.stats.Invalidations++
	}
	if m := n.marks[string(key)]; m != nil {
		m.inval++
	}
}

// onInval is a proxy's one-way invalidation (ticket, key): drop the pair, mark the reads in
// flight, then acknowledge with a one-way message back to the sending node. It never waits for
// another node's handler.
func (n *flexNode) onInval(ctx context.Context, m farmem.Memory, from farmem.ClientID, req []byte) ([]byte, error) {
	r := reader{b: req}
	ticket := r.u64()
	key := r.rest()
	if r.bad || len(key) == 0 {
		return nil, errWire
	}
	n.invalidate(key)
	a, err := m.Topology().ClientSlice(from)
	if err != nil {
		return nil, err
	}
	// Bounded: a lost acknowledgement only delays the write until the pair's lease has passed.
	sctx, cancel := m.Runtime().WithTimeout(ctx, n.kind.pairLease())
	defer cancel()
	if err := m.Send(sctx, a.Node(), farmem.OwnerFlexKV.Method(flexInvalAck), le.AppendUint64(nil, ticket)); err != nil {
		return nil, fmt.Errorf("kvstore: flexkv: acknowledge invalidation: %w", err)
	}
	return nil, nil
}

// onInvalAck records a sharer's acknowledgement of a pending write's invalidation (a one-way
// message): it clears the sharer's bit in the proxy's state, and the last one commits the
// write (finish: a write-through round trip to the memory node, then the local CAS).
func (n *flexNode) onInvalAck(ctx context.Context, m farmem.Memory, from farmem.ClientID, req []byte) ([]byte, error) {
	r := reader{b: req}
	ticket := r.u64()
	if r.bad {
		return nil, errWire
	}
	a, err := m.Topology().ClientSlice(from)
	if err != nil {
		return nil, err
	}
	n.mu.Lock()
	pw := n.pending[ticket]
	if pw != nil {
		pw.waiting &^= sharerBit(a.Node())
	}
	// The last acknowledgement commits the write here, so that its key and slot are locked no
	// longer than the invalidations took (its writer's next poll finds it committed).
	ready := pw != nil && pw.waiting == 0 && n.proxied[pw.w.p] == pw.pp && n.claimLocked(ticket, pw, m.Runtime().Now())
	n.mu.Unlock()
	if ready {
		if _, err := n.finish(ctx, m, pw); err != nil {
			return nil, err // left pending: the writer's poll commits it
		}
	}
	return nil, nil
}

// --- the proxy ---

// partFor returns the proxied partition p if this node holds it in epoch.
func (n *flexNode) partFor(p int, epoch uint64) *proxyPart {
	pp := n.proxied[p]
	if pp == nil || pp.epoch != epoch {
		return nil
	}
	return pp
}

// sub returns the subtable of pp covering h1.
func (pp *proxyPart) sub(h1 uint64) *proxySub {
	for i := range pp.subs {
		if race.CoversHeader(pp.subs[i].header, h1) {
			return &pp.subs[i]
		}
	}
	return nil
}

func (pp *proxyPart) subOf(slot farmem.Addr) (*proxySub, uint64, bool) {
	for i := range pp.subs {
		s := &pp.subs[i]
		if slot >= s.mn && slot < s.mn.Add(s.size) {
			off := uint64(slot - s.mn)
			return s, off, true
		}
	}
	return nil, 0, false
}

func (n *flexNode) onSearch(ctx context.Context, m farmem.Memory, from farmem.ClientID, req []byte) ([]byte, error) {
	r := reader{b: req}
	epoch, p, reads := r.u64(), int(r.u64()), r.u64()
	key := r.rest()
	noCache := reads&noCacheFlag != 0
	reads &^= noCacheFlag
	l := n.kind.layout()
	if r.bad || len(key) == 0 || l == nil || p >= len(n.parts) {
		return nil, errWire
	}
	pl := l.Place(key)
	n.mu.Lock()
	pp := n.partFor(p, epoch)
	if pp == nil {
		n.mu.Unlock()
		return encSearchResp(stStale, false, nil, nil), nil
	}
	s := pp.sub(pl.H1)
	if s == nil {
		n.mu.Unlock()
		return nil, fmt.Errorf("kvstore: flexkv: partition %d holds no subtable for the key: %w", p, race.ErrCorrupt)
	}
	km := pp.metaOf(key)
	cacheIt := false
	if !noCache {
		km.read(1 + reads)
	}
	if !noCache && !n.kind.NoKVCache && !pp.keys[string(key)] && km.worthy() {
		// No write of the key is in flight (it would have taken the sharers already): the
		// sender becomes a sharer, and any later write invalidates it before committing.
		if a, err := m.Topology().ClientSlice(from); err == nil && sharerBit(a.Node()) != 0 {
			bit := sharerBit(a.Node())
			km.sharers |= bit
			km.granted = m.Runtime().Now()
			cacheIt = true
		}
	}
	n.stats.Served++
	local := s.local
	n.mu.Unlock()
	// Read the candidate slots of the local copy (a CPU access) and return the committed
	// fingerprint matches.
	var b farmem.Batch
	bufs := make([][8]byte, len(pl.Candidates))
	for i, c := range pl.Candidates {
		b.Read(local.Add(8*c), bufs[i][:])
	}
	if err := m.Do(ctx, &b); err != nil {
		return nil, fmt.Errorf("kvstore: flexkv: read local index: %w", err)
	}
	// Served only while this proxy's lease runs (checked after the read: the copy was current
	// when read, since the partition is recovered only after the lease has run out).
	if _, ok := n.leased(ctx, m, p, pp); !ok {
		n.count(func(st *FlexStats) { st.LeaseRefused++ })
		return encSearchResp(stStale, false, nil, nil), nil
	}
	var words []race.Slot
	var slots []farmem.Addr
	for i, c := range pl.Candidates {
		w := race.Slot(le.Uint64(bufs[i][:]))
		if w.Committed() && w.Fingerprint() == pl.FP {
			words = append(words, w)
			slots = append(slots, l.SlotAddr(s.mn, c))
		}
	}
	return encSearchResp(stOK, cacheIt, words, slots), nil
}

// sharerBit is a node's bit in a sharer list (0 for a compute id above 32: never a sharer).
func sharerBit(node farmem.NodeID) uint32 {
	c := node.ComputeID()
	if c < 1 || c > 32 {
		return 0
	}
	return 1 << (c - 1)
}

func (pp *proxyPart) metaOf(key []byte) *keyMeta {
	km := pp.meta[string(key)]
	if km == nil {
		km = &keyMeta{}
		pp.meta[string(key)] = km
	}
	return km
}

// read and write bump the counters; past 65535 both are shifted right by 2 (their ratio kept).
func (km *keyMeta) read(d uint64) {
	for ; d > 0; d-- {
		if km.reads == 0xffff {
			km.reads >>= 2
			km.writes >>= 2
		}
		km.reads++
	}
}

func (km *keyMeta) write() {
	if km.writes == 0xffff {
		km.reads >>= 2
		km.writes >>= 2
	}
	km.writes++
}

// worthy: a key whose write/read ratio is below 1/4 is worth caching.
func (km *keyMeta) worthy() bool { return 4*uint64(km.writes) < uint64(km.reads) }

func (n *flexNode) onWrite(ctx context.Context, m farmem.Memory, from farmem.ClientID, req []byte) ([]byte, error) {
	w, err := decWrite(req)
	l := n.kind.layout()
	if err != nil || l == nil {
		return nil, errWire
	}
	n.mu.Lock()
	pp := n.partFor(w.p, w.epoch)
	if pp == nil {
		n.mu.Unlock()
		return encWord(stStale, 0), nil
	}
	s, off, ok := pp.subOf(w.slot)
	if !ok || off < race.SlotsOffset() || (off-race.SlotsOffset())%8 != 0 || (off-race.SlotsOffset())/8 >= uint64(l.Slots()) {
		n.mu.Unlock()
		return nil, fmt.Errorf("kvstore: flexkv: slot %v not in partition %d: %w", w.slot, w.p, farmem.ErrInvalid)
	}
	if pp.keys[string(w.key)] || pp.slots[w.slot] {
		n.stats.Conflicts++
		help := n.readyLocked(pp, m.Runtime().Now(), w.key, w.slot)
		n.mu.Unlock()
		if help != nil {
			// An abandoned write whose sharers are done: commit it for its writer, which
			// learns the outcome by resending (the expected-old check).
			if _, err := n.finish(ctx, m, help); err != nil {
				return nil, err
			}
		}
		return encWord(stBusy, 0), nil
	}
	pp.keys[string(w.key)], pp.slots[w.slot] = true, true
	km := pp.metaOf(w.key)
	km.write()
	local := s.local.Add(off - race.SlotsOffset())
	var pl race.KeyPlace
	if w.kind == wInsert {
		pl = l.Place(w.key)
	}
	n.mu.Unlock()
	held := true
	defer func() {
		if held {
			n.unlock(pp, w)
		}
	}()

	// The slot's current word, and for an insert the key's candidates: a committed slot with
	// its fingerprint the client did not see (another insert of the key) is a conflict.
	var b farmem.Batch
	var cur [8]byte
	b.Read(local, cur[:])
	var cands [][8]byte
	if w.kind == wInsert {
		cands = make([][8]byte, len(pl.Candidates))
		for i, c := range pl.Candidates {
			b.Read(s.local.Add(8*c), cands[i][:])
		}
	}
	if err := m.Do(ctx, &b); err != nil {
		return nil, fmt.Errorf("kvstore: flexkv: read local index: %w", err)
	}
	if c := race.Slot(le.Uint64(cur[:])); c != w.expect {
		if !n.overrides(w, c, m.Runtime().Now()) {
			n.count(func(st *FlexStats) { st.Conflicts++ })
			return encWord(stConflict, c), nil
		}
		// An update or delete whose expected word another write replaced since: the slot
		// still holds the key (see overrides), so it replaces the current word, after that
		// write, as the proxy serializes the key's writes.
		n.count(func(st *FlexStats) { st.Overrides++ })
		w.expect = c
	}
	if w.kind == wInsert {
		var seen []race.Slot
		for i := range cands {
			c := race.Slot(le.Uint64(cands[i][:]))
			if c.Committed() && c.Fingerprint() == pl.FP {
				seen = append(seen, c)
			}
		}
		if !sameSet(seen, w.others) {
			n.count(func(st *FlexStats) { st.Conflicts++ })
			return encWord(stConflict, w.expect), nil
		}
	}
	// The write will commit. Take the sharers (no read adds one while the key is locked) and
	// invalidate them with one-way messages; each answers with a one-way acknowledgement.
	// This node's own pair is dropped at once. With remote sharers the write is left pending
	// (its locks held, no handler waiting) and the writer polls it with commit Calls.
	now := m.Runtime().Now()
	n.mu.Lock()
	sharers := km.sharers
	km.sharers = 0
	if a, err := m.Topology().ClientSlice(from); err == nil && now.Sub(w.begun) < n.kind.pairLease()-2*n.kind.clockSkew() {
		// The writer's node dropped its own pair before the write and installs none until
		// the write's reply, or, if the write failed, until a pair lease after (beginWrite,
		// endWrite): a request this young needs no invalidation of the writer's node.
		sharers &^= sharerBit(a.Node())
	}
	if bit := sharerBit(n.node); sharers&bit != 0 {
		sharers &^= bit
		n.invalidateLocked(w.key)
	}
	pw := &pendingWrite{w: w, pp: pp, local: local, waiting: sharers,
		deadline: km.granted.Add(n.kind.pairLease() + 2*n.kind.clockSkew())}
	if sharers != 0 {
		n.ticket++
		pw.ticket = n.ticket
		n.pending[n.ticket] = pw
		held = false // the pending write owns the locks now
	}
	ticket := n.ticket
	n.mu.Unlock()
	if sharers == 0 {
		held = false
		return n.finish(ctx, m, pw)
	}
	n.sendInvals(ctx, m, sharers, ticket, w.key)
	return encWord(stPending, race.Slot(ticket)), nil
}

// unlock releases a write's key and slot locks.
func (n *flexNode) unlock(pp *proxyPart, w writeReq) {
	n.mu.Lock()
	delete(pp.keys, string(w.key))
	delete(pp.slots, w.slot)
	n.mu.Unlock()
}

// readyLocked returns a pending write holding key's or slot's lock that may commit now and
// that no handler is committing (claimed for the caller), or nil. n.mu is held.
func (n *flexNode) readyLocked(pp *proxyPart, now farmem.Time, key []byte, slot farmem.Addr) *pendingWrite {
	for t, pw := range n.pending {
		if pw.pp == pp && (string(pw.w.key) == string(key) || pw.w.slot == slot) && n.claimLocked(t, pw, now) {
			return pw
		}
	}
	return nil
}

// claimLocked claims pending write t for committing if it is ready: every sharer acknowledged,
// or the deadline passed (a sharer silent, down or its acknowledgement lost: the pairs it may
// hold have expired by then, so the key is uncached everywhere). n.mu is held.
func (n *flexNode) claimLocked(t uint64, pw *pendingWrite, now farmem.Time) bool {
	if pw.finishing || pw.waiting != 0 && now < pw.deadline {
		return false
	}
	if pw.waiting != 0 {
		n.stats.AckTimeouts++
	}
	pw.finishing = true // stays in pending (its writer's polls answered pending) until done
	return true
}

// finish commits a write that no sharer can contradict any more: it sets the replaced block's
// valid word and writes the slot through to the memory node, then commits with the local CAS,
// and releases the write's locks. Every step is idempotent: on an error a pending write is
// left pending (locks held) for the next commit Call; one committing in its own handler
// releases its locks.
func (n *flexNode) finish(ctx context.Context, m farmem.Memory, pw *pendingWrite) ([]byte, error) {
	w := pw.w
	fail := func(err error) ([]byte, error) {
		if pw.ticket == 0 {
			// Committed in its own handler: nothing is pending, release the locks (the
			// writer's resend finds the outcome through the expected-old check).
			n.unlock(pw.pp, w)
			return nil, err
		}
		n.mu.Lock()
		pw.finishing = false
		n.mu.Unlock()
		return nil, err
	}
	// The write-through is posted only while this proxy's lease runs (its context ends with
	// the lease), so that a proxy recovered as dead lands nothing past its fence.
	until, ok := n.leased(ctx, m, w.p, pw.pp)
	if !ok {
		n.count(func(st *FlexStats) { st.LeaseRefused++ })
		if pw.ticket == 0 {
			n.unlock(pw.pp, w)
			return encWord(stStale, 0), nil
		}
		n.mu.Lock()
		pw.finishing = false
		n.mu.Unlock()
		return encWord(stPending, race.Slot(pw.ticket)), nil
	}
	n.mu.Lock()
	if n.proxied[w.p] != pw.pp {
		// Dropped meanwhile (handed over): nothing may be written through any more. A write
		// whose earlier write-through failed may have landed: its outcome is unknown.
		st := byte(stStale)
		if pw.posted {
			st = stForgotten
		}
		n.mu.Unlock()
		return encWord(st, 0), nil
	}
	pw.pp.writing++
	n.mu.Unlock()
	var wb farmem.Batch
	if w.expect.Committed() {
		wb.Write(w.expect.Addr().Add(race.ValidOffset), le.AppendUint64(nil, race.InvalidWord))
	}
	wb.Write(w.slot, le.AppendUint64(nil, uint64(w.new)))
	lctx, cancel := m.Runtime().WithTimeout(ctx, until.Sub(m.Runtime().Now()))
	err := m.Do(lctx, &wb)
	cancel()
	n.mu.Lock()
	pw.pp.writing--
	n.mu.Unlock()
	if err != nil {
		n.mu.Lock()
		pw.posted = true
		n.mu.Unlock()
		return fail(fmt.Errorf("kvstore: flexkv: write through: %w", err))
	}
	prev, err := m.CAS(ctx, pw.local, uint64(w.expect), uint64(w.new))
	if err != nil {
		return fail(fmt.Errorf("kvstore: flexkv: commit: %w", err))
	}
	n.mu.Lock()
	delete(pw.pp.keys, string(w.key))
	delete(pw.pp.slots, w.slot)
	if pw.ticket != 0 {
		delete(n.pending, pw.ticket)
		n.finished.add(pw.ticket, m.Runtime().Now(), w.expect)
	}
	n.mu.Unlock()
	if race.Slot(prev) != w.expect && race.Slot(prev) != w.new {
		// Unreachable while the slot's write lock is held: report it rather than hide it.
		return nil, fmt.Errorf("kvstore: flexkv: slot %v changed under its lock: %w", w.slot, race.ErrCorrupt)
	}
	n.count(func(st *FlexStats) { st.Commits++; st.Served++ })
	return encWord(stOK, w.expect), nil
}

// onCommit is a writer's poll of its pending write (its ticket): it commits the write if it
// is ready and answers ok (also when another handler committed it), answers pending while
// acknowledgements are due, and stale when the ticket is unknown: the write was dropped
// uncommitted with its partition's hand-over, and the writer routes and resolves again. A
// committed ticket is remembered until its writer polls it, within the bounds of ticketBook
// (past them the poll is answered forgotten: outcome unknown).
func (n *flexNode) onCommit(ctx context.Context, m farmem.Memory, _ farmem.ClientID, req []byte) ([]byte, error) {
	r := reader{b: req}
	ticket := r.u64()
	if r.bad {
		return nil, errWire
	}
	n.mu.Lock()
	pw := n.pending[ticket]
	if pw != nil && n.proxied[pw.w.p] != pw.pp {
		// The partition was handed over since: its writes never committed (the new owner
		// loaded the memory nodes' copy, never written by them), unless a write-through
		// failed (then the answer is forgotten: outcome unknown).
		n.dropPendingLocked(ticket, pw)
		pw = nil
	}
	if pw == nil {
		st := byte(stStale)
		committed, forgotten, replaced := n.finished.take(ticket, m.Runtime().Now())
		switch {
		case committed:
			st = stOK
		case forgotten:
			st = stForgotten
		}
		n.mu.Unlock()
		return encWord(st, replaced), nil
	}
	if !n.claimLocked(ticket, pw, m.Runtime().Now()) {
		n.mu.Unlock()
		return encWord(stPending, race.Slot(ticket)), nil
	}
	n.mu.Unlock()
	return n.finish(ctx, m, pw)
}

func (n *flexNode) count(f func(*FlexStats)) {
	n.mu.Lock()
	f(&n.stats)
	n.mu.Unlock()
}

// sameSet reports whether a and b hold the same words (order aside).
func sameSet(a, b []race.Slot) bool {
	if len(a) != len(b) {
		return false
	}
	a, b = slices.Clone(a), slices.Clone(b)
	slices.Sort(a)
	slices.Sort(b)
	return slices.Equal(a, b)
}

// sendInvals sends a one-way invalidation of key (with the write's ticket) to every remote
// sharer. A send that fails (a node down, its inbox full past the pair lease) is left to the
// deadline: the write commits once the pairs granted have expired.
func (n *flexNode) sendInvals(ctx context.Context, m farmem.Memory, sharers uint32, ticket uint64, key []byte) {
	msg := append(le.AppendUint64(nil, ticket), key...)
	sctx, cancel := m.Runtime().WithTimeout(ctx, n.kind.pairLease())
	defer cancel()
	for _, node := range m.Topology().ComputeNodes() {
		if bit := sharerBit(node); bit != 0 && sharers&bit != 0 {
			_ = m.Send(sctx, node, farmem.OwnerFlexKV.Method(flexInval), msg)
		}
	}
}

// --- hand-over ---

// onPause stops admitting operations on partition c.p on this node (for hand-over attempt
// c.attempt) and returns at once: the coordinator pauses every node first, then waits for each
// to drain (onDrain), so the drains run at once on every node and no paused node waits while
// the others keep admitting operations that contend with its own in-flight ones.
func (n *flexNode) onPause(ctx context.Context, m farmem.Memory, _ farmem.ClientID, req []byte) ([]byte, error) {
	c, err := decCtl(req)
	if err != nil || c.p >= len(n.parts) {
		return nil, errWire
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	ps := &n.parts[c.p]
	if c.attempt < ps.pausedFor || c.attempt <= ps.resumedFor {
		// A late pause of an attempt that has ended (or older than the one pausing): ignore.
		return nil, nil
	}
	ps.paused, ps.pausedFor, ps.pausedAt = true, c.attempt, m.Runtime().Now()
	return nil, nil
}

// onDrain waits until no operation of this node's clients is in flight on partition c.p,
// paused by attempt c.attempt, and clears the node's cache; it answers stStale, doing nothing,
// when the partition is not paused by that attempt (a later one took it, or it was resumed).
func (n *flexNode) onDrain(ctx context.Context, m farmem.Memory, _ farmem.ClientID, req []byte) ([]byte, error) {
	c, err := decCtl(req)
	if err != nil || c.p >= len(n.parts) {
		return nil, errWire
	}
	var d time.Duration
	for {
		n.mu.Lock()
		ps := &n.parts[c.p]
		if !ps.paused || ps.pausedFor != c.attempt {
			n.mu.Unlock()
			return []byte{stStale}, nil
		}
		if ps.inflight == 0 {
			// Drained: no client of this node uses p. Clear the cache (its pairs' sharer bits
			// are lost with the proxy's directory, and slot addresses may go stale once the
			// partition is on the memory nodes and splits).
			clear(n.cache)
			n.fifo = n.fifo[:0]
			n.mu.Unlock()
			return []byte{stOK}, nil
		}
		n.mu.Unlock()
		if err := shortBackoff(ctx, m.Runtime(), &d); err != nil {
			return nil, err
		}
	}
}

func (n *flexNode) onLoad(ctx context.Context, m farmem.Memory, _ farmem.ClientID, req []byte) ([]byte, error) {
	c, err := decCtl(req)
	if err != nil || c.p >= len(n.parts) {
		return nil, errWire
	}
	if n.leaving.Load() {
		return []byte{stFull}, nil // refused: the hand-over is rolled back
	}
	// The lease runs from the load's receipt: the coordinator's view of it starts later.
	until := m.Runtime().Now().Add(n.kind.proxyLease())
	subs, err := race.ReadPartition(ctx, m, c.root, c.p)
	if errors.Is(err, race.ErrBusy) {
		// A split holds the partition: a region split begun since the requester finished
		// the partition's splits (handOver), or a dead client's split whose lease runs.
		return []byte{stSplit}, nil
	}
	if err != nil {
		return nil, err
	}
	area, err := nodearea.Open(ctx, m)
	if err != nil {
		return nil, err
	}
	pp := &proxyPart{epoch: c.epoch, until: until, keys: map[string]bool{}, slots: map[farmem.Addr]bool{}, meta: map[string]*keyMeta{}}
	var b farmem.Batch
	for _, s := range subs {
		size := 8 * uint64(len(s.Words))
		local, err := area.Alloc(ctx, size)
		if err != nil {
			n.freeCopies(ctx, area, pp)
			return nil, fmt.Errorf("kvstore: flexkv: room for partition %d: %w", c.p, err)
		}
		img := make([]byte, 0, size)
		for _, w := range s.Words {
			img = le.AppendUint64(img, uint64(w))
		}
		b.Write(local, img)
		pp.subs = append(pp.subs, proxySub{mn: s.Addr, header: s.Header, local: local, size: race.SlotsOffset() + size})
		// The memory node's slots now change discipline: only this proxy writes them, with
		// plain writes, until the partition is handed back (strict mode is told).
		forgetAtomic(m, s.Addr.Add(race.SlotsOffset()), size)
	}
	if err := m.Do(ctx, &b); err != nil {
		n.freeCopies(ctx, area, pp)
		return nil, fmt.Errorf("kvstore: flexkv: load partition %d: %w", c.p, err)
	}
	n.mu.Lock()
	old := n.proxied[c.p]
	n.proxied[c.p] = pp
	n.stats.Loads++
	n.resplitLocked()
	n.mu.Unlock()
	if old != nil {
		n.freeCopies(ctx, area, old)
	}
	return []byte{stOK}, nil
}

func (n *flexNode) freeCopies(ctx context.Context, area *nodearea.Area, pp *proxyPart) {
	for _, s := range pp.subs {
		_ = area.Free(ctx, s.local, s.size-race.SlotsOffset())
	}
}

// forgetAtomic tells a transport with a strict mode that words once CASed are now written
// plainly (by a proxy's write-through); other transports have no such method.
func forgetAtomic(m farmem.Memory, a farmem.Addr, n uint64) {
	if s, ok := m.(interface{ ForgetAtomic(a farmem.Addr, n uint64) }); ok {
		s.ForgetAtomic(a, n)
	}
}

func (n *flexNode) onResume(ctx context.Context, m farmem.Memory, _ farmem.ClientID, req []byte) ([]byte, error) {
	c, err := decCtl(req)
	if err != nil || c.p >= len(n.parts) {
		return nil, errWire
	}
	n.mu.Lock()
	ps := &n.parts[c.p]
	if c.attempt < ps.pausedFor || c.attempt <= ps.resumedFor {
		// Late: a later attempt paused the partition here, or this node has applied this
		// attempt's route or a later one already.
		n.mu.Unlock()
		return nil, nil
	}
	var drop *proxyPart
	if c.owner != n.node {
		drop = n.dropProxiedLocked(c.p)
	}
	if !ps.paused && ps.owner != c.owner {
		// Not paused by this attempt (a recovery skipped the node): its cache was not cleared.
		clear(n.cache)
		n.fifo = n.fifo[:0]
	}
	ps.owner, ps.epoch, ps.paused, ps.resumedFor = c.owner, c.epoch, false, c.attempt
	n.mu.Unlock()
	if drop != nil {
		// Its write-throughs in flight land before the coordinator resumes anyone else.
		var d time.Duration
		for {
			n.mu.Lock()
			left := drop.writing
			n.mu.Unlock()
			if left == 0 {
				break
			}
			if err := backoff(ctx, m.Runtime(), &d); err != nil {
				return nil, err
			}
		}
		if area, err := nodearea.Open(ctx, m); err == nil {
			n.freeCopies(ctx, area, drop)
		}
	}
	return nil, nil
}

// onHandOver runs a hand-over of partition c.p to c.owner (0: the memory nodes) under the
// coordinator's latch (answering busy, for the requester to retry, while another runs); see
// runHandOver. The reply is stOK, or stFull (stSplit: a split held the partition) when it
// was rolled back.
func (n *flexNode) onHandOver(ctx context.Context, m farmem.Memory, _ farmem.ClientID, req []byte) ([]byte, error) {
	c, err := decCtl(req)
	if err != nil || c.p >= len(n.parts) {
		return nil, errWire
	}
	if n.leaving.Load() && c.owner != 0 {
		return []byte{stFull}, nil // a leaving coordinator only hands partitions back
	}
	latch, err := nodearea.NewLatch(m, n.latch)
	if err != nil {
		return nil, err
	}
	// Never wait for the latch in a handler: handlers are few, and the hand-over in progress
	// needs one on this node for its own pause. The requester retries.
	got, err := latch.TryLock(ctx)
	if err != nil {
		return nil, err
	}
	if !got {
		return []byte{stBusy}, nil
	}
	defer func() { _ = latch.Unlock(context.WithoutCancel(ctx)) }()
	n.mu.Lock()
	if n.coord[c.p].busy {
		// A recovery of the partition is running (recoveries take no latch).
		n.mu.Unlock()
		return []byte{stBusy}, nil
	}
	n.coord[c.p].busy = true
	n.mu.Unlock()
	st, err := n.runHandOver(ctx, m, c, 0)
	if err != nil {
		return nil, err
	}
	return []byte{st}, nil
}

// overrides reports whether write w, which expected the slot to hold w.expect, may replace c,
// the word the proxy's copy holds instead. It may when w is an update or a delete, both
// words are committed, c is not w's own new word (a resent write that committed already), and
// w's writer knew the slot held the key's word (w.expect) less than the delete lease ago, less
// twice the clock skew (w.learnt, the writer's clock): a slot the key left holds a delete word
// until the lease has run out past the delete, so within it a committed word in the slot is
// the key's, put there by a later write of it. The write is then ordered after that one; its
// writer learns the word it replaced (to retire it) from the reply. n.mu is not held.
func (n *flexNode) overrides(w writeReq, c race.Slot, now farmem.Time) bool {
	if w.kind == wInsert || !c.Committed() || !w.expect.Committed() || c == w.new || w.learnt == 0 {
		return false
	}
	return now.Sub(w.learnt) < n.kind.deleteLease()-2*n.kind.clockSkew()
}
