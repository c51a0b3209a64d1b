package cxl

import (
	"fmt"
	"strings"
	"time"

	"github.com/farmem/farmem/farmem"
	"github.com/farmem/farmem/farmem/transport"
	"github.com/farmem/farmem/numaemu"
)

// Backing is what a region's memory is.
type Backing uint8

// The backings.
const (
	// BackingAuto infers the backing: a memfd for an empty path, devdax for a character device
	// under /dev/dax, hugetlbfs for a file on a hugetlbfs mount, fsdax for a file the kernel
	// reports DAX (STATX_ATTR_DAX), and a plain shared file (tmpfs, /dev/shm) otherwise.
	BackingAuto Backing = iota
	// BackingMemfd is an anonymous memfd, sealed against shrinking (F_SEAL_SHRINK), shared
	// through /proc/<pid>/fd/<n> or an inherited descriptor.
	BackingMemfd
	// BackingFile is a file on a memory file system, usually /dev/shm (tmpfs).
	BackingFile
	// BackingHugetlb is a file on a hugetlbfs mount; sizes are rounded to its huge page size.
	BackingHugetlb
	// BackingFSDAX is a file on a DAX file system, mapped MAP_SHARED_VALIDATE|MAP_SYNC.
	BackingFSDAX
	// BackingDevDAX is a device-DAX character device (/dev/daxX.Y).
	BackingDevDAX
	numBackings
)

var backingNames = [numBackings]string{"auto", "memfd", "file", "hugetlbfs", "fsdax", "devdax"}

func (b Backing) String() string {
	if b < numBackings {
		return backingNames[b]
	}
	return fmt.Sprintf("backing(%d)", uint8(b))
}

// ParseBacking returns the backing called s (as String spells it).
func ParseBacking(s string) (Backing, error) {
	for i, n := range backingNames {
		if strings.EqualFold(s, n) {
			return Backing(i), nil
		}
	}
	return BackingAuto, fmt.Errorf("cxl: unknown backing %q: %w", s, farmem.ErrInvalid)
}

// Policy is how a fabric handle accesses the shared memory.
type Policy uint8

const (
	// Coherent: plain loads, stores and LOCK-prefixed atomics, as on one host or a CXL pool
	// with hardware coherence (CXL.mem with back-invalidation).
	Coherent Policy = iota
	// Uncached: the discipline of a multi-host pool without hardware coherence. Every write
	// (verb payloads, mailbox payloads) is written back and fenced after it is stored
	// (CLWB+SFENCE), every read is preceded by a flush of its lines (CLFLUSHOPT+MFENCE), and
	// atomics are assumed to execute at the device: each one flushes its line first and writes
	// it back after, so it goes to memory as a device-executed atomic would. On one coherent
	// host, such as any test machine, this reproduces the COST of such a pool, not its failure
	// modes: a missing flush cannot show up as a stale read here, because the caches are
	// coherent anyway (see package atomics).
	Uncached
)

func (p Policy) String() string {
	switch p {
	case Coherent:
		return "coherent"
	case Uncached:
		return "uncached"
	}
	return fmt.Sprintf("policy(%d)", uint8(p))
}

// Options configure a region at Create. The zero value gives one memory node of 16 MiB and
// room for 8 compute nodes, in a memfd.
type Options struct {
	// Backing is what the memory is (default BackingAuto: inferred from the path).
	Backing Backing
	// Shape is the region's shape (see transport.Shape for the fields and their defaults).
	// ComputeNodes is the number of compute ids, i.e. of processes (or fabric handles) that
	// can be attached at once; its default here is 8. Memory sizes are rounded up to 8 bytes.
	transport.Shape
	// Mailboxes is the number of Call mailboxes in each compute node's control block: how many
	// Calls to one node can be in flight at once (default 32; more wait for a free one).
	Mailboxes int
	// MailboxSize is each mailbox's payload buffer (default 16 KiB, rounded up to 64 bytes).
	// Longer requests and replies, up to farmem.MaxCallBytes, go through in chunks.
	MailboxSize uint64
	// DownTimeout is the fabric's down timeout and the compute-node lease (default 1s): a
	// compute node that has not renewed its lease for this long is down, and an unanswered
	// op to a hung node fails after it.
	DownTimeout time.Duration
	// Placement is the NUMA request the region is placed by (numaemu: mbind, populate,
	// verify). Nil places it on the creating thread's node. A request for an absent node
	// fails unless Fallback is set; then the region goes to a local node and the request's
	// profile is recorded as the latency openers inject. DAX backings are not placed: their
	// node is the device's (devdax: its target_node).
	Placement *numaemu.Request
	// Mode is the permission of a created file (default 0600).
	Mode uint32
}

// OpenOptions configure one fabric handle (one compute node).
type OpenOptions struct {
	// Policy is the access policy (default Coherent).
	Policy Policy
	// Profile, if set, is the latency profile whose added latency (Profile.Added: its latency
	// less local DRAM's) is injected per verb and per Call message. Nil takes the region's
	// (the profile its placement fell back from, if any). A profile whose Added is zero (such
	// as LocalDRAM) injects nothing. See the package doc for what is charged.
	Profile *numaemu.Profile
	// Seed seeds the runtime's random sources (default 1).
	Seed uint64
}

func (o *Options) defaults() {
	if o.ComputeNodes == 0 {
		o.ComputeNodes = 8
	}
	o.EnsureDefaults()
	if o.Mailboxes == 0 {
		o.Mailboxes = 32
	}
	if o.MailboxSize == 0 {
		o.MailboxSize = 16 << 10
	}
	o.MailboxSize = (o.MailboxSize + 63) &^ 63
	if o.DownTimeout == 0 {
		o.DownTimeout = time.Second
	}
	if o.Mode == 0 {
		o.Mode = 0o600
	}
}

// header builds the header Create writes, less placement and epoch, checking the options.
func (o *Options) header(b Backing, pageSize uint64) (*header, error) {
	if err := o.Check(); err != nil {
		return nil, fmt.Errorf("cxl: %w", err)
	}
	if o.Mailboxes < 0 || o.Mailboxes > maxMailboxes {
		return nil, fmt.Errorf("cxl: %d mailboxes: %w", o.Mailboxes, farmem.ErrInvalid)
	}
	h := &header{
		Backing:        b,
		PageSize:       pageSize,
		MemoryNodes:    uint32(o.MemoryNodes),
		MemorySize:     (o.MemorySize + 7) &^ 7,
		MaxCompute:     uint32(o.ComputeNodes),
		ClientsPerNode: uint32(o.ClientsPerNode),
		MaxHandlers:    uint32(o.MaxHandlers),
		Mailboxes:      uint32(o.Mailboxes),
		SliceSize:      o.SliceSize,
		SharedSize:     o.SharedSize,
		MailboxSize:    o.MailboxSize,
		DownTimeout:    o.DownTimeout,
		EpochMs:        time.Now().UnixMilli(),
		Requested:      -1,
		Node:           -1,
	}
	if err := h.derive(); err != nil {
		return nil, fmt.Errorf("cxl: %w: %w", err, farmem.ErrInvalid)
	}
	return h, nil
}

// Placement is where a region's memory was put when it was created, as numaemu resolved it.
type Placement struct {
	Requested int           // the NUMA node asked for (-1: none recorded)
	Node      int           // the node the memory is on (-1: unknown or not placed)
	Emulated  bool          // Node is not the one asked for: latency is injected, not real
	Inject    time.Duration // the latency openers inject by default (the profile's Added)
	Profile   string        // the profile the request named, if any
	Reason    string        // one sentence saying what happened (the creator's process only)
	// Verified is where move_pages found the pages after placement (the creator's process only).
	Verified numaemu.Verification
}
