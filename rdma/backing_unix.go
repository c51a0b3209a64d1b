//go:build unix

package rdma

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/farmem/farmem/farmem"
	"github.com/farmem/farmem/internal/wordmem"
)

// mapBacking maps size bytes of zeroed memory as spec describes (see ServerOptions.Backing).
func mapBacking(spec string, size uint64) (*region, error) {
	kind, arg, _ := strings.Cut(spec, ":")
	page := uint64(os.Getpagesize())
	if size == 0 || size > farmem.MaxOffset+1 {
		return nil, fmt.Errorf("rdma: region size %d: %w", size, farmem.ErrInvalid)
	}
	mapLen := (size + page - 1) &^ (page - 1)
	switch kind {
	case "", "anon":
		if arg != "" {
			return nil, fmt.Errorf("rdma: backing %q: anon takes no argument: %w", spec, farmem.ErrInvalid)
		}
		b, err := unix.Mmap(-1, 0, int(mapLen), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_ANON|unix.MAP_PRIVATE)
		if err != nil {
			return nil, fmt.Errorf("rdma: map %d anonymous bytes: %w", mapLen, err)
		}
		_ = unix.Madvise(b, unix.MADV_HUGEPAGE) // best effort
		return newRegion(b, size, "anon", func() error { return unix.Munmap(b) }), nil
	case "shm":
		if arg == "" || strings.ContainsRune(arg, '/') {
			return nil, fmt.Errorf("rdma: backing %q: want shm:<name> with no slash: %w", spec, farmem.ErrInvalid)
		}
		path := filepath.Join("/dev/shm", arg)
		r, err := mapFile(path, size, mapLen)
		if err != nil {
			return nil, err
		}
		release := r.release
		r.release = func() error {
			err := release()
			if e := os.Remove(path); err == nil && !os.IsNotExist(e) {
				err = e
			}
			return err
		}
		r.desc = "shm:" + path
		return r, nil
	case "file":
		if arg == "" {
			return nil, fmt.Errorf("rdma: backing %q: want file:<path>: %w", spec, farmem.ErrInvalid)
		}
		r, err := mapFile(arg, size, mapLen)
		if err != nil {
			return nil, err
		}
		r.desc = "file:" + arg
		return r, nil
	case "devdax":
		return mapDevDax(arg, size)
	}
	return nil, fmt.Errorf("rdma: backing %q: want anon, shm:<name>, file:<path> or devdax:<device>: %w", spec, farmem.ErrInvalid)
}

// mapFile creates or truncates path to size zero bytes and maps it shared.
func mapFile(path string, size, mapLen uint64) (*region, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("rdma: backing file: %w", err)
	}
	defer f.Close()
	// Truncating to zero first discards old contents: the node serves zeroed memory.
	if err := f.Truncate(0); err != nil {
		return nil, fmt.Errorf("rdma: backing file %s: %w", path, err)
	}
	if err := f.Truncate(int64(mapLen)); err != nil {
		return nil, fmt.Errorf("rdma: backing file %s: %w", path, err)
	}
	b, err := unix.Mmap(int(f.Fd()), 0, int(mapLen), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("rdma: map %s: %w", path, err)
	}
	return newRegion(b, size, "file:"+path, func() error { return unix.Munmap(b) }), nil
}

// devDaxAlign is the mapping alignment device DAX requires (its default 2 MiB).
const devDaxAlign = 2 << 20

// mapDevDax maps a device-DAX character device and zeroes it. With size 0 the whole device is
// used.
func mapDevDax(path string, size uint64) (*region, error) {
	if path == "" {
		return nil, fmt.Errorf("rdma: backing devdax: want devdax:/dev/daxX.Y: %w", farmem.ErrInvalid)
	}
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		return nil, fmt.Errorf("rdma: devdax %s: %w (no device DAX here?): %w", path, err, farmem.ErrNotSupported)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFCHR {
		return nil, fmt.Errorf("rdma: devdax %s is not a character device: %w", path, farmem.ErrInvalid)
	}
	if devSize, err := daxSize(st.Rdev); err == nil && (size == 0 || size > devSize) {
		if size > devSize {
			return nil, fmt.Errorf("rdma: devdax %s holds %d bytes, %d asked: %w", path, devSize, size, farmem.ErrInvalid)
		}
		size = devSize
	}
	if size == 0 || size%devDaxAlign != 0 {
		return nil, fmt.Errorf("rdma: devdax size %d must be a nonzero multiple of %d: %w", size, devDaxAlign, farmem.ErrInvalid)
	}
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return nil, fmt.Errorf("rdma: devdax: %w", err)
	}
	defer f.Close()
	b, err := unix.Mmap(int(f.Fd()), 0, int(size), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("rdma: map devdax %s: %w", path, err)
	}
	clear(b) // a DAX device keeps its contents; the node serves zeroed memory
	return newRegion(b, size, "devdax:"+path, func() error { return unix.Munmap(b) }), nil
}

// daxSize reads a DAX device's size from sysfs.
func daxSize(rdev uint64) (uint64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/sys/dev/char/%d:%d/size", unix.Major(rdev), unix.Minor(rdev)))
	if err != nil {
		return 0, err
	}
	return ParseSize(strings.TrimSpace(string(b)))
}

func newRegion(b []byte, size uint64, desc string, release func() error) *region {
	return &region{mem: wordmem.FromPointer(unsafe.Pointer(&b[0]), size), mapped: b, size: size &^ 7, desc: desc, release: release}
}
