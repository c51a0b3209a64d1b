package farmem

import (
	"context"
	"fmt"
)

// ErrNodeLost: the target memory node restarted and lost its memory (it came back with a new
// incarnation). The fabric fences it: every verb to it fails with ErrNodeLost, never with
// ErrOutOfRange and never with a silent zero, until a client acknowledges the loss with
// [Restarts.Adopt]. It wraps ErrNodeDown, so code that treats a down node as "outcome unknown,
// try later" keeps working; errors.Is(err, ErrNodeLost) tells the loss apart.
var ErrNodeLost = fmt.Errorf("farmem: node lost its memory (restarted with a new incarnation): %w", ErrNodeDown)

// NodeState is what a fabric knows of a node's process.
type NodeState uint8

// The states of a node.
const (
	// NodeUp: the node answers, with the incarnation this fabric adopted.
	NodeUp NodeState = iota
	// NodeDown: the node does not answer (crashed, paused, partitioned) as far as this fabric
	// knows. If it comes back with the same incarnation it is up again on its own.
	NodeDown
	// NodeLost: the node came back with a new incarnation: its memory is new, and the fabric
	// fences it (verbs fail with ErrNodeLost) until Adopt.
	NodeLost
)

func (s NodeState) String() string {
	switch s {
	case NodeUp:
		return "up"
	case NodeDown:
		return "down"
	case NodeLost:
		return "lost"
	}
	return fmt.Sprintf("state(%d)", uint8(s))
}

// NodeStatus is one node's incarnation and state as a fabric knows them.
type NodeStatus struct {
	ID    NodeID
	State NodeState
	// Incarnation is the random 64-bit id of the node's process that this fabric adopted (the
	// one its verbs go to); 0 if the fabric never reached the node. Seen is the incarnation the
	// node last answered with: it differs from Incarnation while the node is NodeLost.
	Incarnation, Seen uint64
}

// Restarts is implemented by the fabrics, and the clients (Memory) they open, of transports
// whose memory nodes are processes that can restart and lose their memory (rdma's farmemd
// nodes; farmem/local, which injects restarts as a fault). It is an optional interface, not a
// method of Fabric: a transport whose memory cannot be lost while the fabric lives (cxl's
// regions outlive every process that maps them; sim models crashes, not restarts) has nothing
// to adopt, and every other transport and wrapper keeps compiling. Use [StatusOf], which
// reports "up, incarnation 0" for the others, and a type assertion to reach Adopt.
//
// Status is cheap (no verb, no round trip): allocators call it on their placement path.
type Restarts interface {
	// NodeStatus reports what this fabric knows of node, without a round trip.
	NodeStatus(node NodeID) (NodeStatus, error)
	// Adopt acknowledges that node lost its memory: the fabric takes the node's current
	// incarnation as its own and lifts the fence, so verbs posted from then on reach the node's
	// new (zeroed) memory. A verb posted before (to the old incarnation, or while the node was
	// fenced) never does, even if it arrives after: it fails (ErrNodeLost, or ErrNodeDown for
	// one on a connection to the old process), as a restart ends the old process's connections.
	// Nor does a verb see part of a restart: it applies wholly to the old memory, or not at all.
	// It reaches the node to learn that incarnation (it fails with ErrNodeDown if it cannot);
	// adopting a node that is up and was never lost does nothing. Adopt does not format or
	// repair anything: that is the job of whoever owns the memory (alloc, a store).
	Adopt(ctx context.Context, node NodeID) error
	// Fence makes the fabric treat node as lost from now on, whatever incarnation it answers
	// with: its verbs fail with ErrNodeLost until Adopt. It is for a client that learns of a
	// restart from elsewhere than the fabric (a store whose records name another incarnation
	// than the one this fabric met first). No verb.
	Fence(node NodeID) error
	// Adoptions counts the adoptions (of any node) that changed this fabric's view: code that
	// caches far pointers (a directory, a cursor) re-validates its caches when it changes,
	// since memory they named may now be re-used. One atomic load.
	Adoptions() uint64
}

// StatusOf returns x's NodeStatus of node if x implements Restarts, and otherwise "up,
// incarnation 0".
func StatusOf(x any, node NodeID) NodeStatus {
	if r, ok := x.(Restarts); ok {
		if st, err := r.NodeStatus(node); err == nil {
			return st
		}
	}
	return NodeStatus{ID: node, State: NodeUp}
}
