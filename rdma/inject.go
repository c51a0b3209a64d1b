package rdma

import (
	"fmt"
	"sync"

	"github.com/farmem/farmem/farmem"
	"github.com/farmem/farmem/farmem/transport"
)

// Injector injects faults into a cluster running in this process: memory nodes (Servers) and
// the compute nodes of Fabrics. It implements transport.FaultInjector:
//
//	Crash       a Server stops listening and drops its connections (fail-stop); a Fabric's
//	            compute node does the same and its clients, Waits and handlers end
//	Hang        the node reads and drops every frame (fail-silent) until Resume
//	Partition   the node drops one client's frames until Heal
//	PartitionNodes the node drops the frames of every client of some compute processes
//	            until HealNodes (see PartitionNodes)
//	CrashAfter  the next batch frame applies n ops, answers for them, then the node crashes
//	CrashClient one client fails stop; its node's other clients go on
//
// Ops caught by a silent node fail with farmem.ErrNodeDown after the fabric's down timeout;
// connections that lost frames to a silence are closed when it ends, so nothing posted after
// the lost frames applies on them.
type Injector struct {
	mu      sync.Mutex
	servers map[farmem.NodeID]*srv
	fabrics []*Fabric
}

var _ transport.FaultInjector = (*Injector)(nil)

// NewInjector returns an injector over the given servers and fabrics.
func NewInjector(servers []*Server, fabrics []*Fabric) *Injector {
	in := &Injector{servers: make(map[farmem.NodeID]*srv)}
	for _, s := range servers {
		in.servers[s.s.node] = s.s
	}
	for _, f := range fabrics {
		in.AddFabric(f)
	}
	return in
}

// AddServer adds a memory node.
func (in *Injector) AddServer(s *Server) {
	in.mu.Lock()
	in.servers[s.s.node] = s.s
	in.mu.Unlock()
}

// AddFabric adds a compute process.
func (in *Injector) AddFabric(f *Fabric) {
	in.mu.Lock()
	in.servers[f.self] = f.srv
	in.fabrics = append(in.fabrics, f)
	in.mu.Unlock()
}

func (in *Injector) node(id farmem.NodeID) (*srv, error) {
	in.mu.Lock()
	defer in.mu.Unlock()
	if s := in.servers[id]; s != nil {
		return s, nil
	}
	return nil, fmt.Errorf("rdma: no in-process node %v to inject a fault into: %w", id, farmem.ErrInvalid)
}

// Crash implements transport.FaultInjector.
func (in *Injector) Crash(id farmem.NodeID) error {
	s, err := in.node(id)
	if err != nil {
		return err
	}
	s.crash()
	return nil
}

// Hang implements transport.FaultInjector.
func (in *Injector) Hang(id farmem.NodeID) error {
	s, err := in.node(id)
	if err != nil {
		return err
	}
	return s.hang()
}

// Resume implements transport.FaultInjector.
func (in *Injector) Resume(id farmem.NodeID) error {
	s, err := in.node(id)
	if err != nil {
		return err
	}
	return s.resume()
}

// Partition implements transport.FaultInjector.
func (in *Injector) Partition(client farmem.ClientID, id farmem.NodeID) error {
	s, err := in.node(id)
	if err != nil {
		return err
	}
	s.partition(client, true)
	return nil
}

// Heal implements transport.FaultInjector.
func (in *Injector) Heal(client farmem.ClientID, id farmem.NodeID) error {
	s, err := in.node(id)
	if err != nil {
		return err
	}
	s.partition(client, false)
	return nil
}

// CrashAfter implements transport.FaultInjector.
func (in *Injector) CrashAfter(id farmem.NodeID, n int) error {
	s, err := in.node(id)
	if err != nil {
		return err
	}
	return s.armCrashAfter(n)
}

// CrashClient implements transport.FaultInjector.
func (in *Injector) CrashClient(id farmem.ClientID) error {
	in.mu.Lock()
	fs := append([]*Fabric(nil), in.fabrics...)
	in.mu.Unlock()
	for _, f := range fs {
		if c := f.client(id); c != nil {
			c.crash()
			return nil
		}
	}
	return fmt.Errorf("rdma: no open client %d in this process: %w", id, farmem.ErrInvalid)
}
