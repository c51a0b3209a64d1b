package hybrid

// The cache's copies live in Go memory, which the simulator does not time, while a cache in a
// compute node's region (ds/selcc's frames) pays for every access with a verb to it. So that
// Dolphin and the systems it is compared with pay one price for the same bytes, the tree
// charges its cache accesses through Runtime.Compute at the fabric's localcost.Price (zero
// on real transports, where the work is real), under the rule bench/baseline/sherman and
// bench/baseline/smart follow too:
//
//   - a lookup costs one local access, plus the bytes of the copy it returns (a hit reads the
//     node as a reader fetches it: its 24-byte header and 8 bytes per slot);
//   - a put (a node copied into the cache) costs one local access plus the copy's bytes.
//
// A cache of budget 0 holds nothing and costs nothing. Charges are made after the cache's
// mutex is released (Compute may park the caller in virtual time).

// chargeLocal charges one local access touching n bytes.
func (t *Tree) chargeLocal(n int) { t.lc.Charge(t.rt, n) }

// caching reports whether the tree has a cache that holds anything.
func (t *Tree) caching() bool { return t.cache != nil && t.cache.budget > 0 }

// copyBytes is what a cached copy of n holds and a visit reads.
func copyBytes(n *node) int { return nSlotsOff + 8*len(n.slots) }

// cacheLookup is Cache.lookup, charged.
func (t *Tree) cacheLookup(k uint64) *node {
	n := t.cache.lookup(k)
	switch {
	case !t.caching():
	case n == nil:
		t.chargeLocal(0)
	default:
		t.chargeLocal(copyBytes(n))
	}
	return n
}

// cachePut is Cache.put, charged as the copy's write.
func (t *Tree) cachePut(n *node) {
	t.cache.put(n)
	if t.caching() {
		t.chargeLocal(copyBytes(n))
	}
}
