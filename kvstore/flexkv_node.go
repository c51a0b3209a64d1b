package kvstore

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
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
}

// routeState is one partition in a node's active map.
type routeState struct {
	owner    farmem.NodeID // 0: on the memory nodes
	epoch    uint64
	paused   bool
	inflight int // this node's operations routed to the partition and not finished
}

// cacheEntry is a cached pair (kv) or a cached address, with the slot that named it.
type cacheEntry struct {
	at    farmem.Time // when the entry was learnt: its slot address is used for writes until at+DeleteLease
	kv    bool
	value []byte
	ent   race.Entry
	part  int
	reads uint64 // reads served from the cache since the last RPC for the key (piggybacked)
}

// readMark counts invalidations of a key that arrive while proxied reads of it are in flight.
type readMark struct {
	refs  int
	inval uint64
}

// proxyPart is a partition this node proxies: its subtables' slot copies in the node's region
// (the index buffer) and the per-key directory (the metadata buffer).
type proxyPart struct {
	epoch uint64
	subs  []proxySub
	keys  map[string]bool      // keys with a write in flight
	slots map[farmem.Addr]bool // slots (memory-node addresses) with a write in flight
	meta  map[string]*keyMeta
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
	// Conflicts counts proxied writes answered busy or conflict; Invalidations the pairs this
	// node's cache dropped on a proxy's request; Refused the installs a racing invalidation
	// cancelled.
	Conflicts, Invalidations, Refused uint64
	// HandOvers counts hand-overs this node coordinated.
	HandOvers uint64
}

func (k *FlexKV) openNode(ctx context.Context, env *nodestate.Env) (*flexNode, error) {
	n := &flexNode{kind: k, node: env.Node, proxied: map[int]*proxyPart{}, cache: map[string]*cacheEntry{},
		marks: map[string]*readMark{}, parts: make([]routeState, 1<<k.params().InitialDepth)}
	area, err := nodearea.Open(ctx, env.Memory)
	if err != nil {
		return nil, fmt.Errorf("kvstore: flexkv: node area: %w", err)
	}
	if n.latch, err = area.AllocZeroed(ctx, 8); err != nil {
		return nil, fmt.Errorf("kvstore: flexkv: latch: %w", err)
	}
	hs := map[uint8]farmem.Handler{flexSearch: n.onSearch, flexWrite: n.onWrite, flexInval: n.onInval,
		flexPause: n.onPause, flexLoad: n.onLoad, flexResume: n.onResume, flexHandOver: n.onHandOver}
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
// in flight and returns p's owner and epoch. Every route is followed by done.
func (n *flexNode) route(ctx context.Context, rt farmem.Runtime, p int) (farmem.NodeID, uint64, error) {
	var d time.Duration
	for {
		n.mu.Lock()
		ps := &n.parts[p]
		if !ps.paused {
			ps.inflight++
			o, e := ps.owner, ps.epoch
			n.mu.Unlock()
			return o, e, nil
		}
		n.mu.Unlock()
		if err := backoff(ctx, rt, &d); err != nil {
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

// --- the cache (clients) ---

func (n *flexNode) lookup(key []byte) (cacheEntry, bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	e, ok := n.cache[string(key)]
	if !ok {
		return cacheEntry{}, false
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
	for len(n.cache) > n.kind.cacheEntries() && len(n.fifo) > 0 {
		old := n.fifo[0]
		n.fifo = n.fifo[1:]
		delete(n.cache, old)
	}
	if len(n.fifo) > 4*n.kind.cacheEntries() {
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
		if m.inval == tok {
			n.putLocked(string(key), e)
		} else {
			n.stats.Refused++
		}
	}
	if m.refs--; m.refs == 0 {
		delete(n.marks, string(key))
	}
}

// invalidate drops key's cached pair and marks the reads of it in flight.
func (n *flexNode) invalidate(key []byte) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if e, ok := n.cache[string(key)]; ok && e.kv {
		delete(n.cache, string(key))
		n.stats.Invalidations++
	}
	if m := n.marks[string(key)]; m != nil {
		m.inval++
	}
}

func (n *flexNode) onInval(_ context.Context, _ farmem.Memory, _ farmem.ClientID, req []byte) ([]byte, error) {
	if len(req) == 0 {
		return nil, errWire
	}
	n.invalidate(req)
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

func (n *flexNode) onWrite(ctx context.Context, m farmem.Memory, _ farmem.ClientID, req []byte) ([]byte, error) {
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
		n.mu.Unlock()
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
	unlock := func() {
		n.mu.Lock()
		delete(pp.keys, string(w.key))
		delete(pp.slots, w.slot)
		n.mu.Unlock()
	}
	defer unlock()

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
		n.count(func(st *FlexStats) { st.Conflicts++ })
		return encWord(stConflict, c), nil
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
	// Invalidate the sharers' cached pairs (each Call's reply is its acknowledgement), then
	// the replaced block's valid word (address caches) and write the slot through, then
	// commit with the local CAS. No read adds a sharer while the key is locked; the list is
	// taken only now that the write will commit, and given back if an invalidation fails.
	n.mu.Lock()
	sharers := km.sharers
	km.sharers = 0
	n.mu.Unlock()
	if err := n.invalidateSharers(ctx, m, sharers, w.key); err != nil {
		n.mu.Lock()
		km.sharers |= sharers
		n.mu.Unlock()
		return nil, err
	}
	var wb farmem.Batch
	if w.expect.Committed() {
		wb.Write(w.expect.Addr().Add(race.ValidOffset), le.AppendUint64(nil, race.InvalidWord))
	}
	wb.Write(w.slot, le.AppendUint64(nil, uint64(w.new)))
	if err := m.Do(ctx, &wb); err != nil {
		return nil, fmt.Errorf("kvstore: flexkv: write through: %w", err)
	}
	prev, err := m.CAS(ctx, local, uint64(w.expect), uint64(w.new))
	if err != nil {
		return nil, fmt.Errorf("kvstore: flexkv: commit: %w", err)
	}
	if race.Slot(prev) != w.expect {
		// Unreachable while the slot's write lock is held: report it rather than hide it.
		return nil, fmt.Errorf("kvstore: flexkv: slot %v changed under its lock: %w", w.slot, race.ErrCorrupt)
	}
	n.count(func(st *FlexStats) { st.Commits++; st.Served++ })
	return encWord(stOK, w.expect), nil
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

// invalidateSharers tells every sharer to drop key, one Call each (this node directly), and
// returns once all have acknowledged.
func (n *flexNode) invalidateSharers(ctx context.Context, m farmem.Memory, sharers uint32, key []byte) error {
	if sharers == 0 {
		return nil
	}
	for _, node := range m.Topology().ComputeNodes() {
		bit := sharerBit(node)
		if bit == 0 || sharers&bit == 0 {
			continue
		}
		if node == n.node {
			n.invalidate(key)
			continue
		}
		if _, err := m.Call(ctx, node, farmem.OwnerFlexKV.Method(flexInval), key); err != nil {
			return fmt.Errorf("kvstore: flexkv: invalidate %v: %w", node, err)
		}
	}
	return nil
}

// --- hand-over ---

func (n *flexNode) onPause(ctx context.Context, m farmem.Memory, _ farmem.ClientID, req []byte) ([]byte, error) {
	c, err := decCtl(req)
	if err != nil || c.p >= len(n.parts) {
		return nil, errWire
	}
	n.mu.Lock()
	n.parts[c.p].paused = true
	n.mu.Unlock()
	var d time.Duration
	for {
		n.mu.Lock()
		left := n.parts[c.p].inflight
		if left == 0 {
			// Drained: no client of this node uses p. Clear the cache (its pairs' sharer bits
			// are lost with the proxy's directory, and slot addresses may go stale once the
			// partition is on the memory nodes and splits).
			clear(n.cache)
			n.fifo = n.fifo[:0]
			n.mu.Unlock()
			return nil, nil
		}
		n.mu.Unlock()
		if err := backoff(ctx, m.Runtime(), &d); err != nil {
			return nil, err
		}
	}
}

func (n *flexNode) onLoad(ctx context.Context, m farmem.Memory, _ farmem.ClientID, req []byte) ([]byte, error) {
	c, err := decCtl(req)
	if err != nil || c.p >= len(n.parts) {
		return nil, errWire
	}
	subs, err := race.ReadPartition(ctx, m, c.root, c.p)
	if errors.Is(err, race.ErrBusy) {
		return []byte{stFull}, nil
	}
	if err != nil {
		return nil, err
	}
	area, err := nodearea.Open(ctx, m)
	if err != nil {
		return nil, err
	}
	pp := &proxyPart{epoch: c.epoch, keys: map[string]bool{}, slots: map[farmem.Addr]bool{}, meta: map[string]*keyMeta{}}
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
	var drop *proxyPart
	if c.owner != n.node {
		drop = n.proxied[c.p]
		delete(n.proxied, c.p)
	}
	n.parts[c.p] = routeState{owner: c.owner, epoch: c.epoch}
	n.mu.Unlock()
	if drop != nil {
		if area, err := nodearea.Open(ctx, m); err == nil {
			n.freeCopies(ctx, area, drop)
		}
	}
	return nil, nil
}

// onHandOver runs a hand-over of partition c.p to c.owner (0: the memory nodes) under the
// coordinator's latch (answering busy, for the requester to retry, while another runs): pause every compute node (each drains its clients' operations on the
// partition and clears its cache), have the new owner load it, resume every node with the new
// owner. If the load is refused (a split holds the partition) the partition goes back to the
// memory nodes and the reply says so.
func (n *flexNode) onHandOver(ctx context.Context, m farmem.Memory, _ farmem.ClientID, req []byte) ([]byte, error) {
	c, err := decCtl(req)
	if err != nil || c.p >= len(n.parts) {
		return nil, errWire
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
	n.epoch++
	c.epoch = n.epoch<<16 | uint64(n.node.ComputeID())
	n.stats.HandOvers++
	n.mu.Unlock()
	nodes := m.Topology().ComputeNodes()
	call := func(node farmem.NodeID, method uint8, r ctlReq) ([]byte, error) {
		return m.Call(ctx, node, farmem.OwnerFlexKV.Method(method), r.enc())
	}
	for _, node := range nodes {
		if _, err := call(node, flexPause, c); err != nil {
			return nil, fmt.Errorf("kvstore: flexkv: pause partition %d on %v: %w", c.p, node, err)
		}
	}
	status := byte(stOK)
	if c.owner != 0 {
		rep, err := call(c.owner, flexLoad, c)
		if err != nil || len(rep) != 1 || rep[0] != stOK {
			// Refused (busy) or failed: the partition stays on the memory nodes, whose copy is
			// the truth (every proxy writes through before it commits).
			status = stFull
			c.owner = 0
		}
	}
	for _, node := range nodes {
		if _, err := call(node, flexResume, c); err != nil {
			return nil, fmt.Errorf("kvstore: flexkv: resume partition %d on %v: %w", c.p, node, err)
		}
	}
	return []byte{status}, nil
}
