package kvstore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/farmem/farmem/ds/race"
	"github.com/farmem/farmem/farmem"
)

// Proxy leases, dead-proxy recovery and hand-overs that fail midway.
//
// The coordinator (the lowest compute node) keeps, per partition, the settled route (owner,
// epoch), whether a hand-over of it is running, and its owner's lease: the time until which
// the owner may serve the partition, by the coordinator's clock. A proxy keeps its own view of
// the lease (by its clock) in the proxied partition; it serves an index RPC, grants a pair and
// posts a write-through only while that lease runs, and renews it with a Call to the
// coordinator once less than half is left (a renewal sent at t extends the proxy's view to
// t+ProxyLease, the coordinator's to its receipt plus ProxyLease). Write-throughs are posted
// with a context that ends with the lease, so the fabric posts none after it.
//
// A client whose index RPC finds the owner down (farmem.ErrNodeDown) asks the coordinator to
// recover the partition. The coordinator refuses (busy, the client retries) until the owner's
// lease is fenced: its lease end plus three clock skews (the owner's lease ends, by the
// coordinator's clock, at most two skews after the coordinator's) plus the fabric's down
// timeout (an op posted before the owner's lease ended is applied, if ever, by then). It then
// revokes the lease (no renewal is granted any more) and hands the partition back to the
// memory nodes without the dead owner: every other compute node is paused, drained and its
// cache cleared, and resumed with the memory nodes as owner and a new epoch. The memory nodes'
// copy is the truth: a proxy acknowledges a write only after writing it through. A node that
// cannot be paused is skipped; since its cached pairs were not cleared, the resume then waits
// a pair lease plus two skews more (no pair the dead owner granted is served after it). A
// skipped node, routing to the dead owner, finds it down and learns the new route from the
// coordinator's answer.
//
// A hand-over that fails before its route is decided (a pause or the load fails) is rolled
// back: every node is resumed with the old route. Once the new owner has loaded the partition
// the hand-over completes: a node whose resume fails stays paused until it asks the
// coordinator for the settled route, which a node paused for longer than the fabric's down
// timeout does, every down timeout (and so does an operation that keeps being retried for a
// down timeout: a node a recovery skipped, such as a hung proxy that came back). A pause or
// resume arriving late (from an attempt that ended) is recognized by the attempt's epoch and
// cannot undo a later one. A hand-over moving a partition from the memory nodes to a proxy,
// or between proxies, never skips a node (its clients may be CAS users of the slots); one
// moving it from a proxy to the memory nodes skips a node that is down other than the proxy
// itself (its clients only send RPCs to the proxy). The old proxy is resumed first and drops
// its copy once its write-throughs in flight have landed; if it cannot be told, its lease,
// no longer renewable, is waited out to its fence before any other node resumes.
//
// Safety rests on the fabric's stated bounds: clocks within Options.ClockSkew, and an op
// posted by a node applied, if ever, within the down timeout of its posting.
//
// Limits: recovery is run by the coordinator at any client's request, not by the client
// itself; the coordinator is not recovered (its death stops hand-overs and recoveries);
// compute nodes that proxy nothing hold no lease, so a dead one makes later hand-overs to a
// proxy roll back (the partition keeps being served where it is); a write whose proxy died
// and that cannot be settled on the memory nodes afterwards (see settle) fails with an unknown
// outcome; writes of a partition on the memory nodes may wait out the leases
// of the dead node's clients' split locks and tentative inserts (race.Options.Lease).

// DefaultProxyLease is FlexKV's default ProxyLease.
const DefaultProxyLease = 200 * time.Millisecond

func (k *FlexKV) proxyLease() time.Duration {
	if k.ProxyLease > 0 {
		return k.ProxyLease
	}
	return DefaultProxyLease
}

// coordPart is the coordinator's record of one partition.
type coordPart struct {
	owner   farmem.NodeID
	epoch   uint64
	until   farmem.Time // the owner's lease, by the coordinator's clock
	busy    bool        // a hand-over of the partition is running
	revoked bool        // a recovery revoked the owner's lease
	ended   uint64      // the attempt epoch of the last hand-over of the partition that ended
}

// fenceDelay is how long after an owner's lease ends (coordinator's clock) nothing the owner
// posted can still land and no other node's clock says the lease runs.
func (n *flexNode) fenceDelay(m farmem.Memory) time.Duration {
	return 3*n.kind.clockSkew() + m.Topology().DownTimeout
}

// coordinator is the node that runs hand-overs (the lowest compute node).
func coordinator(m farmem.Memory) (farmem.NodeID, error) {
	cs := m.Topology().ComputeNodes()
	if len(cs) == 0 {
		return 0, fmt.Errorf("kvstore: flexkv: no compute node: %w", farmem.ErrInvalid)
	}
	return cs[0], nil
}

// settledLocked is partition p's route reply. n.mu is held.
func (n *flexNode) settledLocked(p int) routeResp {
	cp := &n.coord[p]
	st := uint8(stOK)
	if cp.busy {
		st = stBusy
	}
	return routeResp{st: st, owner: cp.owner, epoch: cp.epoch, ended: cp.ended}
}

// --- the proxy's lease ---

// leased reports whether this proxy may serve pp (partition p) now, and until when, renewing
// the lease first (a Call to the coordinator, or in place on it) when less than half is left.
// A renewal that fails leaves the lease as it was; with less than a quarter left the proxy
// serves nothing until a renewal succeeds.
func (n *flexNode) leased(ctx context.Context, m farmem.Memory, p int, pp *proxyPart) (farmem.Time, bool) {
	rt := m.Runtime()
	lease := n.kind.proxyLease()
	now := rt.Now()
	n.mu.Lock()
	until := pp.until
	n.mu.Unlock()
	if now < until.Add(-lease/2) {
		return until, true
	}
	granted, refused := n.renew(ctx, m, p, pp.epoch, now)
	n.mu.Lock()
	if granted {
		pp.until = max(pp.until, now.Add(lease))
	}
	until = pp.until
	// A quarter of the lease must be left: enough for the write-through it may cover.
	valid := rt.Now() < until.Add(-lease/4)
	if refused && !valid && n.proxied[p] == pp {
		// The coordinator no longer counts this node the partition's owner (a recovery took
		// it, or a hand-over this node missed): forget the copy and its pending writes.
		n.dropProxiedLocked(p)
	}
	n.mu.Unlock()
	return until, valid
}

// renew asks the coordinator to extend this node's lease on partition p in epoch, sent at now:
// granted, refused (the coordinator names another route or revoked it), or neither (no
// answer).
func (n *flexNode) renew(ctx context.Context, m farmem.Memory, p int, epoch uint64, now farmem.Time) (granted, refused bool) {
	c, err := coordinator(m)
	if err != nil {
		return false, false
	}
	if c == n.node {
		ok := n.grant(p, epoch, n.node, now)
		return ok, !ok
	}
	// Bounded: a renewal that cannot be answered within the down timeout is given up (the
	// lease, if still running, serves meanwhile).
	rctx, cancel := m.Runtime().WithTimeout(ctx, m.Topology().DownTimeout)
	defer cancel()
	rep, err := m.Call(rctx, c, farmem.OwnerFlexKV.Method(flexRenew), ctlReq{p: p, epoch: epoch}.enc())
	if err != nil || len(rep) != 1 {
		return false, false
	}
	return rep[0] == stOK, rep[0] == stStale
}

// grant extends owner's lease on partition p at the coordinator if owner still holds p in
// epoch and no recovery revoked it.
func (n *flexNode) grant(p int, epoch uint64, owner farmem.NodeID, now farmem.Time) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	if p < 0 || p >= len(n.coord) {
		return false
	}
	cp := &n.coord[p]
	if cp.owner != owner || cp.epoch != epoch || cp.revoked || owner == 0 {
		return false
	}
	cp.until = max(cp.until, now.Add(n.kind.proxyLease()))
	return true
}

func (n *flexNode) onRenew(_ context.Context, m farmem.Memory, from farmem.ClientID, req []byte) ([]byte, error) {
	c, err := decCtl(req)
	if err != nil {
		return nil, errWire
	}
	a, err := m.Topology().ClientSlice(from)
	if err != nil {
		return nil, err
	}
	if n.grant(c.p, c.epoch, a.Node(), m.Runtime().Now()) {
		return []byte{stOK}, nil
	}
	return []byte{stStale}, nil
}

// --- routes ---

// onRoute answers a node's query for partition p's settled route.
func (n *flexNode) onRoute(_ context.Context, _ farmem.Memory, _ farmem.ClientID, req []byte) ([]byte, error) {
	c, err := decCtl(req)
	if err != nil || c.p >= len(n.coord) {
		return nil, errWire
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.settledLocked(c.p).enc(), nil
}

// adopt applies a settled route from the coordinator to this node's active map: a node paused
// by an attempt that has ended resumes with it, and a node that missed a hand-over (skipped by
// a recovery) moves to it, its cache cleared. Nothing older or still running is applied.
func (n *flexNode) adopt(p int, r routeResp) {
	if r.st != stOK || p < 0 || p >= len(n.parts) {
		return
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	ps := &n.parts[p]
	switch {
	case ps.paused && ps.pausedFor <= r.ended && r.epoch >= ps.epoch:
	case !ps.paused && r.epoch > ps.epoch:
		if ps.owner == r.owner {
			ps.epoch = r.epoch
			return
		}
	default:
		return
	}
	if r.owner != n.node {
		n.dropProxiedLocked(p)
	}
	ps.owner, ps.epoch, ps.paused = r.owner, r.epoch, false
	ps.resumedFor = max(ps.resumedFor, r.ended)
	clear(n.cache)
	n.fifo = n.fifo[:0]
}

// dropProxiedLocked forgets this node's copy of partition p, if any, and its pending writes
// (their copies are freed by a later load's reuse of the node area: nothing refers to them).
func (n *flexNode) dropProxiedLocked(p int) *proxyPart {
	drop := n.proxied[p]
	if drop == nil {
		return nil
	}
	delete(n.proxied, p)
	n.resplitLocked()
	for t, pw := range n.pending {
		if pw.pp == drop {
			n.dropPendingLocked(t, pw)
		}
	}
	return drop
}

// dropPendingLocked forgets pending write t of a partition this node no longer proxies. Its
// writer's poll is answered stale (resolve again: it never committed) unless a write-through
// of it failed and may land: then forgotten (outcome unknown). n.mu is held.
func (n *flexNode) dropPendingLocked(t uint64, pw *pendingWrite) {
	delete(n.pending, t)
	if pw.posted {
		n.finished.forgotten = max(n.finished.forgotten, t)
	}
}

// askRoute asks the coordinator for partition p's settled route and adopts it. It returns the
// Call's error (the coordinator, or this client's own node, unreachable).
func (n *flexNode) askRoute(ctx context.Context, m farmem.Memory, p int) error {
	c, err := coordinator(m)
	if err != nil {
		return err
	}
	rep, err := m.Call(ctx, c, farmem.OwnerFlexKV.Method(flexRoute), ctlReq{p: p}.enc())
	if err != nil {
		return err
	}
	if r, err := decRoute(rep); err == nil {
		n.adopt(p, r)
	}
	return nil
}

// recoverPart asks the coordinator to recover partition p from owner, found down, in epoch, and
// adopts the route it answers. It reports whether the partition has a settled route other
// than (owner, epoch): false means the owner's lease is not fenced yet, or a hand-over runs.
func (n *flexNode) recoverPart(ctx context.Context, m farmem.Memory, p int, owner farmem.NodeID, epoch uint64) (bool, error) {
	c, err := coordinator(m)
	if err != nil {
		return false, err
	}
	rep, err := m.Call(ctx, c, farmem.OwnerFlexKV.Method(flexRecover), ctlReq{p: p, epoch: epoch, owner: owner}.enc())
	if err != nil {
		return false, fmt.Errorf("kvstore: flexkv: recover partition %d: %w", p, err)
	}
	r, err := decRoute(rep)
	if err != nil {
		return false, err
	}
	n.adopt(p, r)
	return r.st == stOK && (r.owner != owner || r.epoch != epoch), nil
}

// onRecover is a client's report that partition c.p's owner c.owner, in epoch c.epoch, is
// down: once the owner's lease is fenced, hand the partition back to the memory nodes without
// it. The answer is the settled route (busy while the lease runs or a hand-over is running).
func (n *flexNode) onRecover(ctx context.Context, m farmem.Memory, _ farmem.ClientID, req []byte) ([]byte, error) {
	c, err := decCtl(req)
	if err != nil || c.p >= len(n.coord) || c.owner == 0 {
		return nil, errWire
	}
	answer := func() []byte {
		n.mu.Lock()
		defer n.mu.Unlock()
		return n.settledLocked(c.p).enc()
	}
	// No latch: a recovery claims only its partition (busy), so a hand-over of another
	// partition draining slowly does not hold it up.
	now := m.Runtime().Now()
	n.mu.Lock()
	cpp := &n.coord[c.p]
	if cpp.busy || cpp.owner != c.owner || cpp.epoch != c.epoch {
		n.mu.Unlock()
		return answer(), nil
	}
	if now < cpp.until.Add(n.fenceDelay(m)) {
		n.mu.Unlock()
		return routeResp{st: stBusy, owner: c.owner, epoch: c.epoch}.enc(), nil
	}
	cpp.revoked, cpp.busy = true, true
	n.stats.Recoveries++
	n.mu.Unlock()
	if _, err := n.runHandOver(ctx, m, ctlReq{p: c.p}, c.owner); err != nil {
		return nil, err
	}
	return answer(), nil
}

// runHandOver moves partition c.p to c.owner (0: the memory nodes), the partition claimed
// (busy) by the caller: pause every compute node but dead (each drains its clients' operations on the
// partition and clears its cache), have the new owner load it, resume every node but dead
// with the new route. A pause or load that fails rolls it back (every node resumed with the
// old route; status stFull, or stSplit when the load found a split holding the partition); when the partition goes from a proxy to the memory nodes (a
// recovery, dead set, among them) a node other than a live proxy whose pause fails with
// farmem.ErrNodeDown is skipped instead, and the resume waits out the pairs it may hold. Once
// the route is decided a failed resume leaves its node paused until it asks for the route.
func (n *flexNode) runHandOver(ctx context.Context, m farmem.Memory, c ctlReq, dead farmem.NodeID) (byte, error) {
	rt := m.Runtime()
	n.mu.Lock()
	n.epoch++
	attempt := n.epoch<<16 | uint64(n.node.ComputeID())
	old := n.coord[c.p] // claimed (busy) by the caller
	n.stats.HandOvers++
	n.mu.Unlock()
	next := ctlReq{p: c.p, epoch: attempt, owner: c.owner, root: c.root, attempt: attempt}
	back := ctlReq{p: c.p, epoch: old.epoch, owner: old.owner, root: c.root, attempt: attempt}
	nodes := m.Topology().ComputeNodes()
	call := func(node farmem.NodeID, method uint8, r ctlReq) ([]byte, error) {
		return m.Call(ctx, node, farmem.OwnerFlexKV.Method(method), r.enc())
	}
	// end settles the attempt. The lease fields are left as they are: they only grow while
	// the route stands (renewals), and a new route set them when it was decided.
	end := func() {
		n.mu.Lock()
		cp := &n.coord[c.p]
		cp.busy, cp.ended = false, attempt
		n.mu.Unlock()
	}
	// rollbackAs resumes every node with the old route; st is the reply (stFull, or stSplit
	// when the new owner found a split holding the partition).
	rollbackAs := func(st byte, cause error) (byte, error) {
		for _, node := range nodes {
			if node != dead {
				_, _ = call(node, flexResume, back)
			}
		}
		end()
		n.count(func(s *FlexStats) { s.RolledBack++ })
		if ctx.Err() != nil {
			return 0, fmt.Errorf("kvstore: flexkv: hand-over of partition %d rolled back: %w", c.p, cause)
		}
		return st, nil
	}
	rollback := func(cause error) (byte, error) { return rollbackAs(stFull, cause) }
	// Pause every node (each stops admitting operations on the partition at once), then wait
	// for each to drain: the drains overlap.
	skipped := false
	var paused []farmem.NodeID
	for _, node := range nodes {
		if node == dead {
			continue
		}
		if _, err := call(node, flexPause, next); err != nil {
			// A node that cannot be paused may be skipped when the partition leaves a proxy for
			// the memory nodes and the node is not that proxy, or its lease is fenced (a
			// recovery): its clients only send RPCs to the proxy, which will refuse them.
			skippable := dead != 0 || c.owner == 0 && old.owner != 0 && node != old.owner
			if skippable && errors.Is(err, farmem.ErrNodeDown) && ctx.Err() == nil {
				skipped = true
				continue
			}
			return rollback(fmt.Errorf("pause on %v: %w", node, err))
		}
		paused = append(paused, node)
	}
	for _, node := range paused {
		rep, err := call(node, flexDrain, next)
		if err == nil && (len(rep) != 1 || rep[0] != stOK) {
			err = fmt.Errorf("not paused by attempt %d: %w", attempt, ErrHandOver)
		}
		if err != nil {
			skippable := dead != 0 || c.owner == 0 && old.owner != 0 && node != old.owner
			if skippable && errors.Is(err, farmem.ErrNodeDown) && ctx.Err() == nil {
				skipped = true
				continue
			}
			return rollback(fmt.Errorf("drain on %v: %w", node, err))
		}
	}
	if c.owner != 0 {
		rep, err := call(c.owner, flexLoad, next)
		if err == nil && len(rep) == 1 && rep[0] == stSplit {
			// Refused: a split holds the partition. It stays where it was; the requester
			// finishes the partition's splits and asks again.
			return rollbackAs(stSplit, fmt.Errorf("load on %v: a split holds the partition", c.owner))
		}
		if err != nil || len(rep) != 1 || rep[0] != stOK {
			// Refused (the owner is leaving) or failed: it stays where it was.
			return rollback(fmt.Errorf("load on %v: %v", c.owner, err))
		}
	}
	// The route is decided: from here the hand-over completes (nodes it cannot resume learn
	// the route by asking the coordinator).
	route := coordPart{owner: c.owner, epoch: attempt}
	if c.owner != 0 {
		// The new owner's view of its lease began when it received the load, before now.
		route.until = rt.Now().Add(n.kind.proxyLease())
	}
	n.mu.Lock()
	cp := &n.coord[c.p]
	oldUntil := cp.until
	cp.owner, cp.epoch, cp.until, cp.revoked = route.owner, route.epoch, route.until, false
	n.mu.Unlock()
	failed := 0
	stop := func(err error) (byte, error) {
		end()
		n.count(func(s *FlexStats) { s.ResumesFailed += uint64(failed) })
		return 0, fmt.Errorf("kvstore: flexkv: hand-over of partition %d: %w", c.p, err)
	}
	first := farmem.NodeID(0)
	if old.owner != 0 && old.owner != c.owner && old.owner != dead {
		// The old owner drops its copy before any other node is resumed: a node the hand-over
		// skipped may still send it requests, which its stale copy must not answer once
		// others write. If it cannot be told, its lease (no longer renewable) is waited out.
		first = old.owner
		if _, err := call(first, flexResume, next); err != nil {
			failed++
			if err := rt.Sleep(ctx, oldUntil.Add(n.fenceDelay(m)).Sub(rt.Now())); err != nil {
				return stop(fmt.Errorf("waiting out %v's lease: %w", first, err))
			}
		}
	}
	if skipped {
		// A node not paused may serve pairs the old owner granted until it stopped serving
		// (just before, or at its fence): wait them out.
		if err := rt.Sleep(ctx, n.kind.pairLease()+2*n.kind.clockSkew()); err != nil {
			return stop(fmt.Errorf("waiting out cached pairs: %w", err))
		}
	}
	for _, node := range nodes {
		if node == dead || node == first {
			continue
		}
		if _, err := call(node, flexResume, next); err != nil {
			failed++
		}
	}
	end()
	if failed > 0 {
		n.count(func(s *FlexStats) { s.ResumesFailed += uint64(failed) })
	}
	return stOK, nil
}

// errProxyDown marks an index RPC that found the partition's proxy down.
var errProxyDown = errors.New("kvstore: flexkv: proxy down")

// callProxy is an index RPC to a partition's owner; a failure with farmem.ErrNodeDown is
// marked errProxyDown as well.
func (x *flexIndex) callProxy(ctx context.Context, owner farmem.NodeID, method uint16, req []byte) ([]byte, error) {
	if owner != x.n.node {
		x.n.count(func(s *FlexStats) { s.Remote++ })
	}
	rep, err := x.m.Call(ctx, owner, method, req)
	if err != nil && errors.Is(err, farmem.ErrNodeDown) {
		return nil, fmt.Errorf("%w: %w", errProxyDown, err)
	}
	return rep, err
}

// awaitRecovery reports partition p's owner, in epoch, down to the coordinator and waits until
// the partition has another route, backing off, for at most the proxy lease plus the fence
// delay plus a down timeout: the longest a dead owner takes to be fenced. A live owner (a
// Call that merely timed out) keeps renewing its lease, and the wait ends at that bound.
func (x *flexIndex) awaitRecovery(ctx context.Context, p int, owner farmem.NodeID, epoch uint64) error {
	n := x.n
	limit := x.rt.Now().Add(n.kind.proxyLease() + n.fenceDelay(x.m) + x.m.Topology().DownTimeout)
	var d time.Duration
	for {
		moved, err := n.recoverPart(ctx, x.m, p, owner, epoch)
		if err != nil {
			return err
		}
		if moved {
			return nil
		}
		n.mu.Lock()
		ps := n.parts[p]
		n.mu.Unlock()
		if ps.owner != owner || ps.epoch != epoch || x.rt.Now() >= limit {
			return nil
		}
		if err := backoff(ctx, x.rt, &d); err != nil {
			return err
		}
	}
}

// Paused reports whether partition p is paused in node's active map: a hand-over is running,
// or one could not resume the node (its operations on p then wait until it learns the route
// from the coordinator).
func (k *FlexKV) Paused(node farmem.NodeID, p int) bool {
	k.mu.Lock()
	n := k.nodes[node]
	k.mu.Unlock()
	if n == nil || p < 0 || p >= len(n.parts) {
		return false
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.parts[p].paused
}

// unknownOutcome is the error of a proxied write whose outcome is unknown (the proxy did not
// answer, or failed after it may have written through): it wraps farmem.ErrNodeDown, whose
// documented meaning is exactly that, and the cause.
func unknownOutcome(cause error) error {
	if errors.Is(cause, farmem.ErrNodeDown) {
		return fmt.Errorf("kvstore: flexkv: commit outcome unknown: %w", cause)
	}
	return fmt.Errorf("kvstore: flexkv: commit outcome unknown: %w: %w", farmem.ErrNodeDown, cause)
}

// retried notes a retry of an operation on partition p (a stale answer, a busy or conflicting
// slot): once its retries have gone on for a down timeout, and every down timeout after, the
// node asks the coordinator for the settled route. A node that a recovery could not reach
// (a proxy that hung and came back, its clients with it) learns the new route this way.
func (x *flexIndex) retried(ctx context.Context, p int, since *farmem.Time) {
	now := x.rt.Now()
	switch {
	case *since == 0:
		*since = now
	case now.Sub(*since) >= x.m.Topology().DownTimeout:
		*since = now
		_ = x.n.askRoute(ctx, x.m, p)
	}
}

// settle decides the outcome of the write attempt in x.unknown, whose proxy (owner, in epoch)
// failed, once this node routes partition p otherwise: the old proxy can then write nothing
// through any more (a recovery fenced it, or a hand-over dropped its copy after its
// write-throughs in flight had landed and before this node resumed). The memory node's slot
// then tells: holding the attempt's new word (a block address no other write uses), it
// committed (the replaced block is retired); holding the word it expected, a block or a
// tombstone (which cannot come back once replaced: a block is retired only by whoever
// replaced it, a tombstone carries its time), it did not and never will (its block is freed,
// and the caller writes again). Anything else, an expected empty slot (a split empties the
// slots it moves), a delete (its word is not unique), or no other route yet: unknown. One
// round trip.
func (x *flexIndex) settle(ctx context.Context, p int, owner farmem.NodeID, epoch uint64) (committed, known bool) {
	w := x.unknown
	x.unknown = nil
	if w == nil || w.kind == wDelete {
		return false, false
	}
	x.n.mu.Lock()
	ps := x.n.parts[p]
	x.n.mu.Unlock()
	if ps.paused || ps.owner == owner && ps.epoch == epoch {
		return false, false
	}
	var b [8]byte
	if err := x.m.Read(ctx, w.slot, b[:]); err != nil {
		return false, false
	}
	switch race.Slot(le.Uint64(b[:])) {
	case w.new:
		if w.kind != wInsert {
			x.t.Retire(ctx, w.expect)
		}
		x.n.count(func(s *FlexStats) { s.Settled++ })
		return true, true
	case w.expect:
		if w.expect.Empty() {
			// An empty slot can be empty again (a split clears the slots it moves), so it
			// tells nothing.
			return false, false
		}
		_ = x.t.FreeBlock(w.new)
		x.n.count(func(s *FlexStats) { s.Settled++ })
		return false, true
	}
	return false, false
}
