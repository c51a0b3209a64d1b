package selcc

import (
	"fmt"

	"github.com/farmem/farmem/farmem"
)

// Codec is the encoding of a GCL's 64-bit latch word, which is also the GCL's sharer
// directory. The engine is written against it alone: every transition is one atomic whose
// operand the codec gives (see the package doc's table), and a failed attempt's returned word
// is decoded with Holder and Sharers to know whom to invalidate. Compute ids start at 1 (0
// means "no exclusive holder").
//
// A codec guarantees, for nodes 1..MaxNodes, that as long as each node has at most one
// Shared(n) added to a word at a time (the engine's invariant), the deltas of different nodes
// never carry into each other, so every transition commutes with every other (FAA is addition
// modulo 2^64) and only intermediate words can look odd.
type Codec interface {
	// Name names the encoding in reports.
	Name() string
	// MaxNodes is the largest compute id the codec encodes.
	MaxNodes() int
	// Exclusive is the word of node n holding the GCL modified, alone: the swap value of the
	// I→M CAS (which expects 0), and minus it the release delta of an M holder.
	Exclusive(n farmem.ComputeID) uint64
	// Shared is node n's shared-holder delta: the I→S FAA adds it, its undo and an S release
	// subtract it, and it is also the exact word the S→M upgrade CAS expects (n the only
	// holder).
	Shared(n farmem.ComputeID) uint64
	// Holder decodes the exclusive holder field (0: none). During concurrent transitions it
	// can name a node that holds nothing, or no valid node at all; the protocol drops the
	// resulting invalidation and retries.
	Holder(w uint64) farmem.ComputeID
	// Sharers appends to buf a superset of the nodes holding w shared (exact for the bitmap;
	// every member of a non-empty group for the group codec) and returns it.
	Sharers(w uint64, buf []farmem.ComputeID) []farmem.ComputeID
}

// HandoverDelta is the FAA operand by which M holder from hands the GCL to to (case 1).
func HandoverDelta(c Codec, from, to farmem.ComputeID) uint64 {
	return c.Exclusive(to) - c.Exclusive(from)
}

// DowngradeDelta is the FAA operand by which M holder holder drops to S and grants S to
// reader as well (case 2). The reader must have undone its own failed Shared attempt before.
func DowngradeDelta(c Codec, holder, reader farmem.ComputeID) uint64 {
	return c.Shared(holder) + c.Shared(reader) - c.Exclusive(holder)
}

// ReleaseExclusiveDelta is the FAA operand that releases n's M hold.
func ReleaseExclusiveDelta(c Codec, n farmem.ComputeID) uint64 { return -c.Exclusive(n) }

// ReleaseSharedDelta is the FAA operand that releases (or undoes) n's S hold.
func ReleaseSharedDelta(c Codec, n farmem.ComputeID) uint64 { return -c.Shared(n) }

// CodecFor returns the codec for a cluster of nodes compute nodes: the paper's bitmap up to
// BitmapMaxNodes, the group codec past it (up to GroupMaxNodes). It fails with
// farmem.ErrInvalid past that.
func CodecFor(nodes int) (Codec, error) {
	switch {
	case nodes <= 0:
		return nil, fmt.Errorf("selcc: codec for %d compute nodes: %w", nodes, farmem.ErrInvalid)
	case nodes <= BitmapMaxNodes:
		return Bitmap{}, nil
	case nodes <= GroupMaxNodes:
		return NewGroups(nodes)
	}
	return nil, fmt.Errorf("selcc: %d compute nodes is more than the latch word encodes (%d): %w", nodes, GroupMaxNodes, farmem.ErrInvalid)
}

// Bitmap layout: the paper's (§4.3.1).
const (
	// BitmapMaxNodes is the number of compute nodes the bitmap codec encodes.
	BitmapMaxNodes = 58
	bitmapXShift   = 58
	bitmapMask     = uint64(1)<<bitmapXShift - 1
)

// Bitmap is the paper's encoding: the exclusive holder's id in the top 6 bits and a sharer
// bitmap in the low 58, bit n-1 for node n. The holder field is on top so that a negative
// delta on it can only wrap out of bit 63 and never borrows from the bitmap. Sharers is exact.
type Bitmap struct{}

// Name implements Codec.
func (Bitmap) Name() string { return "bitmap58" }

// MaxNodes implements Codec.
func (Bitmap) MaxNodes() int { return BitmapMaxNodes }

// Exclusive implements Codec.
func (Bitmap) Exclusive(n farmem.ComputeID) uint64 { return uint64(n) << bitmapXShift }

// Shared implements Codec.
func (Bitmap) Shared(n farmem.ComputeID) uint64 { return 1 << (uint64(n) - 1) }

// Holder implements Codec.
func (Bitmap) Holder(w uint64) farmem.ComputeID { return farmem.ComputeID(w >> bitmapXShift) }

// Sharers implements Codec.
func (Bitmap) Sharers(w uint64, buf []farmem.ComputeID) []farmem.ComputeID {
	w &= bitmapMask
	for n := farmem.ComputeID(1); w != 0; n, w = n+1, w>>1 {
		if w&1 != 0 {
			buf = append(buf, n)
		}
	}
	return buf
}

// Group layout.
const (
	// GroupMaxNodes is the number of compute nodes the group codec encodes.
	GroupMaxNodes = 255
	groupXShift   = 56
	groupCount    = 8
	groupWidth    = 7
	groupMax      = 1<<groupWidth - 1
)

// Groups is the encoding past 58 nodes: the exclusive holder's id in the top 8 bits and eight
// 7-bit counters of shared holders, node n counting in group (n-1) mod 8. A shared acquire adds
// one to its group's counter, so members of one group never carry into each other as long as
// a group's members number at most 127 (255 nodes make 32 per group, each holding at most one
// count). Sharers names every member of every non-empty group (a superset: members that hold
// nothing drop the invalidation); the upgrade compare (only the caller's count, equal to 1) is
// exact because the caller's own count is in it.
type Groups struct{ nodes int }

// NewGroups returns the group codec for compute ids 1..nodes.
func NewGroups(nodes int) (Groups, error) {
	if nodes <= 0 || nodes > GroupMaxNodes {
		return Groups{}, fmt.Errorf("selcc: group codec for %d nodes: %w", nodes, farmem.ErrInvalid)
	}
	return Groups{nodes: nodes}, nil
}

// Name implements Codec.
func (g Groups) Name() string { return fmt.Sprintf("groups8x7/%d", g.nodes) }

// MaxNodes implements Codec.
func (g Groups) MaxNodes() int { return g.nodes }

// Exclusive implements Codec.
func (Groups) Exclusive(n farmem.ComputeID) uint64 { return uint64(n) << groupXShift }

// Shared implements Codec.
func (Groups) Shared(n farmem.ComputeID) uint64 {
	return 1 << (groupWidth * ((uint64(n) - 1) % groupCount))
}

// Holder implements Codec.
func (Groups) Holder(w uint64) farmem.ComputeID { return farmem.ComputeID(w >> groupXShift) }

// Count returns group i's counter in w.
func (Groups) Count(w uint64, i int) int { return int(w>>(groupWidth*uint(i))) & groupMax }

// Sharers implements Codec.
func (g Groups) Sharers(w uint64, buf []farmem.ComputeID) []farmem.ComputeID {
	var nonEmpty [groupCount]bool
	any := false
	for i := range groupCount {
		nonEmpty[i] = g.Count(w, i) != 0
		any = any || nonEmpty[i]
	}
	if !any {
		return buf
	}
	for n := 1; n <= g.nodes; n++ {
		if nonEmpty[(n-1)%groupCount] {
			buf = append(buf, farmem.ComputeID(n))
		}
	}
	return buf
}
