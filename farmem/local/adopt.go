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
//
// A restart is atomic to verbs, as a process's end is to the connections of a real fabric
// (rdma: a connection reaches the one process it was set up to):
//
//   - a verb is bound, when it is posted, to the incarnation the fabric has adopted then (none
//     if the node is fenced as lost then), and applies only to that incarnation's memory: a
//     verb posted before a restart or before the Adopt that follows it never reaches the new
//     memory, even if it arrives after the Adopt; it fails with farmem.ErrNodeLost;
//   - the ops a verb applies to one node apply all before the restart's wipe or not at all
//     (the wipe waits for them; the node's life lock): a read never returns a half-wiped
//     range, and no write of the old incarnation lands in the new memory.
//
// So a verb that succeeds saw, or changed, one incarnation's memory only, the one the fabric
// adopted when it was posted. Cost: a read lock per batch per node (uncontended but for
// restarts).

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
// fail with farmem.ErrNodeLost until Adopt, and so does every verb posted before the restart
// that had not applied when it began: the restart waits for the ops applying at that moment,
// and no op of an older incarnation applies to the new memory. Only memory nodes restart
// (compute nodes are the caller's own process): others give an error wrapping ErrInvalid.
func (f *Fabric) Restart(id farmem.NodeID) error {
	n, err := f.node(id)
	if err != nil {
		return err
	}
	if id.IsCompute() {
		return fmt.Errorf("local: restart %v: only memory nodes restart: %w", id, farmem.ErrInvalid)
	}
	// Under life, exclusively: the verbs applying now finish first, and every later one finds
	// the new incarnation, not the one it was bound to, and fails (client.go).
	inc := f.newIncarnation()
	n.life.Lock()
	n.inc.Store(inc)
	for off := uint64(0); off < n.size; off += 8 {
		n.mem.Store(off, 0)
	}
	for i := range n.atomicBits {
		n.atomicBits[i].Store(0)
	}
	n.life.Unlock()
	n.crashAfter.Store(-1)
	n.state.Store(stateUp)
	f.changes.Notify()
	return nil
}

// bound returns the incarnation of n's memory a verb posted now may reach: the one the fabric
// adopted, or 0 (none) if n is fenced as lost.
func (f *Fabric) bound(n *node) uint64 {
	a := n.adopted.Load()
	if n.fenced.Load() || n.inc.Load() != a {
		return 0
	}
	return a
}

// lostSincePost is the error of a verb bound to incarnation posted (0: posted while the node
// was fenced) that finds the node's memory at incarnation now.
func lostSincePost(id farmem.NodeID, posted, now uint64) error {
	if posted == 0 {
		return fmt.Errorf("local: %v was fenced as lost when the verb was posted (its memory is at incarnation %#x): %w", id, now, farmem.ErrNodeLost)
	}
	return fmt.Errorf("local: %v restarted (incarnation %#x) after the verb was posted to incarnation %#x: %w", id, now, posted, farmem.ErrNodeLost)
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
