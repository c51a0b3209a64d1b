package transport

import (
	"fmt"
	"slices"
	"sync"

	"github.com/farmem/farmem/farmem"
)

// Registry is a fabric's table of its open clients: it hands out client slots and ids, finds a
// client by id (for faults and Calls), lists the clients to close or crash, and keeps the
// counts of closed clients so that the fabric's Stats still include them. A client's id
// encodes its compute node and slot ([ClientIDOf]), so the id map is the slot table. C is the
// transport's client type. All methods are safe for concurrent use; each takes one mutex.
type Registry[C comparable] struct {
	topo     farmem.Topology // ClientsPerNode and SliceSize only
	handlers int

	mu     sync.Mutex
	live   map[farmem.ClientID]entry[C]
	gone   farmem.Stats // the counts of the clients released so far
	closed bool
}

type entry[C comparable] struct {
	c   C
	ctr *Counters
}

// NewRegistry returns the registry of a fabric whose compute nodes have clientsPerNode slots
// of sliceSize bytes each, the top handlers of them reserved for Call handler clients.
func NewRegistry[C comparable](clientsPerNode int, sliceSize uint64, handlers int) *Registry[C] {
	return &Registry[C]{
		topo:     farmem.Topology{ClientsPerNode: clientsPerNode, SliceSize: sliceSize},
		handlers: handlers,
		live:     make(map[farmem.ClientID]entry[C]),
	}
}

// Open claims a slot of compute node node and registers the client newClient builds for it
// from the slot's ClientInfo, with the Counters its Stats come from. slot < 0 takes the lowest
// free application slot (those below ClientsPerNode less the handler slots); a handler client
// names its slot. It fails with ErrClosed once the registry is closed and ErrNoSpace when no
// slot is free. newClient runs under the registry's lock: it must not block or call back. The
// caller clears the client's slice.
func (r *Registry[C]) Open(node farmem.NodeID, slot int, newClient func(farmem.ClientInfo) (C, *Counters)) (C, error) {
	var zero C
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return zero, fmt.Errorf("farmem: fabric of %v: %w", node, farmem.ErrClosed)
	}
	c := node.ComputeID()
	if slot < 0 {
		limit := r.topo.ClientsPerNode - r.handlers
		for i := range limit {
			if id, err := ClientIDOf(&r.topo, c, i); err == nil && !r.has(id) {
				slot = i
				break
			}
		}
		if slot < 0 {
			return zero, fmt.Errorf("farmem: all %d client slots of %v are taken: %w", limit, node, farmem.ErrNoSpace)
		}
	}
	info, err := ClientInfo(&r.topo, node, slot)
	if err != nil {
		return zero, err
	}
	if r.has(info.ID) {
		return zero, fmt.Errorf("farmem: client slot %d of %v is taken: %w", slot, node, farmem.ErrNoSpace)
	}
	cl, ctr := newClient(info)
	r.live[info.ID] = entry[C]{cl, ctr}
	return cl, nil
}

func (r *Registry[C]) has(id farmem.ClientID) bool {
	_, ok := r.live[id]
	return ok
}

// Release frees client c's slot and id, if c still holds them, and adds its counts to those
// of the closed clients. A client's Close calls it; it is idempotent.
func (r *Registry[C]) Release(id farmem.ClientID, c C) {
	r.mu.Lock()
	if e, ok := r.live[id]; ok && e.c == c {
		delete(r.live, id)
		r.gone = r.gone.Add(e.ctr.Snapshot())
	}
	r.mu.Unlock()
}

// Get returns the open client with id.
func (r *Registry[C]) Get(id farmem.ClientID) (C, bool) {
	r.mu.Lock()
	e, ok := r.live[id]
	r.mu.Unlock()
	return e.c, ok
}

// Clients returns the open clients, by ascending id.
func (r *Registry[C]) Clients() []C {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.clientsLocked()
}

func (r *Registry[C]) clientsLocked() []C {
	ids := make([]farmem.ClientID, 0, len(r.live))
	for id := range r.live {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	cs := make([]C, len(ids))
	for i, id := range ids {
		cs[i] = r.live[id].c
	}
	return cs
}

// Close closes the registry to new clients and returns the open ones, by ascending id, for
// the fabric's Close to close; first is false, and the list empty, when it was closed already.
func (r *Registry[C]) Close() (cs []C, first bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return nil, false
	}
	r.closed = true
	return r.clientsLocked(), true
}

// Closed reports whether Close was called.
func (r *Registry[C]) Closed() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.closed
}

// Released returns the summed counts of the clients released so far.
func (r *Registry[C]) Released() farmem.Stats {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.gone
}

// Stats is the fabric's farmem.Stats: the sum of every client's, closed ones included.
func (r *Registry[C]) Stats() farmem.Stats {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := r.gone
	for _, e := range r.live {
		s = s.Add(e.ctr.Snapshot())
	}
	return s
}
