package local

import (
	"fmt"

	"github.com/farmem/farmem/farmem"
)

func (f *Fabric) node(id farmem.NodeID) (*node, error) {
	n := f.nodes[id]
	if n == nil {
		return nil, fmt.Errorf("local: no node %v: %w", id, farmem.ErrInvalid)
	}
	return n, nil
}

// Crash implements transport.FaultInjector.
func (f *Fabric) Crash(id farmem.NodeID) error {
	n, err := f.node(id)
	if err != nil {
		return err
	}
	n.setState(stateCrashed)
	f.changes.Notify()
	return nil
}

// Hang implements transport.FaultInjector.
func (f *Fabric) Hang(id farmem.NodeID) error {
	n, err := f.node(id)
	if err != nil {
		return err
	}
	if !n.state.CompareAndSwap(stateUp, stateHung) && n.state.Load() == stateCrashed {
		return fmt.Errorf("local: hang %v: crashed: %w", id, farmem.ErrNodeDown)
	}
	f.changes.Notify()
	return nil
}

// Resume implements transport.FaultInjector.
func (f *Fabric) Resume(id farmem.NodeID) error {
	n, err := f.node(id)
	if err != nil {
		return err
	}
	if !n.state.CompareAndSwap(stateHung, stateUp) && n.state.Load() == stateCrashed {
		return fmt.Errorf("local: resume %v: crashed: %w", id, farmem.ErrNodeDown)
	}
	f.changes.Notify()
	return nil
}

// Partition implements transport.FaultInjector.
func (f *Fabric) Partition(client farmem.ClientID, id farmem.NodeID) error {
	if _, err := f.node(id); err != nil {
		return err
	}
	f.mu.Lock()
	f.partitions[partition{client, id}] = true
	f.hasPartitions.Store(true)
	f.mu.Unlock()
	f.changes.Notify()
	return nil
}

// Heal implements transport.FaultInjector.
func (f *Fabric) Heal(client farmem.ClientID, id farmem.NodeID) error {
	f.mu.Lock()
	delete(f.partitions, partition{client, id})
	f.hasPartitions.Store(len(f.partitions) > 0)
	f.mu.Unlock()
	f.changes.Notify()
	return nil
}

// CrashAfter implements transport.FaultInjector.
func (f *Fabric) CrashAfter(id farmem.NodeID, ops int) error {
	n, err := f.node(id)
	if err != nil {
		return err
	}
	if ops < 0 {
		return fmt.Errorf("local: crash after %d ops: %w", ops, farmem.ErrInvalid)
	}
	n.crashAfter.Store(int64(ops))
	return nil
}

// CrashClient implements transport.FaultInjector.
func (f *Fabric) CrashClient(id farmem.ClientID) error {
	c, ok := f.clients.Get(id)
	if !ok {
		return fmt.Errorf("local: no open client %d: %w", id, farmem.ErrInvalid)
	}
	c.crash()
	return nil
}
