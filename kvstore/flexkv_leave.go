package kvstore

import (
	"context"
	"errors"
	"fmt"

	"github.com/farmem/farmem/farmem"
)

// ErrLeaving: the compute node was asked to leave (Store.Leave) and takes no partition.
var ErrLeaving = errors.New("kvstore: flexkv: compute node leaving")

// Leave prepares a FlexKV store's compute nodes in this process to go away without failing
// the operations of the processes that stay: each node stops taking partitions (its loads are
// refused, so hand-overs to it roll back) and stops answering the manager (which then leaves
// it out of the assignment), and every partition it proxies is handed back to the memory
// nodes (a pause and resume each, like any hand-over; nothing acknowledged is lost). When one
// of them is the coordinator (the lowest compute node, which grants every proxy's lease and is
// not replaced), every partition is handed back, whoever proxies it, and the coordinator runs
// no hand-over to a proxy any more: the partitions stay on the memory nodes, where clients
// need no coordinator. Call it before Close, after stopping this process's manager. It is a
// no-op (nil) for a store of another kind or the Aceso baseline. A partition that cannot be
// handed back (its hand-over rolled back three times) is reported with ErrHandOver; the node
// still leaves.
//
// Cost: a hand-over (three Calls per compute node) per partition moved.
func (s *Store) Leave(ctx context.Context) error {
	k, ok := s.opts.Index.(*FlexKV)
	if !ok || k.NoProxy {
		return nil
	}
	return s.with(ctx, func(idx Index) error {
		x, ok := idx.(*flexIndex)
		if !ok {
			return nil
		}
		coord, err := coordinator(x.m)
		if err != nil {
			return err
		}
		var nodes []*flexNode
		all := false
		for _, h := range s.opts.Nodes {
			k.mu.Lock()
			n := k.nodes[h]
			k.mu.Unlock()
			if n == nil {
				continue
			}
			n.leaving.Store(true)
			nodes = append(nodes, n)
			all = all || h == coord
		}
		var failed []int
		for p := range x.n.parts {
			moved := false
			for try := 0; try < 3 && !moved; try++ {
				owner := x.n.routeOf(p)
				leave := owner != 0 && (all || isLeaving(owner, nodes))
				if !leave {
					moved = true
					break
				}
				if err := x.handOver(ctx, p, 0); err != nil {
					if ctx.Err() != nil {
						return err
					}
					continue
				}
				moved = true
			}
			if !moved {
				failed = append(failed, p)
			}
		}
		if len(failed) > 0 {
			return fmt.Errorf("kvstore: flexkv: leave: partitions %v not handed back: %w", failed, ErrHandOver)
		}
		return nil
	})
}

func isLeaving(node farmem.NodeID, nodes []*flexNode) bool {
	for _, n := range nodes {
		if n.node == node {
			return true
		}
	}
	return false
}

// routeOf is partition p's owner in this node's active map (0: the memory nodes).
func (n *flexNode) routeOf(p int) farmem.NodeID {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.parts[p].owner
}

// FlexStats returns the FlexKV counters of this process's compute nodes, summed (false for a
// store of another kind).
func (s *Store) FlexStats() (FlexStats, bool) {
	k, ok := s.opts.Index.(*FlexKV)
	if !ok {
		return FlexStats{}, false
	}
	var sum FlexStats
	for _, h := range s.opts.Nodes {
		st, ok := k.Stats(h)
		if !ok {
			continue
		}
		sum.add(st)
	}
	return sum, true
}

// add adds o's counters to s's.
func (s *FlexStats) add(o FlexStats) {
	s.KVHits += o.KVHits
	s.AddrHits += o.AddrHits
	s.AddrStale += o.AddrStale
	s.Misses += o.Misses
	s.Proxied += o.Proxied
	s.Served += o.Served
	s.Commits += o.Commits
	s.Shortcuts += o.Shortcuts
	s.AckTimeouts += o.AckTimeouts
	s.Conflicts += o.Conflicts
	s.Invalidations += o.Invalidations
	s.Refused += o.Refused
	s.HandOvers += o.HandOvers
	s.RolledBack += o.RolledBack
	s.ResumesFailed += o.ResumesFailed
	s.Recoveries += o.Recoveries
	s.Loads += o.Loads
	s.Settled += o.Settled
	s.LeaseRefused += o.LeaseRefused
	s.Remote += o.Remote
}
