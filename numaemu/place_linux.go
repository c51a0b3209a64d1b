//go:build linux

package numaemu

import (
	"errors"
	"fmt"
	"os"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/farmem/farmem/atomics"
	"github.com/farmem/farmem/farmem"
)

// Bind sets b's policy to MPOL_BIND on node alone, so every page faulted in afterwards comes
// from node (or the fault fails: there is no silent fallback to another node). MPOL_MF_STRICT
// makes it fail if pages already present are elsewhere; MPOL_MF_MOVE first tries to move them.
func Bind(b []byte, node int) error {
	mask, err := NodeMaskOf(node)
	if err != nil {
		return err
	}
	if err := Mbind(b, MPOL_BIND, &mask, MPOL_MF_STRICT|MPOL_MF_MOVE); err != nil {
		return fmt.Errorf("numaemu: mbind %d bytes to node %d: %w", len(b), node, err)
	}
	return nil
}

// Populate write-faults every page of b without changing its contents, with
// madvise(MADV_POPULATE_WRITE); on kernels before 5.14 (EINVAL) it adds zero atomically to one
// word per page instead. b must be a writable mapping, page-aligned; pageSize is its page size
// (0 for the system's).
func Populate(b []byte, pageSize int) error {
	if len(b) == 0 {
		return nil
	}
	err := unix.Madvise(b, unix.MADV_POPULATE_WRITE)
	if err == nil || !errors.Is(err, unix.EINVAL) {
		if err != nil {
			return fmt.Errorf("numaemu: madvise(MADV_POPULATE_WRITE): %w", err)
		}
		return nil
	}
	return touchPages(b, pageSize)
}

// touchPages write-faults one word per page with an atomic add of zero (contents unchanged).
func touchPages(b []byte, pageSize int) error {
	if pageSize <= 0 {
		pageSize = os.Getpagesize()
	}
	r, err := atomics.RegionOf(b)
	if err != nil {
		return err
	}
	return atomics.Guard(func() {
		for off := uint64(0); off < r.Size(); off += uint64(pageSize) {
			_, _ = r.FAA(off, 0)
		}
	})
}

// Verify asks move_pages, in query mode (no target nodes, nothing moves), where each page of b
// is. pageSize is b's page size (0 for the system's).
func Verify(b []byte, pageSize int) (Verification, error) {
	if pageSize <= 0 {
		pageSize = os.Getpagesize()
	}
	v := Verification{PerNode: map[int]int{}}
	if len(b) == 0 {
		return v, nil
	}
	base := unsafe.Pointer(&b[0])
	const chunk = 4096 // pages per system call, to bound the temporary arrays
	pages := make([]unsafe.Pointer, 0, chunk)
	status := make([]int32, chunk)
	for off := 0; off < len(b); {
		pages = pages[:0]
		for ; off < len(b) && len(pages) < chunk; off += pageSize {
			pages = append(pages, unsafe.Add(base, off))
		}
		st := status[:len(pages)]
		if err := MovePages(0, pages, nil, st, 0); err != nil {
			return v, fmt.Errorf("numaemu: move_pages query: %w", err)
		}
		for _, s := range st {
			switch {
			case s >= 0:
				v.PerNode[int(s)]++
			case unix.Errno(-s) == unix.ENOENT:
				v.Absent++
			default:
				v.Failed++
			}
		}
		v.Pages += len(pages)
	}
	return v, nil
}

// Place binds b to node, populates it and verifies that every page is on node, in that order
// (see the package doc for why). Do not use it on DAX mappings: see [Topology.DAXPlacement].
// For a shared mapping (memfd, /dev/shm, hugetlbfs) the policy is the shared object's, so the
// process that creates it should place it before others fault pages in.
func Place(b []byte, node, pageSize int) (Verification, error) {
	if err := Bind(b, node); err != nil {
		return Verification{}, err
	}
	if err := Populate(b, pageSize); err != nil {
		return Verification{}, err
	}
	v, err := Verify(b, pageSize)
	if err != nil {
		return v, err
	}
	if !v.On(node) {
		return v, fmt.Errorf("%w: node %d: %v", ErrMisplaced, node, v)
	}
	return v, nil
}

// Map resolves req on t (falling back as [Topology.Resolve] says), maps size bytes of private
// anonymous memory without MAP_POPULATE, and places it on the resolved node with [Place].
func (t *Topology) Map(size int, req Request) (*Mapping, error) {
	if size <= 0 {
		return nil, fmt.Errorf("numaemu: map %d bytes: %w", size, farmem.ErrInvalid)
	}
	pl, err := t.Resolve(req, LocalNode())
	if err != nil {
		return nil, err
	}
	b, err := unix.Mmap(-1, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		return nil, fmt.Errorf("numaemu: mmap %d bytes: %w", size, err)
	}
	v, err := Place(b, pl.Node, 0)
	if err != nil {
		_ = unix.Munmap(b)
		return nil, err
	}
	return &Mapping{Data: b, Placement: pl, Verified: v}, nil
}

// Close unmaps the memory. It is idempotent.
func (m *Mapping) Close() error {
	if m.Data == nil {
		return nil
	}
	b := m.Data
	m.Data = nil
	return unix.Munmap(b)
}
