package numaemu

import (
	"os"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/farmem/farmem/farmem"
)

func TestResolve(t *testing.T) {
	one, err := ParseSysfs(os.DirFS("testdata/sysfs-1node"))
	require.NoError(t, err)
	four, err := ParseSysfs(os.DirFS("testdata/sysfs-4node"))
	require.NoError(t, err)

	pl, err := one.Resolve(Request{Node: 0, Profile: CXLDirect}, 0)
	require.NoError(t, err)
	require.Equal(t, Placement{Requested: 0, Node: 0, Reason: pl.Reason}, pl, "a present node: nothing injected")

	_, err = one.Resolve(Request{Node: 1, Profile: CXLDirect}, 0)
	require.ErrorIs(t, err, ErrNoNode)
	require.ErrorIs(t, err, farmem.ErrNotSupported)
	require.Contains(t, err.Error(), "node 1 is not a memory node on this machine (memory nodes [0])")

	pl, err = one.Resolve(Request{Node: 1, Profile: CXLSwitched, Fallback: true}, 0)
	require.NoError(t, err)
	require.True(t, pl.Emulated)
	require.Equal(t, 1, pl.Requested)
	require.Equal(t, 0, pl.Node)
	require.Equal(t, CXLSwitched.Added(), pl.Inject)
	require.Contains(t, pl.Reason, "bound to node 0 instead, injecting 169ns per access to emulate cxl-switched")
	t.Log(pl.Reason)

	// A bogus local node falls back to the first memory node.
	pl, err = one.Resolve(Request{Node: 5, Profile: RDMA, Fallback: true}, 7)
	require.NoError(t, err)
	require.Equal(t, 0, pl.Node)

	// On the CXL machine node 2 is real (memory-only): bind there, inject nothing.
	pl, err = four.Resolve(Request{Node: 2, Profile: CXLDirect}, 0)
	require.NoError(t, err)
	require.False(t, pl.Emulated)
	require.Equal(t, 2, pl.Node)
	require.Zero(t, pl.Inject)
}

func TestDAXPlacement(t *testing.T) {
	four, err := ParseSysfs(os.DirFS("testdata/sysfs-4node"))
	require.NoError(t, err)
	pl, err := four.DAXPlacement("dax0.0", 2, CXLDirect)
	require.NoError(t, err)
	require.Equal(t, 2, pl.Node)
	require.False(t, pl.Emulated)
	require.Contains(t, pl.Reason, "mempolicy does not apply")

	pl, err = four.DAXPlacement("dax1.0", 2, CXLSwitched)
	require.NoError(t, err)
	require.Equal(t, 3, pl.Node, "the device's target node, not the one asked for")
	require.True(t, pl.Emulated)
	require.Equal(t, CXLSwitched.Added(), pl.Inject)

	_, err = four.DAXPlacement("dax9.0", 2, CXLDirect)
	require.ErrorIs(t, err, ErrNoNode)
	four.DAX = append(four.DAX, DAXDevice{Name: "dax2.0", TargetNode: -1})
	_, err = four.DAXPlacement("dax2.0", 2, CXLDirect)
	require.ErrorIs(t, err, ErrNoNode)
}

func TestNodeMask(t *testing.T) {
	m, err := NodeMaskOf(0, 63, 64, 1023)
	require.NoError(t, err)
	require.Equal(t, uint64(1|1<<63), m[0])
	require.Equal(t, uint64(1), m[1])
	require.Equal(t, uint64(1<<63), m[15])
	require.Equal(t, []int{0, 63, 64, 1023}, m.Nodes())
	require.False(t, m.Has(1))
	require.False(t, m.Has(-1))
	_, err = NodeMaskOf(1024)
	require.ErrorIs(t, err, farmem.ErrInvalid)
	_, err = NodeMaskOf(-1)
	require.Error(t, err)
	// The kernel reads maxnode-1 bits: a 1024-node mask is passed as 1025.
	require.Equal(t, uintptr(1025), maxnodeArg(MaxNodes))
}

// A verification holds when the present pages are all on the node; absent pages (reclaimed
// since they were populated) do not count against it, while a page elsewhere, a failed query,
// or no page present at all does.
func TestVerificationOn(t *testing.T) {
	for _, c := range []struct {
		v    Verification
		want bool
	}{
		{Verification{Pages: 4, PerNode: map[int]int{0: 4}}, true},
		{Verification{Pages: 4, PerNode: map[int]int{0: 3}, Absent: 1}, true},
		{Verification{Pages: 4, PerNode: map[int]int{0: 3, 1: 1}}, false},
		{Verification{Pages: 4, PerNode: map[int]int{0: 3}, Failed: 1}, false},
		{Verification{Pages: 4, PerNode: map[int]int{}, Absent: 4}, false},
		{Verification{}, false},
	} {
		require.Equal(t, c.want, c.v.On(0), "%v", c.v)
	}
}
