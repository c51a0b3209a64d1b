package kvstore

import (
	"context"
	"fmt"

	"github.com/farmem/farmem/farmem"
	"github.com/farmem/farmem/farmem/nodestate"
)

// NodeKind is an IndexKind with state of its own on each compute node (a cache shared by the
// node's clients, a proxy, a directory) that serves peers through Calls and one-way messages.
// Open calls OpenNode once per compute node the fabric hosts, in ascending order, before it
// opens any handle, through package farmem/nodestate (the same mechanism a structure outside
// the store uses); each handle then finds its node's state in IndexEnv.Node. The store's Close
// closes the states, after every client is released, and removes the handlers they registered
// with env.Handle; an OpenNode that fails makes Open fail, closing the states already opened.
//
// Handlers go in the kind's own block of method ids (Methods), so they cannot collide with
// another structure's; since a node refuses a method registered twice, two stores of a
// NodeKind cannot be open at once on the same fabric (the second Open fails with
// farmem.ErrInvalid naming the method).
type NodeKind interface {
	IndexKind
	// Methods is the block of method ids the kind's node state registers handlers in.
	Methods() farmem.MethodOwner
	// OpenNode opens the kind's state on env.Node. env.Memory is a client of that node the
	// state may keep until its Close; handlers registered with env.Handle run on the node's
	// handler clients.
	OpenNode(ctx context.Context, env *nodestate.Env) (nodestate.State, error)
}

// openNodes opens the node states of a NodeKind index on every compute node the fabric hosts.
func (s *Store) openNodes(ctx context.Context) error {
	k, ok := s.opts.Index.(NodeKind)
	if !ok {
		return nil
	}
	set, err := nodestate.Open(ctx, s.fabric, s.fabric.Hosted(), k.Methods(), nodestate.Opener[nodestate.State](k.OpenNode))
	if err != nil {
		return fmt.Errorf("kvstore: index %s: %w", k.Name(), err)
	}
	s.nodes = set
	return nil
}

// nodeState returns node's state of a NodeKind index, or nil.
func (s *Store) nodeState(node farmem.NodeID) nodestate.State {
	if s.nodes == nil {
		return nil
	}
	st, _ := s.nodes.Get(node)
	return st
}

// closeNodes closes the node states, once.
func (s *Store) closeNodes() error {
	if s.nodes == nil {
		return nil
	}
	if err := s.nodes.Close(); err != nil {
		return fmt.Errorf("kvstore: close node state: %w", err)
	}
	return nil
}
