package farmem

import (
	"context"
	"errors"
	"fmt"
)

// Node quorums and the completion hook.
//
// A replicated structure (SWARM's max registers, a quorum write) posts one batch holding
// several ops to each of its replicas and needs "every op sent to k of the nodes is done", not
// "k ops are done", which is what [Pending.Wait] counts. [Pending.WaitNodes] waits for that;
// [Pending.NodesDone] and [Pending.NodeDone] tell which nodes made it. The ops to the nodes it
// did not wait for (the stragglers) keep running, and the batch and its buffers stay the
// transport's until they finish or fail: [Pending.Then] registers a hook that runs once they
// have, through the fabric's runtime, so that the caller learns their results (SWARM updates
// its per-replica cache from them) and knows when it may reuse the buffers.
//
// The rules, every transport the same:
//
//   - The nodes of a batch are the nodes its signaled ops address; a node that only unsignaled
//     ops address is not one (nothing reports on it).
//   - A node is complete when every signaled op of the batch addressed to it is done and none
//     failed. A node one of whose ops failed is failed, and stays so: it never counts toward a
//     quorum, even once its other ops succeed.
//   - WaitNodes(ctx, k) returns nil once k nodes are complete; it returns an error as soon as
//     fewer than k nodes can still complete (more than n-k failed), never waiting on a quorum
//     that cannot form; k outside 1..n is ErrInvalid.
//   - The hook runs once every signaled op of the batch is done or failed: the moment
//     Wait(ctx, 0) would return. It runs exactly once, in a goroutine the fabric's Runtime.Go
//     starts (a simulated goroutine on the simulator, so a simulated run stays deterministic),
//     also when registered after the batch is done.
//
// Costs: WaitNodes and NodesDone scan the batch's ops on each wake-up (a few nanoseconds per op
// times the number of distinct nodes), allocate nothing for batches of up to eight nodes, and
// allocate only to build the error of an impossible quorum; Then allocates the hook's closure.
// Post allocates nothing more for them.

// nodeState is what one node's signaled ops of a batch have come to so far.
type nodeState struct {
	id   NodeID
	left int   // signaled ops not done yet
	err  error // the first failure among its done ops
}

// inlineNodes is how many distinct nodes the scans keep on the stack.
const inlineNodes = 8

// nodeStates appends the state of each node of the batch to st, in the order the batch first
// names them.
func (p *Pending) nodeStates(st []nodeState) []nodeState {
	ops := p.b.Ops
	for i := range ops {
		op := &ops[i]
		if op.Unsignaled {
			continue
		}
		n := op.Addr.Node()
		k := -1
		for j := range st {
			if st[j].id == n {
				k = j
				break
			}
		}
		if k < 0 {
			st = append(st, nodeState{id: n})
			k = len(st) - 1
		}
		if !p.isDone(i) {
			st[k].left++
		} else if op.err != nil && st[k].err == nil {
			st[k].err = op.err
		}
	}
	return st
}

// tally counts the complete and the failed nodes of st.
func tally(st []nodeState) (complete, failed int) {
	for i := range st {
		switch {
		case st[i].err != nil:
			failed++
		case st[i].left == 0:
			complete++
		}
	}
	return complete, failed
}

// WaitNodes blocks until k nodes of the batch are complete: every signaled op addressed to
// each of them is done and none failed. It returns nil then; an error wrapping ErrInvalid if k
// is below 1 or above the number of nodes the batch's signaled ops address; an error joining
// each failed node's first op error (so errors.Is finds ErrNodeDown and the others) as soon as
// so many nodes failed that fewer than k can still complete; or ctx's error. Ops still
// outstanding when it returns keep running and their buffers stay the transport's: see
// [Pending.Then]. Like Wait, it is for the one goroutine that waits on the Pending.
func (p *Pending) WaitNodes(ctx context.Context, k int) error {
	for {
		var buf [inlineNodes]nodeState
		st := p.nodeStates(buf[:0])
		if k < 1 || k > len(st) {
			return fmt.Errorf("farmem: quorum of %d nodes from a batch to %d: %w", k, len(st), ErrInvalid)
		}
		complete, failed := tally(st)
		if complete >= k {
			return nil
		}
		if len(st)-failed < k {
			return quorumError(st, k, failed)
		}
		if p.park == nil {
			return fmt.Errorf("farmem: unfinished batch has no parker (a transport bug): %w", ErrInvalid)
		}
		if err := p.park.Park(ctx); err != nil {
			st = p.nodeStates(buf[:0])
			if complete, _ := tally(st); complete >= k {
				return nil
			}
			return err
		}
	}
}

// quorumError is the error of a quorum of k that can no longer form.
func quorumError(st []nodeState, k, failed int) error {
	errs := make([]error, 0, failed)
	for i := range st {
		if st[i].err != nil {
			errs = append(errs, fmt.Errorf("%v: %w", st[i].id, st[i].err))
		}
	}
	return fmt.Errorf("farmem: a quorum of %d of %d nodes cannot form, %d failed: %w", k, len(st), failed, errors.Join(errs...))
}

// NodesDone appends to dst the nodes of the batch that are complete so far (every signaled op
// addressed to the node done, none failed), in the order the batch first names them, and
// returns the extended slice. It may be called from any goroutine; the set only grows.
func (p *Pending) NodesDone(dst []NodeID) []NodeID {
	var buf [inlineNodes]nodeState
	for _, s := range p.nodeStates(buf[:0]) {
		if s.left == 0 && s.err == nil {
			dst = append(dst, s.id)
		}
	}
	return dst
}

// NodeDone reports whether node n is complete: the batch has signaled ops addressed to it,
// every one of them is done, and none failed.
func (p *Pending) NodeDone(n NodeID) bool {
	seen := false
	for i := range p.b.Ops {
		op := &p.b.Ops[i]
		if op.Unsignaled || op.Addr.Node() != n {
			continue
		}
		if !p.isDone(i) || op.err != nil {
			return false
		}
		seen = true
	}
	return seen
}

// Then registers f to run once every signaled op of the batch is done or failed (the moment
// Wait(ctx, 0) would return), with the Pending as its argument, so that it reads each op's
// outcome with [Batch.Result]. f runs exactly once, in a goroutine started by the fabric's
// [Runtime.Go] (deterministic on the simulator), including when the batch is already done when
// Then is called; on a Pending whose transport gave it no runtime, that case runs f in the
// caller of Then. A Pending takes one hook: a second Then, or a nil f, is ErrInvalid.
//
// Until f runs, the batch and the buffers of its ops belong to the transport: a caller that
// returned from WaitNodes or a partial Wait must not change, reset, repost or reuse them
// before then. The transport reports each op failed no sooner than it can promise the op will
// not be applied later than the fabric's stated bound (see the transports' docs), so once f
// runs the buffers are free.
func (p *Pending) Then(f func(*Pending)) error {
	if f == nil {
		return fmt.Errorf("farmem: nil completion hook: %w", ErrInvalid)
	}
	if !p.then.CompareAndSwap(nil, &f) {
		return fmt.Errorf("farmem: the batch already has a completion hook: %w", ErrInvalid)
	}
	if p.doneCount() == p.signaled {
		p.fire()
	}
	return nil
}

// fire starts the hook if one is registered and it has not started yet. Both the last
// completion and Then call it, so whichever comes second starts the hook.
func (p *Pending) fire() {
	f := p.then.Load()
	if f == nil || !p.fired.CompareAndSwap(false, true) {
		return
	}
	if p.rt == nil {
		(*f)(p)
		return
	}
	p.rt.Go(func() { (*f)(p) })
}
