package numaemu

import (
	"fmt"

	"github.com/farmem/farmem/farmem"
)

// Memory-policy modes and flags, as in <linux/mempolicy.h> (x/sys/unix does not define them).
const (
	MPOL_DEFAULT        = 0
	MPOL_PREFERRED      = 1
	MPOL_BIND           = 2
	MPOL_INTERLEAVE     = 3
	MPOL_LOCAL          = 4
	MPOL_PREFERRED_MANY = 5

	MPOL_F_NODE         = 1 << 0 // get_mempolicy: return the node of addr, or the next interleave node
	MPOL_F_ADDR         = 1 << 1 // get_mempolicy: the policy of the VMA at addr
	MPOL_F_MEMS_ALLOWED = 1 << 2 // get_mempolicy: the nodes the task may use

	MPOL_MF_STRICT   = 1 << 0 // mbind: fail if existing pages do not follow the policy
	MPOL_MF_MOVE     = 1 << 1 // mbind, move_pages: move pages used only by this process
	MPOL_MF_MOVE_ALL = 1 << 2 // mbind, move_pages: move shared pages too (CAP_SYS_NICE)
)

// MaxNodes is the number of nodes a [NodeMask] holds (the kernel's largest MAX_NUMNODES).
const MaxNodes = 1024

// NodeMask is a set of NUMA nodes in the kernel's layout: bit n of word n/64.
type NodeMask [MaxNodes / 64]uint64

// NodeMaskOf returns the mask of the given nodes.
func NodeMaskOf(nodes ...int) (NodeMask, error) {
	var m NodeMask
	for _, n := range nodes {
		if !m.Set(n) {
			return m, fmt.Errorf("numaemu: node %d outside 0..%d: %w", n, MaxNodes-1, farmem.ErrInvalid)
		}
	}
	return m, nil
}

// Set adds node n; it reports false if n is out of range.
func (m *NodeMask) Set(n int) bool {
	if n < 0 || n >= MaxNodes {
		return false
	}
	m[n/64] |= 1 << (n % 64)
	return true
}

// Has reports whether node n is in the mask.
func (m *NodeMask) Has(n int) bool { return n >= 0 && n < MaxNodes && m[n/64]&(1<<(n%64)) != 0 }

// Nodes returns the nodes in the mask, ascending.
func (m *NodeMask) Nodes() []int {
	var out []int
	for n := range MaxNodes {
		if m.Has(n) {
			out = append(out, n)
		}
	}
	return out
}

// maxnodeArg is the maxnode argument for a mask of bits bits. The kernel decrements maxnode
// before use (mm/mempolicy.c, get_nodes), so passing the bit count itself would make it ignore
// the mask's last bit; libnuma passes size + 1 for the same reason.
func maxnodeArg(bits int) uintptr { return uintptr(bits) + 1 }
