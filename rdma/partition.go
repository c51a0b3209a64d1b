package rdma

import (
	"fmt"

	"github.com/farmem/farmem/farmem"
)

// PartitionNodes cuts node (a memory node, or a compute node's region, served in this
// process) off from every client of the compute nodes from, those open now and those opened
// later, until HealNodes: a network partition between node and those processes as their data
// path sees it. Their verbs to node neither apply nor answer, so they fail with
// farmem.ErrNodeDown after the fabric's down timeout, as a hung node's do, and the fabric
// reports node down to them; every other client of node is served as before. Frames that
// arrived during the partition are dropped, and the connections that lost frames are closed
// when it heals, so nothing posted after a lost frame applies on them (a client re-dials).
//
// It is Partition for each of the ClientsPerNode client ids of each compute node (the
// cluster's layout, which every process agrees on, read from a fabric added to the injector),
// so it costs one entry per client id in the node's partition set and one check per frame
// while any partition is on. It cuts the data path only: control connections (membership,
// leases, status and adoption queries) stay up, so a process cut off from the registry node
// keeps its lease. A partition that also cuts those needs the network itself (a link taken
// down between network namespaces).
func (in *Injector) PartitionNodes(node farmem.NodeID, from ...farmem.NodeID) error {
	return in.partitionNodes(node, from, true)
}

// HealNodes ends PartitionNodes for the compute nodes from. Clients of from that were cut off
// one by one with Partition are healed too.
func (in *Injector) HealNodes(node farmem.NodeID, from ...farmem.NodeID) error {
	return in.partitionNodes(node, from, false)
}

func (in *Injector) partitionNodes(node farmem.NodeID, from []farmem.NodeID, on bool) error {
	s, err := in.node(node)
	if err != nil {
		return err
	}
	per, err := in.clientsPerNode()
	if err != nil {
		return err
	}
	for _, c := range from {
		if !c.IsCompute() {
			return fmt.Errorf("rdma: partition %v from %v: not a compute node: %w", node, c, farmem.ErrInvalid)
		}
	}
	for _, c := range from {
		first := (int(c.ComputeID())-1)*per + 1
		if first+per-1 > int(^farmem.ClientID(0)) {
			return fmt.Errorf("rdma: partition %v from %v: its client ids exceed 16 bits: %w", node, c, farmem.ErrInvalid)
		}
		for id := first; id < first+per; id++ {
			s.partition(farmem.ClientID(id), on)
		}
	}
	return nil
}

// clientsPerNode is the cluster's ClientsPerNode, from any fabric of the injector.
func (in *Injector) clientsPerNode() (int, error) {
	in.mu.Lock()
	defer in.mu.Unlock()
	for _, f := range in.fabrics {
		if t := f.Topology(); t != nil && t.ClientsPerNode > 0 {
			return t.ClientsPerNode, nil
		}
	}
	return 0, fmt.Errorf("rdma: partitioning compute nodes needs the cluster's layout: add a fabric to the injector: %w", farmem.ErrInvalid)
}
