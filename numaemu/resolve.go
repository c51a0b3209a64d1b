package numaemu

import (
	"errors"
	"fmt"
	"time"

	"github.com/farmem/farmem/farmem"
)

// ErrNoNode: the requested NUMA node does not exist or has no memory, and the request did not
// allow a fallback. It wraps [farmem.ErrNotSupported].
var ErrNoNode = fmt.Errorf("numaemu: no such memory node: %w", farmem.ErrNotSupported)

// Request asks for memory on a node, with the latency profile it should exhibit.
type Request struct {
	Node     int     // the NUMA node wanted
	Profile  Profile // the latency that memory should show; zero for none
	Fallback bool    // if Node is absent, bind to a local node and inject Profile's latency
}

// Placement is where a request's memory goes and what must be injected to emulate it.
type Placement struct {
	Requested int           // the node asked for
	Node      int           // the node the memory is bound to
	Emulated  bool          // Node is not the one asked for: latency is injected, not real
	Inject    time.Duration // delay to inject per access (Profile.Added() when emulated)
	Reason    string        // one sentence saying what happened
}

// Resolve decides where req's memory goes on this topology. A present node with memory is
// used as is (the hardware supplies the latency; nothing is injected). An absent node, or one
// without memory, is an error wrapping [ErrNoNode] unless req.Fallback is set; then the memory
// goes to local, the first node with memory that has local CPUs (by default the lowest id),
// and the placement says Emulated and carries the profile's added latency.
func (t *Topology) Resolve(req Request, local int) (Placement, error) {
	pl := Placement{Requested: req.Node, Node: req.Node}
	if n, ok := t.Node(req.Node); ok && n.MemTotal > 0 {
		pl.Reason = fmt.Sprintf("node %d is present with %d MiB; its latency is real", req.Node, n.MemTotal>>20)
		return pl, nil
	}
	mem := t.MemoryNodes()
	why := fmt.Sprintf("node %d is not a memory node on this machine (memory nodes %v)", req.Node, mem)
	if !req.Fallback {
		return pl, fmt.Errorf("%w: %s", ErrNoNode, why)
	}
	if n, ok := t.Node(local); !ok || n.MemTotal == 0 {
		if len(mem) == 0 {
			return pl, fmt.Errorf("%w: %s, and none to fall back to", ErrNoNode, why)
		}
		local = mem[0]
	}
	pl.Node, pl.Emulated, pl.Inject = local, true, req.Profile.Added()
	pl.Reason = fmt.Sprintf("%s; bound to node %d instead, injecting %v per access to emulate %v",
		why, local, pl.Inject, req.Profile)
	return pl, nil
}

// DAXPlacement reports where a device-DAX instance's memory is: on its target node, whatever
// any memory policy says (the mapping is the device's own memory; mbind does not apply). If
// want is not that node, the placement says so and, like a fallback, carries prof's added
// latency for the caller to inject.
func (t *Topology) DAXPlacement(name string, want int, prof Profile) (Placement, error) {
	for _, d := range t.DAX {
		if d.Name != name {
			continue
		}
		pl := Placement{Requested: want, Node: d.TargetNode}
		switch {
		case d.TargetNode < 0:
			return pl, fmt.Errorf("%w: %s has no target_node", ErrNoNode, name)
		case d.TargetNode == want:
			pl.Reason = fmt.Sprintf("%s is device memory on its target node %d; mempolicy does not apply", name, d.TargetNode)
		default:
			pl.Emulated, pl.Inject = true, prof.Added()
			pl.Reason = fmt.Sprintf("%s is device memory on its target node %d, not node %d (mempolicy cannot move it); injecting %v to emulate %v",
				name, d.TargetNode, want, pl.Inject, prof)
		}
		return pl, nil
	}
	return Placement{Requested: want}, fmt.Errorf("%w: no DAX device %q", ErrNoNode, name)
}

// Verification is where move_pages found the pages of a range.
type Verification struct {
	Pages   int         // pages queried
	PerNode map[int]int // present pages by node
	Absent  int         // pages not present (-ENOENT)
	Failed  int         // pages with another error (-EFAULT and the like)
}

// On reports whether the pages are on node: at least one is present there, none is present on
// another node, and no query failed. Pages absent at the query (a file's page cache reclaimed
// under memory pressure since it was populated) are not evidence against the placement; they
// are counted in Absent.
func (v Verification) On(node int) bool {
	if v.Pages == 0 || v.Failed > 0 || v.PerNode[node] == 0 {
		return false
	}
	for n, c := range v.PerNode {
		if n != node && c > 0 {
			return false
		}
	}
	return true
}

// String summarises the verification.
func (v Verification) String() string {
	return fmt.Sprintf("%d pages: by node %v, %d absent, %d failed", v.Pages, v.PerNode, v.Absent, v.Failed)
}

// ErrMisplaced: verification found pages that are not on the node they were bound to.
var ErrMisplaced = errors.New("numaemu: pages not on the requested node")

// Mapping is anonymous memory placed by [Map].
type Mapping struct {
	Data      []byte
	Placement Placement
	Verified  Verification
}
