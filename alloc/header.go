package alloc

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"

	"github.com/farmem/farmem/farmem"
)

// Magic is the first word of a formatted memory node: the bytes "farmALC1" read as a
// little-endian word. It is claimed last, with a CAS, when a node is formatted.
const Magic uint64 = 0x31434c416d726166

// Version is the layout version this package writes and reads. Version 2 added the handover
// table before the epoch table; version 3 added the free-chunk pool's head and count words to
// every node's header (see the package doc, "Free chunks").
const Version = 3

// HeaderLen is the number of bytes at offset 0 of a memory node that hold the header proper.
const HeaderLen = 512

// TableOffset is where the per-client tables start, and where the area reserved for roots
// ([HeaderLen, TableOffset)) ends: first the handover table at HandoverOffset, then the epoch
// table at Header.TableOff. Every node reserves both; only the home node's are used.
const TableOffset = 4096

// HandoverOffset is the offset of the handover table: one word per client id, slot i at
// HandoverOffset + 8*i (slot 0 unused), holding 0 or the packed address of the handover record
// the last allocator of that client id left at Close. Its offset does not depend on the header,
// so New reads a client's word in the same batch as the headers.
const HandoverOffset = TableOffset

// Chunk size limits.
const (
	MinChunkSize = 4 << 10
	MaxChunkSize = 1 << 30
)

// Offsets of the header words. The magic, claim, bump, symmetric bump and epoch words are only
// ever written by atomics; the constants block only by plain writes.
const (
	offMagic   = 0
	offClaim   = 8
	offConst   = 64
	nConst     = 12
	offBump    = 192
	offSymBump = 256
	offEpoch   = 320
	offPool    = 384 // the free-chunk pool's head word (see pool.go)
	offPoolN   = 448 // the number of chunks in the pool
)

// reserved are the byte ranges of the header no field uses; they must be zero.
var reserved = [][2]int{
	{offClaim + 8, offConst}, {offConst + 8*nConst, offBump}, {offBump + 8, offSymBump},
	{offSymBump + 8, offEpoch}, {offEpoch + 8, offPool}, {offPool + 8, offPoolN}, {offPoolN + 8, HeaderLen},
}

// errUnclaimedData is DecodeHeader's ErrBadHeader for a header with data but neither magic nor
// claim: foreign data, or a read torn across a format (see reread).
var errUnclaimedData = fmt.Errorf("no claim: %w", ErrBadHeader)

// Errors of headers and formatting. Each wraps farmem.ErrInvalid, so errors.Is(err,
// farmem.ErrInvalid) holds for every one of them as well.
var (
	// ErrNotFormatted: the node's header is all zero.
	ErrNotFormatted = fmt.Errorf("alloc: node not formatted: %w", farmem.ErrInvalid)
	// ErrHalfFormatted: a formatter claimed the node but never set the magic word (it crashed,
	// or is still formatting). Formatting again with the same options finishes the job.
	ErrHalfFormatted = fmt.Errorf("alloc: node half formatted: %w", farmem.ErrInvalid)
	// ErrBadHeader: the header is not one this package wrote: wrong magic, a checksum that does
	// not match, inconsistent fields, a header of another node, or data where a header belongs.
	ErrBadHeader = fmt.Errorf("alloc: bad node header: %w", farmem.ErrInvalid)
	// ErrVersion: the header has a layout version this package does not read.
	ErrVersion = fmt.Errorf("alloc: unsupported layout version: %w", farmem.ErrInvalid)
	// ErrSizeMismatch: the header was formatted for a node of another size.
	ErrSizeMismatch = fmt.Errorf("alloc: node size does not match its header: %w", farmem.ErrInvalid)
	// ErrFormatConflict: the node is formatted, or half formatted, with other options.
	ErrFormatConflict = fmt.Errorf("alloc: node formatted with other options: %w", farmem.ErrInvalid)
)

// ErrPinExpired: a pinned section outlived the client's lease, so other clients may have reused
// blocks it read; the operation must be retried.
var ErrPinExpired = errors.New("alloc: pin outlived its lease")

// Header is a memory node's header. Every field but the last five is fixed when the node is
// formatted; the layout of the node follows from them:
//
//	[0, HeaderLen)                     the header
//	[HandoverOff, TableOff)            the handover table, 8*(MaxClients+1) bytes (home node only)
//	[TableOff, TableOff+8*(MaxClients+1))  the epoch table (used on the home node only)
//	[SymBase, SymBase+SymSize)         the symmetric area, at the same offsets on every node
//	[HeapBase, HeapLimit)              chunks, claimed with FAA on the bump word
type Header struct {
	Version uint64
	// Node is the node the header was formatted for.
	Node farmem.NodeID
	// Size is the node's size in bytes.
	Size uint64
	// ChunkSize is the unit clients claim from the heap (a power of two).
	ChunkSize uint64
	// MaxClients is the number of announcement slots of the epoch table (client ids 1..MaxClients).
	MaxClients int
	// TableOff is the offset of the epoch table: HandoverOffset + 8*(MaxClients+1), right after
	// the handover table.
	TableOff uint64
	// SymBase and SymSize bound the symmetric area.
	SymBase, SymSize uint64
	// HeapBase and HeapLimit bound the chunk heap.
	HeapBase, HeapLimit uint64
	// Home is the node that holds the global epoch, the epoch table and the handover table in
	// use, and the symmetric bump pointer.
	Home farmem.NodeID
	// HandoverOff is the offset of the handover table (always HandoverOffset).
	HandoverOff uint64
	// Replicas is r, the number of metadata nodes (1, or an odd number up to
	// MaxMetaReplicas): the r memory nodes from Home on, in id order (MetaNodes), each holding
	// a copy of the symmetric bump word, the global epoch, the epoch table and the handover
	// table, kept on a majority (see the package doc, "Replicated metadata"). It is stored in
	// bits 16..23 of the home word of the constants, 0 for r = 1, so a header with r = 1 is the
	// bytes it was before replication existed.
	Replicas int

	// Bump is the next chunk the heap hands out (past HeapLimit once exhausted).
	Bump uint64
	// SymBump is the next symmetric chunk (meaningful on the home node).
	SymBump uint64
	// Epoch is the global epoch (meaningful on the home node).
	Epoch uint64
	// Pool is the head word of the node's pool of free chunks (0: empty; see the package doc,
	// "Free chunks"), and PoolChunks the number of chunks in it. PoolChunks is updated after
	// the head word moves, so it is exact only when no client is pushing or popping.
	Pool       uint64
	PoolChunks int64
}

// layoutOf computes the header of node id of size bytes from the format parameters.
func layoutOf(id farmem.NodeID, size, chunk uint64, maxClients int, symSize uint64, home farmem.NodeID, replicas int) (Header, error) {
	h := Header{
		Version: Version, Node: id, Size: size, ChunkSize: chunk, MaxClients: maxClients,
		SymSize: symSize, Home: home, HandoverOff: HandoverOffset, Replicas: replicas,
	}
	if maxClients >= 1 && maxClients <= 0xffff {
		h.TableOff = tableOffFor(maxClients)
	}
	if err := h.checkParams(farmem.ErrInvalid); err != nil {
		return Header{}, err
	}
	h.SymBase = alignUp(h.TableOff+8*uint64(maxClients+1), chunk)
	h.HeapBase = h.SymBase + symSize
	h.HeapLimit = size &^ (chunk - 1)
	if h.HeapBase > h.HeapLimit {
		return Header{}, fmt.Errorf("alloc: node %v of %d bytes cannot hold a %d-byte symmetric area after its header: %w",
			id, size, symSize, farmem.ErrNoSpace)
	}
	return h, nil
}

// checkParams checks the fields the layout is computed from; errors wrap sentinel.
func (h Header) checkParams(sentinel error) error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("alloc: header of %v: %s: %w", h.Node, fmt.Sprintf(format, args...), sentinel)
	}
	switch {
	case h.Node == 0 || h.Node > farmem.MaxMemoryNode:
		return bad("node id %d is not a memory node", uint16(h.Node))
	case h.Home == 0 || h.Home > farmem.MaxMemoryNode:
		return bad("home %d is not a memory node", uint16(h.Home))
	case h.ChunkSize < MinChunkSize || h.ChunkSize > MaxChunkSize || h.ChunkSize&(h.ChunkSize-1) != 0:
		return bad("chunk size %d is not a power of two in [%d, %d]", h.ChunkSize, MinChunkSize, MaxChunkSize)
	case h.Size > farmem.MaxOffset+1:
		return bad("size %d exceeds 48 bits", h.Size)
	case h.MaxClients < 1 || h.MaxClients > 0xffff:
		return bad("%d clients outside [1, 65535]", h.MaxClients)
	case h.Replicas < 1 || h.Replicas > MaxMetaReplicas || h.Replicas%2 == 0:
		return bad("%d metadata replicas, want an odd number in [1, %d]", h.Replicas, MaxMetaReplicas)
	case h.HandoverOff != HandoverOffset:
		return bad("handover table at %#x, want %#x", h.HandoverOff, HandoverOffset)
	case h.TableOff != tableOffFor(h.MaxClients):
		return bad("epoch table at %#x, want %#x", h.TableOff, tableOffFor(h.MaxClients))
	case h.SymSize%h.ChunkSize != 0 || h.SymSize > h.Size:
		return bad("symmetric size %d is not a multiple of the chunk size within the node", h.SymSize)
	}
	return nil
}

// tableOffFor is the offset of the epoch table of a node formatted for maxClients clients: right
// after the handover table.
func tableOffFor(maxClients int) uint64 { return HandoverOffset + 8*uint64(maxClients+1) }

// check checks that every field agrees with the layout its parameters give.
func (h Header) check() error {
	if err := h.checkParams(ErrBadHeader); err != nil {
		return err
	}
	want, err := layoutOf(h.Node, h.Size, h.ChunkSize, h.MaxClients, h.SymSize, h.Home, h.Replicas)
	if err != nil {
		return fmt.Errorf("alloc: header of %v: %v: %w", h.Node, err, ErrBadHeader)
	}
	if want.SymBase != h.SymBase || want.HeapBase != h.HeapBase || want.HeapLimit != h.HeapLimit {
		return fmt.Errorf("alloc: header of %v: areas [%#x %#x %#x] do not follow from its parameters [%#x %#x %#x]: %w",
			h.Node, h.SymBase, h.HeapBase, h.HeapLimit, want.SymBase, want.HeapBase, want.HeapLimit, ErrBadHeader)
	}
	return nil
}

// constants returns the constants block as the words the header stores.
func (h Header) constants() [nConst]uint64 {
	return [nConst]uint64{h.Version, uint64(h.Node), h.Size, h.ChunkSize, uint64(h.MaxClients), h.TableOff,
		h.SymBase, h.SymSize, h.HeapBase, h.HeapLimit, homeWord(h.Home, h.Replicas), h.HandoverOff}
}

func (h Header) constantBytes() []byte {
	b := make([]byte, 8*nConst)
	for i, w := range h.constants() {
		binary.LittleEndian.PutUint64(b[8*i:], w)
	}
	return b
}

// claimOf is the claim word of a constants block: a nonzero FNV-1a hash of its bytes. It names
// the options a node is being formatted with, and doubles as the header's checksum.
func claimOf(constants []byte) uint64 {
	f := fnv.New64a()
	f.Write(constants)
	return f.Sum64() | 1
}

// Claim returns the claim word a header with these constants carries.
func (h Header) Claim() uint64 { return claimOf(h.constantBytes()) }

// Encode returns the HeaderLen bytes of a formatted node's header: magic, claim, constants and
// the three dynamic words.
func (h Header) Encode() []byte {
	b := make([]byte, HeaderLen)
	c := h.constantBytes()
	copy(b[offConst:], c)
	binary.LittleEndian.PutUint64(b[offMagic:], Magic)
	binary.LittleEndian.PutUint64(b[offClaim:], claimOf(c))
	binary.LittleEndian.PutUint64(b[offBump:], h.Bump)
	binary.LittleEndian.PutUint64(b[offSymBump:], h.SymBump)
	binary.LittleEndian.PutUint64(b[offEpoch:], h.Epoch)
	binary.LittleEndian.PutUint64(b[offPool:], h.Pool)
	binary.LittleEndian.PutUint64(b[offPoolN:], uint64(h.PoolChunks))
	return b
}

// DecodeHeader decodes and validates the first HeaderLen bytes of a memory node. It never
// panics. An all-zero header gives ErrNotFormatted, a claimed one without magic
// ErrHalfFormatted, another layout version ErrVersion, and anything else that this package did
// not write ErrBadHeader.
func DecodeHeader(b []byte) (Header, error) {
	if len(b) < HeaderLen {
		return Header{}, fmt.Errorf("alloc: header of %d bytes, want %d: %w", len(b), HeaderLen, ErrBadHeader)
	}
	word := func(off int) uint64 { return binary.LittleEndian.Uint64(b[off:]) }
	magic, claim := word(offMagic), word(offClaim)
	if magic != Magic {
		switch {
		case magic == 0 && claim == 0 && allZero(b[:HeaderLen]):
			return Header{}, ErrNotFormatted
		case magic == 0 && claim != 0:
			return Header{}, fmt.Errorf("alloc: claim %#x set but no magic: %w", claim, ErrHalfFormatted)
		case magic == 0:
			return Header{}, fmt.Errorf("alloc: no magic, but the header holds data: %w", errUnclaimedData)
		}
		return Header{}, fmt.Errorf("alloc: magic %#x, want %#x: %w", magic, Magic, ErrBadHeader)
	}
	if v := word(offConst); v != Version {
		return Header{}, fmt.Errorf("alloc: layout version %d, this package reads %d: %w", v, Version, ErrVersion)
	}
	var w [nConst]uint64
	for i := range w {
		w[i] = word(offConst + 8*i)
	}
	for _, r := range reserved {
		if !allZero(b[r[0]:r[1]]) {
			return Header{}, fmt.Errorf("alloc: reserved header bytes [%d, %d) are not zero: %w", r[0], r[1], ErrBadHeader)
		}
	}
	if claim != claimOf(b[offConst:offConst+8*nConst]) {
		return Header{}, fmt.Errorf("alloc: header checksum %#x does not match its fields: %w", claim, ErrBadHeader)
	}
	if w[1] > 0xffff || w[10] > 0xffffff || w[4] > 0xffff {
		return Header{}, fmt.Errorf("alloc: header fields out of range: %w", ErrBadHeader)
	}
	home, replicas := splitHomeWord(w[10])
	h := Header{
		Version: w[0], Node: farmem.NodeID(w[1]), Size: w[2], ChunkSize: w[3], MaxClients: int(w[4]),
		TableOff: w[5], SymBase: w[6], SymSize: w[7], HeapBase: w[8], HeapLimit: w[9], Home: home,
		HandoverOff: w[11], Replicas: replicas,
		Bump: word(offBump), SymBump: word(offSymBump), Epoch: word(offEpoch),
		Pool: word(offPool), PoolChunks: int64(word(offPoolN)),
	}
	if err := h.check(); err != nil {
		return Header{}, err
	}
	return h, nil
}

func allZero(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}

func alignUp(x, a uint64) uint64 { return (x + a - 1) &^ (a - 1) }
