package kvstore

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"

	"github.com/farmem/farmem/alloc"
	"github.com/farmem/farmem/ds/race"
	"github.com/farmem/farmem/farmem"
)

// Repopulator is implemented by index handles whose entries are replicated on several memory
// nodes (a replicated index kind): Repopulate copies onto node, a memory node that restarted
// empty and whose store and allocator metadata Store.Adopt has just restored, every index
// slot and value block it should hold, from a majority of its peers, while other clients keep
// running, and returns once the node holds them (from then on the index counts the node in
// its quorums again). It is called once per adoption, with a client of the store, after the
// node was formatted again; it must be idempotent (several processes may adopt the same
// restart). An index kind that does not implement it, or whose Repopulate returns an error
// wrapping farmem.ErrInvalid (the index holds nothing replicated on node: an unreplicated
// RACE index under replicated metadata, or a node outside a replicated one's replicas), loses
// what lived on the node: Adopt purges and reports it, as with an unreplicated store.
type Repopulator interface {
	Repopulate(ctx context.Context, node farmem.NodeID) error
}

// adoptRep is Store.Adopt with replicated metadata (Options.Replicas > 1): any node can be
// adopted, the home node included, while the store runs.
//
//  1. the fabric adopts the node (its verbs reach the new, zeroed memory);
//  2. the node's generation word is read from a majority of the restored metadata nodes; if
//     it records this incarnation at a generation above 0, another client adopted it
//     (Already);
//  3. if the node is a metadata node, the store's words it should hold are copied from a
//     majority of its peers: the descriptor copy, each memory node's generation word (the
//     largest read) and the root word the store found; then its allocator metadata is
//     restored (alloc.Reformat), whose epoch word, written last, makes clients count the node
//     in their quorums again. Any other node is formatted again (alloc.Reformat);
//  4. the index repopulates the node (Repopulator), or, if it cannot (no Repopulator, or one
//     answering farmem.ErrInvalid: nothing of the index is replicated there), purges the
//     entries that pointed into it and reports them (Lost), as without replication;
//  5. the node's generation is raised on a majority, recording the incarnation.
//
// Meanwhile clients run: quorum reads and writes of the metadata skip the node (fenced until
// step 1, not restored until step 3's end), allocation does not place blocks there until it
// is formatted, and what the index does with the node's keys until step 4 ends is the index's
// (a replicated index reads them from its other replicas).
//
// Cost on a metadata node, for r = 3: the generation read (1 round trip), the peers' read and
// the copy (2), alloc.Reformat (a header Read, the peers' read and the format's 3), the
// index's repopulation or purge, and the generation raise (2: read, CAS).
func (s *Store) adoptRep(ctx context.Context, node farmem.NodeID) (AdoptReport, error) {
	rep := AdoptReport{Node: node}
	if s.opts.Replication.Replicas() > 1 {
		return rep, fmt.Errorf("kvstore: adopt %v: a store over several index instances repopulates nodes from them: %w", node, farmem.ErrNotSupported)
	}
	if int(node) > MaxGenNodes {
		return rep, fmt.Errorf("kvstore: adopt %v: no generation word: %w", node, farmem.ErrInvalid)
	}
	// Before the fabric adopts it (swarm_adopt.go).
	sw, err := s.swarmPrepareAdopt(ctx, node)
	if err != nil {
		s.swarmAbortAdopt(node, sw)
		return rep, fmt.Errorf("kvstore: adopt %v: %w", node, err)
	}
	rep, err = s.adoptRepFenced(ctx, node)
	switch {
	case sw.replica && err == nil:
		s.swarmAdopted(node, sw)
	case sw.replica:
		s.swarmAbortAdopt(node, sw)
	}
	return rep, err
}

// adoptRepFenced is adoptRep once a Swarm store fenced the node in its views.
func (s *Store) adoptRepFenced(ctx context.Context, node farmem.NodeID) (AdoptReport, error) {
	wasLost := farmem.StatusOf(s.fabric, node).State == farmem.NodeLost
	if err := adoptNode(ctx, s.fabric, node); err != nil {
		return AdoptReport{Node: node}, fmt.Errorf("kvstore: adopt %v: %w", node, err)
	}
	c, err := s.acquire(ctx)
	if err != nil {
		return AdoptReport{Node: node}, err
	}
	rep, err := s.adoptRepOn(ctx, c, node, wasLost)
	s.release(c, err)
	return rep, err
}

func (s *Store) adoptRepOn(ctx context.Context, c *conn, node farmem.NodeID, wasLost bool) (AdoptReport, error) {
	rep := AdoptReport{Node: node}
	st := farmem.StatusOf(c.m, node)
	rep.Incarnation = st.Incarnation
	peers := slices.DeleteFunc(slices.Clone(s.meta), func(n farmem.NodeID) bool { return n == node })
	// A metadata node's own copy is not counted: a majority of its peers answers (f+1 of 2f).
	gens, err := generationsRep(ctx, c.m, peers)
	if err != nil {
		return rep, fmt.Errorf("kvstore: adopt %v: %w", node, err)
	}
	gw := gens[node]
	same := gw != 0 && gw.Incarnation() == makeGenWord(0, st.Incarnation).Incarnation()
	switch {
	case same && gw.Generation() > 0:
		rep.Already, rep.Generation = true, gw.Generation()
		return rep, nil
	case !wasLost && (gw == 0 || same):
		return rep, fmt.Errorf("kvstore: adopt %v: the node has not lost its memory (incarnation %#x): %w", node, st.Incarnation, farmem.ErrInvalid)
	}
	if len(peers) < len(s.meta) {
		if err := s.restoreMeta(ctx, c.m, node, peers); err != nil {
			return rep, fmt.Errorf("kvstore: adopt %v: %w", node, err)
		}
	}
	if err := alloc.Reformat(ctx, c.m, s.home, node); err != nil {
		return rep, fmt.Errorf("kvstore: adopt %v: %w", node, err)
	}
	purge := true
	if rp, ok := c.idx.(Repopulator); ok {
		switch err := rp.Repopulate(ctx, node); {
		case err == nil:
			purge = false
		case !errors.Is(err, farmem.ErrInvalid):
			return rep, fmt.Errorf("kvstore: adopt %v: repopulate: %w", node, err)
		}
	}
	if purge {
		if err := s.purgeInto(ctx, c, node, &rep); err != nil {
			return rep, err
		}
	}
	g, err := setGenRep(ctx, c.m, s.meta, node, makeGenWord(gw.Generation()+1, st.Incarnation))
	if err != nil {
		return rep, fmt.Errorf("kvstore: adopt %v: bump generation: %w", node, err)
	}
	rep.Generation = g.Generation()
	return rep, nil
}

// purgeInto removes the index entries that pointed into node (Adopt without a repopulating
// index) and records them in rep.
func (s *Store) purgeInto(ctx context.Context, c *conn, node farmem.NodeID, rep *AdoptReport) error {
	p, ok := c.idx.(interface {
		Purge(ctx context.Context, node farmem.NodeID) (race.PurgeReport, error)
	})
	if !ok {
		return fmt.Errorf("kvstore: adopt %v: the %s index neither repopulates nor purges: %w", node, s.opts.Index.Name(), farmem.ErrNotSupported)
	}
	pr, err := p.Purge(ctx, node)
	if err != nil {
		return fmt.Errorf("kvstore: adopt %v: %w", node, err)
	}
	rep.Entries, rep.Subtables, rep.Lost = pr.Entries, pr.Subtables, len(pr.Entries)
	return nil
}

// restoreMeta copies onto metadata node node, restarted and zeroed, the store's words it
// should hold, read from a majority of its peers: the descriptor copy, the generation table
// (each word the largest read) and the root word, in one ordered batch with the root word
// last; all before the allocator's restore, whose epoch word makes the node count.
func (s *Store) restoreMeta(ctx context.Context, m farmem.Memory, node farmem.NodeID, peers []farmem.NodeID) error {
	tables, got, err := genTables(ctx, m, peers, len(s.meta)/2+1)
	if err != nil {
		return err
	}
	off := s.rootWord.Descriptor().Offset()
	at := farmem.MakeAddr(node, off)
	enc, err := s.desc.Encode(at)
	if err != nil {
		return err
	}
	b := &farmem.Batch{}
	b.Write(at, enc)
	for k := range MaxGenNodes {
		var g uint64
		for _, i := range got {
			g = max(g, binary.LittleEndian.Uint64(tables[i][8*k:]))
		}
		if g != 0 {
			b.CAS(farmem.MakeAddr(node, GenOffset+8*uint64(k)), 0, g)
		}
	}
	b.CAS(farmem.MakeAddr(node, RootOffset), 0, uint64(s.rootWord))
	if err := m.Do(ctx, b); err != nil {
		return fmt.Errorf("restore store metadata: %w", err)
	}
	return nil
}

// checkGenerationsRep is checkGenerations with replicated metadata: the words are read from a
// majority, and a word still 0 is recorded on every metadata node.
func (s *Store) checkGenerationsRep(ctx context.Context, m farmem.Memory, r farmem.Restarts, meta []farmem.NodeID) error {
	gens, err := generationsRep(ctx, m, meta)
	if err != nil {
		return err
	}
	b := &farmem.Batch{}
	for _, n := range m.Topology().MemoryNodes() {
		gw, ok := gens[n]
		st := farmem.StatusOf(m, n)
		if !ok || st.State == farmem.NodeLost || st.Incarnation == 0 {
			continue
		}
		cur := makeGenWord(gw.Generation(), st.Incarnation)
		switch {
		case gw == 0:
			for _, x := range meta {
				b.CAS(farmem.MakeAddr(x, GenOffset+8*uint64(n-1)), 0, uint64(cur))
			}
		case gw.Incarnation() != cur.Incarnation():
			if err := r.Fence(n); err != nil {
				return fmt.Errorf("kvstore: fence %v: %w", n, err)
			}
		}
	}
	if len(b.Ops) > 0 {
		if err := m.Post(ctx, b).WaitNodes(ctx, len(meta)/2+1); err != nil {
			return fmt.Errorf("kvstore: record incarnations: %w", err)
		}
	}
	return nil
}
