package replmem

import (
	"context"

	"github.com/farmem/farmem/farmem"
)

// holes returns the positions in ts of the answering replicas whose copy of read k of a round
// has a hole: a word free at version 0 there (never written on that replica) that the agreeing
// replica ref holds at a version above 0. Such a replica missed the write that laid the word
// out (it was suspected, cut off or paused at the time, or restarted empty and is not
// repopulated yet). A copy at version 0 counts in no majority, so while it lasts the word
// lives on f+1 replicas only and one more crash makes it unreadable; an older version above 0
// is not a hole (it votes, and the next atomic or repairing read of the word brings it up).
func holes(ts []int, ok []bool, bufs [][]readBufs, ref, k int) []int {
	var out []int
	rb := bufs[ref][k]
	for q := range ts {
		if q == ref || !ok[q] {
			continue
		}
		qb := bufs[q][k]
		for w := 0; w < len(rb.v)/stride; w++ {
			o := stride*w + ctlOff
			if le.Uint64(rb.c1[o:]) != 0 && le.Uint64(qb.c1[o:]) == 0 && le.Uint64(qb.c3[o:]) == 0 {
				out = append(out, q)
				break
			}
		}
	}
	return out
}

// heal copies the logical range [a, a+n) to replica node where it lacks the latest version
// (Repopulate: three round trips), after a read found a hole there. It is best effort: the
// read already has its answer, and an error leaves the hole to the next read of it.
func (r *Memory) heal(ctx context.Context, node farmem.NodeID, a farmem.Addr, n int) {
	rep, err := r.Repopulate(ctx, node, a, n)
	r.stats.Healed += rep.Copied
	if err == nil {
		r.stats.Heals++
	}
}
