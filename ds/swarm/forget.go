package swarm

// Forget drops what the handle knows of replica i (the index in the addresses it was opened
// with): the In-n-Out register's caches (maxreg.Replicated.Forget) and every writer's cached
// timestamp-lock word there. For a replica whose memory was lost and rebuilt (see
// Repopulate); the owner goroutine calls it between operations; no verb.
func (r *Register) Forget(i int) {
	if i < 0 || i >= r.n {
		return
	}
	r.rep.Forget(i)
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, s := range r.lockCache {
		s[i] = 0
	}
}
