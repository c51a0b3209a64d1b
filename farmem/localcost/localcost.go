// Package localcost prices a compute node's CPU accesses to its own memory on a fabric that does
// not run them in real time (the simulator), so that a structure keeping state in Go memory (a
// cache of node copies) charges itself what the same bytes cost in the node's region.
package localcost

import (
	"time"

	"github.com/farmem/farmem/farmem"
)

// Price is the price of one CPU access to a compute node's own memory: Access per access
// plus the bytes touched at Bandwidth bytes per second (0: no bandwidth term). It is what a
// fabric that does not run its clients' CPU work in real time (the simulator) charges a verb to
// the caller's own region, and what a structure keeping compute-side state in Go memory (a cache
// of node copies) must charge itself for the same bytes, so that a cache in Go memory and a cache
// in the node's region (read with verbs) cost alike. The zero Price charges nothing.
type Price struct {
	Access    time.Duration
	Bandwidth float64
}

// For returns the price of one access touching n bytes.
func (c Price) For(n int) time.Duration {
	d := c.Access
	if c.Bandwidth > 0 && n > 0 {
		d += time.Duration(float64(n)*1e9/c.Bandwidth + 0.5)
	}
	return d
}

// Charge accounts one access touching n bytes to rt's caller (Runtime.Compute), when it
// costs anything. Call it outside any Go lock: on the simulator it parks the caller.
func (c Price) Charge(rt farmem.Runtime, n int) {
	if d := c.For(n); d > 0 {
		rt.Compute(d)
	}
}

// Pricer is implemented by a Memory whose fabric prices its client's CPU accesses to its
// own region instead of running them in real time (the simulator): LocalCost is that price.
// Real transports do not implement it; the work a structure does in Go memory there is real
// and takes its real time.
type Pricer interface {
	LocalCost() Price
}

// Of returns m's Price if m is a Pricer, and the zero Price otherwise.
// A structure charges an access to its Go-memory state with c.Charge(m.Runtime(), bytes).
func Of(m farmem.Memory) Price {
	if p, ok := m.(Pricer); ok {
		return p.LocalCost()
	}
	return Price{}
}
