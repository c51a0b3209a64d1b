package maxreg

// Forget drops what the handle knows of replica i (the index in Addrs): the largest tag it
// is known to hold, the last value seen in this client's metadata word there and the CAS
// believed in flight, as if the handle had never heard from it. It is for a replica whose
// memory was lost and rebuilt (a node that restarted empty and was repopulated, see
// RepopulateReplica): what the handle knew of the lost memory is no lower bound of the new
// one, and a handle that kept it could count the replica as holding a tag it lacks. The next
// operation learns the replica again from its answers (a CAS of this client's word there may
// fail once, one more round). The owner goroutine calls it between operations; no verb.
func (r *Replicated) Forget(i int) {
	if i < 0 || i >= r.n {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.known[i], r.ls.word[i], r.ls.posted[i] = 0, 0, 0
	r.ev[i] = evidence{}
	r.ls.unsure[i] = true
}
