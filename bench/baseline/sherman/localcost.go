package sherman

// The cache's copies live in Go memory, which the simulator does not time, while a cache in a
// compute node's region (ds/selcc's frames) pays for every access with a verb to it. So that
// the baselines and the systems they are compared with pay one price for the same bytes, the
// tree charges its cache accesses through Runtime.Compute at the fabric's localcost.Price
// (zero on real transports, where the work is real), under the rule ds/hybrid and
// bench/baseline/smart follow too:
//
//   - a lookup costs one local access, plus the bytes of the copy it returns (a hit reads the
//     node's page: NodeSize bytes, as SELCC's B-link tree reads a whole line from its frame);
//   - a put (a node's page copied into the cache) costs one local access plus the page's bytes;
//   - a scan's walk of the cached parents costs one lookup plus the bytes of each copy it uses.
//
// Charges are made after the cache's mutex is released (Compute may park the caller).

// chargeLocal charges one local access touching n bytes.
func (t *Tree) chargeLocal(n int) { t.lc.Charge(t.m.Runtime(), n) }

// chargeCopies charges one local access plus the pages of copies.
func (t *Tree) chargeCopies(copies []*node) {
	n := 0
	for _, c := range copies {
		n += len(c.raw)
	}
	t.chargeLocal(n)
}

// caching reports whether the tree has a cache that holds anything (a budget of 0 caches
// nothing, and costs nothing).
func (t *Tree) caching() bool { return t.cache != nil && t.cache.budget > 0 }
