// Package nodestate gives a structure state of its own on each compute node a process hosts: a
// cache, a proxy's partitions, a directory (SELCC's frames, Dolphin's radix cache, FlexKV's
// proxied index), shared by every client of that node and serving peers' Calls and one-way
// messages (Memory.Send) through handlers registered in the structure's block of method ids
// (farmem.MethodOwner). It is the one mechanism for this: kvstore.Open uses it for index kinds
// that implement kvstore.NodeKind, and a structure used outside kvstore calls [Open] itself.
//
// # Use
//
// Open calls the structure's opener once per compute node, in ascending order, each with an
// [Env]: the fabric, the node, a client of that node that the state may keep for its own
// verbs (its background work, or setting up its part of the node's region), and the
// structure's method block, through which [Env.Handle] registers handlers. Handlers run on the
// node's handler clients (their m argument), not on Env.Memory. The structure's handles then
// find their node's state with [Set.Get] (by their Memory's Info().Node). [Set.Close] closes
// every state, in reverse order, removes every handler registered through Env.Handle and
// closes the Env clients; it is idempotent. If an opener fails, Open unwinds in the same way
// what it had opened (the failing node's handlers and client included) and returns the error.
//
// A standalone structure follows the same steps:
//
//	set, err := nodestate.Open(ctx, fabric, fabric.Hosted(), farmem.OwnerSELCC,
//		func(ctx context.Context, env *nodestate.Env) (*cache, error) {
//			c := newCache(env.Node, env.Memory)
//			if err := env.Handle(invalidate, c.onInvalidate); err != nil {
//				return nil, err
//			}
//			return c, nil
//		})
//	...
//	st, _ := set.Get(m.Info().Node) // in each handle opened on client m
//	...
//	defer set.Close()
//
// Because Fabric.Handle refuses a method already registered on a node, two instances of one
// structure cannot hold node state on the same node of one fabric at once: the second Open
// fails with farmem.ErrInvalid naming the method, until the first Set is closed.
//
// # Rules and costs
//
// State follows the farmem runtime's rules: time, goroutines and randomness from the fabric's
// Runtime, no Go lock held across a verb or a Wait. Open costs one client per node (opened
// with Fabric.Open, so it takes an application client slot) plus what the openers do; Get is a
// map lookup with no lock (the set does not change between Open and Close).
package nodestate

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"

	"github.com/farmem/farmem/farmem"
)

// State is one compute node's state of a structure.
type State interface {
	// Close releases the state. Set.Close calls it once, before it removes the node's
	// handlers and closes the node's Env client.
	Close() error
}

// Env is what an opener is handed for one compute node.
type Env struct {
	// Fabric is the fabric the node belongs to.
	Fabric farmem.Fabric
	// Node is the compute node.
	Node farmem.NodeID
	// Memory is a client of Node that the state may keep for its own verbs until its Close.
	// Like any Memory it belongs to one goroutine at a time; handlers get clients of their own.
	Memory farmem.Memory
	// Methods is the structure's block of method ids.
	Methods farmem.MethodOwner

	methods []uint16 // registered through Handle, removed by Close
}

// Handle registers h on the node for method n of the structure's block (Methods.Method(n)),
// to be removed when the set closes. It fails as Fabric.Handle does, with farmem.ErrInvalid if
// the method already has a handler on the node.
func (e *Env) Handle(n uint8, h farmem.Handler) error {
	if h == nil {
		return fmt.Errorf("nodestate: nil handler for %v.%d: %w", e.Methods, n, farmem.ErrInvalid)
	}
	m := e.Methods.Method(n)
	if err := e.Fabric.Handle(e.Node, m, h); err != nil {
		return fmt.Errorf("nodestate: %v: %w", e.Node, err)
	}
	e.methods = append(e.methods, m)
	return nil
}

// release removes e's handlers and closes its client.
func (e *Env) release() error {
	var errs []error
	for _, m := range slices.Backward(e.methods) {
		if err := e.Fabric.Handle(e.Node, m, nil); err != nil && !errors.Is(err, farmem.ErrClosed) {
			errs = append(errs, err)
		}
	}
	e.methods = nil
	if e.Memory != nil {
		if err := e.Memory.Close(); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// Opener opens one node's state.
type Opener[S State] func(ctx context.Context, env *Env) (S, error)

// Set is one structure's states on the compute nodes of one fabric.
type Set[S State] struct {
	nodes  []farmem.NodeID // ascending
	states map[farmem.NodeID]S
	envs   map[farmem.NodeID]*Env

	closed atomic.Bool
}

// Open opens a state on each compute node of nodes (memory nodes and repeats are skipped) with
// open, whose handlers go in owner's block: see the package doc. It fails with
// farmem.ErrInvalid if nodes names no compute node.
func Open[S State](ctx context.Context, fabric farmem.Fabric, nodes []farmem.NodeID, owner farmem.MethodOwner, open Opener[S]) (*Set[S], error) {
	var ids []farmem.NodeID
	for _, n := range nodes {
		if n.IsCompute() && !slices.Contains(ids, n) {
			ids = append(ids, n)
		}
	}
	slices.Sort(ids)
	if len(ids) == 0 {
		return nil, fmt.Errorf("nodestate: no compute node to open state on: %w", farmem.ErrInvalid)
	}
	s := &Set[S]{states: make(map[farmem.NodeID]S, len(ids)), envs: make(map[farmem.NodeID]*Env, len(ids))}
	for _, n := range ids {
		m, err := fabric.Open(ctx, n)
		if err != nil {
			return nil, errors.Join(fmt.Errorf("nodestate: a client of %v: %w", n, err), s.Close())
		}
		env := &Env{Fabric: fabric, Node: n, Memory: m, Methods: owner}
		st, err := open(ctx, env)
		if err != nil {
			return nil, errors.Join(fmt.Errorf("nodestate: open state on %v: %w", n, err), env.release(), s.Close())
		}
		s.nodes = append(s.nodes, n)
		s.states[n] = st
		s.envs[n] = env
	}
	return s, nil
}

// Get returns node's state, if the set has one there.
func (s *Set[S]) Get(node farmem.NodeID) (S, bool) {
	st, ok := s.states[node]
	return st, ok
}

// Nodes returns the nodes the set holds state on, ascending.
func (s *Set[S]) Nodes() []farmem.NodeID { return slices.Clone(s.nodes) }

// Close closes every node's state in reverse order, then removes its handlers and closes its
// Env client; each step runs even if an earlier one failed, and the errors are joined. It is
// idempotent: a later call does nothing and returns nil. No lock is held while states close
// (they may issue verbs).
func (s *Set[S]) Close() error {
	if s.closed.Swap(true) {
		return nil
	}
	var errs []error
	for _, n := range slices.Backward(s.nodes) {
		if err := s.states[n].Close(); err != nil {
			errs = append(errs, fmt.Errorf("nodestate: close state on %v: %w", n, err))
		}
		if err := s.envs[n].release(); err != nil {
			errs = append(errs, fmt.Errorf("nodestate: release %v: %w", n, err))
		}
	}
	return errors.Join(errs...)
}
