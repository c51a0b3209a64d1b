package local

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"fmt"

	"github.com/farmem/farmem/farmem"
)

// Restarts: a memory node of a local fabric has an incarnation, a random 64-bit id drawn when
// the fabric is built. Restart is the fault of a node process that restarts: its memory is
// lost (zeroed) and it comes back at once with a new incarnation. The fabric then fences it:
// every verb to it fails at once with farmem.ErrNodeLost until Adopt, after which verbs reach
// the new, zeroed memory. A Hang, Partition or Crash does not change the incarnation; Resume
// and Heal make the node usable again on their own.

var (
	_ farmem.Restarts = (*Fabric)(nil)
	_ farmem.Restarts = (*client)(nil)
)

// newIncarnation returns a random nonzero incarnation.
func (f *Fabric) newIncarnation() uint64 {
	var b [8]byte
	for {
		_, _ = rand.Read(b[:])
		if v := binary.LittleEndian.Uint64(b[:]); v != 0 {
			return v
		}
	}
}

// Restart is a fault: memory node id restarts and loses its memory. Its words become zero,
// it gets a new incarnation, and it is up (a crashed or hung node restarts too). Verbs to it
// fail with farmem.ErrNodeLost until Adopt. A verb racing the restart may apply to either
// incarnation's memory; its caller sees ErrNodeLost or its result. Only memory nodes restart
// (compute nodes are the caller's own process): others give an error wrapping ErrInvalid.
func (f *Fabric) Restart(id farmem.NodeID) error {
	n, err := f.node(id)
	if err != nil {
		return err
	}
	if id.IsCompute() {
		return fmt.Errorf("local: restart %v: only memory nodes restart: %w", id, farmem.ErrInvalid)
	}
	// Fence first, so that nothing reaches the memory while it is wiped.
	n.inc.Store(f.newIncarnation())
	for off := uint64(0); off < n.size; off += 8 {
		n.mem.Store(off, 0)
	}
	for i := range n.atomicBits {
		n.atomicBits[i].Store(0)
	}
	n.crashAfter.Store(-1)
	n.state.Store(stateUp)
	f.changes.Notify()
	return nil
}

// NodeStatus implements farmem.Restarts.
func (f *Fabric) NodeStatus(id farmem.NodeID) (farmem.NodeStatus, error) {
	n, err := f.node(id)
	if err != nil {
		return farmem.NodeStatus{}, err
	}
	st := farmem.NodeStatus{ID: id, Incarnation: n.adopted.Load(), Seen: n.inc.Load()}
	switch {
	case n.state.Load() != stateUp:
		st.State = farmem.NodeDown
	case st.Incarnation != st.Seen || n.fenced.Load():
		st.State = farmem.NodeLost
	}
	return st, nil
}

// Fence implements farmem.Restarts.
func (f *Fabric) Fence(id farmem.NodeID) error {
	n, err := f.node(id)
	if err != nil {
		return err
	}
	if id.IsCompute() {
		return fmt.Errorf("local: fence %v: only memory nodes restart: %w", id, farmem.ErrInvalid)
	}
	n.fenced.Store(true)
	f.changes.Notify()
	return nil
}

// Fence implements farmem.Restarts: the fabric's Fence.
func (c *client) Fence(id farmem.NodeID) error { return c.f.Fence(id) }

// Adopt implements farmem.Restarts: the fabric takes node id's current incarnation as its own.
// A crashed node cannot be adopted (ErrNodeDown); a node up and never lost is left as it is.
func (f *Fabric) Adopt(ctx context.Context, id farmem.NodeID) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	n, err := f.node(id)
	if err != nil {
		return err
	}
	if n.state.Load() == stateCrashed {
		return fmt.Errorf("local: adopt %v: crashed: %w", id, farmem.ErrNodeDown)
	}
	if n.adopted.Swap(n.inc.Load()) != n.inc.Load() || n.fenced.Swap(false) {
		f.adoptions.Add(1)
	}
	f.changes.Notify()
	return nil
}

// Adoptions implements farmem.Restarts.
func (f *Fabric) Adoptions() uint64 { return f.adoptions.Load() }

// Adoptions implements farmem.Restarts.
func (c *client) Adoptions() uint64 { return c.f.adoptions.Load() }

// NodeStatus implements farmem.Restarts: the fabric's view, which every client shares.
func (c *client) NodeStatus(id farmem.NodeID) (farmem.NodeStatus, error) {
	return c.f.NodeStatus(id)
}

// Adopt implements farmem.Restarts: the fabric's Adopt.
func (c *client) Adopt(ctx context.Context, id farmem.NodeID) error { return c.f.Adopt(ctx, id) }
