package farmem

import "time"

// LocalCost is the price of one CPU access to a compute node's own memory: Access per access
// plus the bytes touched at Bandwidth bytes per second (0: no bandwidth term). It is what a
// fabric that does not run its clients' CPU work in real time (the simulator) charges a verb to
// the caller's own region, and what a structure keeping compute-side state in Go memory (a cache
// of node copies) must charge itself for the same bytes, so that a cache in Go memory and a cache
// in the node's region (read with verbs) cost alike. The zero LocalCost charges nothing.
type LocalCost struct {
	Access    time.Duration
	Bandwidth float64
}

// Of returns the price of one access touching n bytes.
func (c LocalCost) Of(n int) time.Duration {
	d := c.Access
	if c.Bandwidth > 0 && n > 0 {
		d += time.Duration(float64(n)*1e9/c.Bandwidth + 0.5)
	}
	return d
}

// Charge accounts one access touching n bytes to rt's caller (Runtime.Compute), when it
// costs anything. Call it outside any Go lock: on the simulator it parks the caller.
func (c LocalCost) Charge(rt Runtime, n int) {
	if d := c.Of(n); d > 0 {
		rt.Compute(d)
	}
}

// LocalPricer is implemented by a Memory whose fabric prices its client's CPU accesses to its
// own region instead of running them in real time (the simulator): LocalCost is that price.
// Real transports do not implement it; the work a structure does in Go memory there is real
// and takes its real time.
type LocalPricer interface {
	LocalCost() LocalCost
}

// LocalCostOf returns m's LocalCost if m is a LocalPricer, and the zero LocalCost otherwise.
// A structure charges an access to its Go-memory state with c.Charge(m.Runtime(), bytes).
func LocalCostOf(m Memory) LocalCost {
	if p, ok := m.(LocalPricer); ok {
		return p.LocalCost()
	}
	return LocalCost{}
}
