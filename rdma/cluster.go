package rdma

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/farmem/farmem/farmem"
	"github.com/farmem/farmem/farmem/transport"
)

// Cluster is a parsed cluster file: the memory nodes by id and address, optionally the compute
// nodes, and the settings every process of the cluster shares. See the package doc for the
// format.
type Cluster struct {
	// Memory lists the memory nodes (farmemd processes).
	Memory []NodeAddr
	// Compute lists the compute processes when the cluster's compute nodes are fixed; when it is
	// empty, each process claims a compute id from the registry as it joins.
	Compute []NodeAddr
	// Registry is the memory node that keeps compute membership (default: the lowest memory id).
	Registry farmem.NodeID
	// SecretFile is the cluster secret's file, relative to the cluster file's directory.
	SecretFile string
	// ClientsPerNode, SliceSize and SharedSize fix the layout of every compute node's region
	// (defaults 64, 16 KiB, 1 MiB).
	ClientsPerNode int
	SliceSize      uint64
	SharedSize     uint64
	// DownTimeout is the fabric time after which an unanswered op fails with ErrNodeDown
	// (default 1s).
	DownTimeout time.Duration
	// Lease is how long a compute node's membership lasts without a heartbeat (default 10s).
	Lease time.Duration
}

// NodeAddr names a node and where it listens.
type NodeAddr struct {
	ID   farmem.NodeID
	Addr string
	// Size is the node's region size if the file states it (memory nodes only; 0 = learn it
	// when connecting). A node with a stated size may be down when a process dials.
	Size uint64
}

// Defaults of the cluster file's settings.
const (
	DefaultClientsPerNode = transport.DefaultClientsPerNode
	DefaultSliceSize      = transport.DefaultSliceSize
	DefaultSharedSize     = transport.DefaultSharedSize
	DefaultDownTimeout    = time.Second
	DefaultLease          = 10 * time.Second
)

// LoadCluster reads and parses a cluster file. A relative secret-file in it is resolved
// against the cluster file's directory.
func LoadCluster(path string) (*Cluster, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("rdma: cluster file: %w", err)
	}
	c, err := ParseCluster(bytes.NewReader(b))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if c.SecretFile != "" && !filepath.IsAbs(c.SecretFile) {
		c.SecretFile = filepath.Join(filepath.Dir(path), c.SecretFile)
	}
	return c, nil
}

// ParseCluster parses a cluster file and fills in defaults. Errors name the line and wrap
// farmem.ErrInvalid.
func ParseCluster(r io.Reader) (*Cluster, error) {
	c := &Cluster{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 4096), 64<<10)
	seen := map[farmem.NodeID]bool{}
	line := 0
	for sc.Scan() {
		line++
		text, _, _ := strings.Cut(sc.Text(), "#")
		f := strings.Fields(text)
		if len(f) == 0 {
			continue
		}
		bad := func(format string, args ...any) error {
			return fmt.Errorf("rdma: cluster file line %d: %s: %w", line, fmt.Sprintf(format, args...), farmem.ErrInvalid)
		}
		want := func(n int) error {
			if len(f) != n {
				return bad("%q takes %d field(s)", f[0], n-1)
			}
			return nil
		}
		var err error
		switch f[0] {
		case "memory", "compute":
			if len(f) < 3 || len(f) > 4 {
				return nil, bad("want %s <id> <host:port> [size=<bytes>]", f[0])
			}
			id, e := strconv.ParseUint(f[1], 10, 16)
			if e != nil || id == 0 {
				return nil, bad("bad id %q", f[1])
			}
			n := NodeAddr{Addr: f[2]}
			if _, _, e := net.SplitHostPort(f[2]); e != nil {
				return nil, bad("bad address %q", f[2])
			}
			if f[0] == "memory" {
				if farmem.NodeID(id) > farmem.MaxMemoryNode {
					return nil, bad("memory node id %d exceeds %d", id, farmem.MaxMemoryNode)
				}
				n.ID = farmem.NodeID(id)
			} else {
				if farmem.ComputeID(id) > farmem.MaxComputeID {
					return nil, bad("compute id %d exceeds %d", id, farmem.MaxComputeID)
				}
				n.ID = farmem.ComputeID(id).Node()
			}
			if len(f) == 4 {
				v, ok := strings.CutPrefix(f[3], "size=")
				if !ok || f[0] != "memory" {
					return nil, bad("unknown field %q", f[3])
				}
				if n.Size, err = ParseSize(v); err != nil || n.Size == 0 {
					return nil, bad("bad size %q", v)
				}
			}
			if seen[n.ID] {
				return nil, bad("node %v listed twice", n.ID)
			}
			seen[n.ID] = true
			if f[0] == "memory" {
				c.Memory = append(c.Memory, n)
			} else {
				c.Compute = append(c.Compute, n)
			}
		case "registry":
			if err := want(2); err != nil {
				return nil, err
			}
			id, e := strconv.ParseUint(f[1], 10, 16)
			if e != nil || id == 0 || farmem.NodeID(id) > farmem.MaxMemoryNode {
				return nil, bad("bad memory node id %q", f[1])
			}
			c.Registry = farmem.NodeID(id)
		case "secret-file":
			if err := want(2); err != nil {
				return nil, err
			}
			c.SecretFile = f[1]
		case "clients-per-node":
			if err := want(2); err != nil {
				return nil, err
			}
			v, e := strconv.Atoi(f[1])
			if e != nil || v < 2 || v > 0xffff {
				return nil, bad("bad count %q", f[1])
			}
			c.ClientsPerNode = v
		case "slice-size", "shared-size":
			if err := want(2); err != nil {
				return nil, err
			}
			v, e := ParseSize(f[1])
			if e != nil || v > 1<<40 {
				return nil, bad("bad size %q", f[1])
			}
			if f[0] == "slice-size" {
				c.SliceSize = v
			} else {
				c.SharedSize = v
			}
		case "down-timeout", "lease":
			if err := want(2); err != nil {
				return nil, err
			}
			d, e := time.ParseDuration(f[1])
			if e != nil || d <= 0 {
				return nil, bad("bad duration %q", f[1])
			}
			if f[0] == "lease" {
				c.Lease = d
			} else {
				c.DownTimeout = d
			}
		default:
			return nil, bad("unknown keyword %q", f[0])
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("rdma: cluster file line %d: %v: %w", line+1, err, farmem.ErrInvalid)
	}
	if err := c.fill(); err != nil {
		return nil, err
	}
	return c, nil
}

// fill sets defaults and checks the whole.
func (c *Cluster) fill() error {
	if len(c.Memory) == 0 {
		return fmt.Errorf("rdma: cluster lists no memory node: %w", farmem.ErrInvalid)
	}
	if c.Registry == 0 {
		c.Registry = c.Memory[0].ID
		for _, m := range c.Memory {
			c.Registry = min(c.Registry, m.ID)
		}
	}
	if _, ok := c.memory(c.Registry); !ok {
		return fmt.Errorf("rdma: registry %v is not a listed memory node: %w", c.Registry, farmem.ErrInvalid)
	}
	transport.RegionDefaults(&c.ClientsPerNode, &c.SliceSize, &c.SharedSize)
	if c.DownTimeout == 0 {
		c.DownTimeout = DefaultDownTimeout
	}
	if c.Lease == 0 {
		c.Lease = DefaultLease
	}
	if n := len(c.Compute); n > 0 && c.Compute[n-1].ID.ComputeID() > farmem.MaxComputeID {
		return fmt.Errorf("rdma: compute ids: %w", farmem.ErrInvalid)
	}
	for _, cn := range c.Compute {
		if uint64(cn.ID.ComputeID())*uint64(c.ClientsPerNode) > 0xffff {
			return fmt.Errorf("rdma: compute id %d x %d clients per node exceeds 16-bit client ids: %w", cn.ID.ComputeID(), c.ClientsPerNode, farmem.ErrInvalid)
		}
	}
	return nil
}

func (c *Cluster) memory(id farmem.NodeID) (NodeAddr, bool) {
	for _, m := range c.Memory {
		if m.ID == id {
			return m, true
		}
	}
	return NodeAddr{}, false
}

// ComputeSize is the size of every compute node's region under this cluster's layout.
func (c *Cluster) ComputeSize() uint64 {
	return farmem.ComputeHeaderSize + uint64(c.ClientsPerNode)*c.SliceSize + c.SharedSize
}

// String formats the cluster as a cluster file that ParseCluster reads back.
func (c *Cluster) String() string {
	var b strings.Builder
	for _, m := range c.Memory {
		fmt.Fprintf(&b, "memory %d %s", m.ID, m.Addr)
		if m.Size != 0 {
			fmt.Fprintf(&b, " size=%d", m.Size)
		}
		b.WriteByte('\n')
	}
	for _, m := range c.Compute {
		fmt.Fprintf(&b, "compute %d %s\n", m.ID.ComputeID(), m.Addr)
	}
	if c.Registry != 0 {
		fmt.Fprintf(&b, "registry %d\n", c.Registry)
	}
	if c.SecretFile != "" {
		fmt.Fprintf(&b, "secret-file %s\n", c.SecretFile)
	}
	if c.ClientsPerNode != 0 {
		fmt.Fprintf(&b, "clients-per-node %d\n", c.ClientsPerNode)
	}
	if c.SliceSize != 0 {
		fmt.Fprintf(&b, "slice-size %d\n", c.SliceSize)
	}
	if c.SharedSize != 0 {
		fmt.Fprintf(&b, "shared-size %d\n", c.SharedSize)
	}
	if c.DownTimeout != 0 {
		fmt.Fprintf(&b, "down-timeout %v\n", c.DownTimeout)
	}
	if c.Lease != 0 {
		fmt.Fprintf(&b, "lease %v\n", c.Lease)
	}
	return b.String()
}

// ParseSize parses a byte count: decimal digits with an optional suffix K, M, G, T, P, E (powers
// of 1024; KiB, MiB, ... and KB, MB, ... are read the same). Its errors say whether the suffix
// is unknown, the digits are not a number, or the count exceeds 2^63 bytes.
func ParseSize(s string) (uint64, error) {
	num := strings.TrimRightFunc(s, func(r rune) bool { return r < '0' || r > '9' })
	suffix := strings.TrimSuffix(strings.TrimSuffix(strings.ToUpper(s[len(num):]), "B"), "I")
	var shift uint
	switch suffix {
	case "":
	case "K":
		shift = 10
	case "M":
		shift = 20
	case "G":
		shift = 30
	case "T":
		shift = 40
	case "P":
		shift = 50
	case "E":
		shift = 60
	default:
		return 0, fmt.Errorf("rdma: size %q: unknown suffix (want K, M, G, T, P or E): %w", s, farmem.ErrInvalid)
	}
	v, err := strconv.ParseUint(num, 10, 64)
	if err != nil && !errors.Is(err, strconv.ErrRange) {
		return 0, fmt.Errorf("rdma: size %q: not a byte count: %w", s, farmem.ErrInvalid)
	}
	if err != nil || v > (1<<63)>>shift {
		return 0, fmt.Errorf("rdma: size %q: too large (at most 8EiB): %w", s, farmem.ErrInvalid)
	}
	return v << shift, nil
}

// ReadSecret reads a cluster secret file: its contents with surrounding white space trimmed,
// at least 16 bytes.
func ReadSecret(path string) ([]byte, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("rdma: secret file: %w", err)
	}
	b = bytes.TrimSpace(b)
	if len(b) < MinSecret {
		return nil, fmt.Errorf("rdma: secret file %s: %d bytes, want at least %d: %w", path, len(b), MinSecret, farmem.ErrInvalid)
	}
	return b, nil
}

// MinSecret is the shortest cluster secret accepted.
const MinSecret = 16
