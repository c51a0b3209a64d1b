package cxl

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/farmem/farmem/atomics"
	"github.com/farmem/farmem/farmem"
	"github.com/farmem/farmem/farmem/transport"
	"github.com/farmem/farmem/internal/wordmem"
	"github.com/farmem/farmem/numaemu"
)

// fileKey identifies a region file in this process's registry.
type fileKey struct{ dev, ino uint64 }

func keyOf(fi os.FileInfo) (fileKey, bool) {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return fileKey{}, false
	}
	return fileKey{uint64(st.Dev), st.Ino}, true
}

// registry maps each region file this process has mapped to its one mapping, so every Open of
// the same file in a process shares the mapping, its fault state and its hosted compute nodes.
var registry = struct {
	sync.Mutex
	m map[fileKey]*mapping
}{m: make(map[fileKey]*mapping)}

// seg is one node's memory in the mapping: a memory node, or a compute node's addressable
// region (with its control block and compute-table entry).
type seg struct {
	id   farmem.NodeID
	base unsafe.Pointer
	size uint64
	mem  wordmem.Mem
	reg  atomics.Region
	// Compute nodes only.
	cid   farmem.ComputeID
	ctl   unsafe.Pointer // the control block
	entry unsafe.Pointer // the compute-table entry
}

// mapping is a region file mapped into this process, shared by its Region and Fabric handles.
type mapping struct {
	key       fileKey
	path      string
	f         *os.File
	h         *header
	base      unsafe.Pointer
	size      uint64
	placement Placement
	refs      int // under registry's lock
	topo      farmem.Topology
	mem       []seg // by memory NodeID; [0] unused
	comp      []seg // by ComputeID; [0] unused
	faults    faults
	self      identity
	leaseMs   uint64
	unmapped  atomic.Bool

	hmu    sync.Mutex
	hosted map[farmem.ComputeID]*Fabric
}

func newMapping(key fileKey, path string, f *os.File, h *header, base unsafe.Pointer, pl Placement) *mapping {
	m := &mapping{key: key, path: path, f: f, h: h, base: base, size: h.TotalSize, placement: pl, refs: 1,
		self: selfIdentity(), hosted: make(map[farmem.ComputeID]*Fabric)}
	m.leaseMs = uint64(max(h.DownTimeout.Milliseconds(), 1))
	m.faults.init()
	m.topo = farmem.Topology{
		ClientsPerNode: int(h.ClientsPerNode),
		SliceSize:      h.SliceSize,
		DownTimeout:    h.DownTimeout,
	}
	m.mem = make([]seg, h.MemoryNodes+1)
	for i := 1; i <= int(h.MemoryNodes); i++ {
		id := farmem.NodeID(i)
		p := unsafe.Add(base, h.memOff(id))
		m.mem[i] = seg{id: id, base: p, size: h.MemorySize, mem: wordmem.FromPointer(p, h.MemorySize), reg: region(p, h.MemorySize)}
		m.topo.Nodes = append(m.topo.Nodes, farmem.NodeInfo{ID: id, Role: farmem.RoleMemory, Size: h.MemorySize})
	}
	cs := h.ComputeSize()
	m.comp = make([]seg, h.MaxCompute+1)
	for c := 1; c <= int(h.MaxCompute); c++ {
		cid := farmem.ComputeID(c)
		p := unsafe.Add(base, h.computeOff(cid))
		m.comp[c] = seg{id: cid.Node(), base: p, size: cs, mem: wordmem.FromPointer(p, cs), reg: region(p, cs), cid: cid,
			ctl: unsafe.Add(base, h.ctlOff(cid)), entry: unsafe.Add(base, h.entryOff(cid))}
		m.topo.Nodes = append(m.topo.Nodes, farmem.NodeInfo{ID: cid.Node(), Role: farmem.RoleCompute, Size: cs})
	}
	return m
}

// region returns the atomics.Region of a node; its base and size are 8-byte aligned by the
// layout, so NewRegion cannot fail.
func region(p unsafe.Pointer, size uint64) atomics.Region {
	r, err := atomics.NewRegion(p, uintptr(size))
	if err != nil {
		panic(err)
	}
	return r
}

// seg returns node id's memory, or nil if the region has no such node.
// sizeOf returns the size of node id's addressable region.
func (m *mapping) sizeOf(id farmem.NodeID) (uint64, error) {
	if s := m.seg(id); s != nil {
		return s.size, nil
	}
	return 0, transport.NoSuchNode(id)
}

func (m *mapping) seg(id farmem.NodeID) *seg {
	if id.IsCompute() {
		c := int(id &^ farmem.ComputeNodeBit)
		if c == 0 || c >= len(m.comp) {
			return nil
		}
		return &m.comp[c]
	}
	if id == 0 || int(id) >= len(m.mem) {
		return nil
	}
	return &m.mem[id]
}

func (m *mapping) bytes(off, n uint64) []byte {
	return unsafe.Slice((*byte)(unsafe.Add(m.base, off)), n)
}

// acquire takes a reference for a new handle; it fails once the mapping is gone.
func (m *mapping) acquire() error {
	registry.Lock()
	defer registry.Unlock()
	if m.refs == 0 {
		return fmt.Errorf("cxl: region %s: %w", m.path, farmem.ErrClosed)
	}
	m.refs++
	return nil
}

// release drops a reference; the last one unmaps the region and closes the file.
func (m *mapping) release() {
	registry.Lock()
	m.refs--
	last := m.refs == 0
	if last && registry.m[m.key] == m {
		delete(registry.m, m.key)
	}
	registry.Unlock()
	if last {
		m.unmap()
	}
}

// unmap replaces the mapping with an inaccessible reservation of the same range rather than
// unmapping it: a goroutine still running over it (a Call handler that outlived its fabric)
// then faults, which atomics.Guard turns into an error, instead of writing into whatever a
// later mmap put there. Only address space stays reserved.
func (m *mapping) unmap() {
	m.unmapped.Store(true)
	_, err := unix.MmapPtr(-1, 0, m.base, uintptr(m.size), unix.PROT_NONE,
		unix.MAP_FIXED|unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_NORESERVE)
	if err != nil {
		_ = unix.MunmapPtr(m.base, uintptr(m.size))
	}
	_ = m.f.Close()
}

// Region is a handle on a region file mapped into this process. Every handle on the same file
// in one process shares one mapping. Close releases the handle; the mapping goes when its last
// handle (Region or Fabric) does.
type Region struct {
	m      *mapping
	closed atomic.Bool
	remove string // CreateTemp's file, removed by Close
}

// Create makes a new region at path and returns a handle on it. The path names a file on a
// memory file system (/dev/shm), on hugetlbfs, or on a DAX file system, or a device-DAX
// instance (/dev/daxX.Y, which must exist and is formatted in place); an empty path makes a
// memfd. Files are created under a temporary name, formatted, placed and then renamed to path
// (failing if path exists), so no process ever opens a half-made region. The memory is zeroed,
// placed through numaemu (see Options.Placement) and populated. See the package doc for how
// other processes reach a memfd.
func Create(path string, o Options) (*Region, error) {
	o.defaults()
	c, err := createBacking(path, &o)
	if err != nil {
		return nil, err
	}
	m, err := format(c, &o)
	if err != nil {
		c.undo()
		if c.backing == BackingMemfd || c.backing == BackingDevDAX || path == "" {
			_ = c.f.Close()
		}
		return nil, err
	}
	return &Region{m: m}, nil
}

// format sizes, maps, places and formats a new backing, publishes it and registers its mapping.
func format(c *created, o *Options) (*mapping, error) {
	h, err := o.header(c.backing, c.pageSize)
	if err != nil {
		return nil, err
	}
	switch c.backing {
	case BackingDevDAX:
		if c.devSize < h.TotalSize {
			return nil, fmt.Errorf("cxl: %s holds %d bytes; the region needs %d: %w", c.path, c.devSize, h.TotalSize, farmem.ErrNoSpace)
		}
	default:
		if err := c.f.Truncate(int64(h.TotalSize)); err != nil {
			return nil, fmt.Errorf("cxl: size %s to %d bytes: %w", c.path, h.TotalSize, err)
		}
	}
	if c.backing == BackingMemfd {
		if _, err := unix.FcntlInt(c.f.Fd(), unix.F_ADD_SEALS, unix.F_SEAL_SHRINK|unix.F_SEAL_GROW|unix.F_SEAL_SEAL); err != nil {
			return nil, fmt.Errorf("cxl: seal the memfd: %w", err)
		}
	}
	base, err := mapFile(c.f, h.TotalSize, c.backing, c.path)
	if err != nil {
		return nil, err
	}
	data := unsafe.Slice((*byte)(base), h.TotalSize)
	fail := func(err error) (*mapping, error) {
		_ = unix.MunmapPtr(base, uintptr(h.TotalSize))
		return nil, err
	}
	var pl Placement
	ferr := atomics.Guard(func() {
		if c.backing == BackingDevDAX || c.backing == BackingFSDAX {
			// Device memory keeps what it held: a new region starts zeroed.
			clear(data)
			atomics.WriteBack(base, uintptr(len(data)))
		}
		pl, err = place(c, data, o.Placement, h)
		if err != nil {
			return
		}
		if pl.Emulated && o.Placement != nil {
			pl.Inject = o.Placement.Profile.Added()
		}
		var hb [headerLen]byte
		h.encode(hb[:])
		copy(data[8:headerLen], hb[8:])
		atomics.WriteBack(base, headerLen)
		copy(data[:8], hb[:8]) // the magic last: a region is a region once complete
		atomics.WriteBack(base, headerLen)
	})
	if ferr != nil {
		return fail(fmt.Errorf("cxl: format %s: %w", c.path, ferr))
	}
	if err != nil {
		return fail(err)
	}
	if err := c.publish(); err != nil {
		return fail(err)
	}
	fi, err := c.f.Stat()
	if err != nil {
		return fail(err)
	}
	key, ok := keyOf(fi)
	m := newMapping(key, c.path, c.f, h, base, pl)
	registry.Lock()
	if old := registry.m[key]; ok && (old == nil || old.refs == 0) {
		registry.m[key] = m
	}
	registry.Unlock()
	return m, nil
}

// OpenRegion maps an existing region. A file that is not a region (wrong magic, version,
// checksum or layout), is smaller than its header says, or cannot be read gives an error, and
// nothing is written to it. In a process that has the file mapped already, the mapping is
// shared.
func OpenRegion(path string) (*Region, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("cxl: open region: %w", err)
	}
	if fi.IsDir() {
		return nil, fmt.Errorf("%w: %s is a directory", ErrBadRegion, path)
	}
	registry.Lock()
	defer registry.Unlock()
	if key, ok := keyOf(fi); ok {
		if m := registry.m[key]; m != nil && m.refs > 0 {
			m.refs++
			return &Region{m: m}, nil
		}
	}
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return nil, fmt.Errorf("cxl: open region: %w", err)
	}
	m, err := mapExisting(path, f)
	if err != nil {
		_ = f.Close()
		return nil, err
	}
	if old := registry.m[m.key]; old != nil && old.refs > 0 {
		// Another path to a file already mapped (a second name, /proc/<pid>/fd/<n>).
		m.unmap()
		old.refs++
		return &Region{m: old}, nil
	}
	registry.m[m.key] = m
	return &Region{m: m}, nil
}

// mapExisting validates f's header and maps it. It writes nothing.
func mapExisting(path string, f *os.File) (*mapping, error) {
	fi, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("cxl: open region %s: %w", path, err)
	}
	key, _ := keyOf(fi)
	var size uint64
	buf := make([]byte, headerPage)
	if fi.Mode()&os.ModeCharDevice != 0 {
		name := daxName(fi)
		if name == "" {
			return nil, fmt.Errorf("%w: %s is a character device but not a device-DAX instance", ErrBadRegion, path)
		}
		var align uint64
		size, align, err = devdaxGeometry(name)
		if err != nil {
			return nil, err
		}
		if size < align {
			return nil, fmt.Errorf("%w: %s holds %d bytes", ErrBadRegion, path, size)
		}
		// Device DAX supports only mmap: read the header through a read-only mapping.
		b, err := unix.Mmap(int(f.Fd()), 0, int(align), unix.PROT_READ, unix.MAP_SHARED)
		if err != nil {
			return nil, fmt.Errorf("cxl: read the header of %s: %w", path, err)
		}
		gerr := atomics.Guard(func() { copy(buf, b) })
		_ = unix.Munmap(b)
		if gerr != nil {
			return nil, fmt.Errorf("cxl: read the header of %s: %w", path, gerr)
		}
	} else {
		if !fi.Mode().IsRegular() {
			return nil, fmt.Errorf("%w: %s is not a regular file or a DAX device (%v)", ErrBadRegion, path, fi.Mode().Type())
		}
		size = uint64(fi.Size())
		n, err := f.ReadAt(buf, 0)
		if err != nil && !errors.Is(err, io.EOF) {
			return nil, fmt.Errorf("cxl: read the header of %s: %w", path, err)
		}
		if n < headerLen {
			return nil, fmt.Errorf("%w: %s is %d bytes, too small for a region", ErrBadRegion, path, n)
		}
		buf = buf[:n]
	}
	h, err := decodeHeader(buf)
	if err != nil {
		return nil, fmt.Errorf("cxl: %s: %w", path, err)
	}
	if size < h.TotalSize {
		return nil, fmt.Errorf("%w: %s is %d bytes but its header says %d (truncated?)", ErrBadRegion, path, size, h.TotalSize)
	}
	base, err := mapFile(f, h.TotalSize, h.Backing, path)
	if err != nil {
		return nil, err
	}
	pl := Placement{Requested: int(h.Requested), Node: int(h.Node), Emulated: h.Emulated, Profile: h.Profile}
	if pl.Emulated {
		if p, err := numaemu.ProfileByName(h.Profile); err == nil {
			pl.Inject = p.Added()
		}
	}
	return newMapping(key, path, f, h, base, pl), nil
}

// Path returns the path other processes open the region by. For a memfd it is
// /proc/<pid>/fd/<n> of the creating process, valid while that process keeps it open.
func (r *Region) Path() string { return r.m.path }

// Close releases the handle. It is idempotent. Fabrics attached through it stay open. The
// handle CreateTemp returned also removes the file's name (the memory stays with whoever has
// it mapped).
func (r *Region) Close() error {
	if r.closed.Swap(true) {
		return nil
	}
	r.m.release()
	if r.remove != "" {
		if err := os.Remove(r.remove); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("cxl: remove %s: %w", r.remove, err)
		}
	}
	return nil
}

// CreateTemp creates a region in a new file of directory dir, named from pattern as
// os.CreateTemp names files (a random string replaces the last "*", or is appended). An empty
// dir is /dev/shm if it is a tmpfs, else os.TempDir() (a file on a disk file system works, but
// the kernel writes its dirty pages back to the disk). Closing the returned handle removes
// the file's name; processes attached by then keep the memory until they close.
func CreateTemp(dir, pattern string, o Options) (*Region, error) {
	if dir == "" {
		dir = os.TempDir()
		var sf unix.Statfs_t
		if unix.Statfs("/dev/shm", &sf) == nil && uint32(sf.Type) == uint32(unix.TMPFS_MAGIC) {
			dir = "/dev/shm"
		}
	}
	prefix, suffix := pattern, ""
	if i := strings.LastIndexByte(pattern, '*'); i >= 0 {
		prefix, suffix = pattern[:i], pattern[i+1:]
	}
	if strings.ContainsRune(prefix+suffix, os.PathSeparator) {
		return nil, fmt.Errorf("cxl: pattern %q contains a path separator: %w", pattern, farmem.ErrInvalid)
	}
	for range 100 {
		path := filepath.Join(dir, prefix+strconv.FormatUint(rand.Uint64(), 36)+suffix)
		r, err := Create(path, o)
		if errors.Is(err, fs.ErrExist) {
			continue
		}
		if err != nil {
			return nil, err
		}
		r.remove = path
		return r, nil
	}
	return nil, fmt.Errorf("cxl: no free name for a region in %s: %w", dir, fs.ErrExist)
}

// Info describes the region.
func (r *Region) Info() RegionInfo {
	h := r.m.h
	return RegionInfo{
		Path: r.m.path, Backing: h.Backing, Size: h.TotalSize, PageSize: h.PageSize,
		MemoryNodes: int(h.MemoryNodes), MemorySize: h.MemorySize, MaxComputeNodes: int(h.MaxCompute),
		ClientsPerNode: int(h.ClientsPerNode), MaxHandlers: int(h.MaxHandlers), SliceSize: h.SliceSize,
		SharedSize: h.SharedSize, ComputeSize: h.ComputeSize(), Mailboxes: int(h.Mailboxes),
		MailboxSize: h.MailboxSize, DownTimeout: h.DownTimeout, Placement: r.m.placement,
	}
}

// Topology returns the cluster the region holds: its memory nodes and every compute id, live
// or not (a compute id with no live process is a down node).
func (r *Region) Topology() *farmem.Topology { return &r.m.topo }
