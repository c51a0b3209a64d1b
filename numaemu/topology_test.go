package numaemu

import (
	"os"
	"testing"
	"testing/fstest"

	"github.com/stretchr/testify/require"
)

func seq(a, b int) []int {
	var out []int
	for i := a; i <= b; i++ {
		out = append(out, i)
	}
	return out
}

func TestParseSysfsTrees(t *testing.T) {
	two, err := ParseSysfs(os.DirFS("testdata/sysfs-2node"))
	require.NoError(t, err)
	require.Len(t, two.Nodes, 2)
	require.Equal(t, append(seq(0, 15), seq(32, 47)...), two.Nodes[0].CPUs)
	require.Equal(t, append(seq(16, 31), seq(48, 63)...), two.Nodes[1].CPUs)
	require.Equal(t, uint64(263839612)*1024, two.Nodes[0].MemTotal)
	require.Equal(t, uint64(258964112)*1024, two.Nodes[1].MemFree)
	d, ok := two.Distance(0, 1)
	require.True(t, ok)
	require.Equal(t, 21, d)
	require.Equal(t, []int{0, 1}, two.MemoryNodes())
	require.Empty(t, two.DAX)
	n, ok := two.NodeOfCPU(40)
	require.True(t, ok)
	require.Equal(t, 0, n)
	n, _ = two.NodeOfCPU(50)
	require.Equal(t, 1, n)
	_, ok = two.NodeOfCPU(64)
	require.False(t, ok)

	four, err := ParseSysfs(os.DirFS("testdata/sysfs-4node"))
	require.NoError(t, err)
	require.Len(t, four.Nodes, 4)
	require.Empty(t, four.Nodes[2].CPUs, "CXL nodes are memory-only")
	require.Empty(t, four.Nodes[3].CPUs)
	require.Equal(t, uint64(128)<<30, four.Nodes[2].MemTotal)
	for _, c := range []struct{ a, b, d int }{{0, 2, 14}, {0, 3, 24}, {1, 3, 14}, {2, 3, 26}, {3, 3, 10}} {
		d, ok := four.Distance(c.a, c.b)
		require.True(t, ok)
		require.Equal(t, c.d, d, "distance %d->%d", c.a, c.b)
	}
	_, ok = four.Distance(0, 4)
	require.False(t, ok)
	require.Equal(t, []DAXDevice{{"dax0.0", 2, 64 << 30}, {"dax1.0", 3, 64 << 30}}, four.DAX)
	require.Contains(t, four.String(), "dax1.0: target node 3")

	one, err := ParseSysfs(os.DirFS("testdata/sysfs-1node"))
	require.NoError(t, err)
	require.Len(t, one.Nodes, 1)
	require.Equal(t, []int{10}, one.Nodes[0].Distances)
	require.NotEmpty(t, one.Nodes[0].CPUs)
}

func TestReadTopologyHere(t *testing.T) {
	topo, err := ReadTopology()
	if err != nil {
		t.Skipf("no NUMA sysfs on this machine: %v", err)
	}
	t.Logf("this machine:\n%v", topo)
	require.NotEmpty(t, topo.MemoryNodes())
}

func TestParseSysfsErrors(t *testing.T) {
	good := func() fstest.MapFS {
		return fstest.MapFS{
			"devices/system/node/online":         {Data: []byte("0-1\n")},
			"devices/system/node/node0/cpulist":  {Data: []byte("0\n")},
			"devices/system/node/node0/distance": {Data: []byte("10 20\n")},
			"devices/system/node/node0/meminfo":  {Data: []byte("Node 0 MemTotal: 8 kB\nNode 0 MemFree: 4 kB\n")},
			"devices/system/node/node1/cpulist":  {Data: []byte("\n")},
			"devices/system/node/node1/distance": {Data: []byte("20 10\n")},
			"devices/system/node/node1/meminfo":  {Data: []byte("Node 1 MemTotal: 0 kB\nNode 1 MemFree: 0 kB\n")},
		}
	}
	topo, err := ParseSysfs(good())
	require.NoError(t, err)
	require.Equal(t, []int{0}, topo.MemoryNodes(), "a node with no memory is not a memory node")

	// Without "online", the node directories are listed.
	fsys := good()
	delete(fsys, "devices/system/node/online")
	topo, err = ParseSysfs(fsys)
	require.NoError(t, err)
	require.Len(t, topo.Nodes, 2)

	for name, mutate := range map[string]func(fstest.MapFS){
		"no nodes":        func(f fstest.MapFS) { clear(f) },
		"empty online":    func(f fstest.MapFS) { f["devices/system/node/online"].Data = []byte("\n") },
		"bad online":      func(f fstest.MapFS) { f["devices/system/node/online"].Data = []byte("0-x") },
		"huge online":     func(f fstest.MapFS) { f["devices/system/node/online"].Data = []byte("0-4294967295") },
		"short distance":  func(f fstest.MapFS) { f["devices/system/node/node1/distance"].Data = []byte("20") },
		"bad distance":    func(f fstest.MapFS) { f["devices/system/node/node1/distance"].Data = []byte("20 -1") },
		"missing cpulist": func(f fstest.MapFS) { delete(f, "devices/system/node/node1/cpulist") },
		"reversed range":  func(f fstest.MapFS) { f["devices/system/node/node0/cpulist"].Data = []byte("3-1") },
		"bad meminfo": func(f fstest.MapFS) {
			f["devices/system/node/node0/meminfo"].Data = []byte("Node 0 MemTotal: lots kB\n")
		},
		"meminfo units": func(f fstest.MapFS) {
			f["devices/system/node/node0/meminfo"].Data = []byte("Node 0 MemTotal: 8 MB\nNode 0 MemFree: 1 kB\n")
		},
		"missing distance":  func(f fstest.MapFS) { delete(f, "devices/system/node/node0/distance") },
		"bad dax node":      func(f fstest.MapFS) { f["bus/dax/devices/dax0.0/target_node"] = &fstest.MapFile{Data: []byte("two")} },
		"bad dax size":      func(f fstest.MapFS) { f["bus/dax/devices/dax0.0/size"] = &fstest.MapFile{Data: []byte("-5")} },
		"oversized cpulist": func(f fstest.MapFS) { f["devices/system/node/node0/cpulist"].Data = make([]byte, 1<<17) },
	} {
		fsys := good()
		mutate(fsys)
		_, err := ParseSysfs(fsys)
		require.ErrorIs(t, err, ErrSysfs, name)
	}
}

func TestParseList(t *testing.T) {
	for in, want := range map[string][]int{
		"":            nil,
		"\n":          nil,
		"0":           {0},
		"0-3":         {0, 1, 2, 3},
		"0-1,8,10-11": {0, 1, 8, 10, 11},
		"5,1-2,2":     {1, 2, 5},
	} {
		got, err := ParseList(in, 100)
		require.NoError(t, err, in)
		require.Equal(t, want, got, in)
	}
	for _, in := range []string{"a", "-1", "1-", "2-1", "101", "0-101", "1,,2", "0-3:2"} {
		_, err := ParseList(in, 100)
		require.Error(t, err, in)
	}
}

func FuzzParseSysfs(f *testing.F) {
	f.Add("0-1", "0-3", "10 21", "Node 0 MemTotal: 8 kB\nNode 0 MemFree: 4 kB\n", "2", "4096")
	f.Add("0", "", "10", "", "-1", "")
	f.Add("0-1023", "0-65535", "10 10 10", "Node 0 MemTotal: 99999999999999999999 kB", "x", "1e9")
	f.Fuzz(func(t *testing.T, online, cpus, dist, meminfo, daxNode, daxSize string) {
		fsys := fstest.MapFS{
			"devices/system/node/online":         {Data: []byte(online)},
			"devices/system/node/node0/cpulist":  {Data: []byte(cpus)},
			"devices/system/node/node0/distance": {Data: []byte(dist)},
			"devices/system/node/node0/meminfo":  {Data: []byte(meminfo)},
			"devices/system/node/node1/cpulist":  {Data: []byte(cpus)},
			"devices/system/node/node1/distance": {Data: []byte(dist)},
			"bus/dax/devices/dax0.0/target_node": {Data: []byte(daxNode)},
			"bus/dax/devices/dax0.0/size":        {Data: []byte(daxSize)},
		}
		topo, err := ParseSysfs(fsys)
		if err != nil {
			require.ErrorIs(t, err, ErrSysfs)
			return
		}
		for _, n := range topo.Nodes {
			require.Len(t, n.Distances, len(topo.Nodes))
			for _, o := range topo.Nodes {
				_, ok := topo.Distance(n.ID, o.ID)
				require.True(t, ok)
			}
		}
		_, _ = topo.Resolve(Request{Node: 1, Fallback: true, Profile: CXLDirect}, 0)
	})
}
