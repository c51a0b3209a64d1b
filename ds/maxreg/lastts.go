package maxreg

// LastTS returns the largest timestamp this handle's writer (its client, or with per-node
// lanes its compute node) is known to have written: its own writes and what Open found of
// its id in the metadata words and its lane. The owner goroutine calls it (a protocol above checks it before writing: ds/swarm's WriteBelow).
func (r *Replicated) LastTS() uint64 {
	r.mergeLate()
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.ls.last
}
