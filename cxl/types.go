package cxl

import (
	"time"

	"github.com/farmem/farmem/farmem"
)

// RegionInfo describes a region.
type RegionInfo struct {
	Path            string
	Backing         Backing
	Size            uint64 // bytes mapped
	PageSize        uint64
	MemoryNodes     int
	MemorySize      uint64
	MaxComputeNodes int
	ClientsPerNode  int
	MaxHandlers     int
	SliceSize       uint64
	SharedSize      uint64
	ComputeSize     uint64 // a compute node's addressable region
	Mailboxes       int
	MailboxSize     uint64
	DownTimeout     time.Duration
	Placement       Placement
}

// Status is a snapshot of a region's compute-id table and mailboxes.
type Status struct {
	Compute []ComputeStatus // one per compute id, ascending
}

// ComputeStatus is one compute id: who holds it and the mailboxes in use in its control block.
type ComputeStatus struct {
	ID      farmem.ComputeID
	Gen     uint32    // generation of the last claim (0: never claimed)
	PID     int       // the holder's pid, as it recorded it
	Live    bool      // lease current and, on this host, the holder's process alive
	Crashed bool      // the lease was marked crashed (a crash, or fenced after it expired)
	Free    bool      // released by Close, or never claimed
	Expires time.Time // end of the current lease
	// Mailboxes lists the mailboxes of this node that are not free.
	Mailboxes []MailboxStatus
}

// MailboxStatus is a mailbox in use.
type MailboxStatus struct {
	Slot      int
	Owner     farmem.ComputeID // the calling compute node
	OwnerGen  uint32
	Phase     string
	Abandoned bool
}
