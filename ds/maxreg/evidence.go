package maxreg

import "github.com/farmem/farmem/farmem"

// evidence is what a handle may count of one replica toward a majority holding a tag: the
// largest tag an answer of the replica showed it to hold, and when the batch that asked was
// built (the client's clock; never later than the answer). An operation counts it only beside
// answers to batches built within Params.Lease of it (holds): answers to batches built
// further apart are never paired, whatever the client stalled in between. So a replica whose
// node restarted empty and was repopulated while the client stalled is never counted as
// holding a tag on an answer of its lost memory beside answers that came after the copy,
// provided the copy reads the other replicas no sooner than the fabric's down timeout, the
// Lease and twice Skew after the loss (every op posted within the lease of the lost
// replica's answer has applied by then: kvstore's Swarm kind waits that long; see
// RepopulateReplica). The caches known and word keep their other uses (the largest tag a
// read returns, the CASes' expectations), where a value from lost memory costs at most a
// failed CAS or a restarted read.
type evidence struct {
	val Tag
	at  farmem.Time
}

// raise records an answer of replica i, to a batch built at at, showing it to hold x or more
// (under mu): known is raised, and the evidence becomes (x, at) if x is at least the current
// one's tag and at no earlier, or the current one is older than the lease at at (otherwise
// the current one stays: counting less is always safe).
func (r *Replicated) raise(i int, x Tag, at farmem.Time) {
	r.known[i] = max(r.known[i], x)
	e := &r.ev[i]
	if (x >= e.val && at >= e.at) || at.Sub(e.at) > r.h.p.Lease {
		e.val, e.at = x, at
	}
}

// holds reports whether replica i counts as holding v or more beside the answers to a batch
// built at ref (under mu): an answer to a batch built within the lease of ref showed it.
func (r *Replicated) holds(i int, v Tag, ref farmem.Time) bool {
	e := r.ev[i]
	d := ref.Sub(e.at)
	return e.val >= v && d <= r.h.p.Lease && d >= -r.h.p.Lease
}
