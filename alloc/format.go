package alloc

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"

	"github.com/farmem/farmem/farmem"
)

// DefaultChunkSize is the chunk size of a node formatted without one.
const DefaultChunkSize = 64 << 10

// FormatOptions are the parameters a node is formatted with. Every field's default is computed
// from the topology alone, so clients that format the same cluster with the zero value agree.
type FormatOptions struct {
	// ChunkSize is the unit clients claim from the heap with one FAA (default DefaultChunkSize;
	// a power of two between MinChunkSize and MaxChunkSize).
	ChunkSize uint64
	// SymmetricSize is the size of the symmetric area reserved at the same offsets on every
	// node, rounded down to the chunk size (default: an eighth of the smallest memory node).
	SymmetricSize uint64
	// MaxClients is the number of epoch-table slots, the largest client id that can use an
	// allocator (default: the largest client id the topology's compute nodes can have).
	MaxClients int
	// Home is the node holding the global epoch, the epoch table and the symmetric bump pointer
	// (default: the lowest memory node); with Replicas above 1, the first of the metadata nodes.
	Home farmem.NodeID
	// Replicas is the number of memory nodes holding the allocator's shared metadata (default
	// 1: the home node alone, a single point of failure). An odd r = 2f+1 up to
	// MaxMetaReplicas and at most the number of memory nodes keeps it on the r nodes from Home
	// on (MetaNodes) and survives any f of them down (see the package doc, "Replicated
	// metadata").
	Replicas int
}

func (o FormatOptions) withDefaults(t *farmem.Topology) (FormatOptions, error) {
	mem := t.MemoryNodes()
	if len(mem) == 0 {
		return o, fmt.Errorf("alloc: the topology has no memory node: %w", farmem.ErrInvalid)
	}
	if o.ChunkSize == 0 {
		o.ChunkSize = DefaultChunkSize
	}
	if o.ChunkSize < MinChunkSize || o.ChunkSize > MaxChunkSize || o.ChunkSize&(o.ChunkSize-1) != 0 {
		return o, fmt.Errorf("alloc: chunk size %d is not a power of two in [%d, %d]: %w", o.ChunkSize, MinChunkSize, MaxChunkSize, farmem.ErrInvalid)
	}
	if o.SymmetricSize == 0 {
		smallest := uint64(farmem.MaxOffset + 1)
		for _, id := range mem {
			n, _ := t.Node(id)
			smallest = min(smallest, n.Size)
		}
		o.SymmetricSize = smallest / 8
	}
	o.SymmetricSize &^= o.ChunkSize - 1
	if o.MaxClients == 0 {
		var maxC farmem.ComputeID
		for _, id := range t.ComputeNodes() {
			maxC = max(maxC, id.ComputeID())
		}
		o.MaxClients = max(1, min(0xffff, int(maxC)*t.ClientsPerNode))
	}
	if o.MaxClients < 1 || o.MaxClients > 0xffff {
		return o, fmt.Errorf("alloc: %d clients outside [1, 65535]: %w", o.MaxClients, farmem.ErrInvalid)
	}
	if o.Home == 0 {
		o.Home = mem[0]
	}
	if !slices.Contains(mem, o.Home) {
		return o, fmt.Errorf("alloc: home %v is not a memory node of the topology: %w", o.Home, farmem.ErrInvalid)
	}
	if o.Replicas == 0 {
		o.Replicas = 1
	}
	if o.Replicas < 1 || o.Replicas > MaxMetaReplicas || o.Replicas%2 == 0 || o.Replicas > len(mem) {
		return o, fmt.Errorf("alloc: %d metadata replicas, want an odd number in [1, %d] and at most the %d memory nodes: %w",
			o.Replicas, MaxMetaReplicas, len(mem), farmem.ErrInvalid)
	}
	return o, nil
}

// Layout returns the header that Format with opts writes on node, without touching it.
func Layout(t *farmem.Topology, node farmem.NodeID, opts FormatOptions) (Header, error) {
	info, ok := t.Node(node)
	if !ok || info.Role != farmem.RoleMemory {
		return Header{}, fmt.Errorf("alloc: %v is not a memory node of the topology: %w", node, farmem.ErrInvalid)
	}
	o, err := opts.withDefaults(t)
	if err != nil {
		return Header{}, err
	}
	return layoutOf(node, info.Size, o.ChunkSize, o.MaxClients, o.SymmetricSize, o.Home, o.Replicas)
}

// Format formats memory node node through m's verbs, with no memory-node CPU. It is idempotent
// and safe when several clients format the same node at once:
//
//  1. it reads the header and refuses (writing nothing) a node that holds anything but zeros,
//     its own claim, or a finished header with the same options;
//  2. it claims the node with CAS(claim, 0, h), h being a hash of every constant of the header,
//     so formatters with the same options share the claim and one with other options fails
//     with ErrFormatConflict having written nothing;
//  3. in one batch (applied in order on the node) it writes the constants (the same bytes
//     whoever writes them), initialises the atomic words with CAS from 0 (so a late formatter
//     cannot reset a bump pointer already in use), and sets the magic word last, with a CAS.
//
// A formatter that dies between 2 and 3 leaves a half-formatted node that Open reports with
// ErrHalfFormatted and that Format with the same options finishes. Formatting a node already
// formatted with the same options returns nil and writes nothing.
func Format(ctx context.Context, m farmem.Memory, node farmem.NodeID, opts FormatOptions) error {
	h, err := Layout(m.Topology(), node, opts)
	if err != nil {
		return err
	}
	return formatWith(ctx, m, node, h, nil)
}

// formatWith is Format of header h, with the atomic words init gives (restore.go) in place of
// a fresh node's.
func formatWith(ctx context.Context, m farmem.Memory, node farmem.NodeID, h Header, init *restored) error {
	consts := h.constantBytes()
	claim := claimOf(consts)
	base := farmem.MakeAddr(node, 0)

	// The header read is not atomic: another formatter may write its constants while it runs.
	// Reading the magic and then the claim again after it, in the same ordered batch, closes
	// that gap: a formatter writes its claim, then its constants, then the magic, so whatever
	// an earlier read of this batch saw of its work, a later read sees its claim. The magic is
	// read before the claim for the same reason: read the other way round, the claim could be
	// read as 0 and the magic as set by a formatter that ran between the two reads, which
	// looked like a node formatted with other options.
	cur := make([]byte, HeaderLen)
	claimWord, magicWord := make([]byte, 8), make([]byte, 8)
	var rb farmem.Batch
	rb.Read(base, cur)
	rb.Read(base.Add(offMagic), magicWord)
	rb.Read(base.Add(offClaim), claimWord)
	if err := m.Do(ctx, &rb); err != nil {
		return fmt.Errorf("alloc: format %v: %w", node, err)
	}
	gotMagic := binary.LittleEndian.Uint64(magicWord)
	gotClaim := binary.LittleEndian.Uint64(claimWord)
	switch {
	case gotMagic == Magic && gotClaim == claim:
		if _, err := DecodeHeader(cur); err != nil {
			// The first read may have run before the constants landed; the magic says they
			// have now.
			if err := m.Read(ctx, base, cur); err != nil {
				return fmt.Errorf("alloc: format %v: %w", node, err)
			}
			if _, err := DecodeHeader(cur); err != nil {
				return fmt.Errorf("alloc: format %v: %w", node, err)
			}
		}
		return nil // already formatted with these options
	case gotMagic == Magic:
		return fmt.Errorf("alloc: format %v: formatted with other options (claim %#x, want %#x): %w", node, gotClaim, claim, ErrFormatConflict)
	case gotMagic != 0:
		return fmt.Errorf("alloc: format %v: magic %#x: refusing to overwrite: %w", node, gotMagic, ErrBadHeader)
	case gotClaim == 0 && !allZero(cur):
		return fmt.Errorf("alloc: format %v: the header area holds data: refusing to overwrite: %w", node, ErrBadHeader)
	case gotClaim != 0 && gotClaim != claim:
		return fmt.Errorf("alloc: format %v: half formatted with other options (claim %#x, want %#x): %w", node, gotClaim, claim, ErrFormatConflict)
	}

	prev, err := m.CAS(ctx, base.Add(offClaim), 0, claim)
	if err != nil {
		return fmt.Errorf("alloc: format %v: claim: %w", node, err)
	}
	if prev != 0 && prev != claim {
		return fmt.Errorf("alloc: format %v: claimed with other options (claim %#x, want %#x): %w", node, prev, claim, ErrFormatConflict)
	}

	var b farmem.Batch
	b.Write(base.Add(offConst), consts)
	epoch, symBump := uint64(1), h.SymBase
	if init != nil {
		// The copied tables land before the epoch and symmetric words, which tell clients
		// that the node's metadata is usable (replica.go).
		for _, w := range init.words {
			b.CAS(base.Add(w.off), 0, w.val)
		}
		epoch, symBump = max(epoch, init.epoch), max(symBump, init.symBump)
	}
	b.CAS(base.Add(offEpoch), 0, epoch)
	b.CAS(base.Add(offBump), 0, h.HeapBase)
	b.CAS(base.Add(offSymBump), 0, symBump)
	im := b.CAS(base.Add(offMagic), 0, Magic)
	if err := m.Do(ctx, &b); err != nil {
		return fmt.Errorf("alloc: format %v: %w", node, err)
	}
	if prev, _ := b.Result(im); prev != 0 && prev != Magic {
		return fmt.Errorf("alloc: format %v: magic became %#x meanwhile: %w", node, prev, ErrBadHeader)
	}
	return nil
}

// FormatAll formats every memory node of m's topology with opts (see Format), in order, and
// returns the errors of the nodes that failed.
func FormatAll(ctx context.Context, m farmem.Memory, opts FormatOptions) error {
	var errs []error
	for _, n := range m.Topology().MemoryNodes() {
		if err := Format(ctx, m, n, opts); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// Open reads node's header and validates it against the topology: one Read, and nothing is
// written. A header of another node or of another size is an error (ErrBadHeader,
// ErrSizeMismatch), as are the errors of DecodeHeader.
func Open(ctx context.Context, m farmem.Memory, node farmem.NodeID) (Header, error) {
	b := make([]byte, HeaderLen)
	if err := m.Read(ctx, farmem.MakeAddr(node, 0), b); err != nil {
		return Header{}, fmt.Errorf("alloc: open %v: %w", node, err)
	}
	h, err := validate(m.Topology(), node, b)
	if err != nil {
		return reread(ctx, m, node, err)
	}
	return h, nil
}

// reread tells apart, for a header read that showed data but neither magic nor claim
// (errUnclaimedData), foreign data from a read torn across a format in progress: a formatter
// CASes the claim, then writes the constants and the rest, then the magic, so a read of the
// header's words in order (magic, claim, constants) may find the claim not yet set and the
// constants already there. A read begun after it sees the claim: reread reads the header
// again and returns what it says (the header, once the format finished; ErrHalfFormatted while
// it runs); data with no claim again is foreign (ErrBadHeader). Any other err is returned as
// is. Cost: one round trip, only after such a read.
func reread(ctx context.Context, m farmem.Memory, node farmem.NodeID, err error) (Header, error) {
	if !errors.Is(err, errUnclaimedData) {
		return Header{}, err
	}
	b := make([]byte, HeaderLen)
	if rerr := m.Read(ctx, farmem.MakeAddr(node, 0), b); rerr != nil {
		return Header{}, fmt.Errorf("alloc: open %v: read the header again: %w", node, rerr)
	}
	return validate(m.Topology(), node, b)
}

// validate decodes the header read from node and checks it against the topology.
func validate(t *farmem.Topology, node farmem.NodeID, b []byte) (Header, error) {
	info, ok := t.Node(node)
	if !ok || info.Role != farmem.RoleMemory {
		return Header{}, fmt.Errorf("alloc: %v is not a memory node of the topology: %w", node, farmem.ErrInvalid)
	}
	h, err := DecodeHeader(b)
	if err != nil {
		return Header{}, fmt.Errorf("alloc: open %v: %w", node, err)
	}
	if h.Node != node {
		return Header{}, fmt.Errorf("alloc: open %v: the header is %v's: %w", node, h.Node, ErrBadHeader)
	}
	if h.Size != info.Size {
		return Header{}, fmt.Errorf("alloc: open %v: header for %d bytes, node has %d: %w", node, h.Size, info.Size, ErrSizeMismatch)
	}
	return h, nil
}
