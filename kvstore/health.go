package kvstore

import (
	"github.com/farmem/farmem/farmem"
	"github.com/farmem/farmem/farmem/replmem"
)

// healthOf returns the replica suspicion the store's index handles on compute node share
// (IndexEnv.Health), made on first use. One per compute node, since reachability is a property
// of the path from a compute node to a memory node; the store's index instances share it, since
// suspicion is kept per memory node. It takes the pool's lock briefly, never across a verb.
func (s *Store) healthOf(node farmem.NodeID) *replmem.Health {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.health == nil {
		s.health = make(map[farmem.NodeID]*replmem.Health)
	}
	h, ok := s.health[node]
	if !ok {
		h = new(replmem.Health)
		s.health[node] = h
	}
	return h
}
