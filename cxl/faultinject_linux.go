package cxl

import (
	"fmt"

	"github.com/farmem/farmem/atomics"
	"github.com/farmem/farmem/farmem"
	"github.com/farmem/farmem/farmem/transport"
)

// The FaultInjector acts on this process's view of the region, shared by every fabric handle
// the process has on it. A compute node attached by this process can be crashed for real (its
// lease is marked crashed, so every process sees it down) and hung (it stops answering Calls
// and renewing its lease, so other processes see it down after the down timeout, and it is
// fenced if one of them acted on that). Memory nodes have no process to stop: crashing,
// hanging or partitioning one changes what this process's handles see. What needs another
// process's cooperation (crashing its compute node or its clients, arming CrashAfter on it)
// returns farmem.ErrNotSupported with the reason; a test kills that process instead.

func (f *Fabric) node(id farmem.NodeID) (*seg, error) {
	s := f.m.seg(id)
	if s == nil {
		return nil, fmt.Errorf("cxl: no node %v in this region: %w", id, farmem.ErrInvalid)
	}
	return s, nil
}

// hostedFabric returns the fabric of this process that hosts compute node c, or nil.
func (m *mapping) hostedFabric(c farmem.ComputeID) *Fabric {
	m.hmu.Lock()
	defer m.hmu.Unlock()
	return m.hosted[c]
}

// openClient finds an open client of this process by id.
func (m *mapping) openClient(id farmem.ClientID) *client {
	c, _, err := transport.ClientSlot(&m.topo, id)
	if err != nil {
		return nil
	}
	hf := m.hostedFabric(c)
	if hf == nil {
		return nil
	}
	cl, _ := hf.clients.Get(id)
	return cl
}

// crashNode crashes node id as a mid-batch crash reaches it.
func (m *mapping) crashNode(id farmem.NodeID) {
	if id.IsCompute() {
		if hf := m.hostedFabric(id.ComputeID()); hf != nil {
			hf.crash()
			return
		}
	}
	m.faults.update(func() { m.faults.down[id] = true })
}

func notHosted(what string, id farmem.NodeID) error {
	return fmt.Errorf("cxl: %s %v: that compute node is attached by another process, which only it (or a kill) can stop: %w",
		what, id, farmem.ErrNotSupported)
}

// Crash implements transport.FaultInjector.
func (f *Fabric) Crash(id farmem.NodeID) error {
	if _, err := f.node(id); err != nil {
		return err
	}
	if id.IsCompute() {
		hf := f.m.hostedFabric(id.ComputeID())
		if hf == nil {
			return notHosted("crash", id)
		}
		hf.crash()
		return nil
	}
	f.m.faults.update(func() { f.m.faults.down[id] = true })
	return nil
}

// Hang implements transport.FaultInjector.
func (f *Fabric) Hang(id farmem.NodeID) error {
	if _, err := f.node(id); err != nil {
		return err
	}
	if id.IsCompute() {
		if hf := f.m.hostedFabric(id.ComputeID()); hf != nil && !hf.state.CompareAndSwap(stateUp, stateHung) && hf.state.Load() != stateHung {
			return fmt.Errorf("cxl: hang %v: %w", id, farmem.ErrNodeDown)
		}
	}
	var err error
	f.m.faults.update(func() {
		if f.m.faults.down[id] {
			err = fmt.Errorf("cxl: hang %v: crashed: %w", id, farmem.ErrNodeDown)
			return
		}
		f.m.faults.hung[id] = true
	})
	return err
}

// Resume implements transport.FaultInjector.
func (f *Fabric) Resume(id farmem.NodeID) error {
	if _, err := f.node(id); err != nil {
		return err
	}
	f.m.faults.update(func() { delete(f.m.faults.hung, id) })
	if id.IsCompute() {
		if hf := f.m.hostedFabric(id.ComputeID()); hf != nil {
			if !hf.state.CompareAndSwap(stateHung, stateUp) && hf.stopped() {
				return fmt.Errorf("cxl: resume %v: %w", id, hf.usable())
			}
			_ = atomics.Guard(func() { bump(hf.ctl().bell()) })
		}
	}
	if f.m.faults.isDown(id) {
		return fmt.Errorf("cxl: resume %v: crashed: %w", id, farmem.ErrNodeDown)
	}
	return nil
}

// Partition implements transport.FaultInjector, for a client of this process.
func (f *Fabric) Partition(client farmem.ClientID, id farmem.NodeID) error {
	if _, err := f.node(id); err != nil {
		return err
	}
	if f.m.openClient(client) == nil {
		return fmt.Errorf("cxl: partition client %d: not open in this process: %w", client, farmem.ErrNotSupported)
	}
	f.m.faults.update(func() { f.m.faults.parts[partition{client, id}] = true })
	return nil
}

// Heal implements transport.FaultInjector.
func (f *Fabric) Heal(client farmem.ClientID, id farmem.NodeID) error {
	f.m.faults.update(func() { delete(f.m.faults.parts, partition{client, id}) })
	return nil
}

// CrashAfter implements transport.FaultInjector: the next batch of this process that reaches the
// node applies its first n ops there, then the node crashes (for this process; for a compute
// node attached here, for every process).
func (f *Fabric) CrashAfter(id farmem.NodeID, n int) error {
	if _, err := f.node(id); err != nil {
		return err
	}
	if n < 0 {
		return fmt.Errorf("cxl: crash after %d ops: %w", n, farmem.ErrInvalid)
	}
	if id.IsCompute() && f.m.hostedFabric(id.ComputeID()) == nil {
		return notHosted("crash-after", id)
	}
	f.m.faults.update(func() { f.m.faults.after[id] = n })
	return nil
}

// CrashClient implements transport.FaultInjector, for a client of this process.
func (f *Fabric) CrashClient(id farmem.ClientID) error {
	c := f.m.openClient(id)
	if c == nil {
		return fmt.Errorf("cxl: crash client %d: not open in this process: %w", id, farmem.ErrNotSupported)
	}
	c.crash()
	return nil
}
