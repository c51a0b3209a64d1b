package alloc

import (
	"fmt"
	"slices"

	"github.com/farmem/farmem/farmem"
)

// Absorb moves everything other holds into a: its free blocks, spare chunks and free runs, the
// uncarved rest of its current chunks, its retired blocks with their epoch tags, and what it
// relays for nodes outside its set. It costs no verb: which allocator of a process holds a
// block is bookkeeping of that process alone. It lets a process with several clients (a
// kvstore's pool) gather the memory its clients freed into the one that ran out, where
// rebuilding can make whole chunks of blocks that different clients freed. Retired blocks keep
// their tags, so they become reusable exactly when they would have for other (their safety
// depends on the epochs, not on which client holds them).
//
// Both allocators must be open, over the same nodes with the same home, and neither may be in
// use by another goroutine during the call (nor may a be pinned across it for other's blocks:
// other's announcement is its own and stays as it is). other stays open and usable, holding
// nothing.
func (a *Allocator) Absorb(other *Allocator) error {
	if err := a.usable(); err != nil {
		return err
	}
	if err := other.usable(); err != nil {
		return err
	}
	if other == a {
		return nil
	}
	if a.home != other.home || !slices.Equal(slices.Sorted(slices.Values(a.nodes)), slices.Sorted(slices.Values(other.nodes))) {
		return fmt.Errorf("alloc: absorb: allocators over other nodes or another home: %w", farmem.ErrInvalid)
	}
	moved := map[*arena]*arena{other.sym: a.sym}
	for _, n := range other.nodes {
		moved[other.arenas[n]] = a.arenas[n]
	}
	for from, to := range moved {
		to.absorb(from)
	}
	// Retired blocks name their arenas by node, the same in both allocators.
	a.ep.retired = append(a.ep.retired, other.ep.retired...)
	other.ep.retired = nil
	a.foreign = append(a.foreign, other.foreign...)
	a.foreignRetired = append(a.foreignRetired, other.foreignRetired...)
	other.foreign, other.foreignRetired = nil, nil
	return nil
}

// absorb moves what from holds into ar (the same node's arena of another allocator).
func (ar *arena) absorb(from *arena) {
	from.settle()
	for c := range from.free {
		for k := range from.free[c] {
			for _, off := range from.free[c][k] {
				ar.push(off, c)
			}
			from.free[c][k] = nil
		}
	}
	for n, offs := range from.large {
		ar.large[n] = append(ar.large[n], offs...)
	}
	ar.spare = append(ar.spare, from.spare...)
	if from.cur < from.end {
		ar.salvage(from.cur, from.end)
	}
	from.cur, from.end = 0, 0
	from.large, from.spare = make(map[uint64][]uint64), nil
	from.freeIn, from.listed, from.sincePass = newChunkFree(from.base, from.chunk), 0, 0
}
