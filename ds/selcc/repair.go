package selcc

import (
	"context"
	"fmt"

	"github.com/farmem/farmem/farmem"
)

// Repair is the recovery of a compute node that died holding latches (a repair scan, §6.5):
// for each of lines it removes dead's part of the latch word, with one FAA per hold found
// (reading the words costs one round trip per line). The other nodes' transitions commute with
// these FAAs, so Repair runs while the cluster serves. It returns the number of holds removed.
//
// Only a node that is really gone may be repaired (fenced by the operator or the transport):
// clearing the bits of a live node breaks coherence. What dead held dirty is lost (see
// Durability); a peer that was waiting for dead's answer fails with farmem.ErrNodeDown after
// Options.ReplyTimeout and may retry after the repair.
//
// With the bitmap codec the scan is exact and costs one FAA per hold. With the group codec the
// holder field is exact, but a group's count does not say which members hold it: for a line
// whose count in dead's group is not zero, Repair runs a fenced census of the group's live
// members (each gives its own share of the line up and adds none until the census ends; one
// message and one answer each, plus a READ), after which the count is dead's alone, and
// removes it. That is exact too: it never removes a live member's count, and a member that
// holds nothing never decrements. It fails with farmem.ErrNodeDown if another member of the
// group does not answer (repair it as well), with ErrBusy if the members kept the line busy at
// every census (the word is then unchanged: call again), and with farmem.ErrInvalid if the
// census finds more than one dead count, or at once on a cluster opened with
// Options.EagerForward (its words may not name every holder). One Repair at a time per line. [Cluster.Recount]
// remains the check (and repair) of a quiesced cluster hosted in one process.
func (cl *Client) Repair(ctx context.Context, dead farmem.ComputeID, lines []GCL) (int, error) {
	if cl.o.EagerForward {
		return 0, fmt.Errorf("selcc: repair of %v: a cluster with EagerForward may hold lines its words do not name: %w", dead.Node(), farmem.ErrInvalid)
	}
	cd := cl.o.Codec
	_, exact := cd.(Bitmap)
	removed := 0
	for _, g := range lines {
		w, err := cl.word(ctx, g.Latch())
		if err != nil {
			return removed, err
		}
		if cd.Holder(w) == dead {
			if _, err := cl.m.FAA(ctx, g.Latch(), ReleaseExclusiveDelta(cd, dead)); err != nil {
				return removed, err
			}
			removed++
			w += ReleaseExclusiveDelta(cd, dead)
			// It may have had a share attempt under way too (before its undo): go on.
		}
		if !exact {
			if gc, ok := cd.(Groups); ok && gc.Count(w, int(uint64(dead-1)%groupCount)) == 0 {
				continue
			}
			ok, err := cl.repairGroup(ctx, dead, g)
			if err != nil {
				return removed, err
			}
			if ok {
				removed++
			}
			continue
		}
		if w&cd.Shared(dead) != 0 {
			if _, err := cl.m.FAA(ctx, g.Latch(), ReleaseSharedDelta(cd, dead)); err != nil {
				return removed, err
			}
			removed++
		}
	}
	return removed, nil
}

// Recount sets each line's latch word to what the caches of the nodes this process hosts hold
// (their memos), with one CAS per line whose word differs, through client m. It is the repair
// of the group codec and a check of any codec: it is only correct on a quiesced cluster (no
// guard held, no acquisition or invalidation under way) whose compute nodes are all hosted
// here, and it returns the number of words it changed.
func (c *Cluster) Recount(ctx context.Context, m farmem.Memory, lines []GCL) (int, error) {
	cd := c.opts.Codec
	want := make(map[GCL]uint64, len(lines))
	for _, id := range c.set.Nodes() {
		n, _ := c.set.Get(id)
		n.mu.Lock()
		for g, f := range n.table {
			switch f.memo {
			case memoS:
				want[g] += cd.Shared(n.id)
			case memoM:
				want[g] += cd.Exclusive(n.id)
			}
		}
		n.mu.Unlock()
	}
	changed := 0
	for _, g := range lines {
		var b [8]byte
		if err := m.Read(ctx, g.Latch(), b[:]); err != nil {
			return changed, err
		}
		w := leUint64(b[:])
		if w == want[g] {
			continue
		}
		prev, err := m.CAS(ctx, g.Latch(), w, want[g])
		if err != nil {
			return changed, err
		}
		if prev != w {
			return changed, fmt.Errorf("selcc: recount of %v: the word changed under it (the cluster is not quiesced): %w", g, farmem.ErrInvalid)
		}
		changed++
	}
	return changed, nil
}

func leUint64(b []byte) uint64 {
	var v uint64
	for i := range 8 {
		v |= uint64(b[i]) << (8 * i)
	}
	return v
}
