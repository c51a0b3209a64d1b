package kvstore

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/farmem/farmem/ds/race"
	"github.com/farmem/farmem/farmem"
)

// The compute-node side of FlexKV's manager: the access counters it reads each period, the
// memory split it sets, and the manager's lease, kept by the coordinator.

// mgrCounters are one node's access counters since the manager last read them: per
// partition (every operation of this node's clients on a key of the partition, cache hits
// included: the paper's per-partition access counters, 4 bytes each, summed per node here
// rather than per client), and reads and writes (the knob's workload-shift test).
type mgrCounters struct {
	parts         []atomic.Uint32
	reads, writes atomic.Uint64
	// budget is the node's memory for its local index and cache (bytes; 0: not split, the
	// kind's CacheEntries), entry the bytes one cache entry is charged; capacity is the
	// entries the cache may hold under the split (0: not split).
	budget, entry, capacity atomic.Int64
}

// touch counts one operation of a client of n on partition p.
func (n *flexNode) touch(p int, read bool) {
	if p >= 0 && p < len(n.mgr.parts) {
		n.mgr.parts[p].Add(1)
	}
	if read {
		n.mgr.reads.Add(1)
	} else {
		n.mgr.writes.Add(1)
	}
}

// capacity is how many entries the node's cache may hold: the split the manager set, or the
// kind's CacheEntries.
func (n *flexNode) capacity() int {
	if c := n.mgr.capacity.Load(); c > 0 {
		return int(c)
	}
	if n.mgr.budget.Load() > 0 {
		return 1 // the index took the whole budget: keep one entry so the FIFO still works
	}
	return n.kind.cacheEntries()
}

// indexBytesLocked is what the node's local index takes: each proxied partition's slot copies
// and its metadata buffer (the paper's 8-byte entry per key, charged per slot here since a
// slot may come to hold a key). n.mu is held.
func (n *flexNode) indexBytesLocked() int64 {
	var b int64
	for _, pp := range n.proxied {
		for _, s := range pp.subs {
			slots := int64(s.size-race.SlotsOffset()) / 8
			b += 16 * slots
		}
	}
	return b
}

// resplitLocked recomputes the cache's capacity from the budget and the local index, and
// evicts down to it. n.mu is held.
func (n *flexNode) resplitLocked() {
	budget, entry := n.mgr.budget.Load(), n.mgr.entry.Load()
	if budget <= 0 || entry <= 0 {
		return
	}
	c := (budget - n.indexBytesLocked()) / entry
	n.mgr.capacity.Store(max(0, c))
	n.evictLocked()
}

// evictLocked drops the oldest entries past the capacity. n.mu is held.
func (n *flexNode) evictLocked() {
	for len(n.cache) > n.capacity() && len(n.fifo) > 0 {
		old := n.fifo[0]
		n.fifo = n.fifo[1:]
		delete(n.cache, old)
	}
}

// mgrStatsResp is a node's answer to the manager's read of its counters.
type mgrStatsResp struct {
	parts         []uint32
	reads, writes uint64
	indexBytes    uint64
	entries       uint64 // cache entries held
	// served is the index RPCs the node's proxy has served since it opened (the manager
	// takes differences).
	served uint64
	// owners and epochs are the coordinator's settled route of every partition (only the
	// coordinator answers with them; others leave them empty).
	owners []farmem.NodeID
	epochs []uint64
}

func (r mgrStatsResp) enc() []byte {
	b := le.AppendUint64(nil, uint64(len(r.parts)))
	for _, c := range r.parts {
		b = le.AppendUint32(b, c)
	}
	b = le.AppendUint64(b, r.reads)
	b = le.AppendUint64(b, r.writes)
	b = le.AppendUint64(b, r.indexBytes)
	b = le.AppendUint64(b, r.entries)
	b = le.AppendUint64(b, r.served)
	b = le.AppendUint64(b, uint64(len(r.owners)))
	for i, o := range r.owners {
		b = le.AppendUint64(b, uint64(o))
		b = le.AppendUint64(b, r.epochs[i])
	}
	return b
}

func decMgrStats(b []byte) (mgrStatsResp, error) {
	r := reader{b: b}
	var s mgrStatsResp
	n := r.u64()
	if n > uint64(len(b)) {
		return s, errWire
	}
	s.parts = make([]uint32, n)
	for i := range s.parts {
		if len(r.b) < 4 {
			return s, errWire
		}
		s.parts[i] = le.Uint32(r.b)
		r.b = r.b[4:]
	}
	s.reads, s.writes, s.indexBytes, s.entries, s.served = r.u64(), r.u64(), r.u64(), r.u64(), r.u64()
	k := r.u64()
	if r.bad || k > uint64(len(r.b))/16 {
		return s, errWire
	}
	s.owners, s.epochs = make([]farmem.NodeID, k), make([]uint64, k)
	for i := range s.owners {
		s.owners[i], s.epochs[i] = farmem.NodeID(r.u64()), r.u64()
	}
	if r.bad || len(r.b) != 0 {
		return s, errWire
	}
	return s, nil
}

// onMgrStats answers the manager with the node's counters since its last read (and resets
// them: the window is the manager's period), its local index's size and, on the coordinator,
// every partition's settled route.
func (n *flexNode) onMgrStats(_ context.Context, m farmem.Memory, _ farmem.ClientID, _ []byte) ([]byte, error) {
	if n.leaving.Load() {
		// The manager counts a node that does not answer out of the assignment.
		return nil, fmt.Errorf("kvstore: flexkv: %v is leaving: %w", n.node, ErrLeaving)
	}
	r := mgrStatsResp{parts: make([]uint32, len(n.mgr.parts))}
	for i := range n.mgr.parts {
		r.parts[i] = n.mgr.parts[i].Swap(0)
	}
	r.reads, r.writes = n.mgr.reads.Swap(0), n.mgr.writes.Swap(0)
	n.mu.Lock()
	r.indexBytes = uint64(n.indexBytesLocked())
	r.entries = uint64(len(n.cache))
	r.served = n.stats.Served
	if c, err := coordinator(m); err == nil && c == n.node {
		r.owners, r.epochs = make([]farmem.NodeID, len(n.coord)), make([]uint64, len(n.coord))
		for p := range n.coord {
			r.owners[p], r.epochs[p] = n.coord[p].owner, n.coord[p].epoch
		}
	}
	n.mu.Unlock()
	return r.enc(), nil
}

// onMgrSplit sets the node's memory budget for index and cache and the bytes per cache entry
// (two words), and recomputes the cache's capacity now and whenever the local index changes.
func (n *flexNode) onMgrSplit(_ context.Context, _ farmem.Memory, _ farmem.ClientID, req []byte) ([]byte, error) {
	r := reader{b: req}
	budget, entry := r.u64(), r.u64()
	if r.bad || budget > 1<<50 || entry > 1<<30 {
		return nil, errWire
	}
	n.mgr.budget.Store(int64(budget))
	n.mgr.entry.Store(int64(entry))
	n.mu.Lock()
	if budget == 0 {
		n.mgr.capacity.Store(0)
	}
	n.resplitLocked()
	c := n.mgr.capacity.Load()
	n.mu.Unlock()
	return le.AppendUint64(nil, uint64(c)), nil
}

// managerLease is the coordinator's record of the manager's lease.
type managerLease struct {
	holder uint64 // the manager's identity (drawn at random when it starts)
	term   uint64
	until  farmem.Time
}

// onMgrElect, on the coordinator, grants the manager's lease: to the requester (its identity,
// a nonzero word, in the request, with the lease's length) when the lease is free, has run out, or is the
// requester's (a renewal). The reply is a status byte and the lease's term, which grows by one
// at every change of holder.
func (n *flexNode) onMgrElect(_ context.Context, m farmem.Memory, _ farmem.ClientID, req []byte) ([]byte, error) {
	r := reader{b: req}
	who, d := r.u64(), time.Duration(r.u64())
	if r.bad || d <= 0 || who == 0 {
		return nil, errWire
	}
	now := m.Runtime().Now()
	n.mu.Lock()
	defer n.mu.Unlock()
	l := &n.mgrLease
	st := uint8(stOK)
	switch {
	case l.holder == who && l.term > 0:
		l.until = now.Add(d)
	case l.term == 0 || now >= l.until:
		l.holder, l.term, l.until = who, l.term+1, now.Add(d)
	default:
		st = stBusy
	}
	return le.AppendUint64([]byte{st}, l.term), nil
}
