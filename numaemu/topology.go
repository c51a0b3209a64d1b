package numaemu

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"slices"
	"strconv"
	"strings"

	"github.com/farmem/farmem/farmem"
)

// ErrSysfs: a sysfs file was missing or malformed. It wraps [farmem.ErrInvalid].
var ErrSysfs = fmt.Errorf("numaemu: bad sysfs topology: %w", farmem.ErrInvalid)

// Limits that keep a malformed (or fuzzed) sysfs tree from allocating without bound.
const (
	maxNodeID = 1<<10 - 1 // the kernel's MAX_NUMNODES is at most 1024
	maxCPUID  = 1<<16 - 1
	maxFile   = 1 << 16
)

// Topology is the machine's NUMA layout.
type Topology struct {
	Nodes []Node      // ascending by ID
	DAX   []DAXDevice // ascending by name
}

// Node is one NUMA node.
type Node struct {
	ID        int
	CPUs      []int  // ascending; empty for a memory-only node (CXL expanders appear so)
	MemTotal  uint64 // bytes
	MemFree   uint64 // bytes, when read
	Distances []int  // ACPI SLIT distance to Topology.Nodes[i]; 10 is local
}

// DAXDevice is a device-DAX instance.
type DAXDevice struct {
	Name       string // e.g. "dax0.0", the device /dev/dax0.0
	TargetNode int    // the node its memory belongs to; -1 if the kernel does not know
	Size       uint64 // bytes
}

// ReadTopology reads the running machine's topology from /sys.
func ReadTopology() (*Topology, error) { return ParseSysfs(os.DirFS("/sys")) }

// ParseSysfs reads a topology from fsys, a tree laid out like /sys (devices/system/node and,
// if present, bus/dax/devices). It never panics; malformed input returns an error wrapping
// [ErrSysfs].
func ParseSysfs(fsys fs.FS) (*Topology, error) {
	const dir = "devices/system/node"
	var ids []int
	if online, err := readSmall(fsys, dir+"/online"); err == nil {
		ids, err = ParseList(online, maxNodeID)
		if err != nil {
			return nil, fmt.Errorf("%w: %s/online: %v", ErrSysfs, dir, err)
		}
	} else {
		ents, err := fs.ReadDir(fsys, dir)
		if err != nil {
			return nil, fmt.Errorf("%w: %v", ErrSysfs, err)
		}
		for _, e := range ents {
			if s, ok := strings.CutPrefix(e.Name(), "node"); ok {
				if id, err := strconv.Atoi(s); err == nil && id >= 0 && id <= maxNodeID {
					ids = append(ids, id)
				}
			}
		}
		slices.Sort(ids)
	}
	if len(ids) == 0 {
		return nil, fmt.Errorf("%w: no online node", ErrSysfs)
	}
	t := &Topology{}
	for _, id := range ids {
		nd := fmt.Sprintf("%s/node%d", dir, id)
		n := Node{ID: id}
		cpus, err := readSmall(fsys, nd+"/cpulist")
		if err != nil {
			return nil, fmt.Errorf("%w: %v", ErrSysfs, err)
		}
		if n.CPUs, err = ParseList(cpus, maxCPUID); err != nil {
			return nil, fmt.Errorf("%w: %s/cpulist: %v", ErrSysfs, nd, err)
		}
		if mi, err := readSmall(fsys, nd+"/meminfo"); err == nil {
			if n.MemTotal, n.MemFree, err = ParseMeminfo(mi, id); err != nil {
				return nil, fmt.Errorf("%w: %s/meminfo: %v", ErrSysfs, nd, err)
			}
		}
		dist, err := readSmall(fsys, nd+"/distance")
		if err != nil {
			return nil, fmt.Errorf("%w: %v", ErrSysfs, err)
		}
		for _, f := range strings.Fields(dist) {
			d, err := strconv.Atoi(f)
			if err != nil || d < 0 || d > 255 {
				return nil, fmt.Errorf("%w: %s/distance: bad entry %q", ErrSysfs, nd, f)
			}
			n.Distances = append(n.Distances, d)
		}
		if len(n.Distances) != len(ids) {
			return nil, fmt.Errorf("%w: %s/distance has %d entries for %d nodes", ErrSysfs, nd, len(n.Distances), len(ids))
		}
		t.Nodes = append(t.Nodes, n)
	}
	dax, err := parseDAX(fsys)
	if err != nil {
		return nil, err
	}
	t.DAX = dax
	return t, nil
}

func parseDAX(fsys fs.FS) ([]DAXDevice, error) {
	const dir = "bus/dax/devices"
	ents, err := fs.ReadDir(fsys, dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrSysfs, err)
	}
	var out []DAXDevice
	for _, e := range ents {
		d := DAXDevice{Name: e.Name(), TargetNode: -1}
		p := path.Join(dir, e.Name())
		if s, err := readSmall(fsys, p+"/target_node"); err == nil {
			v, err := strconv.Atoi(strings.TrimSpace(s))
			if err != nil || v < -1 || v > maxNodeID {
				return nil, fmt.Errorf("%w: %s/target_node: %q", ErrSysfs, p, strings.TrimSpace(s))
			}
			d.TargetNode = v
		}
		if s, err := readSmall(fsys, p+"/size"); err == nil {
			v, err := strconv.ParseUint(strings.TrimSpace(s), 10, 64)
			if err != nil {
				return nil, fmt.Errorf("%w: %s/size: %q", ErrSysfs, p, strings.TrimSpace(s))
			}
			d.Size = v
		}
		out = append(out, d)
	}
	slices.SortFunc(out, func(a, b DAXDevice) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

func readSmall(fsys fs.FS, name string) (string, error) {
	f, err := fsys.Open(name)
	if err != nil {
		return "", err
	}
	defer f.Close()
	buf := make([]byte, maxFile+1)
	n := 0
	for n < len(buf) {
		m, err := f.Read(buf[n:])
		n += m
		if err != nil {
			break
		}
	}
	if n > maxFile {
		return "", fmt.Errorf("%s: larger than %d bytes", name, maxFile)
	}
	return string(buf[:n]), nil
}

// ParseList parses a kernel list such as "0-3,8,10-11" (cpulist, node online) into ascending,
// distinct numbers no larger than limit. Blank input is the empty list.
func ParseList(s string, limit int) ([]int, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return nil, nil
	}
	var out []int
	for part := range strings.SplitSeq(s, ",") {
		lo, hi, isRange := strings.Cut(part, "-")
		a, err := strconv.Atoi(lo)
		if err != nil || a < 0 || a > limit {
			return nil, fmt.Errorf("bad list item %q", part)
		}
		b := a
		if isRange {
			if b, err = strconv.Atoi(hi); err != nil || b < a || b > limit {
				return nil, fmt.Errorf("bad list range %q", part)
			}
		}
		if len(out)+(b-a+1) > limit+1 {
			return nil, fmt.Errorf("list longer than %d", limit+1)
		}
		for i := a; i <= b; i++ {
			out = append(out, i)
		}
	}
	slices.Sort(out)
	return slices.Compact(out), nil
}

// ParseMeminfo returns MemTotal and MemFree in bytes from a node's meminfo ("Node 0 MemTotal:
// 4155168 kB" lines). Both must be present.
func ParseMeminfo(s string, node int) (total, free uint64, err error) {
	var seen int
	prefix := fmt.Sprintf("Node %d ", node)
	for line := range strings.Lines(s) {
		rest, ok := strings.CutPrefix(line, prefix)
		if !ok {
			continue
		}
		key, val, ok := strings.Cut(rest, ":")
		if !ok || (key != "MemTotal" && key != "MemFree") {
			continue
		}
		f := strings.Fields(val)
		if len(f) != 2 || f[1] != "kB" {
			return 0, 0, fmt.Errorf("bad %s line %q", key, strings.TrimSpace(line))
		}
		kb, err := strconv.ParseUint(f[0], 10, 64)
		if err != nil || kb > 1<<53 {
			return 0, 0, fmt.Errorf("bad %s value %q", key, f[0])
		}
		if key == "MemTotal" {
			total, seen = kb*1024, seen|1
		} else {
			free, seen = kb*1024, seen|2
		}
	}
	if seen != 3 {
		return 0, 0, errors.New("MemTotal or MemFree missing")
	}
	return total, free, nil
}

// Node returns the node with id, if the machine has it.
func (t *Topology) Node(id int) (*Node, bool) {
	for i := range t.Nodes {
		if t.Nodes[i].ID == id {
			return &t.Nodes[i], true
		}
	}
	return nil, false
}

// Distance returns the SLIT distance from node a to node b (10 is local).
func (t *Topology) Distance(a, b int) (int, bool) {
	na, ok := t.Node(a)
	if !ok {
		return 0, false
	}
	for i := range t.Nodes {
		if t.Nodes[i].ID == b {
			return na.Distances[i], true
		}
	}
	return 0, false
}

// MemoryNodes returns the ids of the nodes that have memory.
func (t *Topology) MemoryNodes() []int {
	var out []int
	for _, n := range t.Nodes {
		if n.MemTotal > 0 {
			out = append(out, n.ID)
		}
	}
	return out
}

// NodeOfCPU returns the node whose cpulist has cpu.
func (t *Topology) NodeOfCPU(cpu int) (int, bool) {
	for _, n := range t.Nodes {
		if _, ok := slices.BinarySearch(n.CPUs, cpu); ok {
			return n.ID, true
		}
	}
	return 0, false
}

// String summarises the topology in one line per node.
func (t *Topology) String() string {
	var b strings.Builder
	for _, n := range t.Nodes {
		fmt.Fprintf(&b, "node %d: %d CPUs, %d MiB, distances %v\n", n.ID, len(n.CPUs), n.MemTotal>>20, n.Distances)
	}
	for _, d := range t.DAX {
		fmt.Fprintf(&b, "%s: target node %d, %d MiB\n", d.Name, d.TargetNode, d.Size>>20)
	}
	return b.String()
}
