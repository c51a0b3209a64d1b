//go:build !linux

package numaemu

import (
	"fmt"
	"unsafe"

	"github.com/farmem/farmem/farmem"
)

var errNotLinux = fmt.Errorf("numaemu: NUMA system calls need Linux: %w", farmem.ErrNotSupported)

// Mbind is mbind(2); without Linux it returns an error wrapping [farmem.ErrNotSupported].
func Mbind(b []byte, mode int, mask *NodeMask, flags int) error { return errNotLinux }

// GetMempolicy is get_mempolicy(2); without Linux it returns an error.
func GetMempolicy(mode *int, mask *NodeMask, addr unsafe.Pointer, flags int) error {
	return errNotLinux
}

// MovePages is move_pages(2); without Linux it returns an error.
func MovePages(pid int, pages []unsafe.Pointer, nodes []int32, status []int32, flags int) error {
	return errNotLinux
}

// Getcpu is getcpu(2); without Linux it returns an error.
func Getcpu() (cpu, node int, err error) { return 0, 0, errNotLinux }

// PinThread pins the calling thread to cpus; without Linux it returns an error.
func PinThread(cpus ...int) (unpin func() error, err error) { return nil, errNotLinux }

// PinToNode pins the calling thread to node's CPUs; without Linux it returns an error.
func (t *Topology) PinToNode(node int) (unpin func() error, err error) { return nil, errNotLinux }

// LocalNode returns 0 without Linux.
func LocalNode() int { return 0 }

// Bind binds b to node; without Linux it returns an error.
func Bind(b []byte, node int) error { return errNotLinux }

// Populate faults b in; without Linux it returns an error.
func Populate(b []byte, pageSize int) error { return errNotLinux }

// Verify queries page locations; without Linux it returns an error.
func Verify(b []byte, pageSize int) (Verification, error) { return Verification{}, errNotLinux }

// Place binds, populates and verifies; without Linux it returns an error.
func Place(b []byte, node, pageSize int) (Verification, error) { return Verification{}, errNotLinux }

// Map maps and places memory; without Linux it returns an error.
func (t *Topology) Map(size int, req Request) (*Mapping, error) { return nil, errNotLinux }

// Close is idempotent and does nothing without Linux.
func (m *Mapping) Close() error { return nil }
