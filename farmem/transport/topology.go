package transport

import (
	"fmt"

	"github.com/farmem/farmem/farmem"
)

// ClientIDOf returns the id of the client in slot of compute node c:
// (c-1)*ClientsPerNode + slot + 1.
func ClientIDOf(t *farmem.Topology, c farmem.ComputeID, slot int) (farmem.ClientID, error) {
	if c == 0 || slot < 0 || slot >= t.ClientsPerNode {
		return 0, fmt.Errorf("farmem: client slot %d of compute node %d: %w", slot, c, farmem.ErrInvalid)
	}
	id := (uint64(c)-1)*uint64(t.ClientsPerNode) + uint64(slot) + 1
	if id > 0xffff {
		return 0, fmt.Errorf("farmem: client slot %d of compute node %d does not fit a 16-bit id: %w", slot, c, farmem.ErrInvalid)
	}
	return farmem.ClientID(id), nil
}

// ClientSlot returns the compute node and slot a client id encodes.
func ClientSlot(t *farmem.Topology, id farmem.ClientID) (farmem.ComputeID, int, error) {
	if id == 0 || t.ClientsPerNode <= 0 {
		return 0, 0, fmt.Errorf("farmem: client id %d: %w", id, farmem.ErrInvalid)
	}
	k := uint64(t.ClientsPerNode)
	c := (uint64(id)-1)/k + 1
	if farmem.ComputeID(c) > farmem.MaxComputeID {
		return 0, 0, fmt.Errorf("farmem: client id %d: %w", id, farmem.ErrInvalid)
	}
	return farmem.ComputeID(c), int((uint64(id) - 1) % k), nil
}

// ClientInfo describes the client in slot of compute node node: its id and its slice.
func ClientInfo(t *farmem.Topology, node farmem.NodeID, slot int) (farmem.ClientInfo, error) {
	id, err := ClientIDOf(t, node.ComputeID(), slot)
	if err != nil {
		return farmem.ClientInfo{}, err
	}
	return farmem.ClientInfo{
		ID: id, Node: node, Slot: slot,
		Slice:     farmem.MakeAddr(node, farmem.ComputeHeaderSize+uint64(slot)*t.SliceSize),
		SliceSize: t.SliceSize,
	}, nil
}

// StrictMemory is implemented by the clients of transports with a strict mode (see farmem's
// package doc, semantics 1): farmem.ForgetAtomic calls it to say that the words in [a, a+n)
// are being reused as plain data, so a later plain write over them is no violation.
type StrictMemory interface {
	ForgetAtomic(a farmem.Addr, n uint64)
}

// FaultInjector injects faults into a fabric: the fault model of farmem's package doc, which
// every transport of this repository implements and the conformance suite (farmem/farmemtest)
// exercises. Tests of structures assert a fabric to it. Each method returns an error wrapping
// ErrNotSupported where the transport cannot inject that fault.
type FaultInjector interface {
	// Crash makes node fail-stop: its ops fail with ErrNodeDown at once, and on a compute node
	// its clients, Waits and Call handlers end with ErrNodeDown.
	Crash(node farmem.NodeID) error
	// Hang makes node fail-silent: ops to it get no answer, so they fail with ErrNodeDown after
	// the down timeout, unapplied. Resume ends it.
	Hang(node farmem.NodeID) error
	// Resume ends a Hang.
	Resume(node farmem.NodeID) error
	// Partition cuts client from node (fail-silent, like Hang, for that client only).
	Partition(client farmem.ClientID, node farmem.NodeID) error
	// Heal ends a Partition.
	Heal(client farmem.ClientID, node farmem.NodeID) error
	// CrashAfter arms node so that the next batch reaching it applies only its first n ops
	// there; then the node crashes and the rest fail with ErrNodeDown.
	CrashAfter(node farmem.NodeID, n int) error
	// CrashClient makes one client fail-stop: its ops in flight have unknown outcomes and its
	// later ops fail with ErrNodeDown; other clients of its node are unaffected.
	CrashClient(client farmem.ClientID) error
}
