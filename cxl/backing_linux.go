package cxl

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/farmem/farmem/farmem"
	"github.com/farmem/farmem/numaemu"
)

// devdaxDefaultAlign is the mapping alignment of a device-DAX instance whose sysfs does not say.
const devdaxDefaultAlign = 2 << 20

// daxName returns the device-DAX instance name ("dax0.0") of a character device, or "".
func daxName(fi os.FileInfo) string {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok || fi.Mode()&os.ModeCharDevice == 0 {
		return ""
	}
	link, err := os.Readlink(fmt.Sprintf("/sys/dev/char/%d:%d", unix.Major(st.Rdev), unix.Minor(st.Rdev)))
	if err != nil {
		return ""
	}
	name := filepath.Base(link)
	if !strings.HasPrefix(name, "dax") {
		return ""
	}
	return name
}

// daxSysfs reads a decimal (or 0x-hex) number from a device-DAX instance's sysfs directory.
func daxSysfs(name, attr string) (uint64, error) {
	b, err := os.ReadFile(filepath.Join("/sys/bus/dax/devices", name, attr))
	if err != nil {
		return 0, err
	}
	return strconv.ParseUint(strings.TrimSpace(string(b)), 0, 64)
}

// devdaxGeometry returns a device-DAX instance's size and mapping alignment.
func devdaxGeometry(name string) (size, align uint64, err error) {
	size, err = daxSysfs(name, "size")
	if err != nil {
		return 0, 0, fmt.Errorf("cxl: size of %s: %w", name, err)
	}
	align, err = daxSysfs(name, "align")
	if err != nil || !isPow2(align) || align < headerPage {
		align = devdaxDefaultAlign
	}
	return size, align, nil
}

// isDAXFile reports whether the kernel maps f directly (STATX_ATTR_DAX).
func isDAXFile(f *os.File) bool {
	var sx unix.Statx_t
	if err := unix.Statx(int(f.Fd()), "", unix.AT_EMPTY_PATH, unix.STATX_BASIC_STATS, &sx); err != nil {
		return false
	}
	return sx.Attributes_mask&unix.STATX_ATTR_DAX != 0 && sx.Attributes&unix.STATX_ATTR_DAX != 0
}

// hugePageSize returns the page size of a hugetlbfs file, or 0 if f is not on hugetlbfs.
func hugePageSize(f *os.File) uint64 {
	var sf unix.Statfs_t
	if err := unix.Fstatfs(int(f.Fd()), &sf); err != nil || uint32(sf.Type) != uint32(unix.HUGETLBFS_MAGIC) {
		return 0
	}
	return uint64(sf.Bsize)
}

// defaultHugePageSize reads Hugepagesize from /proc/meminfo (2 MiB if it cannot).
func defaultHugePageSize() uint64 {
	b, err := os.ReadFile("/proc/meminfo")
	if err == nil {
		for line := range strings.SplitSeq(string(b), "\n") {
			if rest, ok := strings.CutPrefix(line, "Hugepagesize:"); ok {
				f := strings.Fields(rest)
				if len(f) == 2 && f[1] == "kB" {
					if kb, err := strconv.ParseUint(f[0], 10, 64); err == nil && isPow2(kb<<10) {
						return kb << 10
					}
				}
			}
		}
	}
	return 2 << 20
}

// mmapFlags returns the mmap flags for a backing.
func mmapFlags(b Backing) int {
	if b == BackingFSDAX {
		return unix.MAP_SHARED_VALIDATE | unix.MAP_SYNC
	}
	return unix.MAP_SHARED
}

// mapFile maps size bytes of f shared, read-write.
func mapFile(f *os.File, size uint64, b Backing, path string) (unsafe.Pointer, error) {
	p, err := unix.MmapPtr(int(f.Fd()), 0, nil, uintptr(size), unix.PROT_READ|unix.PROT_WRITE, mmapFlags(b))
	if err != nil {
		if b == BackingFSDAX && (errors.Is(err, unix.EOPNOTSUPP) || errors.Is(err, unix.EINVAL)) {
			return nil, fmt.Errorf("%w: mmap %s with MAP_SYNC: %v (the file system is not mounted with DAX)", ErrNotDAX, path, err)
		}
		return nil, fmt.Errorf("cxl: mmap %d bytes of %s: %w", size, path, err)
	}
	return p, nil
}

// created is a backing Create made: the open file, its page size, and how to publish it.
type created struct {
	f        *os.File
	backing  Backing
	pageSize uint64
	daxName  string
	devSize  uint64 // devdax: the device's size
	// publish makes the formatted region visible at its path (a rename for files); undo
	// removes what Create made if it fails before that.
	publish func() error
	undo    func()
	path    string // the path other processes open
}

// createBacking makes the file (or memfd, or opens the device) a new region lives in.
func createBacking(path string, o *Options) (*created, error) {
	b := o.Backing
	if path == "" {
		switch b {
		case BackingAuto, BackingMemfd, BackingHugetlb:
		default:
			return nil, fmt.Errorf("cxl: a %v region needs a path: %w", b, farmem.ErrInvalid)
		}
		return createMemfd(b == BackingHugetlb)
	}
	if b == BackingMemfd {
		return nil, fmt.Errorf("cxl: a memfd region has no path (got %q): %w", path, farmem.ErrInvalid)
	}
	if fi, err := os.Stat(path); err == nil && fi.Mode()&os.ModeCharDevice != 0 {
		if b != BackingAuto && b != BackingDevDAX {
			return nil, fmt.Errorf("cxl: %s is a character device, not a %v file: %w", path, b, farmem.ErrInvalid)
		}
		return openDevDAX(path, fi)
	} else if b == BackingDevDAX {
		if err != nil {
			return nil, fmt.Errorf("%w: %s: %v", ErrNotDAX, path, err)
		}
		return nil, fmt.Errorf("%w: %s is not a device-DAX character device", ErrNotDAX, path)
	}
	return createFile(path, o)
}

func createMemfd(huge bool) (*created, error) {
	flags := unix.MFD_CLOEXEC | unix.MFD_ALLOW_SEALING
	ps := uint64(os.Getpagesize())
	backing := BackingMemfd
	if huge {
		flags |= unix.MFD_HUGETLB
		ps = defaultHugePageSize()
		backing = BackingHugetlb
	}
	fd, err := unix.MemfdCreate("farmem-cxl", flags)
	if err != nil {
		return nil, fmt.Errorf("cxl: memfd_create: %w", err)
	}
	f := os.NewFile(uintptr(fd), "memfd:farmem-cxl")
	c := &created{f: f, backing: backing, pageSize: ps, publish: func() error { return nil }, undo: func() {}}
	c.path = fmt.Sprintf("/proc/%d/fd/%d", os.Getpid(), fd)
	return c, nil
}

func openDevDAX(path string, fi os.FileInfo) (*created, error) {
	name := daxName(fi)
	if name == "" {
		return nil, fmt.Errorf("%w: %s is a character device but not a device-DAX instance", ErrNotDAX, path)
	}
	size, align, err := devdaxGeometry(name)
	if err != nil {
		return nil, err
	}
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return nil, fmt.Errorf("cxl: open %s: %w", path, err)
	}
	return &created{f: f, backing: BackingDevDAX, pageSize: align, daxName: name, devSize: size,
		publish: func() error { return nil }, undo: func() {}, path: path}, nil
}

// createFile creates the region under a temporary name in path's directory; publish renames
// it to path (failing if path exists), so no process ever opens a half-formatted region.
func createFile(path string, o *Options) (*created, error) {
	if _, err := os.Lstat(path); err == nil {
		return nil, fmt.Errorf("cxl: create %s: %w", path, os.ErrExist)
	}
	dir, base := filepath.Split(path)
	if dir == "" {
		dir = "."
	}
	tmp := filepath.Join(dir, fmt.Sprintf(".%s.%d-%x.tmp", base, os.Getpid(), rand.Uint64()))
	f, err := os.OpenFile(tmp, os.O_RDWR|os.O_CREATE|os.O_EXCL, os.FileMode(o.Mode))
	if err != nil {
		return nil, fmt.Errorf("cxl: create %s: %w", path, err)
	}
	// The mode is applied exactly, whatever the umask.
	_ = f.Chmod(os.FileMode(o.Mode))
	c := &created{f: f, pageSize: uint64(os.Getpagesize()), path: path}
	c.undo = func() {
		_ = f.Close()
		_ = os.Remove(tmp)
	}
	c.publish = func() error {
		if err := unix.Renameat2(unix.AT_FDCWD, tmp, unix.AT_FDCWD, path, unix.RENAME_NOREPLACE); err != nil {
			if errors.Is(err, unix.EINVAL) || errors.Is(err, unix.ENOSYS) {
				// No RENAME_NOREPLACE here: a hard link fails if path exists, too.
				if err = os.Link(tmp, path); err == nil {
					err = os.Remove(tmp)
				}
			}
			if err != nil {
				return fmt.Errorf("cxl: publish %s: %w", path, err)
			}
		}
		return nil
	}
	huge := hugePageSize(f)
	dax := isDAXFile(f)
	switch o.Backing {
	case BackingAuto:
		switch {
		case huge != 0:
			c.backing, c.pageSize = BackingHugetlb, huge
		case dax:
			c.backing = BackingFSDAX
		default:
			c.backing = BackingFile
		}
	case BackingFile:
		c.backing = BackingFile
	case BackingHugetlb:
		if huge == 0 {
			c.undo()
			return nil, fmt.Errorf("cxl: %s is not on a hugetlbfs mount: %w", path, farmem.ErrNotSupported)
		}
		c.backing, c.pageSize = BackingHugetlb, huge
	case BackingFSDAX:
		// MAP_SYNC decides: a file system without DAX refuses it, with a clear error.
		c.backing = BackingFSDAX
	default:
		c.undo()
		return nil, fmt.Errorf("cxl: backing %v for %s: %w", o.Backing, path, farmem.ErrInvalid)
	}
	return c, nil
}

// place puts a freshly created region's memory on a NUMA node through numaemu and records the
// outcome in h. DAX memory is the device's own and is not placed.
func place(c *created, data []byte, req *numaemu.Request, h *header) (Placement, error) {
	pl := Placement{Requested: -1, Node: -1}
	if req != nil {
		pl.Requested = req.Node
		pl.Profile = req.Profile.Name
	}
	topo, terr := numaemu.ReadTopology()
	switch c.backing {
	case BackingFSDAX:
		pl.Reason = "fsdax: the file's pages are the device's memory; mempolicy does not apply"
		record(h, pl)
		return pl, nil
	case BackingDevDAX:
		if terr != nil {
			pl.Reason = fmt.Sprintf("devdax %s: no topology to read its target node from: %v", c.daxName, terr)
			record(h, pl)
			return pl, nil
		}
		want, prof := numaemu.LocalNode(), numaemu.Profile{}
		if req != nil {
			want, prof = req.Node, req.Profile
		}
		np, err := topo.DAXPlacement(c.daxName, want, prof)
		if err != nil {
			return pl, err
		}
		pl.Requested, pl.Node, pl.Emulated, pl.Inject, pl.Reason = np.Requested, np.Node, np.Emulated, np.Inject, np.Reason
		record(h, pl)
		return pl, nil
	}
	if terr != nil {
		// No sysfs (a container without it): populate without binding.
		pl.Reason = fmt.Sprintf("not placed (no NUMA topology: %v)", terr)
		if err := numaemu.Populate(data, int(c.pageSize)); err != nil {
			return pl, err
		}
		record(h, pl)
		return pl, nil
	}
	local := numaemu.LocalNode()
	r := numaemu.Request{Node: local, Fallback: true}
	if req != nil {
		r = *req
	}
	np, err := topo.Resolve(r, local)
	if err != nil {
		return pl, fmt.Errorf("cxl: place the region: %w", err)
	}
	pl.Requested, pl.Node, pl.Emulated, pl.Inject, pl.Reason = np.Requested, np.Node, np.Emulated, np.Inject, np.Reason
	v, err := numaemu.Place(data, np.Node, int(c.pageSize))
	if err != nil {
		if !errors.Is(err, unix.EPERM) && !errors.Is(err, unix.ENOSYS) {
			return pl, fmt.Errorf("cxl: place the region on node %d: %w", np.Node, err)
		}
		// A seccomp filter refuses mbind or move_pages: populate without binding, and say so.
		if perr := numaemu.Populate(data, int(c.pageSize)); perr != nil {
			return pl, perr
		}
		pl.Node = -1
		pl.Reason = fmt.Sprintf("not placed (memory-policy calls refused: %v)", err)
	}
	pl.Verified = v
	record(h, pl)
	return pl, nil
}

func record(h *header, pl Placement) {
	h.Requested, h.Node, h.Emulated = int32(pl.Requested), int32(pl.Node), pl.Emulated
	h.Profile = pl.Profile
}
