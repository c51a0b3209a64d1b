package cider

import (
	"sync"
	"sync/atomic"

	"github.com/farmem/farmem/ds/ptrsync"
)

// The parameters of contention-aware synchronization (CIDER §4.3, §5.2.2).
const (
	// InitialCredit is the credit a key gains when it turns hot.
	InitialCredit = 36
	// HotnessThreshold is the failed CASes an optimistic update must need, twice in a row on a
	// key, for the key to turn hot: ptrsync.SevereFailures, so that a severe update (as every
	// synchronizer counts it) is what Algorithm 1 calls a hot one.
	HotnessThreshold = ptrsync.SevereFailures
	// AIMDFactor divides a key's credit after an uncombined lock acquisition.
	AIMDFactor = 2
	// DefaultCreditCapacity bounds the keys a compute node tracks.
	DefaultCreditCapacity = 4096
)

// Credits is a compute node's contention state (CIDER's Algorithm 1): a credit map (how many
// more updates of a key go through its lock) and a retryRecord map (the failed CASes of the
// last optimistic update of a key), shared by the node's clients. Only keys with credit or
// with a last optimistic update of HotnessThreshold failed CASes or more are kept, at most
// Capacity of them (CLOCK eviction). It is safe for concurrent use: a sync.Mutex guards
// short sections that issue no verb. While it tracks no key at all (a node with no hot key,
// the common case), Take and AfterOptimistic of a cool update answer from one atomic load
// (tracked) without the mutex or the map, as if they ran just before any concurrent change.
type Credits struct {
	tracked atomic.Int64 // len(entries), stored under mu after every change of entries
	mu      sync.Mutex
	cap     int
	entries map[uint64]*creditEntry
	ring    []uint64 // keys in insertion slots, for CLOCK eviction
	hand    int
	evicted uint64
}

type creditEntry struct {
	credit uint32
	retry  uint32
	ref    bool
	slot   int
}

// NewCredits returns an empty contention state for one compute node, tracking at most capacity
// keys (DefaultCreditCapacity if capacity <= 0).
func NewCredits(capacity int) *Credits {
	if capacity <= 0 {
		capacity = DefaultCreditCapacity
	}
	return &Credits{cap: capacity, entries: make(map[uint64]*creditEntry)}
}

// Take decides an update's path: if the key has credit it spends one and reports true (go
// pessimistic), otherwise false (go optimistic).
func (c *Credits) Take(key uint64) bool {
	if c.tracked.Load() == 0 {
		return false // no entry, none with credit: the check inlines into every update's Plan
	}
	return c.take(key)
}

// take is Take's lookup under the lock.
func (c *Credits) take(key uint64) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	defer c.count()
	e := c.entries[key]
	if e == nil || e.credit == 0 {
		return false
	}
	e.credit--
	e.ref = true
	c.gc(key, e)
	return true
}

// AfterPessimistic adjusts a key's credit after an update that went through the lock: one more
// if it took part in a combined batch (additive increase), divided by AIMDFactor if it held the
// lock alone (multiplicative decrease: nobody was queued behind it).
func (c *Credits) AfterPessimistic(key uint64, combined bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	defer c.count()
	e := c.entries[key]
	if !combined {
		if e != nil {
			e.credit /= AIMDFactor
			c.gc(key, e)
		}
		return
	}
	if e == nil {
		e = c.add(key)
	}
	e.credit++
	e.ref = true
}

// AfterOptimistic records the failed CASes of an optimistic update: if it and the previous
// optimistic update of the key (from this compute node) both needed HotnessThreshold or more,
// the key turns hot and gains InitialCredit.
func (c *Credits) AfterOptimistic(key uint64, retries int) {
	if retries < HotnessThreshold && c.tracked.Load() == 0 {
		return // no entry to update, and none to add: the check inlines into Commit
	}
	c.afterOptimistic(key, retries)
}

// afterOptimistic is AfterOptimistic's update under the lock.
func (c *Credits) afterOptimistic(key uint64, retries int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	defer c.count()
	e := c.entries[key]
	if e == nil {
		if retries < HotnessThreshold {
			return
		}
		e = c.add(key)
	}
	if retries >= HotnessThreshold && e.retry >= HotnessThreshold {
		e.credit += InitialCredit
	}
	e.retry = uint32(min(retries, 1<<31))
	e.ref = true
	c.gc(key, e)
}

// Get returns a key's credit and retry record.
func (c *Credits) Get(key uint64) (credit, retry uint32) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e := c.entries[key]; e != nil {
		return e.credit, e.retry
	}
	return 0, 0
}

// Len returns the number of keys tracked; Evicted the number evicted to stay within capacity.
func (c *Credits) Len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.entries)
}

// Evicted returns the number of keys evicted to keep within the capacity.
func (c *Credits) Evicted() uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.evicted
}

// count publishes the number of entries (tracked); called under mu by every method that may
// change them.
func (c *Credits) count() {
	if n := int64(len(c.entries)); c.tracked.Load() != n {
		c.tracked.Store(n)
	}
}

// add inserts a fresh entry for key, evicting one (CLOCK: the first not referenced since the
// hand last passed) if the map is full.
func (c *Credits) add(key uint64) *creditEntry {
	e := &creditEntry{}
	if len(c.ring) < c.cap {
		e.slot = len(c.ring)
		c.ring = append(c.ring, key)
		c.entries[key] = e
		return e
	}
	for {
		k := c.ring[c.hand]
		v := c.entries[k]
		if v != nil && v.slot != c.hand {
			v = nil // a stale slot: its key was dropped and added again elsewhere
		}
		if v == nil || !v.ref {
			if v != nil {
				delete(c.entries, k)
				c.evicted++
			}
			e.slot = c.hand
			c.ring[c.hand] = key
			c.entries[key] = e
			c.hand = (c.hand + 1) % len(c.ring)
			return e
		}
		v.ref = false
		c.hand = (c.hand + 1) % len(c.ring)
	}
}

// gc drops an entry that no longer matters (no credit, a cool retry record).
func (c *Credits) gc(key uint64, e *creditEntry) {
	if e.credit == 0 && e.retry < HotnessThreshold {
		delete(c.entries, key)
		// The ring slot stays; add reuses it when the hand comes by (the key is gone).
	}
}
