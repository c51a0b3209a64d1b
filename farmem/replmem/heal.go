package replmem

import (
	"context"
	"slices"

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

// missed records, for every replica the round ts left out or that failed it (ok), the ranges of
// the writes of seg it carried: the replica holds them at version 0 (see catchUp).
func (r *Memory) missed(b *farmem.Batch, seg []int, ts []int, ok []bool) {
	for i := range r.o.Nodes {
		k := slices.Index(ts, i)
		if k >= 0 && ok[k] {
			continue
		}
		for _, j := range seg {
			if op := &b.Ops[j]; op.Kind == farmem.OpWrite && len(op.Buf) > 0 {
				r.hs[i].addMissed(span{op.Addr, len(op.Buf)})
			}
		}
	}
}

// catchUp copies to a replica one range it missed (a write laid it out while the replica was
// suspected or failed), if its Health holds one of this memory's and the replica is not
// suspected: one range per batch, so that a replica back from a pause or a partition regains
// what it missed while the handles keep working, at three round trips per range.
func (r *Memory) catchUp(ctx context.Context) {
	for i, n := range r.hs {
		if n.missedN.Load() == 0 || n.suspected.Load() {
			continue
		}
		if sp, ok := n.takeMissed(r.o.Virtual); ok {
			r.heal(ctx, r.o.Nodes[i], sp.a, sp.n)
			return
		}
	}
}

// heal copies the logical range [a, a+n) to replica node where it lacks the latest version
// (Repopulate: three round trips), after a read found a hole there or a write missed it. It is
// best effort: an error leaves the hole to the next read of it.
func (r *Memory) heal(ctx context.Context, node farmem.NodeID, a farmem.Addr, n int) {
	rep, err := r.Repopulate(ctx, node, a, n)
	r.stats.Healed += rep.Copied
	if err == nil {
		r.stats.Heals++
	}
}
