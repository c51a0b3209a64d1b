package local

import (
	"fmt"

	"github.com/farmem/farmem/farmem"
)

// PartitionNodes cuts node off from every client of the compute nodes from, those open now
// and those opened later, until HealNodes: the partition a network split makes between node
// and those processes. Their verbs, Waits and Calls to node neither apply nor answer and fail
// with farmem.ErrNodeDown after the down timeout, as with Hang; every other client is served
// as before. It is Partition for each of the Topology's ClientsPerNode client ids of each
// compute node, so it costs one map entry per id and one map lookup under the fabric's lock per
// verb while any partition is on.
func (f *Fabric) PartitionNodes(node farmem.NodeID, from ...farmem.NodeID) error {
	return f.partitionNodes(node, from, true)
}

// HealNodes ends PartitionNodes for the compute nodes from (and heals their clients cut off
// one by one with Partition).
func (f *Fabric) HealNodes(node farmem.NodeID, from ...farmem.NodeID) error {
	return f.partitionNodes(node, from, false)
}

func (f *Fabric) partitionNodes(node farmem.NodeID, from []farmem.NodeID, on bool) error {
	if _, err := f.node(node); err != nil {
		return err
	}
	per := f.topo.ClientsPerNode
	for _, c := range from {
		if _, err := f.node(c); err != nil || !c.IsCompute() {
			return fmt.Errorf("local: partition %v from %v: not a compute node: %w", node, c, farmem.ErrInvalid)
		}
	}
	for _, c := range from {
		first := (int(c.ComputeID())-1)*per + 1
		for id := first; id < first+per; id++ {
			var err error
			if on {
				err = f.Partition(farmem.ClientID(id), node)
			} else {
				err = f.Heal(farmem.ClientID(id), node)
			}
			if err != nil {
				return err
			}
		}
	}
	return nil
}
