package kvstore

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/farmem/farmem/sim"
)

// swarmObjectBound is the most an object of the default parameters may take per replica at
// 512 clients (64 compute nodes of 8 clients, as `farmem bench --transport sim --clients 512`
// runs them): its register with a lane per compute node (272,576 bytes), rounded, and its life
// word's group.
const swarmObjectBound = 280_000

// TestSwarmObjectSizeAt512: an object of the default parameters, on the simulated topology
// the benchmark uses at 512 clients (64 compute nodes of 11 client slots), fits
// swarmObjectBound per replica with per-node lanes, so 1,000 objects fit a 512 MiB memory
// node's symmetric area; with a lane per client slot (PerClientLanes) it takes 704 lanes, over 2.5 MiB.
func TestSwarmObjectSizeAt512(t *testing.T) {
	t.Parallel()
	model := sim.ConnectX6()
	model.MemoryNodes, model.ComputeNodes, model.ClientsPerNode, model.MemorySize = 3, 64, 11, 1<<20
	s, err := sim.New(model, 1)
	require.NoError(t, err)
	defer s.Close()
	topo := s.Topology()

	p := Swarm{}.objectParams(topo)
	require.True(t, p.PerNode)
	require.Equal(t, 64, p.Writers, "a writer per compute node")
	require.Equal(t, 64, p.Words, "a metadata word per compute node")
	size := swarmBlockSize(p)
	t.Logf("per-node lanes: %d bytes per object and replica, %d MiB for 1,000 objects", size, 1000*size>>20)
	require.LessOrEqual(t, size, uint64(swarmObjectBound))
	const node = 512 << 20
	require.Less(t, 1000*size, uint64(node-node/replicatedIndexSymFraction)*3/4, "1,000 objects fit three quarters of a 512 MiB node's symmetric area")

	pc := Swarm{PerClientLanes: true}.objectParams(topo)
	require.False(t, pc.PerNode)
	require.Equal(t, 64*11, pc.Writers, "a writer per client slot")
	t.Logf("per-client lanes: %d bytes per object and replica", swarmBlockSize(pc))
	require.Greater(t, swarmBlockSize(pc), uint64(5<<19))

	// The parameters round-trip through the index's reserved entry, and a version 1 record
	// (per-client lanes) still decodes.
	got, err := decodeSwarmParams(encodeSwarmParams(p))
	require.NoError(t, err)
	require.Equal(t, p, got)
	v1 := encodeSwarmParams(pc)
	v1 = v1[:len(v1)-1]
	v1[0] = swarmParamsV1
	got, err = decodeSwarmParams(v1)
	require.NoError(t, err)
	require.Equal(t, pc, got)
	_, err = decodeSwarmParams(append(encodeSwarmParams(p)[:len(v1)], 2))
	require.ErrorIs(t, err, ErrBadRoot, "an unknown flag")
}
