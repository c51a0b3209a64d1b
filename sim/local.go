package sim

import (
	"time"

	"github.com/farmem/farmem/farmem"
	"github.com/farmem/farmem/farmem/transport"
)

// This file prices a client's accesses to its own compute node's region (Model.LocalAccess):
// CPU accesses, except atomics to words a peer has reached with a NIC atomic, which loop
// through the client's own NIC.

// markNIC records that a client of another compute node applied atomic op to a word of n's
// region: from now on the node's own atomics on that word go through its NIC.
func (n *node) markNIC(op *farmem.Op) {
	w := op.Addr.Offset() >> 3
	if n.nicWords == nil {
		n.nicWords = make([]uint64, (len(n.words)+63)/64)
	}
	n.nicWords[w>>6] |= 1 << (w & 63)
}

// nicReached reports whether a peer has reached the word at off with a NIC atomic.
func (n *node) nicReached(off uint64) bool {
	if n.nicWords == nil {
		return false
	}
	w := off >> 3
	return n.nicWords[w>>6]&(1<<(w&63)) != 0
}

// viaNIC reports whether op, to the caller's own region n, goes through the caller's NIC: an
// atomic to a NIC-reached word.
func (n *node) viaNIC(op *farmem.Op) bool {
	return transport.IsAtomic(op.Kind) && n.nicReached(op.Addr.Offset())
}

// localCost is the CPU time of op as a CPU access to the caller's own region: Model.LocalCost
// (the price a structure keeping state in Go memory charges itself through Runtime.Compute),
// its bandwidth term on a Read's or Write's bytes.
func (s *Sim) localCost(op *farmem.Op) time.Duration {
	lc := s.m.LocalCost()
	if op.Kind == farmem.OpRead || op.Kind == farmem.OpWrite {
		return lc.For(len(op.Buf))
	}
	return lc.Access
}
