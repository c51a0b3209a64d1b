package rdma

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"github.com/farmem/farmem/farmem"
	"github.com/farmem/farmem/farmem/transport"
	"github.com/farmem/farmem/internal/wire"
)

// Restarts. Every node process (a farmemd memory node, a compute process's own server) draws a
// random nonzero 64-bit incarnation when it starts and sends it in every Welcome (wire protocol
// version 2). A Fabric remembers, per peer, the incarnation it adopted (the first it met) and
// the one the peer last answered with:
//
//   - a peer that stops answering (killed, SIGSTOPped, partitioned) is down: its connections
//     fail with farmem.ErrNodeDown as before. The fabric re-dials it in the background, a
//     control handshake at a time, with exponential backoff from an eighth of the down timeout
//     to twice the down timeout (fabric time), for as long as the fabric is open; ops dial on
//     their own too, each bounded by the down timeout. When the peer answers with the same
//     incarnation it is up again, with nothing to do: the next op's connection works.
//   - a peer that answers with another incarnation restarted and lost its memory. The fabric
//     fences it: every verb to it fails at once with an error wrapping farmem.ErrNodeLost
//     (which wraps farmem.ErrNodeDown), naming the node and both incarnations — never
//     ErrBadKey (ErrOutOfRange) and never the new memory's zeros — until Adopt. Adopt takes the
//     new incarnation, region key and size as the fabric's own; verbs then reach the new,
//     zeroed memory. Adopt is per Fabric (per process): each process acknowledges the loss.
//     What was posted before the adoption never reaches the new memory: a connection carries
//     the incarnation adopted when it was made, and one whose handshake meets another process
//     (the node restarted, and the fabric adopted it, while it dialed) fails what was posted
//     on it with ErrNodeLost; the next op dials again.
//
// NodeStatus reports this without a round trip; Fabric.Status asks the node itself (its
// incarnation is in NodeStatus.Incarnation).

var (
	_ farmem.Restarts = (*Fabric)(nil)
	_ farmem.Restarts = (*client)(nil)
)

// newIncarnation draws a random nonzero incarnation.
func newIncarnation() uint64 {
	var b [8]byte
	for {
		_, _ = rand.Read(b[:])
		if v := binary.LittleEndian.Uint64(b[:]); v != 0 {
			return v
		}
	}
}

// peerLife is what a fabric knows of a peer's process (guarded by the peer's mu).
type peerLife struct {
	inc      uint64 // the incarnation adopted (0: not met yet)
	seen     uint64 // the incarnation last met
	seenKey  uint32 // the region key and size the last met incarnation announced
	seenSize uint64
	down     bool // the last dial failed (or the node has not answered since)
	fenced   bool // Fence: lost until Adopt whatever the incarnations say
	probing  bool // a background re-dialer runs
	warned   uint64
}

// meet records a Welcome's incarnation (called by learn, p.mu held). It reports whether the peer
// is fenced.
func (p *peer) meet(w wire.Welcome) bool {
	l := &p.life
	l.down = false
	if w.Incarnation == 0 {
		return l.seen != l.inc
	}
	l.seen, l.seenKey, l.seenSize = w.Incarnation, w.Key, w.Size
	if l.inc == 0 {
		l.inc = w.Incarnation
	}
	if l.seen != l.inc && l.warned != l.seen && p.log != nil {
		l.warned = l.seen
		p.log.Warn("node restarted with a new incarnation: its memory is lost; verbs to it fail with ErrNodeLost until it is adopted",
			"peer", p.id.String(), "adopted", fmt.Sprintf("%#x", l.inc), "seen", fmt.Sprintf("%#x", l.seen))
	}
	return l.seen != l.inc
}

// fenced returns the error of a verb to p if it is fenced, or nil.
func (p *peer) fenced() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.life.seen != p.life.inc || p.life.fenced {
		return fmt.Errorf("rdma: %w", transport.LostError(p.id, p.life.inc, p.life.seen))
	}
	return nil
}

// adopted returns the incarnation of p the fabric has adopted (0: none met yet).
func (p *peer) adopted() uint64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.life.inc
}

// status returns p's NodeStatus.
func (p *peer) status() farmem.NodeStatus {
	p.mu.Lock()
	defer p.mu.Unlock()
	st := farmem.NodeStatus{ID: p.id, Incarnation: p.life.inc, Seen: p.life.seen}
	switch {
	case p.life.seen != p.life.inc || p.life.fenced:
		st.State = farmem.NodeLost
	case p.life.down:
		st.State = farmem.NodeDown
	}
	return st
}

// noteDown records that dialing p failed with err; if p is unreachable (not refused for another
// reason) it starts the background re-dialer.
func (f *Fabric) noteDown(p *peer, err error) {
	if !errors.Is(err, farmem.ErrNodeDown) || errors.Is(err, farmem.ErrNodeLost) || f.ctx.Err() != nil {
		return
	}
	p.mu.Lock()
	p.life.down = true
	start := !p.life.probing
	p.life.probing = true
	p.mu.Unlock()
	if !start {
		return
	}
	f.bgMu.Lock()
	defer f.bgMu.Unlock()
	if f.bgStopped {
		return
	}
	f.wg.Add(1)
	go f.redial(p)
}

// redial probes a down peer with a control request, with exponential backoff, until it answers
// (up again, or fenced if its incarnation changed) or the fabric closes.
func (f *Fabric) redial(p *peer) {
	defer f.wg.Done()
	backoff := max(f.down/8, time.Millisecond)
	limit := 2 * f.down
	for {
		if err := f.rt.Sleep(f.ctx, backoff); err != nil {
			break
		}
		ctx, cancel := context.WithTimeout(f.ctx, f.down)
		var st NodeStatus
		err := p.control(f).rpc(ctx, wire.CtlInfo, struct{}{}, &st)
		cancel()
		if err == nil {
			break
		}
		if !errors.Is(err, farmem.ErrNodeDown) {
			// Refused for another reason (authentication, shutting down): the node answers.
			break
		}
		backoff = min(2*backoff, limit)
	}
	p.mu.Lock()
	p.life.probing = false
	p.mu.Unlock()
}

// NodeStatus implements farmem.Restarts, with no round trip.
func (f *Fabric) NodeStatus(id farmem.NodeID) (farmem.NodeStatus, error) {
	if id == f.self {
		return farmem.NodeStatus{ID: id, Incarnation: f.srv.inc, Seen: f.srv.inc}, nil
	}
	f.pmu.RLock()
	p := f.peers[id]
	f.pmu.RUnlock()
	if p == nil {
		return farmem.NodeStatus{}, fmt.Errorf("rdma: no node %v: %w", id, farmem.ErrInvalid)
	}
	return p.status(), nil
}

// Adopt implements farmem.Restarts: it asks the node for its current incarnation (a control
// request: one round trip, after a handshake if need be) and, if it differs from the one this
// fabric holds, takes it, with the node's new region key, as its own: verbs then reach the new
// memory. A node that restarted with another region size cannot be adopted (ErrInvalid).
func (f *Fabric) Adopt(ctx context.Context, id farmem.NodeID) error {
	if id == f.self {
		return nil
	}
	p := f.peer(ctx, id)
	if p == nil {
		return fmt.Errorf("rdma: adopt: no node %v: %w", id, farmem.ErrInvalid)
	}
	var st NodeStatus
	ctl := p.control(f)
	err := ctl.rpc(ctx, wire.CtlInfo, struct{}{}, &st)
	if err != nil && errors.Is(err, farmem.ErrNodeDown) && ctx.Err() == nil {
		// A control connection to the old incarnation fails once; the next request re-dials.
		err = ctl.rpc(ctx, wire.CtlInfo, struct{}{}, &st)
	}
	if err != nil {
		return fmt.Errorf("rdma: adopt %v: %w", id, err)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	l := &p.life
	if l.seen == l.inc && !l.fenced {
		return nil
	}
	if l.seenSize != 0 && p.size != 0 && l.seenSize != p.size {
		return fmt.Errorf("rdma: adopt %v: it restarted with a region of %d bytes, not %d: %w", id, l.seenSize, p.size, farmem.ErrInvalid)
	}
	l.inc, l.fenced = l.seen, false
	p.setKey(l.seenKey)
	f.adoptions.Add(1)
	if p.log != nil {
		p.log.Info("node adopted: its new memory is in use", "peer", id.String(), "incarnation", fmt.Sprintf("%#x", l.inc))
	}
	return nil
}

// Fence implements farmem.Restarts.
func (f *Fabric) Fence(id farmem.NodeID) error {
	f.pmu.RLock()
	p := f.peers[id]
	f.pmu.RUnlock()
	if p == nil || id == f.self {
		return fmt.Errorf("rdma: fence: no peer %v: %w", id, farmem.ErrInvalid)
	}
	p.mu.Lock()
	p.life.fenced = true
	p.mu.Unlock()
	// Connections already open to the node would reach its memory: end them.
	err := p.fenced()
	qs := f.liveTo(p)
	for _, q := range qs {
		q.fail(err)
	}
	return nil
}

// Fence implements farmem.Restarts: the fabric's Fence.
func (c *client) Fence(id farmem.NodeID) error { return c.f.Fence(id) }

// Adoptions implements farmem.Restarts.
func (f *Fabric) Adoptions() uint64 { return f.adoptions.Load() }

// Adoptions implements farmem.Restarts.
func (c *client) Adoptions() uint64 { return c.f.adoptions.Load() }

// NodeStatus implements farmem.Restarts: the fabric's view.
func (c *client) NodeStatus(id farmem.NodeID) (farmem.NodeStatus, error) {
	return c.f.NodeStatus(id)
}

// Adopt implements farmem.Restarts: the fabric's Adopt.
func (c *client) Adopt(ctx context.Context, id farmem.NodeID) error { return c.f.Adopt(ctx, id) }
