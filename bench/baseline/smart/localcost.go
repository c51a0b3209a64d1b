package smart

// The cache's copies live in Go memory, which the simulator does not time, while a cache in a
// compute node's region (ds/selcc's frames) pays for every access with a verb to it. So that
// the baselines and the systems they are compared with pay one price for the same bytes, the
// tree charges its cache accesses through Runtime.Compute at the fabric's localcost.Price
// (zero on real transports, where the work is real), under the rule ds/hybrid and
// bench/baseline/sherman follow too:
//
//   - a lookup costs one local access, plus the bytes of the copy it returns (a hit reads the
//     node as a reader fetches it: its header and 8 bytes per slot of its class);
//   - a put (a node copied into the cache) costs one local access plus the copy's bytes.
//
// A cache of budget 0 holds nothing and costs nothing. Charges are made after the cache's
// mutex is released (Compute may park the caller).

// chargeLocal charges one local access touching n bytes.
func (t *Tree) chargeLocal(n int) { t.lc.Charge(t.m.Runtime(), n) }

// caching reports whether the tree has a cache that holds anything.
func (t *Tree) caching() bool { return t.cache != nil && t.cache.budget > 0 }

// copyBytes is what a cached copy of n holds and a visit reads.
func copyBytes(n *node) int { return nodeHeader + 8*classes[classOf(n.count())] }

// cacheLookup is Cache.lookup, charged.
func (t *Tree) cacheLookup(k uint64) *node {
	n := t.cache.lookup(k)
	t.chargeVisit(n)
	return n
}

// cacheLookupAt is Cache.lookupAt, charged.
func (t *Tree) cacheLookupAt(k uint64, d int) *node {
	n := t.cache.lookupAt(k, d)
	t.chargeVisit(n)
	return n
}

// chargeVisit charges a lookup that returned n (nil: a miss).
func (t *Tree) chargeVisit(n *node) {
	switch {
	case !t.caching():
	case n == nil:
		t.chargeLocal(0)
	default:
		t.chargeLocal(copyBytes(n))
	}
}

// cachePut is Cache.put, charged as the copy's write.
func (t *Tree) cachePut(n *node) {
	t.cache.put(n)
	if t.caching() {
		t.chargeLocal(copyBytes(n))
	}
}
