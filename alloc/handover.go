package alloc

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"slices"

	"github.com/farmem/farmem/farmem"
)

// Adoption is what New took over from the allocators that last closed with the same client id
// (see the package doc, "Handover").
type Adoption struct {
	// Records counts the handover records adopted (more than one when closes chained).
	Records int
	// Blocks counts the free blocks, chunks, runs and ranges adopted, with the current chunks'
	// tails; Bytes is their total size.
	Blocks int
	Bytes  uint64
	// Retired counts retired blocks adopted; they are reused only once their epochs allow.
	Retired int
	// Relayed counts arenas and retired blocks on nodes outside Options.Nodes: kept unused, and
	// handed over again at Close.
	Relayed int
	// Err is why a record was not adopted: it wraps ErrBadHandover for a corrupt record (its
	// blocks are lost), or the transport's error if it could not be read (the record is then
	// put back for a later New, when the handover word can be restored).
	Err error
}

// Adopted reports what New adopted.
func (a *Allocator) Adopted() Adoption { return a.adoption }

// snapshot returns everything the allocator holds, as a handover body.
func (a *Allocator) snapshot() *handover {
	h := &handover{}
	add := func(node farmem.NodeID, ar *arena) {
		ar.settle() // the magazine's blocks are free blocks of the record
		s := arenaState{node: node, cur: ar.cur, end: ar.end, spare: slices.Clone(ar.spare), small: map[int][]blockRun{}}
		if s.cur == s.end {
			s.cur, s.end = 0, 0
		}
		for n, offs := range ar.large {
			for _, o := range offs {
				s.large = append(s.large, blockRun{o, n})
			}
		}
		for c := range ar.free {
			var offs []uint64
			for k := range ar.free[c] {
				offs = append(offs, ar.free[c][k]...)
			}
			if len(offs) > 0 {
				s.small[c] = coalesce(offs, classSizes[c])
			}
		}
		h.arenas = append(h.arenas, s)
	}
	for _, n := range a.nodes {
		add(n, a.arenas[n])
	}
	add(0, a.sym)
	for _, f := range a.foreign {
		h.arenas = append(h.arenas, f.clone())
	}
	h.arenas = slices.DeleteFunc(h.arenas, func(s arenaState) bool { return s.empty() })
	for _, r := range a.ep.retired {
		node := r.node
		if r.sym {
			node = 0
		}
		h.retired = append(h.retired, retiredState{node: node, off: r.off, size: r.size, tag: r.tag})
	}
	h.retired = append(h.retired, a.foreignRetired...)
	return h
}

func (s *arenaState) clone() arenaState {
	c := *s
	c.spare, c.large, c.ranges = slices.Clone(s.spare), slices.Clone(s.large), slices.Clone(s.ranges)
	c.small = make(map[int][]blockRun, len(s.small))
	for k, v := range s.small {
		c.small[k] = slices.Clone(v)
	}
	return c
}

// Storage kinds: where a block that can hold part of the record comes from.
const (
	fromSpare = iota
	fromLarge
	fromSmall
	fromTail
)

// candidate is a block the allocator holds that can store part of its record.
type candidate struct {
	ai    int // index in the handover's arenas
	kind  int
	class int
	addr  farmem.Addr
	size  uint64
}

// minStorage is the least block worth storing part of a record in.
const minStorage = minHeadRead

// candidates lists the blocks of the allocator's own heap arenas (not the symmetric area, not
// relayed ones) that can store the record, smallest first; est is the record's estimated size.
func (a *Allocator) candidates(h *handover, est uint64) []candidate {
	var cs []candidate
	for ai := range h.arenas {
		s := &h.arenas[ai]
		if s.node == 0 || a.arena(s.node) == nil {
			continue
		}
		chunk := a.arenas[s.node].chunk
		at := func(off uint64) farmem.Addr { return farmem.MakeAddr(s.node, off) }
		for _, o := range s.spare {
			cs = append(cs, candidate{ai: ai, kind: fromSpare, addr: at(o), size: chunk})
		}
		for _, r := range s.large {
			cs = append(cs, candidate{ai: ai, kind: fromLarge, addr: at(r.off), size: r.n * chunk})
		}
		for c, runs := range s.small {
			if classSizes[c] < minStorage {
				continue
			}
			for _, r := range runs {
				for i := range r.n {
					cs = append(cs, candidate{ai: ai, kind: fromSmall, class: c, addr: at(r.off + i*classSizes[c]), size: classSizes[c]})
				}
			}
		}
		// Of the current chunk's tail, only its end: what the record needs, rounded up to a
		// head read. The rest stays the carve range the adopter goes on carving.
		if tail := s.end - s.cur; tail >= minStorage {
			k := uint64(minHeadRead)
			for k < est && k < tail {
				k <<= 1
			}
			k = min(k, tail)
			cs = append(cs, candidate{ai: ai, kind: fromTail, addr: at(s.end - k), size: k})
		}
	}
	slices.SortFunc(cs, func(x, y candidate) int {
		if c := cmpU(x.size, y.size); c != 0 {
			return c
		}
		return cmpU(uint64(x.addr), uint64(y.addr))
	})
	return cs
}

// withStorage returns a copy of h in which the picked blocks are no longer listed as what they
// were but as free ranges of their arenas: the adopter frees them once it has read the record.
func withStorage(h *handover, picks []candidate) *handover {
	out := &handover{arenas: slices.Clone(h.arenas), retired: h.retired}
	copied := map[int]bool{}
	for _, p := range picks {
		if !copied[p.ai] {
			out.arenas[p.ai] = out.arenas[p.ai].clone()
			copied[p.ai] = true
		}
		s := &out.arenas[p.ai]
		off := p.addr.Offset()
		switch p.kind {
		case fromSpare:
			s.spare = slices.DeleteFunc(s.spare, func(o uint64) bool { return o == off })
		case fromLarge:
			s.large = slices.DeleteFunc(s.large, func(r blockRun) bool { return r.off == off })
		case fromTail:
			if s.end = off; s.cur == s.end {
				s.cur, s.end = 0, 0
			}
		case fromSmall:
			size := classSizes[p.class]
			var runs []blockRun
			for _, r := range s.small[p.class] {
				if off < r.off || off >= r.off+r.n*size {
					runs = append(runs, r)
					continue
				}
				if k := (off - r.off) / size; k > 0 {
					runs = append(runs, blockRun{r.off, k})
				}
				if k := (r.off + r.n*size - off - size) / size; k > 0 {
					runs = append(runs, blockRun{off + size, k})
				}
			}
			if len(runs) == 0 {
				delete(s.small, p.class)
			} else {
				s.small[p.class] = runs
			}
		}
		s.ranges = append(s.ranges, blockRun{off, p.size})
	}
	return out
}

// recordPlan is where a record's bytes go: the head (read length read) and further segments.
type recordPlan struct {
	head farmem.Addr
	read uint64
	segs []segment
}

// word is the handover word naming the plan's head.
func (p recordPlan) word() uint64 { return packWord(p.head, p.read) }

// fit lays a body of bodyLen bytes out over the picked blocks, the largest holding the head; ok
// is false if they cannot hold it.
func fit(picks []candidate, bodyLen int) (recordPlan, bool) {
	if len(picks) == 0 {
		return recordPlan{}, false
	}
	ps := slices.Clone(picks)
	slices.SortStableFunc(ps, func(x, y candidate) int { return cmpU(y.size, x.size) })
	h := ps[0]
	rmax := uint64(0)
	for r := uint64(minHeadRead); r <= min(h.size, maxHeadRead); r <<= 1 {
		rmax = r
	}
	if rmax == 0 {
		return recordPlan{}, false
	}
	// Further segments: the head block past its read, then the other picks.
	var room []segment
	if h.size > rmax {
		room = append(room, segment{h.addr.Add(rmax), h.size - rmax})
	}
	for _, p := range ps[1:] {
		room = append(room, segment{p.addr, p.size})
	}
	// The prefix grows with the number of segments, which grows with the prefix: iterate to the
	// least fixed point.
	n := 0
	for range maxSegs + 2 {
		total := uint64(prefixFixed+descLen*n) + uint64(bodyLen)
		read := uint64(minHeadRead)
		for read < total && read < rmax {
			read <<= 1
		}
		rest := total - min(total, read)
		var segs []segment
		for _, r := range room {
			if rest == 0 {
				break
			}
			k := min(rest, r.n)
			segs = append(segs, segment{r.addr, k})
			rest -= k
		}
		switch {
		case rest > 0 || len(segs) > maxSegs:
			return recordPlan{}, false
		case len(segs) == n:
			return recordPlan{head: h.addr, read: read, segs: segs}, true
		}
		n = len(segs)
	}
	return recordPlan{}, false
}

// planRecord chooses the blocks that store the record of h, best fit first (the smallest
// block that completes the record, else the largest left), and returns the body to write (h
// with those blocks as free ranges) and its layout.
func (a *Allocator) planRecord(h *handover) ([]byte, recordPlan, []candidate, bool) {
	cands := a.candidates(h, uint64(len(encodeBody(h)))+prefixFixed+4*descLen+64)
	used := make([]bool, len(cands))
	var picks []candidate
	for range maxSegs + 1 {
		body := encodeBody(withStorage(h, picks))
		if p, ok := fit(picks, len(body)); ok {
			return body, p, picks, true
		}
		// The smallest block that completes the record in one read, else the smallest that
		// completes it, else the largest (cands ascend). Slack: the range entry a pick adds,
		// and a run it splits.
		next, whole, some := -1, -1, -1
		for i, c := range cands {
			if used[i] {
				continue
			}
			next = i
			if p, ok := fit(append(slices.Clone(picks), c), len(body)+64); ok {
				if some < 0 {
					some = i
				}
				if len(p.segs) == 0 {
					whole = i
					break
				}
			}
		}
		switch {
		case whole >= 0:
			next = whole
		case some >= 0:
			next = some
		}
		if next < 0 {
			break
		}
		used[next] = true
		picks = append(picks, cands[next])
	}
	return nil, recordPlan{}, nil, false
}

// handOver writes what the allocator holds into far memory and publishes it in the client's
// handover word, withdrawing the announcement in the same batch. See the package doc for the
// costs.
func (a *Allocator) handOver(ctx context.Context) error {
	withdraw := func(b *farmem.Batch) { b.MaskedCAS(a.slotAddr, 0, 0, 0, ^uint64(0)) }
	if a.rep != nil {
		withdraw = a.withdrawRep
	}
	h := a.snapshot()
	if h.empty() {
		var b farmem.Batch
		withdraw(&b)
		if err := a.m.Do(ctx, &b); err != nil {
			return fmt.Errorf("clear announcement: %w", err)
		}
		return nil
	}
	body, plan, picks, ok := a.planRecord(h)
	if !ok {
		// No held block is large enough (or they are too scattered): claim a run of chunks
		// for the record. It is then one of the blocks the allocator holds, and is picked.
		need := uint64(len(encodeBody(h))) + prefixFixed + 2*descLen + 64
		err := a.claimForRecord(ctx, need)
		if errors.Is(err, farmem.ErrNoSpace) {
			// The heaps are exhausted: make room from what the allocator holds (see roomForRecord).
			if h, ok = a.roomForRecord(ctx, withdraw); ok {
				err = nil
			}
		}
		if err != nil {
			var b farmem.Batch
			withdraw(&b)
			_ = a.m.Do(ctx, &b)
			return fmt.Errorf("hand over: %d arenas and %d retired blocks are lost: %w", len(h.arenas), len(h.retired), err)
		}
		h = a.snapshot()
		if body, plan, picks, ok = a.planRecord(h); !ok {
			return fmt.Errorf("hand over: no layout for a %d-byte record (a bug): %w", len(body), farmem.ErrNoSpace)
		}
	}
	prefix := encodePrefix(uint64(a.id), plan.segs, body, 0)
	rec := append(prefix, body...)
	for _, p := range picks {
		// The blocks may have held atomic words of earlier owners; the record is plain data.
		forgetAtomic(a.m, p.addr, p.size)
	}
	var b farmem.Batch
	hn := min(plan.read, uint64(len(rec)))
	b.Write(plan.head, rec[:hn])
	pos := plan.read
	for _, s := range plan.segs {
		b.Write(s.addr, rec[pos:pos+s.n])
		pos += s.n
	}
	withdraw(&b)
	word := plan.word()
	if a.rep != nil {
		// Replicated handover words: the record first, then the words on a majority.
		if err := a.m.Do(ctx, &b); err != nil {
			return fmt.Errorf("hand over: write record: %w", err)
		}
		return a.publishRep(ctx, plan.head, word)
	}
	ip := b.CAS(a.handAddr, 0, word)
	if err := a.m.Do(ctx, &b); err != nil {
		return fmt.Errorf("hand over: write record: %w", err)
	}
	prev, _ := b.Result(ip)
	// The word holds an older record nobody adopted (another allocator of this client id
	// closed meanwhile, or a New could not read it): chain onto it. The next word is written,
	// and lands, before the CAS that publishes it.
	next := make([]byte, 8)
	for i := 0; prev != 0; i++ {
		if i == maxChain {
			return fmt.Errorf("hand over: the handover word keeps changing: %w", farmem.ErrInvalid)
		}
		binary.LittleEndian.PutUint64(next, prev)
		if err := a.m.Write(ctx, plan.head.Add(offNext), next); err != nil {
			return fmt.Errorf("hand over: chain record: %w", err)
		}
		got, err := a.m.CAS(ctx, a.handAddr, prev, word)
		if err != nil {
			return fmt.Errorf("hand over: publish record: %w", err)
		}
		if got == prev {
			break
		}
		prev = got
		if prev == 0 {
			// Adopted meanwhile: unchain and publish alone.
			if err := a.m.Write(ctx, plan.head.Add(offNext), make([]byte, 8)); err != nil {
				return fmt.Errorf("hand over: unchain record: %w", err)
			}
			if got, err = a.m.CAS(ctx, a.handAddr, 0, word); err != nil {
				return fmt.Errorf("hand over: publish record: %w", err)
			}
			prev = got
		}
	}
	a.stats.HandedOver++
	return nil
}

// claimForRecord claims a run of chunks of at least need bytes, for the record, on the
// preferred node first; it becomes a free run of the allocator's.
func (a *Allocator) claimForRecord(ctx context.Context, need uint64) error {
	var errs []error
	for i := range a.nodes {
		ar := a.arenas[a.nodes[(a.pref+i)%len(a.nodes)]]
		n := ar.chunksFor(need)
		off, err := ar.claim(ctx, a.m, n, false)
		if err == nil {
			ar.large[n] = append(ar.large[n], off)
			return nil
		}
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// span is a byte range of one node (node 0: the symmetric area).
type span struct{ lo, hi uint64 }

// adopt takes over the record chain named by this client's handover word w (New's adoption),
// then sheds what it adopted beyond its own needs (shed).
func (a *Allocator) adopt(ctx context.Context, w uint64, hdrs map[farmem.NodeID]Header) error {
	if err := a.adoptChain(ctx, a.handAddr, a.id, w, hdrs, &a.adoption); err != nil {
		return err
	}
	if a.adoption.Records > 0 {
		a.shed(ctx)
	}
	return nil
}

// shed gives back, after an adoption, what a Reclaim would: it rebuilds whole chunks from the
// free blocks it holds (no verb) and pushes those beyond keepSpares per node onto the nodes'
// pools (a round trip per node that has any). Close hands free blocks over as they are, so a
// record can hold much of a heap, uncoalesced (a store's clients gathered into one before it
// closed, say); without this its adopter would hold all of it privately while allocators of
// other ids run out. A push that fails leaves its chunks held, as Reclaim's does.
func (a *Allocator) shed(ctx context.Context) {
	_ = a.giveBack(ctx, keepSpares, rebuildDue)
}

// adoptChain takes over the record chain that client id published in its handover word at
// (w, as read): it clears the word with a CAS in the batch that reads the head (so two
// allocators, of that id or any other, cannot both adopt), then reads, validates and adopts
// each record, reporting into ad. hdrs are headers read since the records were published.
func (a *Allocator) adoptChain(ctx context.Context, at farmem.Addr, id farmem.ClientID, w uint64, hdrs map[farmem.NodeID]Header, ad *Adoption) error {
	seen := map[farmem.NodeID][]span{}
	t := a.m.Topology()
	for first := true; w != 0; first = false {
		if ad.Records >= maxChain {
			ad.Err = fmt.Errorf("alloc: more than %d chained handover records: %w", maxChain, ErrBadHandover)
			return nil
		}
		head, read := unpackWord(w)
		// A word naming no memory would make the whole batch fail, the CAS with it: such a
		// word is cleared alone.
		valid := inNode(t, head, read)
		var b farmem.Batch
		ic := -1
		if first && a.rep == nil { // replicated words were taken already (takeRep)
			ic = b.CAS(at, w, 0)
		}
		buf := make([]byte, read)
		if valid {
			b.Read(head, buf)
		}
		var err error
		if len(b.Ops) > 0 {
			err = a.m.Do(ctx, &b)
		}
		if ic >= 0 {
			prev, cerr := b.Result(ic)
			if cerr != nil {
				return fmt.Errorf("alloc: take handover record: %w", cerr)
			}
			if prev != w {
				return nil // another allocator took it
			}
		}
		if !valid {
			ad.Err = fmt.Errorf("alloc: handover word %#x names no memory: %w", w, ErrBadHandover)
			return nil
		}
		if err != nil {
			a.putBack(ctx, at, w, err, ad)
			return nil
		}
		rh, err := decodeHead(buf)
		if err != nil {
			ad.Err = err
			return nil
		}
		var sb farmem.Batch
		for _, s := range rh.segs {
			if !inNode(t, s.addr, s.n) {
				ad.Err = fmt.Errorf("alloc: handover segment %v of %d bytes is outside memory: %w", s.addr, s.n, ErrBadHandover)
				return nil
			}
			p := make([]byte, s.n)
			sb.Read(s.addr, p)
		}
		if len(sb.Ops) > 0 {
			if err := a.m.Do(ctx, &sb); err != nil {
				a.putBack(ctx, at, w, err, ad)
				return nil
			}
			for _, op := range sb.Ops {
				buf = append(buf, op.Buf...)
			}
		}
		rh, st, err := decodeRecord(buf, int(read))
		if err == nil && rh.client != uint64(id) {
			err = fmt.Errorf("alloc: handover record of client %d, not %d: %w", rh.client, id, ErrBadHandover)
		}
		if err == nil {
			err = a.checkHandover(st, hdrs, seen)
		}
		if err != nil {
			ad.Err = err
			return nil
		}
		a.apply(st, ad)
		ad.Records++
		w = rh.next
	}
	return nil
}

// putBack puts the unread rest of a chain back in the handover word at after a failed read,
// so that a later adoption can take it, reporting into ad.
func (a *Allocator) putBack(ctx context.Context, at farmem.Addr, w uint64, cause error, ad *Adoption) {
	ad.Err = fmt.Errorf("alloc: read handover record: %w", cause)
	if errors.Is(cause, farmem.ErrOutOfRange) || errors.Is(cause, farmem.ErrMisaligned) {
		ad.Err = fmt.Errorf("alloc: read handover record: %w: %w", cause, ErrBadHandover)
		return
	}
	if a.rep != nil {
		if !a.putBackRep(ctx, w) {
			ad.Err = fmt.Errorf("%w (and it could not be put back: the record is lost)", ad.Err)
		}
		return
	}
	if prev, err := a.m.CAS(ctx, at, 0, w); err != nil || prev != 0 {
		ad.Err = fmt.Errorf("%w (and it could not be put back: the record is lost)", ad.Err)
	}
}

// inNode reports whether n bytes at addr lie inside a memory node of t.
func inNode(t *farmem.Topology, addr farmem.Addr, n uint64) bool {
	info, ok := t.Node(addr.Node())
	return ok && info.Role == farmem.RoleMemory && addr.Offset() <= info.Size && n <= info.Size-addr.Offset()
}

// bounds returns where blocks of arena ar may lie: from its base to the lower of its limit and
// the bump word New read (nothing past it was ever claimed).
func (a *Allocator) bounds(node farmem.NodeID, ar *arena, hdrs map[farmem.NodeID]Header) (uint64, uint64) {
	if node == 0 {
		bump := hdrs[a.home].SymBump
		if a.rep != nil {
			for _, n := range a.rep.nodes {
				bump = max(bump, hdrs[n].SymBump)
			}
		}
		return ar.base, min(ar.limit, bump)
	}
	return ar.base, min(ar.limit, hdrs[node].Bump)
}

// checkHandover validates a decoded record against the headers: every block of the
// allocator's arenas inside its heap below the bump word, aligned as the arena hands it out, and
// no two overlapping (nor overlapping those of earlier records of the chain, in seen). Arenas of
// nodes outside the allocator's set must be memory nodes; they are relayed unchecked.
func (a *Allocator) checkHandover(h *handover, hdrs map[farmem.NodeID]Header, seen map[farmem.NodeID][]span) error {
	t := a.m.Topology()
	spans := map[farmem.NodeID][]span{}
	bad := func(format string, args ...any) error {
		return fmt.Errorf("alloc: handover: %s: %w", fmt.Sprintf(format, args...), ErrBadHandover)
	}
	arenaOf := func(node farmem.NodeID) (*arena, bool, error) {
		if node == 0 {
			return a.sym, false, nil
		}
		if ar := a.arena(node); ar != nil {
			return ar, false, nil
		}
		if info, ok := t.Node(node); !ok || info.Role != farmem.RoleMemory {
			return nil, false, bad("%v is not a memory node", node)
		}
		return nil, true, nil
	}
	for i := range h.arenas {
		s := &h.arenas[i]
		ar, foreign, err := arenaOf(s.node)
		if err != nil {
			return err
		}
		if foreign {
			continue
		}
		lo, hi := a.bounds(s.node, ar, hdrs)
		add := func(what string, off, n, align uint64) error {
			if off%align != 0 || off < lo || off > hi || n > hi-off || n == 0 {
				return bad("%s %v+%#x of %d bytes is not a block of [%#x, %#x)", what, s.node, off, n, lo, hi)
			}
			spans[s.node] = append(spans[s.node], span{off, off + n})
			return nil
		}
		if s.cur != 0 || s.end != 0 {
			if s.cur > s.end || s.end-s.cur > ar.chunk || s.end%minBlock != 0 {
				return bad("carve range [%#x, %#x)", s.cur, s.end)
			}
			if err := add("chunk tail", s.cur, s.end-s.cur, minBlock); err != nil {
				return err
			}
		}
		for _, o := range s.spare {
			if err := add("spare chunk", o, ar.chunk, ar.chunk); err != nil {
				return err
			}
		}
		for _, r := range s.large {
			if r.n > (ar.limit-ar.base)/ar.chunk {
				return bad("run of %d chunks", r.n)
			}
			if err := add("run", r.off, r.n*ar.chunk, ar.chunk); err != nil {
				return err
			}
		}
		for _, r := range s.ranges {
			if err := add("range", r.off, r.n, minBlock); err != nil {
				return err
			}
			if r.n%minBlock != 0 {
				return bad("range of %d bytes", r.n)
			}
		}
		for c, runs := range s.small {
			if c >= ar.nClasses {
				return bad("class %d in an arena of %d classes", c, ar.nClasses)
			}
			for _, r := range runs {
				if r.n > (ar.limit-ar.base)/classSizes[c] {
					return bad("run of %d blocks", r.n)
				}
				if err := add("blocks", r.off, r.n*classSizes[c], minBlock); err != nil {
					return err
				}
			}
		}
	}
	for _, r := range h.retired {
		ar, foreign, err := arenaOf(r.node)
		if err != nil {
			return err
		}
		if foreign {
			continue
		}
		if err := ar.check(r.off, r.size); err != nil {
			return bad("retired block: %v", err)
		}
		lo, hi := a.bounds(r.node, ar, hdrs)
		n := ar.blockSize(r.size)
		if r.off < lo || r.off > hi || n > hi-r.off {
			return bad("retired block %v+%#x beyond the bump word", r.node, r.off)
		}
		spans[r.node] = append(spans[r.node], span{r.off, r.off + n})
	}
	for _, node := range slices.Sorted(maps.Keys(spans)) {
		all := append(slices.Clone(seen[node]), spans[node]...)
		slices.SortFunc(all, func(x, y span) int { return cmpU(x.lo, y.lo) })
		for i := 1; i < len(all); i++ {
			if all[i].lo < all[i-1].hi {
				return bad("blocks %v+[%#x, %#x) and [%#x, %#x) overlap", node, all[i-1].lo, all[i-1].hi, all[i].lo, all[i].hi)
			}
		}
		seen[node] = all
	}
	return nil
}

// apply adopts a validated record: free blocks to the free lists, tails as current chunks (or
// freed, if the arena has one), ranges to spares and free lists, retired blocks with their
// tags; what is on nodes outside the allocator's set is kept to be relayed at Close. It counts
// what it adopted into ad.
func (a *Allocator) apply(h *handover, ad *Adoption) {
	for i := range h.arenas {
		s := &h.arenas[i]
		ar := a.sym
		if s.node != 0 {
			ar = a.arena(s.node)
		}
		if ar == nil {
			a.foreign = append(a.foreign, s.clone())
			ad.Relayed++
			continue
		}
		if s.end != 0 {
			if ar.end == 0 || ar.cur == ar.end {
				ar.cur, ar.end = s.cur, s.end
			} else {
				ar.salvage(s.cur, s.end)
			}
			ad.Blocks++
			ad.Bytes += s.end - s.cur
		}
		for _, o := range s.spare {
			ar.spare = append(ar.spare, o)
			ad.Blocks++
			ad.Bytes += ar.chunk
		}
		for _, r := range s.large {
			ar.large[r.n] = append(ar.large[r.n], r.off)
			ad.Blocks++
			ad.Bytes += r.n * ar.chunk
		}
		for _, r := range s.ranges {
			ar.freeRange(r.off, r.off+r.n)
			ad.Blocks++
			ad.Bytes += r.n
		}
		for c, runs := range s.small {
			for _, r := range runs {
				for k := range r.n {
					ar.push(r.off+k*classSizes[c], c)
				}
				ad.Blocks += int(r.n)
				ad.Bytes += r.n * classSizes[c]
			}
		}
	}
	for _, r := range h.retired {
		ar := a.sym
		if r.node != 0 {
			ar = a.arena(r.node)
		}
		if ar == nil {
			a.foreignRetired = append(a.foreignRetired, r)
			ad.Relayed++
			continue
		}
		a.ep.retired = append(a.ep.retired, retired{node: r.node, sym: r.node == 0, off: r.off, size: r.size, tag: r.tag})
		ad.Retired++
	}
}

// freeRange frees the byte range [from, to) (16-aligned): its whole chunks become a spare
// chunk or a free run, the rest is cut into blocks of the largest classes that fit.
func (ar *arena) freeRange(from, to uint64) {
	c0 := alignUp(from-ar.base, ar.chunk) + ar.base
	c1 := (to-ar.base)&^(ar.chunk-1) + ar.base
	if c0 >= c1 {
		ar.salvage(from, to)
		return
	}
	ar.salvage(from, c0)
	switch n := (c1 - c0) / ar.chunk; n {
	case 1:
		ar.spare = append(ar.spare, c0)
	default:
		ar.large[n] = append(ar.large[n], c0)
	}
	ar.salvage(c1, to)
}
