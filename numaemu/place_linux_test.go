//go:build linux

package numaemu

import (
	"errors"
	"os"
	"runtime"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

func topologyHere(t *testing.T) *Topology {
	topo, err := ReadTopology()
	if err != nil {
		t.Skipf("no NUMA topology in sysfs: %v", err)
	}
	return topo
}

// skipIfNoMempolicy skips when the kernel or a seccomp filter refuses the NUMA calls.
func skipIfNoMempolicy(t *testing.T, err error) {
	if errors.Is(err, unix.ENOSYS) || errors.Is(err, unix.EPERM) {
		t.Skipf("memory-policy system calls refused here: %v", err)
	}
}

func anon(t *testing.T, size int) []byte {
	b, err := unix.Mmap(-1, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, unix.Munmap(b)) })
	return b
}

// The placement test: map, bind to node 0, populate, verify every page.
func TestPlaceNode0(t *testing.T) {
	topologyHere(t)
	const size = 8 << 20
	b := anon(t, size)
	pages := size / os.Getpagesize()

	// Before populating, move_pages finds no page: the verification is not vacuous.
	v, err := Verify(b, 0)
	skipIfNoMempolicy(t, err)
	require.NoError(t, err)
	require.Equal(t, pages, v.Pages)
	require.Equal(t, pages, v.Absent)
	require.False(t, v.On(0))

	require.NoError(t, Bind(b, 0))
	var mode int
	var mask NodeMask
	require.NoError(t, GetMempolicy(&mode, &mask, unsafe.Pointer(&b[0]), MPOL_F_ADDR))
	require.Equal(t, MPOL_BIND, mode)
	require.Equal(t, []int{0}, mask.Nodes())

	// Bound but not populated: still nothing present.
	v, err = Verify(b, 0)
	require.NoError(t, err)
	require.Equal(t, pages, v.Absent)

	require.NoError(t, Populate(b, 0))
	v, err = Verify(b, 0)
	require.NoError(t, err)
	require.Equal(t, pages, v.Pages)
	require.Equal(t, map[int]int{0: pages}, v.PerNode, "every page on node 0")
	require.Zero(t, v.Absent)
	require.True(t, v.On(0))
	require.False(t, v.On(1))
	t.Logf("verified: %v", v)

	// The node of one page, through get_mempolicy too.
	var node int
	require.NoError(t, GetMempolicy(&node, nil, unsafe.Pointer(&b[size/2]), MPOL_F_ADDR|MPOL_F_NODE))
	require.Equal(t, 0, node)
}

// Populate keeps what the pages hold (MADV_POPULATE_WRITE does not zero present pages).
func TestPopulateKeepsData(t *testing.T) {
	b := anon(t, 1<<20)
	b[0], b[len(b)-1] = 7, 9
	err := Populate(b, 0)
	skipIfNoMempolicy(t, err)
	require.NoError(t, err)
	require.Equal(t, byte(7), b[0])
	require.Equal(t, byte(9), b[len(b)-1])
}

func TestMapAndFallback(t *testing.T) {
	topo := topologyHere(t)
	m, err := topo.Map(1<<20, Request{Node: 0, Profile: CXLDirect})
	skipIfNoMempolicy(t, err)
	require.NoError(t, err)
	require.False(t, m.Placement.Emulated)
	require.True(t, m.Verified.On(0))
	m.Data[123] = 1
	require.NoError(t, m.Close())
	require.NoError(t, m.Close(), "Close is idempotent")

	if len(topo.MemoryNodes()) > 1 {
		t.Skip("this machine has a second memory node; the fallback cannot be shown")
	}
	remote := 1
	_, err = topo.Map(1<<20, Request{Node: remote, Profile: CXLSwitched})
	require.ErrorIs(t, err, ErrNoNode)
	m, err = topo.Map(1<<20, Request{Node: remote, Profile: CXLSwitched, Fallback: true})
	require.NoError(t, err)
	defer m.Close()
	require.True(t, m.Placement.Emulated)
	require.Equal(t, CXLSwitched.Added(), m.Placement.Inject)
	require.True(t, m.Verified.On(m.Placement.Node))
	t.Logf("fallback: %s", m.Placement.Reason)

	_, err = topo.Map(0, Request{})
	require.Error(t, err)
}

// Binding to a node the machine does not have fails in the kernel, not silently.
func TestBindAbsentNode(t *testing.T) {
	topo := topologyHere(t)
	absent := topo.Nodes[len(topo.Nodes)-1].ID + 1
	b := anon(t, 1<<16)
	err := Bind(b, absent)
	skipIfNoMempolicy(t, err)
	require.ErrorIs(t, err, unix.EINVAL)
	require.Error(t, Bind(b, MaxNodes))
}

func TestPlaceOnSecondNode(t *testing.T) {
	topo := topologyHere(t)
	mem := topo.MemoryNodes()
	if len(mem) < 2 {
		t.Skipf("needs two NUMA nodes with memory; this machine has %d (%v)", len(mem), mem)
	}
	b := anon(t, 4<<20)
	v, err := Place(b, mem[1], 0)
	skipIfNoMempolicy(t, err)
	require.NoError(t, err)
	require.True(t, v.On(mem[1]))
}

func TestMovePagesArguments(t *testing.T) {
	b := anon(t, 8192)
	p := []unsafe.Pointer{unsafe.Pointer(&b[0])}
	require.ErrorIs(t, MovePages(0, p, nil, make([]int32, 2), 0), unix.EINVAL)
	require.ErrorIs(t, MovePages(0, p, make([]int32, 2), make([]int32, 1), 0), unix.EINVAL)
	require.NoError(t, MovePages(0, nil, nil, nil, 0))
	st := make([]int32, 1)
	x := new(uint64)
	*x = 1
	err := MovePages(0, []unsafe.Pointer{unsafe.Pointer(x)}, nil, st, 0)
	skipIfNoMempolicy(t, err)
	require.NoError(t, err)
	require.GreaterOrEqual(t, st[0], int32(0), "a Go heap word is present on some node")
	runtime.KeepAlive(x)
}

// The pre-5.14 populate path faults every page in and keeps the data.
func TestTouchPages(t *testing.T) {
	b := anon(t, 1<<20)
	b[4096] = 5
	require.NoError(t, touchPages(b, 0))
	v, err := Verify(b, 0)
	skipIfNoMempolicy(t, err)
	require.NoError(t, err)
	require.Zero(t, v.Absent, "%v", v)
	require.Equal(t, byte(5), b[4096])
}

func TestPinThread(t *testing.T) {
	topo := topologyHere(t)
	cpus := topo.Nodes[0].CPUs
	if len(cpus) == 0 {
		t.Skip("node 0 has no CPU")
	}
	target := cpus[len(cpus)-1]
	done := make(chan struct{})
	go func() {
		defer close(done)
		unpin, err := PinThread(target)
		require.NoError(t, err)
		var set unix.CPUSet
		require.NoError(t, unix.SchedGetaffinity(0, &set))
		require.Equal(t, 1, set.Count())
		require.True(t, set.IsSet(target))
		for range 10 {
			runtime.Gosched()
			cpu, node, err := Getcpu()
			require.NoError(t, err)
			require.Equal(t, target, cpu)
			require.Equal(t, 0, node)
		}
		require.NoError(t, unpin())
		require.NoError(t, unpin(), "unpin is idempotent")
		require.NoError(t, unix.SchedGetaffinity(0, &set))
		require.Greater(t, set.Count(), 1, "affinity restored")
	}()
	<-done
	_, err := PinThread()
	require.Error(t, err)
	_, err = PinThread(1 << 20)
	require.Error(t, err)
	unpin, err := topo.PinToNode(0)
	require.NoError(t, err)
	require.NoError(t, unpin())
	_, err = topo.PinToNode(99)
	require.ErrorIs(t, err, ErrNoNode)
}
