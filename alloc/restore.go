package alloc

import (
	"context"
	"fmt"
	"slices"

	"github.com/farmem/farmem/farmem"
)

// restored is what a metadata node that restarted gets back from its peers before it counts
// in a quorum again: the largest symmetric bump word and global epoch of a majority, and the
// table words to copy.
type restored struct {
	symBump, epoch uint64
	words          []restoredWord
}

type restoredWord struct{ off, val uint64 }

// Reformat formats node again after it restarted and was adopted (its memory is zero), with
// the parameters the other nodes' headers record (the home node's, or with replicated
// metadata any readable node's), so the node's layout matches the other nodes' and allocators
// opened before the restart keep working with it. home is the allocator's home node
// (Allocator.Home).
//
// Without replicated metadata, node cannot be home: the home node holds the shared tables, and
// its loss is not recoverable (ErrInvalid). With replicated metadata (Header.Replicas = r > 1)
// a metadata node (MetaNodes) is restored: Reformat reads the symmetric bump words, global
// epochs, epoch tables and handover tables of a majority of the r nodes among its peers (r/2+1
// of the r-1 others; ErrNodeDown if fewer answer) and formats the node with the largest bump
// word and epoch, each epoch-table slot's oldest live announcement, and each handover word
// that every peer read holds, written before the epoch and bump words that make the node count
// in quorums again (clients skip a metadata node whose epoch word is 0). A majority of peers
// meets every majority that completed a write, so nothing that a quorum holds is lost; a
// handover word is copied only if all peers read agree, so a record already taken is never
// revived.
//
// Cost: one header Read (more if the nodes read first do not answer) and Format's round trips;
// a metadata node adds one round trip reading its peers. Reformatting a node already
// formatted with the same parameters writes nothing (Format's idempotence), so several clients
// adopting the same restart may all call it.
func Reformat(ctx context.Context, m farmem.Memory, home, node farmem.NodeID) error {
	hh, err := paramsFrom(ctx, m, home, node)
	if err != nil {
		return fmt.Errorf("alloc: reformat %v: %w", node, err)
	}
	if (node == home || node == hh.Home) && hh.Replicas == 1 {
		return fmt.Errorf("alloc: reformat %v: it is the home node, whose tables are lost with it: %w", node, farmem.ErrInvalid)
	}
	opts := FormatOptions{ChunkSize: hh.ChunkSize, SymmetricSize: hh.SymSize, MaxClients: hh.MaxClients, Home: hh.Home, Replicas: hh.Replicas}
	meta := MetaNodes(m.Topology(), hh)
	if hh.Replicas == 1 || !slices.Contains(meta, node) {
		return Format(ctx, m, node, opts)
	}
	h, err := Layout(m.Topology(), node, opts)
	if err != nil {
		return err
	}
	if _, err := Open(ctx, m, node); err == nil {
		return nil // restored already
	}
	init, err := readPeers(ctx, m, node, hh, meta)
	if err != nil {
		return fmt.Errorf("alloc: restore %v: %w", node, err)
	}
	return formatWith(ctx, m, node, h, init)
}

// paramsFrom returns a header holding the format parameters: home's, or (when home is node or
// does not answer) the first other memory node's that can be read.
func paramsFrom(ctx context.Context, m farmem.Memory, home, node farmem.NodeID) (Header, error) {
	var errs []error
	if home != node {
		h, err := Open(ctx, m, home)
		if err == nil {
			return h, nil
		}
		errs = append(errs, err)
	}
	for _, n := range m.Topology().MemoryNodes() {
		if n == node || n == home || farmem.StatusOf(m, n).State == farmem.NodeLost {
			continue
		}
		h, err := Open(ctx, m, n)
		if err == nil {
			return h, nil
		}
		errs = append(errs, err)
	}
	if len(errs) == 0 {
		errs = append(errs, fmt.Errorf("alloc: no other memory node: %w", farmem.ErrInvalid))
	}
	return Header{}, errs[0]
}

// readPeers reads the replicated words of node's peers among the metadata nodes, from a
// majority of all r, and merges them (see Reformat).
func readPeers(ctx context.Context, m farmem.Memory, node farmem.NodeID, hh Header, meta []farmem.NodeID) (*restored, error) {
	peers := slices.DeleteFunc(slices.Clone(meta), func(n farmem.NodeID) bool { return n == node })
	q := hh.Replicas/2 + 1
	tlen := hh.TableOff + 8*uint64(hh.MaxClients+1) - HandoverOffset
	b := &farmem.Batch{}
	hb := make([][]byte, len(peers))
	tb := make([][]byte, len(peers))
	for i, n := range peers {
		hb[i], tb[i] = make([]byte, HeaderLen), make([]byte, tlen)
		b.Read(farmem.MakeAddr(n, 0), hb[i])
		b.Read(farmem.MakeAddr(n, HandoverOffset), tb[i])
	}
	got, err := waitFor(ctx, m.Post(ctx, b), peers, q, func(i int) bool { return le64(hb[i][offEpoch:]) != 0 })
	if err != nil {
		return nil, err
	}
	r := &restored{}
	for _, i := range got {
		r.symBump = max(r.symBump, le64(hb[i][offSymBump:]))
		r.epoch = max(r.epoch, le64(hb[i][offEpoch:]))
	}
	for c := 1; c <= hh.MaxClients; c++ {
		// Handover word: only if every peer read holds the same one.
		off := 8 * uint64(c)
		v := le64(tb[got[0]][off:])
		for _, i := range got[1:] {
			if le64(tb[i][off:]) != v {
				v = 0
			}
		}
		if v != 0 {
			r.words = append(r.words, restoredWord{off: HandoverOffset + off, val: v})
		}
		// Epoch slot: the oldest announcement read.
		soff := hh.TableOff + 8*uint64(c) - HandoverOffset
		var best uint64
		for _, i := range got {
			w := le64(tb[i][soff:])
			if w == 0 {
				continue
			}
			if best == 0 || decodeEpoch(r.epoch, uint32(w>>32)) < decodeEpoch(r.epoch, uint32(best>>32)) {
				best = w
			}
		}
		if best != 0 {
			r.words = append(r.words, restoredWord{off: HandoverOffset + soff, val: best})
		}
	}
	return r, nil
}
