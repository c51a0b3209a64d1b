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
// With the bitmap codec the scan is exact. With the group codec the holder field is exact but a
// group's count does not say which members hold it, so dead's shared holds are removed only
// when its group's count exceeds what the group's live members hold: that needs every other
// member's cache, which only a process hosting them all has ([Cluster.Recount] on a quiesced
// cluster); Repair reports farmem.ErrInvalid for such a line and leaves its count alone.
func (cl *Client) Repair(ctx context.Context, dead farmem.ComputeID, lines []GCL) (int, error) {
	cd := cl.o.Codec
	_, exact := cd.(Bitmap)
	removed := 0
	var inexact int
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
			continue
		}
		for _, s := range cd.Sharers(w, nil) {
			if s != dead {
				continue
			}
			if !exact {
				inexact++
				break
			}
			if _, err := cl.m.FAA(ctx, g.Latch(), ReleaseSharedDelta(cd, dead)); err != nil {
				return removed, err
			}
			removed++
		}
	}
	if inexact > 0 {
		return removed, fmt.Errorf("selcc: %d lines have a non-empty count in %v's group: the group codec needs Recount: %w", inexact, dead.Node(), farmem.ErrInvalid)
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
