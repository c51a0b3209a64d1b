package sim

import "github.com/farmem/farmem/farmem/localcost"

// LocalCost returns the model's price of a CPU access to a compute node's own region (the
// price of a verb to it, as localCost charges it): LocalAccess plus the bytes at
// LocalBandwidth, or OpCPU with no bandwidth term when LocalAccess is zero.
func (m Model) LocalCost() localcost.Price {
	if m.LocalAccess == 0 {
		return localcost.Price{Access: m.OpCPU}
	}
	return localcost.Price{Access: m.LocalAccess, Bandwidth: m.LocalBandwidth}
}

// LocalCost implements localcost.Pricer: a structure keeping compute-side state in Go
// memory (a cache of node copies) charges its accesses to it at this price through
// Runtime.Compute, as a verb to the client's own region is charged.
func (c *client) LocalCost() localcost.Price { return c.s.m.LocalCost() }
