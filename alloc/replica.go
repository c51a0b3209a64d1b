package alloc

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/farmem/farmem/farmem"
)

// Replicated metadata (see the package doc, "Replicated metadata"). With Header.Replicas = r =
// 2f+1 above 1, the allocator's shared words live on the r metadata nodes (MetaNodes), each
// at the offsets the home node alone uses when r = 1, and every operation on them reaches a
// majority (q = f+1) of those nodes:
//
//   - the symmetric bump words: a claim reads (or remembers) each node's word, takes M, the
//     q-th smallest known word, and CASes every node whose word it knows to be at most M from
//     that value to M+n (it reads the others); it owns [M, M+n) once q of the CASes
//     succeeded. Each CAS raises a word (from at most M to above M), so words only grow, and
//     a CAS succeeds only from a value at most M: of two claims that both reached a
//     majority, the later one, on a node both reached, found at least the earlier's end, so
//     its M is past it and the ranges are disjoint. A word above M, in a view that is up to
//     date, was raised by claims that reached only a minority; it owns nothing, is not
//     CASed, and stays ahead until the majority's word passes it (in a stale view, the CASes
//     fail and bring the view up to date), so a lost claim does not move the word the next claim
//     starts from (taking the largest word instead would skip a range per lost claim). A
//     word of 0 is a node not restored yet (Reformat): it never counts and
//     is never CASed. A lost round whose CASes all failed only brought a stale view up to
//     date, and the claim retries from it at once; a round that split the votes (some CASes
//     succeeded) pauses at random (from the client's Runtime), doubling up to
//     maxSymBackoff. Rounds after which the majority's word has not moved are bounded
//     (maxSymRounds); the others mean another claim progressed, which the area's size bounds.
//   - the global epoch: each node's copy only grows, and a value appears on a node only by a
//     scan's advance or by copying a value that exists (write-back, Restore). A pin succeeds
//     when its announcement and then the epoch, read on each of q nodes, give the same value
//     e on all of them; a scan advances from g only when q nodes read the same g and then no
//     live announcement below g. On a node both reached, a scan that missed a pin's
//     announcement read the epoch before the pin did, so the pin would have read g > e: the
//     single-node argument, node by node. Retire and scans read the largest copy of q nodes,
//     which is at least every pinned epoch (each pinned epoch is on a majority).
//   - the epoch table: announcements go to every metadata node; a scan takes the oldest live
//     announcement it reads on any of its q nodes, and clears an expired one on the node it
//     read it on.
//   - the handover words: Close publishes with a CAS on every node, and has published once q
//     of them succeeded; New takes a word with CASes to 0 and adopts it only if q succeeded,
//     so two allocators never both adopt a record (majorities intersect). A record published
//     on a majority of which some nodes then restart before a New takes it may no longer be
//     takable: its blocks leak, as with any lost record.
//
// Costs with r > 1: a symmetric chunk claim is one round trip (the CASes, from the values the
// allocator last saw) when no other client claimed since, one more per race (with k clients
// claiming at once, a claim loses up to k-1 races, each to a claim that won: rounds are
// counted in Stats.SymRounds); pins, scans,
// retires and quiesces are one round trip each, as with r = 1, but wait for q nodes; New reads
// the handover words in a round trip of their own and takes one in another; Close publishes in
// a round trip after the one writing the record.

// MaxMetaReplicas is the largest number of metadata nodes a header can name.
const MaxMetaReplicas = 15

// homeWord packs the home node and the metadata replica count into the constants' home word:
// r = 1 is stored as 0, so an unreplicated header keeps its bytes.
func homeWord(home farmem.NodeID, replicas int) uint64 {
	w := uint64(home)
	if replicas > 1 {
		w |= uint64(replicas) << 16
	}
	return w
}

// splitHomeWord is homeWord's inverse.
func splitHomeWord(w uint64) (farmem.NodeID, int) {
	r := int(w >> 16 & 0xff)
	if r == 0 {
		r = 1
	}
	return farmem.NodeID(w & 0xffff), r
}

// MetaNodes returns the memory nodes of t that hold the allocator's shared metadata under h:
// h.Replicas nodes from h.Home on, in id order, wrapping around. With r = 1 it is the home node
// alone. It returns nil if the topology has fewer memory nodes than h asks for.
func MetaNodes(t *farmem.Topology, h Header) []farmem.NodeID {
	mem := t.MemoryNodes()
	i := slices.Index(mem, h.Home)
	if i < 0 || h.Replicas < 1 || h.Replicas > len(mem) {
		return nil
	}
	out := make([]farmem.NodeID, 0, h.Replicas)
	for k := range h.Replicas {
		out = append(out, mem[(i+k)%len(mem)])
	}
	return out
}

// replicaState is an allocator's view of the metadata nodes (r > 1 only).
type replicaState struct {
	nodes  []farmem.NodeID
	quorum int
	// symSeen is each node's symmetric bump word as last seen (0: unknown, or not restored).
	symSeen []uint64
	// gSeen is each node's global epoch copy as last seen (0: unknown).
	gSeen []uint64
	// rng draws the pauses of contended symmetric claims (from the client's Runtime).
	rng *rand.Rand
}

// index returns the position of node n among the metadata nodes, or -1.
func (r *replicaState) index(n farmem.NodeID) int { return slices.Index(r.nodes, n) }

// initReplicas sets up the replicated paths for header hh; hdrs holds the headers New read.
func (a *Allocator) initReplicas(hh Header, hdrs map[farmem.NodeID]Header) error {
	if hh.Replicas <= 1 {
		return nil
	}
	nodes := MetaNodes(a.m.Topology(), hh)
	if nodes == nil {
		return fmt.Errorf("alloc: %d metadata replicas on a topology of %d memory nodes: %w", hh.Replicas, len(a.all), ErrBadHeader)
	}
	rs := &replicaState{nodes: nodes, quorum: hh.Replicas/2 + 1, symSeen: make([]uint64, len(nodes)), gSeen: make([]uint64, len(nodes))}
	for i, n := range nodes {
		if st := farmem.StatusOf(a.m, n); st.State == farmem.NodeLost {
			continue
		}
		if h, ok := hdrs[n]; ok && h.Epoch != 0 {
			rs.symSeen[i], rs.gSeen[i] = h.SymBump, h.Epoch
		}
	}
	a.rep = rs
	a.tableOff = hh.TableOff
	a.sym.claimFn = a.claimSymRep
	return nil
}

// waitQuorum waits until q of the metadata nodes of p's batch are complete and good(i) holds
// for each (i the node's index among the metadata nodes); it returns their indexes. It waits
// for more nodes when some complete ones are not good, and fails once q good ones cannot come.
func (a *Allocator) waitQuorum(ctx context.Context, p *farmem.Pending, good func(i int) bool) ([]int, error) {
	return waitFor(ctx, p, a.rep.nodes, a.rep.quorum, good)
}

// waitFor is waitQuorum over nodes, for a quorum of q.
func waitFor(ctx context.Context, p *farmem.Pending, nodes []farmem.NodeID, q int, good func(i int) bool) ([]int, error) {
	rs := &replicaState{nodes: nodes, quorum: q}
	k := rs.quorum
	for {
		if err := p.WaitNodes(ctx, k); err != nil {
			return nil, err
		}
		done := p.NodesDone(nil)
		var ok []int
		for _, n := range done {
			if i := rs.index(n); i >= 0 && good(i) {
				ok = append(ok, i)
			}
		}
		if len(ok) >= rs.quorum {
			return ok, nil
		}
		k = len(done) + rs.quorum - len(ok)
		if k > len(rs.nodes) {
			return nil, fmt.Errorf("alloc: %d of %d metadata nodes answered, %d of them usable, want %d: %w",
				len(done), len(rs.nodes), len(ok), rs.quorum, farmem.ErrNodeDown)
		}
	}
}

// maxSymRounds bounds the rounds of a replicated symmetric claim (each lost round means
// another client claimed meanwhile).
const maxSymRounds = 64

// maxSymBackoff caps the random pause after a replicated symmetric claim split the votes.
const maxSymBackoff = time.Millisecond

// symQuorumMax returns the smallest value that q of the nodes' known symmetric bump words are
// at most (the q-th smallest known word), or 0 when fewer than q words are known. A claim
// CASes only the nodes at or below it: a word further ahead was raised by claims that reached
// only a minority, and owns nothing.
func (r *replicaState) symQuorumMax() uint64 {
	known := make([]uint64, 0, len(r.symSeen))
	for _, v := range r.symSeen {
		if v != 0 {
			known = append(known, v)
		}
	}
	if len(known) < r.quorum {
		return 0
	}
	slices.Sort(known)
	return known[r.quorum-1]
}

// claimSymRep claims delta bytes of the symmetric area by a maximum over a majority of the
// metadata nodes' symmetric bump words (see "Replicated metadata" above), and returns the
// claimed range's start, like an FAA's previous value (at or past the limit when exhausted).
func (a *Allocator) claimSymRep(ctx context.Context, delta uint64) (uint64, error) {
	rs := a.rep
	ar := a.sym
	backoff := time.Microsecond
	pause := false
	for stalled := 0; stalled < maxSymRounds; {
		if pause {
			// Claims that split the nodes' votes retry after a random pause, so that one of
			// them wins the next round.
			if rs.rng == nil {
				rs.rng = a.rt.NewRand()
			}
			if err := a.rt.Sleep(ctx, time.Duration(rs.rng.Int64N(int64(backoff)))+1); err != nil {
				return 0, err
			}
			backoff = min(2*backoff, maxSymBackoff)
		}
		m := rs.symQuorumMax()
		if m >= ar.limit && m != 0 {
			return m, nil
		}
		b := &farmem.Batch{}
		ops := make([]int, len(rs.nodes))
		bufs := make([][]byte, len(rs.nodes))
		for i, n := range rs.nodes {
			at := farmem.MakeAddr(n, offSymBump)
			if v := rs.symSeen[i]; v != 0 && m != 0 && v <= m {
				ops[i] = b.CAS(at, v, m+delta)
			} else {
				bufs[i] = make([]byte, 8)
				ops[i] = b.Read(at, bufs[i])
			}
		}
		p := a.m.Post(ctx, b)
		a.stats.SymRounds++
		won := 0
		seen := func(i int) uint64 {
			if bufs[i] != nil {
				return le64(bufs[i])
			}
			prev, _ := b.Result(ops[i])
			return prev
		}
		_, err := a.waitQuorum(ctx, p, func(i int) bool { return seen(i) != 0 })
		if err != nil {
			return 0, fmt.Errorf("alloc: symmetric claim: %w", err)
		}
		for _, n := range p.NodesDone(nil) {
			i := rs.index(n)
			v := seen(i)
			if bufs[i] == nil && v == rs.symSeen[i] {
				won++
				rs.symSeen[i] = m + delta
				continue
			}
			rs.symSeen[i] = v
		}
		if won >= rs.quorum {
			return m, nil
		}
		if won > 0 {
			a.stats.SymSplits++
		}
		// A round every CAS of which failed only brought a stale view up to date: retry at
		// once from it. A round some of whose CASes succeeded split the votes with other
		// claims: pause. Rounds after which the quorum's largest word has not moved count
		// towards the bound; the others mean a claim progressed (the area bounds those).
		pause = won > 0 || m == 0
		if m2 := rs.symQuorumMax(); m2 <= m {
			stalled++
		}
	}
	return 0, fmt.Errorf("alloc: symmetric claim stalled for %d rounds: %w", maxSymRounds, farmem.ErrNoSpace)
}

// The replicated epoch (r > 1): see "Replicated metadata" above and epoch.go for r = 1.

func (a *Allocator) epochOn(n farmem.NodeID) farmem.Addr { return farmem.MakeAddr(n, offEpoch) }

func (a *Allocator) slotOn(n farmem.NodeID) farmem.Addr {
	return farmem.MakeAddr(n, a.tableOff+8*uint64(a.id))
}

// announceRep is announce over the metadata nodes: the announcement and a read of the epoch,
// in one batch per node (a write-back of the largest epoch seen first, on nodes behind), until
// q nodes read the epoch announced.
func (a *Allocator) announceRep(ctx context.Context, now farmem.Time) error {
	ep := &a.ep
	rs := a.rep
	for range maxAnnounce {
		e, deadline := ep.cached, now.Add(a.opts.Lease)
		w := encodeSlot(e, deadline)
		b := &farmem.Batch{}
		bufs := make([][]byte, len(rs.nodes))
		for i, n := range rs.nodes {
			if g := rs.gSeen[i]; g != 0 && g < e {
				b.CAS(a.epochOn(n), g, e)
			}
			b.MaskedCAS(a.slotOn(n), 0, 0, w, math.MaxUint64)
			bufs[i] = make([]byte, 8)
			b.Read(a.epochOn(n), bufs[i])
		}
		p := a.m.Post(ctx, b)
		got, err := a.waitQuorum(ctx, p, func(i int) bool { return le64(bufs[i]) != 0 })
		if err != nil {
			ep.announced = false
			return fmt.Errorf("alloc: announce epoch %d: %w", e, err)
		}
		a.stats.Refreshes++
		ep.announced, ep.annE, ep.annAt, ep.deadline, ep.word = true, e, now, deadline, w
		ep.seen = max(ep.seen, now)
		lo, hi := uint64(math.MaxUint64), uint64(0)
		for _, i := range got {
			g := le64(bufs[i])
			rs.gSeen[i] = g
			lo, hi = min(lo, g), max(hi, g)
		}
		ep.cached = max(ep.cached, hi)
		a.stats.Epoch = ep.cached
		if lo == e && hi == e {
			return nil
		}
		now = a.rt.Now()
	}
	ep.announced = false
	return fmt.Errorf("alloc: the global epoch moved through %d announcements: %w", maxAnnounce, farmem.ErrInvalid)
}

// readEpochRep returns the largest copy of the global epoch on q metadata nodes.
func (a *Allocator) readEpochRep(ctx context.Context) (uint64, error) {
	rs := a.rep
	b := &farmem.Batch{}
	bufs := make([][]byte, len(rs.nodes))
	for i, n := range rs.nodes {
		bufs[i] = make([]byte, 8)
		b.Read(a.epochOn(n), bufs[i])
	}
	got, err := a.waitQuorum(ctx, a.m.Post(ctx, b), func(i int) bool { return le64(bufs[i]) != 0 })
	if err != nil {
		return 0, err
	}
	g := uint64(0)
	for _, i := range got {
		rs.gSeen[i] = le64(bufs[i])
		g = max(g, rs.gSeen[i])
	}
	return g, nil
}

// slotsRep sets this client's slot to w on every metadata node and waits for q of them; it
// returns the previous words of those q.
func (a *Allocator) slotsRep(ctx context.Context, w uint64) ([]uint64, error) {
	rs := a.rep
	b := &farmem.Batch{}
	ops := make([]int, len(rs.nodes))
	for i, n := range rs.nodes {
		ops[i] = b.MaskedCAS(a.slotOn(n), 0, 0, w, math.MaxUint64)
	}
	got, err := a.waitQuorum(ctx, a.m.Post(ctx, b), func(int) bool { return true })
	if err != nil {
		return nil, err
	}
	prevs := make([]uint64, 0, len(got))
	for _, i := range got {
		prev, _ := b.Result(ops[i])
		prevs = append(prevs, prev)
	}
	return prevs, nil
}

// withdrawRep adds to b the unsignaled withdrawal of this client's announcement on every
// metadata node.
func (a *Allocator) withdrawRep(b *farmem.Batch) {
	for _, n := range a.rep.nodes {
		b.Unsignaled(b.MaskedCAS(a.slotOn(n), 0, 0, 0, math.MaxUint64))
	}
}

// scanRep is scan over the metadata nodes: the epoch and the table read on q nodes; the
// horizon is the oldest live announcement read on any of them; the epoch advances from g only
// if all q read g (otherwise the nodes behind get g written back).
func (a *Allocator) scanRep(ctx context.Context) (horizon, others uint64, err error) {
	rs := a.rep
	ep := &a.ep
	now := a.rt.Now()
	b := &farmem.Batch{}
	gb := make([][]byte, len(rs.nodes))
	tb := make([][]byte, len(rs.nodes))
	for i, n := range rs.nodes {
		gb[i], tb[i] = make([]byte, 8), make([]byte, 8*a.slots)
		b.Read(a.epochOn(n), gb[i])
		b.Read(farmem.MakeAddr(n, a.tableOff+8), tb[i])
	}
	got, err := a.waitQuorum(ctx, a.m.Post(ctx, b), func(i int) bool { return le64(gb[i]) != 0 })
	if err != nil {
		return 0, 0, fmt.Errorf("alloc: scan epoch table: %w", err)
	}
	a.stats.Scans++
	ep.lastScan = now
	g, unanimous := uint64(0), true
	for _, i := range got {
		rs.gSeen[i] = le64(gb[i])
		g = max(g, rs.gSeen[i])
	}
	post := &farmem.Batch{}
	for _, i := range got {
		if rs.gSeen[i] != g {
			unanimous = false
			post.Unsignaled(post.CAS(a.epochOn(rs.nodes[i]), rs.gSeen[i], g))
		}
	}
	f := newSlotFold()
	f.advance = unanimous
	for _, i := range got {
		n := rs.nodes[i]
		for s := range a.slots {
			if w := le64(tb[i][8*s:]); w != 0 && !f.add(a, w, g, s, now) {
				post.Unsignaled(post.CAS(farmem.MakeAddr(n, a.tableOff+8+8*uint64(s)), w, 0))
			}
		}
	}
	horizon, others = f.horizon, f.others
	if f.advance {
		for _, n := range rs.nodes {
			post.Unsignaled(post.CAS(a.epochOn(n), g, g+1))
		}
		a.stats.Advances++
	}
	if len(post.Ops) > 0 {
		a.m.Post(context.Background(), post)
	}
	ep.cached = max(ep.cached, g)
	a.stats.Epoch = ep.cached
	return horizon, others, nil
}

// Replicated handover words (r > 1).

func handOn(n farmem.NodeID, id farmem.ClientID) farmem.Addr {
	return farmem.MakeAddr(n, HandoverOffset+8*uint64(id))
}

// publishRep publishes handover word w (its record's head at head) on a majority of the
// metadata nodes, chaining onto a record that a majority holds unadopted.
func (a *Allocator) publishRep(ctx context.Context, head farmem.Addr, w uint64) error {
	rs := a.rep
	seen := make([]uint64, len(rs.nodes))
	chained := uint64(0)
	next := make([]byte, 8)
	for range maxChain {
		b := &farmem.Batch{}
		ops := make([]int, len(rs.nodes))
		for i, n := range rs.nodes {
			ops[i] = b.CAS(handOn(n, a.id), seen[i], w)
		}
		p := a.m.Post(ctx, b)
		if _, err := a.waitQuorum(ctx, p, func(int) bool { return true }); err != nil {
			return fmt.Errorf("hand over: publish record: %w", err)
		}
		won := 0
		count := map[uint64]int{}
		for _, n := range p.NodesDone(nil) {
			i := rs.index(n)
			prev, _ := b.Result(ops[i])
			if prev == seen[i] {
				won++
				seen[i] = w
				continue
			}
			seen[i] = prev
			if prev != w && prev != 0 {
				count[prev]++
			}
		}
		if won >= rs.quorum {
			a.stats.HandedOver++
			return nil
		}
		// Chain onto an unadopted record held by a majority (one only a minority holds can
		// never be taken: it is overwritten).
		want := uint64(0)
		for v, c := range count {
			if c >= rs.quorum {
				want = v
			}
		}
		if want != chained {
			binary.LittleEndian.PutUint64(next, want)
			if err := a.m.Write(ctx, head.Add(offNext), next); err != nil {
				return fmt.Errorf("hand over: chain record: %w", err)
			}
			chained = want
		}
	}
	return fmt.Errorf("hand over: the handover words keep changing: %w", farmem.ErrInvalid)
}

// takeRep reads this client's handover words on the metadata nodes and takes one with CASes
// to 0, succeeding when q of them did; it returns the word taken (0: none).
func (a *Allocator) takeRep(ctx context.Context) (uint64, error) {
	rs := a.rep
	b := &farmem.Batch{}
	bufs := make([][]byte, len(rs.nodes))
	for i, n := range rs.nodes {
		bufs[i] = make([]byte, 8)
		b.Read(handOn(n, a.id), bufs[i])
	}
	got, err := a.waitQuorum(ctx, a.m.Post(ctx, b), func(int) bool { return true })
	if err != nil {
		return 0, fmt.Errorf("alloc: read handover words: %w", err)
	}
	var cands []uint64
	for _, i := range got {
		if v := le64(bufs[i]); v != 0 && !slices.Contains(cands, v) {
			cands = append(cands, v)
		}
	}
	for _, v := range cands {
		tb := &farmem.Batch{}
		ops := make([]int, len(rs.nodes))
		for i, n := range rs.nodes {
			ops[i] = tb.CAS(handOn(n, a.id), v, 0)
		}
		p := a.m.Post(ctx, tb)
		won, err := a.waitQuorum(ctx, p, func(i int) bool { prev, _ := tb.Result(ops[i]); return prev == v })
		if err == nil && len(won) >= rs.quorum {
			return v, nil
		}
		// Not taken: put back what this take cleared, so that a later New may take it.
		var done []int
		for _, n := range p.NodesDone(nil) {
			if i := rs.index(n); i >= 0 {
				if prev, _ := tb.Result(ops[i]); prev == v {
					done = append(done, i)
				}
			}
		}
		if len(done) > 0 {
			pb := &farmem.Batch{}
			for _, i := range done {
				pb.Unsignaled(pb.CAS(handOn(rs.nodes[i], a.id), 0, v))
			}
			a.m.Post(context.Background(), pb)
		}
	}
	return 0, nil
}

// putBackRep puts handover word w back on the metadata nodes after a failed read of its record.
func (a *Allocator) putBackRep(ctx context.Context, w uint64) bool {
	rs := a.rep
	b := &farmem.Batch{}
	ops := make([]int, len(rs.nodes))
	for i, n := range rs.nodes {
		ops[i] = b.CAS(handOn(n, a.id), 0, w)
	}
	_, err := a.waitQuorum(ctx, a.m.Post(ctx, b), func(i int) bool { prev, _ := b.Result(ops[i]); return prev == 0 })
	return err == nil
}

// MetaNodes returns the nodes holding the allocator's shared metadata: the home node alone,
// or the r metadata nodes (see the package function MetaNodes). No verb.
func (a *Allocator) MetaNodes() []farmem.NodeID {
	if a.rep == nil {
		return []farmem.NodeID{a.home}
	}
	return slices.Clone(a.rep.nodes)
}

// EpochWordOffset is the offset of a node's global epoch word. On a metadata node it is 0
// only while the node is not restored after a restart (Reformat writes it last), so
// structures that keep their own words beside the allocator's on the metadata nodes can use
// it, read in the same batch, to skip a node that is not restored yet.
const EpochWordOffset = offEpoch
