package cxl

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"math/bits"
	"time"

	"github.com/farmem/farmem/farmem"
	"github.com/farmem/farmem/numaemu"
)

// ErrBadRegion: the file is not a farmem cxl region (wrong magic, version, checksum or layout),
// or is smaller than its header says. Nothing was written to it. It wraps [farmem.ErrInvalid].
var ErrBadRegion = fmt.Errorf("cxl: not a valid farmem region: %w", farmem.ErrInvalid)

// ErrNotDAX: an fsdax region was asked for on a file system that does not map files directly
// (MAP_SYNC refused), or a devdax region on something that is not a DAX device. It wraps
// [farmem.ErrNotSupported].
var ErrNotDAX = fmt.Errorf("cxl: not DAX: %w", farmem.ErrNotSupported)

// The region file's header, at offset 0. All words are little-endian.
const (
	magic        = "FMCXLRG\x00"
	version      = 1
	headerPage   = 4096 // the header and the compute-id table start in this page
	headerFields = 208  // bytes covered by the checksum
	headerLen    = headerFields + 4
	tableOff     = headerPage
	entrySize    = 64 // one compute-id table entry: a cache line
)

// Control block of a compute node (outside the node's addressable region): doorbell, the
// slot-free word, the wake buckets, then the mailbox slots.
const (
	ctlBell     = 0   // u32 futex: bumped by callers after posting a request; u32 sleepers at +4
	ctlSlotFree = 64  // u32 futex: bumped when a slot is freed; u32 waiters at +4
	ctlBuckets  = 128 // numBuckets x {u32 seq, u32 waiters}
	numBuckets  = 64
	ctlSlots    = ctlBuckets + numBuckets*8 // 640
	slotHeader  = 128                       // per slot, before its payload
)

// Slot header fields (offsets within a slot).
const (
	slotOwner  = 0  // u64: 0 free, else the claiming compute node's token
	slotState  = 8  // u32 futex: seq<<8 | flags<<4 | phase; u32 sleepers at +12
	slotMeta   = 16 // u64: method | from<<16 | code<<32 | remote<<40 | one-way<<48 (metaOneWay)
	slotTotal  = 24 // u64: the whole message's length
	slotOff    = 32 // u64: this chunk's offset in the message
	slotLen    = 40 // u64: this chunk's length
	slotTarget = 48 // u64: the target's generation the caller addressed
)

// Limits on the parameters a header may carry.
const (
	maxPageSize     = 1 << 30
	maxSliceSize    = 1 << 30
	maxSharedSize   = 1 << 40
	maxMailboxes    = 4096
	maxMailboxSize  = 16 << 20
	maxDownTimeout  = time.Hour
	maxRegionSize   = 1 << 48
	profileNameSize = 32
)

// header is a region's self-description: its parameters (what Create was asked for) and the
// layout derived from them. decodeHeader accepts only a header whose stored layout is exactly
// the one its parameters give.
type header struct {
	Backing        Backing
	PageSize       uint64
	TotalSize      uint64
	MemoryNodes    uint32
	MemorySize     uint64
	MaxCompute     uint32
	ClientsPerNode uint32
	MaxHandlers    uint32
	Mailboxes      uint32
	SliceSize      uint64
	SharedSize     uint64
	MailboxSize    uint64
	DownTimeout    time.Duration
	EpochMs        int64
	// Placement, as the creator resolved it.
	Requested int32
	Node      int32
	Emulated  bool
	Profile   string

	// Derived layout.
	ComputeBase   uint64 // offset of compute node 1's region
	ComputeStride uint64 // region + control block, rounded to PageSize
	CtlOff        uint64 // control block's offset within a stride
	MemBase       uint64 // offset of memory node 1
	MemStride     uint64 // MemorySize rounded to PageSize
}

// ComputeSize is the addressable size of a compute node's region.
func (h *header) ComputeSize() uint64 {
	return farmem.ComputeHeaderSize + uint64(h.ClientsPerNode)*h.SliceSize + h.SharedSize
}

func (h *header) slotSize() uint64 { return slotHeader + h.MailboxSize }

// ctlSize is the size of one compute node's control block.
func (h *header) ctlSize() uint64 { return ctlSlots + uint64(h.Mailboxes)*h.slotSize() }

// entryOff is the offset of compute id c's table entry.
func (h *header) entryOff(c farmem.ComputeID) uint64 { return tableOff + uint64(c-1)*entrySize }

// computeOff is the offset of compute node c's region.
func (h *header) computeOff(c farmem.ComputeID) uint64 {
	return h.ComputeBase + uint64(c-1)*h.ComputeStride
}

// ctlOff is the offset of compute node c's control block.
func (h *header) ctlOff(c farmem.ComputeID) uint64 { return h.computeOff(c) + h.CtlOff }

// memOff is the offset of memory node n.
func (h *header) memOff(n farmem.NodeID) uint64 { return h.MemBase + uint64(n-1)*h.MemStride }

// errOverflow marks a layout whose sizes do not fit.
var errOverflow = errors.New("sizes overflow")

// sizer accumulates a layout computation, remembering the first overflow.
type sizer struct{ err error }

func (s *sizer) add(a, b uint64) uint64 {
	r, c := bits.Add64(a, b, 0)
	if c != 0 && s.err == nil {
		s.err = errOverflow
	}
	return r
}

func (s *sizer) mul(a, b uint64) uint64 {
	hi, lo := bits.Mul64(a, b)
	if hi != 0 && s.err == nil {
		s.err = errOverflow
	}
	return lo
}

// roundUp rounds a up to a multiple of the power of two p.
func (s *sizer) roundUp(a, p uint64) uint64 { return s.add(a, p-1) &^ (p - 1) }

// derive computes the layout from the parameters. It checks the parameters first. Its errors
// wrap no sentinel; callers say whether the parameters came from a file or from Options.
func (h *header) derive() error {
	if err := h.checkParams(); err != nil {
		return err
	}
	var s sizer
	computeSize := s.add(s.add(farmem.ComputeHeaderSize, s.mul(uint64(h.ClientsPerNode), h.SliceSize)), h.SharedSize)
	ctlSize := s.add(ctlSlots, s.mul(uint64(h.Mailboxes), s.add(slotHeader, h.MailboxSize)))
	h.ComputeBase = s.roundUp(tableOff+uint64(h.MaxCompute)*entrySize, h.PageSize)
	h.CtlOff = s.roundUp(computeSize, headerPage)
	h.ComputeStride = s.roundUp(s.add(h.CtlOff, ctlSize), h.PageSize)
	h.MemBase = s.add(h.ComputeBase, s.mul(uint64(h.MaxCompute), h.ComputeStride))
	h.MemStride = s.roundUp(h.MemorySize, h.PageSize)
	h.TotalSize = s.add(h.MemBase, s.mul(uint64(h.MemoryNodes), h.MemStride))
	if s.err != nil || h.TotalSize > maxRegionSize || computeSize > farmem.MaxOffset+1 {
		return fmt.Errorf("a region of %d memory nodes of %d bytes and %d compute nodes does not fit in %d bytes",
			h.MemoryNodes, h.MemorySize, h.MaxCompute, uint64(maxRegionSize))
	}
	return nil
}

func isPow2(v uint64) bool { return v != 0 && v&(v-1) == 0 }

// checkParams validates the parameters, never trusting any of them. Its errors wrap no sentinel.
func (h *header) checkParams() error {
	bad := fmt.Errorf
	switch {
	case h.Backing <= BackingAuto || h.Backing >= numBackings:
		return bad("unknown backing %d", h.Backing)
	case !isPow2(h.PageSize) || h.PageSize < headerPage || h.PageSize > maxPageSize:
		return bad("page size %d", h.PageSize)
	case h.MemoryNodes < 1 || h.MemoryNodes > uint32(farmem.MaxMemoryNode):
		return bad("%d memory nodes", h.MemoryNodes)
	case h.MemorySize < 64 || h.MemorySize%8 != 0 || h.MemorySize > farmem.MaxOffset+1:
		return bad("memory node size %d", h.MemorySize)
	case h.MaxCompute < 1 || h.MaxCompute > uint32(farmem.MaxComputeID):
		return bad("%d compute nodes", h.MaxCompute)
	case uint64(tableOff)+uint64(h.MaxCompute)*entrySize > maxRegionSize:
		return bad("compute table too large")
	case h.ClientsPerNode < 2 || h.MaxHandlers < 1 || h.MaxHandlers >= h.ClientsPerNode:
		return bad("%d client slots cannot hold %d handlers and a client", h.ClientsPerNode, h.MaxHandlers)
	case uint64(h.MaxCompute)*uint64(h.ClientsPerNode) > 0xffff:
		return bad("%d compute nodes x %d client slots exceed 16-bit client ids", h.MaxCompute, h.ClientsPerNode)
	case h.SliceSize < 64 || h.SliceSize%64 != 0 || h.SliceSize > maxSliceSize:
		return bad("slice size %d", h.SliceSize)
	case h.SharedSize%8 != 0 || h.SharedSize > maxSharedSize:
		return bad("shared area size %d", h.SharedSize)
	case h.Mailboxes < 1 || h.Mailboxes > maxMailboxes:
		return bad("%d mailboxes", h.Mailboxes)
	case h.MailboxSize < 64 || h.MailboxSize%64 != 0 || h.MailboxSize > maxMailboxSize:
		return bad("mailbox size %d", h.MailboxSize)
	case h.DownTimeout <= 0 || h.DownTimeout > maxDownTimeout:
		return bad("down timeout %v", h.DownTimeout)
	case h.EpochMs <= 0:
		return bad("epoch %d", h.EpochMs)
	case len(h.Profile) >= profileNameSize:
		return bad("profile name of %d bytes", len(h.Profile))
	}
	if h.Profile != "" {
		if _, err := numaemu.ProfileByName(h.Profile); err != nil {
			return bad("unknown latency profile %q", h.Profile)
		}
	}
	return nil
}

// encode writes the header into b (at least headerLen bytes).
func (h *header) encode(b []byte) {
	le := binary.LittleEndian
	clear(b[:headerLen])
	copy(b, magic)
	le.PutUint32(b[8:], version)
	le.PutUint32(b[12:], headerFields)
	le.PutUint32(b[16:], uint32(h.Backing))
	le.PutUint32(b[20:], h.MemoryNodes)
	le.PutUint64(b[24:], h.PageSize)
	le.PutUint64(b[32:], h.TotalSize)
	le.PutUint64(b[40:], h.MemorySize)
	le.PutUint32(b[48:], h.MaxCompute)
	le.PutUint32(b[52:], h.ClientsPerNode)
	le.PutUint32(b[56:], h.MaxHandlers)
	le.PutUint32(b[60:], h.Mailboxes)
	le.PutUint64(b[64:], h.SliceSize)
	le.PutUint64(b[72:], h.SharedSize)
	le.PutUint64(b[80:], h.MailboxSize)
	le.PutUint64(b[88:], uint64(h.DownTimeout))
	le.PutUint64(b[96:], uint64(h.EpochMs))
	le.PutUint64(b[104:], tableOff)
	le.PutUint64(b[112:], h.ComputeBase)
	le.PutUint64(b[120:], h.ComputeStride)
	le.PutUint64(b[128:], h.CtlOff)
	le.PutUint64(b[136:], h.MemBase)
	le.PutUint64(b[144:], h.MemStride)
	le.PutUint32(b[152:], uint32(h.Requested))
	le.PutUint32(b[156:], uint32(h.Node))
	if h.Emulated {
		le.PutUint32(b[160:], 1)
	}
	copy(b[176:176+profileNameSize], h.Profile)
	le.PutUint32(b[headerFields:], crc32.ChecksumIEEE(b[:headerFields]))
}

// decodeHeader parses and validates a header. It never panics; anything that is not a header
// encode could have written gives an error wrapping ErrBadRegion.
func decodeHeader(b []byte) (*header, error) {
	if len(b) < headerLen {
		return nil, fmt.Errorf("%w: %d bytes is too small for a header (%d)", ErrBadRegion, len(b), headerLen)
	}
	le := binary.LittleEndian
	if string(b[:8]) != magic {
		return nil, fmt.Errorf("%w: bad magic %q", ErrBadRegion, b[:8])
	}
	if v := le.Uint32(b[8:]); v != version {
		return nil, fmt.Errorf("%w: version %d, this build reads version %d", ErrBadRegion, v, version)
	}
	if n := le.Uint32(b[12:]); n != headerFields {
		return nil, fmt.Errorf("%w: header length %d, want %d", ErrBadRegion, n, headerFields)
	}
	if sum, want := le.Uint32(b[headerFields:]), crc32.ChecksumIEEE(b[:headerFields]); sum != want {
		return nil, fmt.Errorf("%w: header checksum %#x, want %#x", ErrBadRegion, sum, want)
	}
	name := b[176 : 176+profileNameSize]
	end := 0
	for end < len(name) && name[end] != 0 {
		end++
	}
	for _, c := range name[end:] {
		if c != 0 {
			return nil, fmt.Errorf("%w: profile name not NUL-padded", ErrBadRegion)
		}
	}
	emulated := le.Uint32(b[160:])
	if emulated > 1 || le.Uint32(b[164:]) != 0 || le.Uint64(b[168:]) != 0 {
		return nil, fmt.Errorf("%w: reserved header fields set", ErrBadRegion)
	}
	h := &header{
		Backing:        Backing(le.Uint32(b[16:])),
		MemoryNodes:    le.Uint32(b[20:]),
		PageSize:       le.Uint64(b[24:]),
		MemorySize:     le.Uint64(b[40:]),
		MaxCompute:     le.Uint32(b[48:]),
		ClientsPerNode: le.Uint32(b[52:]),
		MaxHandlers:    le.Uint32(b[56:]),
		Mailboxes:      le.Uint32(b[60:]),
		SliceSize:      le.Uint64(b[64:]),
		SharedSize:     le.Uint64(b[72:]),
		MailboxSize:    le.Uint64(b[80:]),
		DownTimeout:    time.Duration(le.Uint64(b[88:])),
		EpochMs:        int64(le.Uint64(b[96:])),
		Requested:      int32(le.Uint32(b[152:])),
		Node:           int32(le.Uint32(b[156:])),
		Emulated:       emulated == 1,
		Profile:        string(name[:end]),
	}
	if err := h.derive(); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrBadRegion, err)
	}
	stored := []struct {
		name      string
		got, want uint64
	}{
		{"total size", le.Uint64(b[32:]), h.TotalSize},
		{"table offset", le.Uint64(b[104:]), tableOff},
		{"compute base", le.Uint64(b[112:]), h.ComputeBase},
		{"compute stride", le.Uint64(b[120:]), h.ComputeStride},
		{"control offset", le.Uint64(b[128:]), h.CtlOff},
		{"memory base", le.Uint64(b[136:]), h.MemBase},
		{"memory stride", le.Uint64(b[144:]), h.MemStride},
	}
	for _, f := range stored {
		if f.got != f.want {
			return nil, fmt.Errorf("%w: %s %#x, the parameters give %#x", ErrBadRegion, f.name, f.got, f.want)
		}
	}
	return h, nil
}
