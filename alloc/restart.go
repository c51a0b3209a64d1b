package alloc

import (
	"context"
	"fmt"
	"slices"

	"github.com/farmem/farmem/farmem"
)

// Restarted memory nodes (see farmem.Restarts). A memory node that restarts loses its memory:
// its header, its bump word and every block on it. The fabric fences it (verbs fail with
// farmem.ErrNodeLost) until someone adopts it; then its memory is zero until it is formatted
// again (Reformat). An allocator follows, with no verb and nothing to call:
//
//   - it remembers the incarnation of each node it allocates on (0 on transports without
//     restarts);
//   - placement skips a node the fabric reports lost: Alloc takes neither a free block nor a
//     new chunk there, and goes on to the next node, as when a node is full; AllocOn fails with
//     an error wrapping farmem.ErrNodeLost; what the allocator held there is dropped at once,
//     so Close's handover record neither names it nor is written into it; New opens over a
//     lost node (its layout taken from the home header) without reading it;
//   - once the node is adopted (a new incarnation, state up), the allocator drops everything it
//     held there — its current chunk, free lists, spare chunks, retired blocks and what a
//     handover gave it — since those offsets name the lost memory, and starts afresh from the
//     node's bump word once the node is formatted again (one header Read per allocation until
//     it is; Reformat formats it). A retired block of the old incarnation is never freed into
//     the new one.
//
// On a transport whose Memory does not implement farmem.Restarts (cxl, sim), farmem.StatusOf
// reports every node up at incarnation 0 for ever, so none of this can happen: placement then
// asks for no status at all (Allocator.restartable).
//
// What this does not cover: a handover record written before the restart and adopted by a New
// after it may still name blocks of the old incarnation (the record does not carry
// incarnations); and without replicated metadata the home node is a single point of failure:
// its restart loses the epoch table, the handover table and the symmetric bump word, which
// nothing rebuilds (with Header.Replicas > 1, Reformat restores them from its peers).

// restartState is what an allocator knows of its nodes' incarnations, by node id.
type restartState struct {
	inc []uint64
	// unchecked marks nodes adopted since the allocator last read their header: they take no
	// chunk until a header formatted for this allocator's home is found there.
	unchecked []bool
	// dropped marks lost nodes whose blocks the allocator already forgot.
	dropped []bool
}

func (a *Allocator) initRestarts() {
	a.restarts.inc = make([]uint64, len(a.arenas))
	a.restarts.unchecked = make([]bool, len(a.arenas))
	a.restarts.dropped = make([]bool, len(a.arenas))
	for _, n := range a.nodes {
		a.restarts.inc[n] = farmem.StatusOf(a.m, n).Incarnation
	}
}

// nodeUsable reports whether the allocator may place blocks on node n now: false while the
// fabric reports n lost. When n was adopted with a new incarnation since the allocator last
// looked, it first forgets what it held there.
func (a *Allocator) nodeUsable(n farmem.NodeID) bool {
	if int(n) >= len(a.restarts.inc) {
		return true
	}
	st := farmem.StatusOf(a.m, n)
	if st.State == farmem.NodeLost {
		// What the allocator holds there is gone: drop it now, so that no handover record
		// names it or is written into it.
		if !a.restarts.dropped[n] {
			a.forgetNode(n)
			a.restarts.dropped[n] = true
		}
		return false
	}
	a.restarts.dropped[n] = false
	if st.Incarnation != a.restarts.inc[n] {
		a.forgetNode(n)
		a.restarts.inc[n] = st.Incarnation
		a.restarts.unchecked[n] = true
	}
	return true
}

// headerReady reports whether node n, once adopted, has been formatted again (Reformat): until
// then its bump word is not one to claim chunks with. One Read per call while it is not.
func (a *Allocator) headerReady(ctx context.Context, n farmem.NodeID) bool {
	if int(n) >= len(a.restarts.unchecked) || !a.restarts.unchecked[n] {
		return true
	}
	h, err := Open(ctx, a.m, n)
	if err != nil || h.Home != a.home {
		return false
	}
	a.restarts.unchecked[n] = false
	return true
}

// checkNodes runs nodeUsable on every node, so that what the allocator holds names only live
// memory (before a handover).
func (a *Allocator) checkNodes() {
	for _, n := range a.nodes {
		a.nodeUsable(n)
	}
}

// forgetNode drops everything the allocator holds on node n.
func (a *Allocator) forgetNode(n farmem.NodeID) {
	old := a.arenas[n]
	if old == nil {
		return
	}
	a.arenas[n] = newArena(old.name, false, old.bump, old.base, old.limit, old.chunk, old.st)
	a.arenas[n].forget = a.forgetter(a.arenas[n])
	a.ep.retired = slices.DeleteFunc(a.ep.retired, func(r retired) bool { return !r.sym && r.node == n })
	a.foreign = slices.DeleteFunc(a.foreign, func(s arenaState) bool { return s.node == n })
	a.foreignRetired = slices.DeleteFunc(a.foreignRetired, func(r retiredState) bool { return r.node == n })
	a.stats.Forgotten++
}

// lostErr returns the error of an allocation on a lost node.
func lostErr(n farmem.NodeID, st farmem.NodeStatus) error {
	if st.State != farmem.NodeLost {
		return fmt.Errorf("alloc: %v was adopted after a restart and is not formatted again yet: %w", n, farmem.ErrNodeLost)
	}
	return fmt.Errorf("alloc: %v restarted (incarnation %#x, this fabric holds %#x) and is fenced until adopted: %w", n, st.Seen, st.Incarnation, farmem.ErrNodeLost)
}

// splitLost separates the nodes the fabric reports lost from the others.
func splitLost(m farmem.Memory, nodes []farmem.NodeID) (readable, lost []farmem.NodeID) {
	for _, n := range nodes {
		if farmem.StatusOf(m, n).State == farmem.NodeLost {
			lost = append(lost, n)
		} else {
			readable = append(readable, n)
		}
	}
	return readable, lost
}

// layoutLost fills in the headers of lost nodes from the home header's parameters: the layout
// they were formatted with and will be formatted with again (Reformat). A lost home node
// cannot be replaced.
func layoutLost(m farmem.Memory, hdrs map[farmem.NodeID]Header, hh Header, lost []farmem.NodeID) error {
	for _, n := range lost {
		if _, ok := hdrs[n]; ok {
			continue
		}
		if n == hh.Home && hh.Replicas == 1 {
			return fmt.Errorf("alloc: the home node %v lost its memory: %w", n, farmem.ErrNodeLost)
		}
		info, ok := m.Topology().Node(n)
		if !ok {
			return fmt.Errorf("alloc: %v is not in the topology: %w", n, farmem.ErrInvalid)
		}
		h, err := layoutOf(n, info.Size, hh.ChunkSize, hh.MaxClients, hh.SymSize, hh.Home, hh.Replicas)
		if err != nil {
			return err
		}
		hdrs[n] = h
	}
	return nil
}
