package kvstore

import (
	"context"
	"encoding/binary"
	"fmt"

	"github.com/farmem/farmem/alloc"
	"github.com/farmem/farmem/ds/race"
	"github.com/farmem/farmem/farmem"
)

// AdoptReport is what Store.Adopt found lost and removed.
type AdoptReport struct {
	// Node is the node adopted, Incarnation the incarnation adopted, and Generation the node's
	// generation in the store's table after the adoption.
	Node        farmem.NodeID
	Incarnation uint64
	Generation  uint64
	// Already is set when another client (of this or another process) had already adopted this
	// incarnation for the store: nothing was lost anew, and Lost is 0.
	Already bool
	// Lost counts the index entries removed: keys whose value lived on the node. Entries lists
	// them. The key of each was in its KV block, on the lost node, so it is identified by its
	// slot (subtable, index) and what the slot word keeps of the key: its fingerprint and the
	// subtable's hash suffix.
	Lost    int
	Entries []race.LostEntry
	// Subtables are the index's subtables that lived on the node: each held an unknown number
	// of keys (its slots were lost with it), all of them now absent; an empty subtable replaces
	// each. The keys are those whose first hash ends in the subtable's suffix and that no other
	// subtable holds.
	Subtables []race.LostSubtable
}

// Location is where a key lives in a RACE-indexed store (Store.Locate).
type Location = race.Location

// Adopt acknowledges that memory node node restarted and lost its memory (the fabric reports
// farmem.ErrNodeLost for it): the explicit step after which the store is as if every key that
// lived there had been deleted, and the node takes new data. Until it, every operation on a key
// whose index entry or value lived on the node fails with an error wrapping
// farmem.ErrNodeLost (never a wrong value, never ErrNotFound), keys elsewhere keep working, and
// new KV blocks and subtables are placed on other nodes.
//
// Adopt, with one pooled client:
//
//  1. adopts the node on the fabric (farmem.Restarts.Adopt: verbs reach its new memory);
//  2. reads the node's generation word; if it already records this incarnation at a generation
//     above 0, another client adopted it, and Adopt returns with Already set; if neither the
//     fabric (the node was not lost) nor the word (it records this incarnation, or nothing)
//     says the node lost its memory, Adopt refuses (ErrInvalid), since purging would delete
//     live keys;
//  3. formats the node again with the home node's allocator parameters (alloc.Reformat);
//  4. removes every index entry that pointed into the lost memory and replaces lost subtables
//     with empty ones (race.Table.Purge), and reports them;
//  5. bumps the node's generation in the store's table (GenOffset on the home node), recording
//     the incarnation.
//
// Every allocator of the store forgets, at its next allocation, what it held on the node (alloc,
// "Restarted memory nodes"). Each process with a Store on the fabric calls Adopt for its own
// fabric (the fence is per fabric); the first to do so reports the loss.
//
// With replicated metadata (Options.Replicas > 1) Adopt works on any node, the home node
// included, while the store runs, and repopulates the node through the index's Repopulator
// when it has one (see Repopulator and the package doc, "Restarted memory nodes").
//
// Limits without replicated metadata: the home node (the store's root word, descriptor and
// the allocator's shared tables) is a single point of failure: Adopt refuses it (ErrInvalid),
// and a store whose home node restarted is lost. A store with replication is refused (ErrNotSupported): repopulating a node
// from replicas is the replicator's job. Only the RACE index can purge (others:
// ErrNotSupported). Adopt is meant to run while no other client splits the index; operations
// may run meanwhile (those on lost keys keep failing until step 4 removes them).
func (s *Store) Adopt(ctx context.Context, node farmem.NodeID) (AdoptReport, error) {
	rep := AdoptReport{Node: node}
	if s.closed.Load() {
		return rep, errClosed
	}
	if info, ok := s.fabric.Topology().Node(node); !ok || info.Role != farmem.RoleMemory {
		return rep, fmt.Errorf("kvstore: adopt %v: not a memory node: %w", node, farmem.ErrInvalid)
	}
	if len(s.meta) > 1 {
		return s.adoptRep(ctx, node)
	}
	if node == s.home {
		return rep, fmt.Errorf("kvstore: adopt %v: it is the store's home node (root and allocator tables), which cannot be recovered: %w", node, farmem.ErrInvalid)
	}
	if s.opts.Replication.Replicas() > 1 {
		return rep, fmt.Errorf("kvstore: adopt %v: a replicated store repopulates nodes from replicas: %w", node, farmem.ErrNotSupported)
	}
	ga, err := genAddr(s.home, node)
	if err != nil {
		return rep, err
	}
	wasLost := farmem.StatusOf(s.fabric, node).State == farmem.NodeLost
	if err := adoptNode(ctx, s.fabric, node); err != nil {
		return rep, fmt.Errorf("kvstore: adopt %v: %w", node, err)
	}
	c, err := s.acquire(ctx)
	if err != nil {
		return rep, err
	}
	rep, err = s.adoptOn(ctx, c, node, ga, wasLost)
	s.release(c, err)
	return rep, err
}

func (s *Store) adoptOn(ctx context.Context, c *conn, node farmem.NodeID, ga farmem.Addr, wasLost bool) (AdoptReport, error) {
	rep := AdoptReport{Node: node}
	st := farmem.StatusOf(c.m, node)
	rep.Incarnation = st.Incarnation
	var buf [8]byte
	if err := c.m.Read(ctx, ga, buf[:]); err != nil {
		return rep, fmt.Errorf("kvstore: adopt %v: read generation: %w", node, err)
	}
	gw := GenWord(binary.LittleEndian.Uint64(buf[:]))
	same := gw != 0 && gw.Incarnation() == makeGenWord(0, st.Incarnation).Incarnation()
	switch {
	case same && gw.Generation() > 0:
		rep.Already, rep.Generation = true, gw.Generation()
		return rep, nil
	case !wasLost && (gw == 0 || same):
		// Neither this fabric nor the store's records say the node lost anything: purging
		// would delete live keys.
		return rep, fmt.Errorf("kvstore: adopt %v: the node has not lost its memory (incarnation %#x): %w", node, st.Incarnation, farmem.ErrInvalid)
	}
	if err := alloc.Reformat(ctx, c.m, s.home, node); err != nil {
		return rep, fmt.Errorf("kvstore: adopt %v: %w", node, err)
	}
	p, ok := c.idx.(interface {
		Purge(ctx context.Context, node farmem.NodeID) (race.PurgeReport, error)
	})
	if !ok {
		return rep, fmt.Errorf("kvstore: adopt %v: the %s index cannot purge lost entries: %w", node, s.opts.Index.Name(), farmem.ErrNotSupported)
	}
	pr, err := p.Purge(ctx, node)
	if err != nil {
		return rep, fmt.Errorf("kvstore: adopt %v: %w", node, err)
	}
	rep.Entries, rep.Subtables, rep.Lost = pr.Entries, pr.Subtables, len(pr.Entries)
	for {
		next := makeGenWord(gw.Generation()+1, st.Incarnation)
		prev, err := c.m.CAS(ctx, ga, uint64(gw), uint64(next))
		if err != nil {
			return rep, fmt.Errorf("kvstore: adopt %v: bump generation: %w", node, err)
		}
		if GenWord(prev) == gw {
			rep.Generation = next.Generation()
			return rep, nil
		}
		gw = GenWord(prev)
		if gw.Incarnation() == next.Incarnation() {
			// Another client adopted the same incarnation meanwhile.
			rep.Generation = gw.Generation()
			return rep, nil
		}
	}
}

// Purge implements Adopt's step for the RACE index.
func (x *raceIndex) Purge(ctx context.Context, node farmem.NodeID) (race.PurgeReport, error) {
	return x.t.Purge(ctx, node)
}

// Locate returns where key's index entry and value live (RACE and FlexKV only; ErrNotSupported
// otherwise; ErrNotFound if absent): a diagnostic for tools and for tests that must know which
// node holds what. Cost: a Get's.
func (s *Store) Locate(ctx context.Context, key []byte) (Location, error) {
	if err := s.check(key, nil); err != nil {
		return Location{}, err
	}
	var loc Location
	err := s.with(ctx, func(idx Index) error {
		x, ok := idx.(interface{ Table() *race.Table })
		if !ok {
			return fmt.Errorf("kvstore: locate: the %s index: %w", s.opts.Index.Name(), farmem.ErrNotSupported)
		}
		var err error
		loc, err = x.Table().Locate(ctx, key)
		return mapRace(err)
	})
	return loc, err
}

// NodeState is one memory node as the store sees it: the fabric's view (incarnation, state)
// and the store's generation word.
type NodeState struct {
	farmem.NodeStatus
	Gen GenWord
}

// Nodes reports every memory node's incarnation and state (from the fabric, no round trip) and
// generation (one round trip to the home node).
func (s *Store) Nodes(ctx context.Context) ([]NodeState, error) {
	if s.closed.Load() {
		return nil, errClosed
	}
	var out []NodeState
	c, err := s.acquire(ctx)
	if err != nil {
		return nil, err
	}
	var gens map[farmem.NodeID]GenWord
	if len(s.meta) > 1 {
		gens, err = generationsRep(ctx, c.m, s.meta)
	} else {
		gens, err = Generations(ctx, c.m, s.home)
	}
	s.release(c, err)
	if err != nil {
		return nil, err
	}
	for _, n := range s.fabric.Topology().MemoryNodes() {
		out = append(out, NodeState{NodeStatus: farmem.StatusOf(s.fabric, n), Gen: gens[n]})
	}
	return out, nil
}

// Home returns the store's home node: the allocator's home, holding the root word, the
// generation table and the allocator's shared tables.
func (s *Store) Home() farmem.NodeID { return s.home }

// checkGenerations runs at Open, on fabrics with restarts: it compares each memory node's
// generation word with the incarnation this fabric met. A word recording another incarnation
// means the node restarted and no client adopted the new one for the store: the fabric, which
// met only the new incarnation, is told to fence it (farmem.Restarts.Fence), so this process
// sees ErrNodeLost like the others until Store.Adopt. A word still 0 records the incarnation
// met (a CAS from 0). Open runs it before it formats anything (so a restarted node is not
// formatted behind the store's back) and again once the store is found. Cost: one round trip
// each, and one more the first time.
func (s *Store) checkGenerations(ctx context.Context, m farmem.Memory, meta []farmem.NodeID) error {
	r, ok := m.(farmem.Restarts)
	if !ok {
		return nil
	}
	if len(meta) > 1 {
		return s.checkGenerationsRep(ctx, m, r, meta)
	}
	home := meta[0]
	gens, err := Generations(ctx, m, home)
	if err != nil {
		return err
	}
	var b farmem.Batch
	for n, gw := range gens {
		st := farmem.StatusOf(m, n)
		if st.State == farmem.NodeLost || st.Incarnation == 0 {
			continue
		}
		cur := makeGenWord(gw.Generation(), st.Incarnation)
		switch {
		case gw == 0:
			a, _ := genAddr(home, n)
			b.CAS(a, 0, uint64(cur))
		case gw.Incarnation() != cur.Incarnation():
			if err := r.Fence(n); err != nil {
				return fmt.Errorf("kvstore: fence %v: %w", n, err)
			}
		}
	}
	if len(b.Ops) > 0 {
		if err := m.Do(ctx, &b); err != nil {
			return fmt.Errorf("kvstore: record incarnations: %w", err)
		}
	}
	return nil
}

// adoptNode calls f's Adopt if its transport has restarts (farmem.Restarts).
func adoptNode(ctx context.Context, f farmem.Fabric, node farmem.NodeID) error {
	r, ok := f.(farmem.Restarts)
	if !ok {
		return fmt.Errorf("kvstore: adopt %v: the transport has no restarts: %w", node, farmem.ErrNotSupported)
	}
	return r.Adopt(ctx, node)
}
