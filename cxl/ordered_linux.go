package cxl

// ReadsInAddressOrder implements transport.OrderedReader: a Read copies the mapping word by word
// in ascending order (assembly MOVs, or sync/atomic loads in the pure-Go build and for short
// or unaligned accesses), which x86-TSO keeps in order with each other, and a batch's Writes
// are program-ordered stores. It is false under the Uncached policy, whose lines are fetched
// again after a flush in no promised order.
func (c *client) ReadsInAddressOrder() bool { return !c.f.uncached }
