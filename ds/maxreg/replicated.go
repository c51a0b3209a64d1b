package maxreg

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/farmem/farmem/alloc"
	"github.com/farmem/farmem/alloc/nodearea"
	"github.com/farmem/farmem/farmem"
)

// ErrNoQuorum: fewer than a majority of a replicated register's nodes answered. It wraps
// farmem.ErrNodeDown, so the operation's outcome is unknown (lincheck.Classify treats it so).
var ErrNoQuorum = fmt.Errorf("maxreg: no majority of replicas answered: %w", farmem.ErrNodeDown)

// ErrContended: a write's tag was not installed at a majority within its bound of rounds
// (MaxInstallRounds and Params.Lease: writers sharing its metadata word kept moving it). It
// wraps ErrNoQuorum, so the write's outcome is unknown (it may be installed on some replicas).
var ErrContended = fmt.Errorf("maxreg: metadata word kept moving: %w", ErrNoQuorum)

// MaxInstallRounds is how many rounds a replicated write (or write-back) posts, at least,
// before it may give up with ErrContended: it gives up once it has posted that many and run
// for longer than Params.Lease. A writer with a metadata word of its own needs at most two.
const MaxInstallRounds = 16

// ReplicatedOptions configure a Replicated handle.
type ReplicatedOptions struct {
	// Refresher, if set, writes in-place copies and VERIFIED marks in the background on its
	// own client (a goroutine from Runtime.Go); if nil, the handle posts them unsignaled on its
	// own client (no round trip).
	Refresher *Refresher
	// EarlyReuse lets the writer reuse a superseded buffer at once when none has aged the
	// reuse delay, instead of sleeping until one has: the writer never waits for a buffer. A
	// read begun before the supersede that chases the buffer within its lease may then find
	// it reused and start over, so reads stay wait-free (under the synchrony of "Buffers")
	// only while each writer makes at most Params.Slots writes per ReuseDelay, and are
	// lock-free above that rate. Safety and durability do not depend on it: a buffer is only
	// ever reused once its tag is superseded, and only by its own writer.
	EarlyReuse bool
	// Lanes is the process's shared lane state, required for a register with per-node lanes
	// (Params.PerNode) and ignored otherwise: every handle of the process on such a register
	// must be given the same Lanes.
	Lanes *Lanes
}

// ReplicatedStats are a Replicated handle's counters.
type ReplicatedStats struct {
	// Writes counts writes (and write-backs) that reached a majority; Rounds the batches they
	// posted (a write already held by a majority posts none; a lost CAS on a shared metadata
	// word costs another round).
	Writes, Rounds uint64
	// Reads counts reads that returned; Empty those that found the register empty; InPlace
	// those whose value came from an in-place copy; Chased those that read an out-of-place
	// buffer; Retries the reads that started over (every buffer they chased had been
	// reused); LeaseRestarts those that started over because the lease ran out before a verb
	// that depended on the tag read (both also count a WriteRead's read half that fell back to
	// a full read for those reasons); WriteBacks the reads whose write-back posted a batch.
	Reads, Empty, InPlace, Chased, Retries, LeaseRestarts, WriteBacks uint64
	// Stragglers counts replica replies handled by completion hooks, after the operation
	// that posted them had returned.
	Stragglers uint64
	// RecycleWaits counts writes (and write-backs' copies) that waited for a buffer to become
	// reusable, RecycleWait their total wait (on the client's clock); RecycleReads the reads a
	// write made to learn which of its buffers were superseded. Copies counts the write-backs
	// that copied another writer's record into a buffer of this handle's lane; CopyChases the
	// reads that found a tag's record only in such a copy.
	// EarlyReuses counts buffers reused before their reuse delay (ReplicatedOptions.EarlyReuse).
	RecycleWaits, RecycleReads, Copies, CopyChases, EarlyReuses uint64
	RecycleWait                                                 time.Duration
	// LaneLatches counts the times the handle took its node's lane latch (per-node lanes);
	// LaneWaits the rounds a write skipped a replica, or waited, because a record write of the
	// node's into the same buffer was still in flight there.
	LaneLatches, LaneWaits uint64
}

// Replicated is one client's handle on a reliable max register (the paper's Appendix A) over
// N = 2f+1 In-n-Out registers, one per memory node, formatted with one header (FormatReplicated
// or CreateReplicated): it survives any f of those nodes crashing or hanging. See the package
// doc, "Replication", for the protocol and "Buffers" for the recycling it does. A handle
// belongs to one client's goroutine; its completion hooks (which run on the fabric's runtime)
// update its per-replica caches under a mutex that no verb is ever issued under.
type Replicated struct {
	m      farmem.Memory
	rt     farmem.Runtime
	addrs  []farmem.Addr
	n, maj int
	l      layout
	h      header
	seed   uint64
	id     farmem.ClientID
	writer bool
	wi     uint64 // this client's metadata word index
	own    bool   // no other writer maps to word wi (OwnWord)
	reuse  time.Duration
	opts   ReplicatedOptions
	mates  [][]farmem.ClientID // per metadata word: the writers that map to it

	// ls is the writer's lane state: the handle's own, or, with per-node lanes, its node's,
	// shared through ReplicatedOptions.Lanes (mu is then the lane's mutex too).
	ls    *laneState
	lanes *Lanes
	area  *nodearea.Area // per-node lanes: the node's shared area, where the latch word is
	held  bool           // per-node lanes: the handle holds its node's lane latch (HoldLane)

	mu    *sync.Mutex // guards known, ev and ls's marked fields; never held across a verb
	known []Tag       // per replica: the largest tag the replica is known to hold
	ev    []evidence  // per replica: what counts toward a majority holding a tag (evidence.go)

	deferWB   bool       // inside WriteReadDeferred: hand the write-back over instead
	pendingWB *WriteBack // the write-back handed over

	stats      ReplicatedStats // the owner goroutine's counters
	stragglers atomic.Uint64   // counted by completion hooks
	closed     bool
}

// CreateReplicated allocates a register with p on each of nodes (2f+1 distinct memory nodes)
// with a, formats them with one header (FormatReplicated) and returns their addresses, in the
// order of nodes: what OpenReplicated takes.
func CreateReplicated(ctx context.Context, m farmem.Memory, a *alloc.Allocator, nodes []farmem.NodeID, p Params) ([]farmem.Addr, error) {
	p, err := p.withDefaults()
	if err != nil {
		return nil, err
	}
	addrs := make([]farmem.Addr, len(nodes))
	for i, n := range nodes {
		if addrs[i], err = a.AllocOn(ctx, n, layoutOf(p).size, 64); err != nil {
			return nil, fmt.Errorf("maxreg: allocating %d bytes on %v: %w", layoutOf(p).size, n, err)
		}
	}
	return addrs, FormatReplicated(ctx, m, addrs, p)
}

// FormatReplicated formats a register with p at each of addrs (Size(p) bytes each, on
// distinct memory nodes, an odd number of them), all with one header: the same base time and
// hash nonce, so that a record is byte-for-byte the same on every replica and a client can
// copy one to another replica verbatim. FormatRoundTrips per replica, one after the other.
func FormatReplicated(ctx context.Context, m farmem.Memory, addrs []farmem.Addr, p Params) error {
	p, err := p.withDefaults()
	if err != nil {
		return err
	}
	if err := checkReplicas(addrs); err != nil {
		return err
	}
	rt := m.Runtime()
	h := header{p: p, base: rt.Now(), nonce: rt.Rand().Uint64()}
	for _, a := range addrs {
		if err := format(ctx, m, a, h); err != nil {
			return err
		}
	}
	return nil
}

func checkReplicas(addrs []farmem.Addr) error {
	if len(addrs) == 0 || len(addrs)%2 == 0 || len(addrs) > 15 {
		return fmt.Errorf("%w: %d replicas, want an odd number up to 15", ErrBadParams, len(addrs))
	}
	seen := map[farmem.NodeID]bool{}
	for _, a := range addrs {
		if seen[a.Node()] {
			return fmt.Errorf("%w: two replicas on %v", ErrBadParams, a.Node())
		}
		seen[a.Node()] = true
	}
	return nil
}

// OpenReplicated returns m's handle on the replicated register at addrs. It reads the headers
// (they must agree on a majority), then each replica's metadata words, in-place record and the
// identity words of the client's own lane, so that its timestamps continue above every one an
// earlier client of its id left. OpenReplicatedRoundTrips.
func OpenReplicated(ctx context.Context, m farmem.Memory, addrs []farmem.Addr, opts ReplicatedOptions) (*Replicated, error) {
	if err := checkReplicas(addrs); err != nil {
		return nil, err
	}
	n := len(addrs)
	maj := n/2 + 1
	hbs := make([][]byte, n)
	b := new(farmem.Batch)
	for i, a := range addrs {
		hbs[i] = make([]byte, hdrUsed)
		b.Read(a, hbs[i])
	}
	p := m.Post(ctx, b)
	if err := p.WaitNodes(ctx, maj); err != nil {
		return nil, fmt.Errorf("maxreg: open: %w: %w", ErrNoQuorum, err)
	}
	var h header
	var hb []byte
	for i := range addrs {
		if !p.NodeDone(addrs[i].Node()) {
			continue
		}
		if hb != nil && string(hb) != string(hbs[i]) {
			return nil, fmt.Errorf("%w: replicas' headers differ", ErrNotFormatted)
		}
		hb = hbs[i]
	}
	h, err := decodeHeader(hb)
	if err != nil {
		return nil, fmt.Errorf("maxreg: open: %w", err)
	}
	l := layoutOf(h.p)
	topo := m.Topology()
	r := &Replicated{m: m, rt: m.Runtime(), addrs: append([]farmem.Addr(nil), addrs...), n: n, maj: maj, l: l, h: h,
		seed: hashSeed ^ h.nonce, id: writerOf(topo, m.Info().ID, h.p.PerNode), opts: opts, known: make([]Tag, n), ev: make([]evidence, n)}
	if h.p.PerNode {
		if opts.Lanes == nil {
			return nil, fmt.Errorf("%w: a register with per-node lanes needs ReplicatedOptions.Lanes", ErrBadParams)
		}
		r.lanes = opts.Lanes
		r.ls = opts.Lanes.lane(addrs[0], h.nonce, m.Info().Node, h.p.Slots, n)
	} else {
		r.ls = newLaneState(h.p.Slots, n)
	}
	r.mu = &r.ls.mu
	r.writer = r.id >= 1 && int(r.id) <= h.p.Writers
	r.wi = r.wordFor(r.id)
	// A per-node lane's word is shared by the node's clients, whose CASes from different
	// clients are not ordered: it is never the handle's own.
	r.own = r.writer && !h.p.PerNode && ownWord(topo, r.id, h.p.Writers, h.p.Words)
	r.reuse = h.p.Lease + h.p.Skew
	r.mates = make([][]farmem.ClientID, h.p.Words)
	for c := 1; c <= h.p.Writers; c++ {
		w := r.wordFor(farmem.ClientID(c))
		r.mates[w] = append(r.mates[w], farmem.ClientID(c))
	}
	// The metadata words and the lane's identity words of every replica.
	b = new(farmem.Batch)
	metas := make([][]byte, n)
	ids := make([][][]byte, n)
	for i, a := range addrs {
		metas[i] = make([]byte, 8*h.p.Words)
		b.Read(a+metaOff, metas[i])
		if r.writer {
			lane := l.slotOff(MakeTag(0, r.id, false))
			for s := range uint64(h.p.Slots) {
				w := make([]byte, 8)
				b.Read(a+farmem.Addr(lane+s*l.recSize+16), w)
				ids[i] = append(ids[i], w)
			}
		}
	}
	p = m.Post(ctx, b)
	if err := p.WaitNodes(ctx, maj); err != nil {
		return nil, fmt.Errorf("maxreg: open: %w: %w", ErrNoQuorum, err)
	}
	r.absorbOpen(p, metas, ids)
	if err := p.Then(func(p *farmem.Pending) { r.absorbOpen(p, metas, ids) }); err != nil {
		return nil, err
	}
	r.mergeLate()
	return r, nil
}

// mergeLate folds what Open's stragglers reported of the lane into last and slotTag.
// Only the owner goroutine calls it (Open, and stamp before it picks a timestamp).
func (r *Replicated) mergeLate() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.ls.last = max(r.ls.last, r.ls.lateLast)
	for s, t := range r.ls.lateSlot {
		if t > r.ls.slotTag[s] {
			r.ls.slotTag[s], r.ls.freeAt[s] = t, 0
		}
	}
}

// absorbOpen takes in what Open's second batch returned from the replicas done so far; the
// writer's own timestamps go to lateLast and lateSlot, for mergeLate.
func (r *Replicated) absorbOpen(p *farmem.Pending, metas [][]byte, ids [][][]byte) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for i, a := range r.addrs {
		if !p.NodeDone(a.Node()) {
			continue
		}
		for w := range r.h.p.Words {
			t := Tag(binary.LittleEndian.Uint64(metas[i][8*w:]))
			r.known[i] = max(r.known[i], t)
			if uint64(w) == r.wi {
				r.ls.word[i] = max(r.ls.word[i], t)
			}
			if t.Client() == r.id {
				r.ls.lateLast = max(r.ls.lateLast, t.TS())
			}
		}
		for s, w := range ids[i] {
			t := Tag(binary.LittleEndian.Uint64(w))
			if t.Client() == r.id && t.TS() > 0 {
				r.ls.lateLast = max(r.ls.lateLast, t.TS())
			}
			// Any identity (a copy of another writer's record too) keeps the slot until a
			// larger tag is known at a majority.
			if t.Client() != 0 {
				r.ls.lateSlot[s] = max(r.ls.lateSlot[s], t)
			}
		}
	}
}

// Addrs returns the replicas' addresses.
func (r *Replicated) Addrs() []farmem.Addr { return r.addrs }

// Params returns the register's parameters.
func (r *Replicated) Params() Params { return r.h.p }

// Quorum returns the majority a write or read waits for: f+1 of the 2f+1 replicas.
func (r *Replicated) Quorum() int { return r.maj }

// Stats returns the handle's counters.
func (r *Replicated) Stats() ReplicatedStats {
	s := r.stats
	s.Stragglers = r.stragglers.Load()
	return s
}

// Known returns, per replica, the largest tag this handle knows the replica holds.
func (r *Replicated) Known() []Tag {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Tag(nil), r.known...)
}

// Close releases the handle (no verb). Idempotent; later calls fail with ErrClosed.
func (r *Replicated) Close() error {
	r.closed = true
	return nil
}

func (r *Replicated) ticks() uint64 {
	d := r.rt.Now().Sub(r.h.base)
	if d < 0 {
		return 0
	}
	return uint64(d / r.h.p.Tick)
}

// Ticks returns the client's clock in the register's timestamp ticks: what a write's
// timestamp starts from.
func (r *Replicated) Ticks() uint64 { return r.ticks() }

// heldBy returns how many replicas count as holding v or more beside answers to a batch
// built at ref (holds).
func (r *Replicated) heldBy(v Tag, ref farmem.Time) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	have := 0
	for i := range r.known {
		if r.holds(i, v, ref) {
			have++
		}
	}
	return have
}

// maxKnown returns the largest tag any replica counts as holding beside the answers to a
// batch built at ref (holds): a read returns it, so never a tag only a replica's lost memory
// held (a read chasing such a tag would start over forever).
func (r *Replicated) maxKnown(ref farmem.Time) Tag {
	r.mu.Lock()
	defer r.mu.Unlock()
	var v Tag
	for i := range r.ev {
		if e := r.ev[i]; r.holds(i, e.val, ref) {
			v = max(v, e.val)
		}
	}
	return v
}

// install is one replica's part of a posted batch: the indices of its ops (-1 if absent),
// the word it expected and the buffer its read fills.
type install struct {
	write, cas, read int
	expect           Tag
	probe            bool // the CAS only tests the word (see casOp): it installs nothing
	buf              []byte
	seen             bool        // the operation absorbed this replica's results itself
	at               farmem.Time // when the batch was built: its answers' evidence (evidence.go)
}

// casOp appends to b the CAS of a handle's metadata word at addr that raises it from expect
// to t, and reports whether it is a probe instead. The compare ignores the VERIFIED bit (a
// concurrent mark must not make it fail). A CAS never stores a value below the one it
// expects, which is what keeps a word a max register: when expect is at least t (it is the
// tag of this handle's own CAS still in flight to that word, a larger tag than the one it
// installs now, as when Safe-Guess's guess lies below a tag the handle just wrote back), the
// CAS stores back the word it found (its VERIFIED bit kept), so it changes nothing and tells
// only whether the word holds expect, that is whether the replica holds at least t.
func casOp(b *farmem.Batch, addr farmem.Addr, expect, t Tag) (int, bool) {
	if t > expect {
		return b.MaskedCAS(addr, uint64(expect), ^uint64(VerifiedBit), uint64(t), ^uint64(0)), false
	}
	return b.MaskedCAS(addr, uint64(expect), ^uint64(VerifiedBit), uint64(expect), ^uint64(VerifiedBit)), true
}

// absorb takes in the results of the replicas of b that are complete (every signaled op done,
// none failed): the CAS's word and the read's words raise known and word. It is idempotent, so
// both the operation and the completion hook call it. It returns, per replica, whether the CAS
// installed t (nil if want is nil).
func (r *Replicated) absorb(p *farmem.Pending, b *farmem.Batch, parts []install, t Tag, installed []bool, hook bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for i, a := range r.addrs {
		pt := &parts[i]
		if pt.cas >= 0 && p.OpDone(pt.cas) {
			if _, err := b.Result(pt.cas); err != nil {
				r.ls.posted[i] = 0 // failed (maybe unapplied): expect the word seen next time
				r.ls.unsure[i] = true
			}
		}
		if (pt.cas < 0 && pt.read < 0) || !p.NodeDone(a.Node()) {
			continue
		}
		if hook && !pt.seen {
			r.stragglers.Add(1)
		}
		if !hook {
			pt.seen = true
		}
		r.ls.unsure[i] = false // the word's value is seen below (a failed op never applies later)
		if pt.cas >= 0 {
			prev, _ := b.Result(pt.cas)
			switch {
			case Tag(prev)&^VerifiedBit != pt.expect&^VerifiedBit:
				// Expected wrongly: the next CAS expects the word seen. The operation's own
				// batch is the newest this handle posted to the replica, so what it returns is
				// the word's current value, taken as is even if below what the handle believed
				// (a hook's, from an older batch, only raises the belief).
				r.ls.posted[i] = 0
				if hook {
					r.ls.word[i] = max(r.ls.word[i], Tag(prev))
				} else {
					r.ls.word[i] = Tag(prev)
				}
				r.raise(i, Tag(prev), pt.at)
			case pt.probe:
				// The word held expect, at least t: the replica holds t or more.
				r.ls.word[i] = max(r.ls.word[i], Tag(prev))
				r.raise(i, Tag(prev), pt.at)
			default:
				r.ls.word[i] = max(r.ls.word[i], t)
				r.raise(i, t, pt.at)
				if installed != nil {
					installed[i] = true
				}
			}
		}
		if pt.read >= 0 {
			words := r.h.p.Words
			var top Tag
			for w := range words {
				top = max(top, Tag(binary.LittleEndian.Uint64(pt.buf[8*w:])))
			}
			r.raise(i, top, pt.at)
			r.ls.word[i] = max(r.ls.word[i], Tag(binary.LittleEndian.Uint64(pt.buf[8*r.wi:])))
		}
	}
}

// quorumErr wraps a failed quorum wait.
func quorumErr(op string, err error) error {
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("maxreg: %s: %w", op, err)
	}
	return fmt.Errorf("maxreg: %s: %w: %w", op, ErrNoQuorum, err)
}

// innerWrite is the paper's inner_write(t): until a majority of replicas is known to hold t or
// more, it posts to every replica not known to (rec, t's sealed record, into t's buffer, then
// a masked CAS of this client's word from its last seen value to t) and waits for as many more
// replicas as the majority needs; the others finish through the batch's completion hook,
// which records what they return. With read set, the first round also reads every replica's
// metadata words and in-place record (the parts it returns), whatever the caches say. It
// returns the first round's parts (nil if it posted none), the largest tag counted beside
// that round's answers (maxKnown at the time its batch was built; read only) and, per
// replica, whether this call's CAS installed t there.
//
// A round asks every replica not counted as holding t beside that round's own batch (the
// answers a write counts are paired within Params.Lease of each other: see evidence), and
// waits for as many as the majority then needs, so a client descheduled for longer than the
// lease between rounds still completes in the round after the last lost CAS. A round that
// skipped a replica as busy (per-node lanes) and cannot complete without it goes around to
// ask it once free (waitRound).
//
// Rounds are bounded. A round that posts to a replica learns its word's current value, so
// the next one installs there unless a writer sharing the word moved it meanwhile (with a word
// of its own, a write takes at most two rounds); a write that has posted MaxInstallRounds
// rounds and run longer than Params.Lease (on the client's clock, from its first round) gives
// up with ErrContended, its outcome unknown. A write-back (lease set: when the read that
// returned t began) posts no round past that read's lease: it returns errRestart instead, as
// the read must not write into t's buffer after its lease (see "Buffers").
func (r *Replicated) innerWrite(ctx context.Context, t Tag, rec []byte, read bool, extra func(int, *farmem.Batch), lease *farmem.Time, recOff uint64) ([]install, Tag, *farmem.Pending, []bool, error) {
	installed := make([]bool, r.n)
	var first []install
	var top Tag // read: the largest tag counted beside the first round's answers
	var firstP *farmem.Pending
	recAddr := func(i int) farmem.Addr { return r.addrs[i] + farmem.Addr(recOff) }
	began := r.rt.Now()
	slot := -1 // per-node lanes: the lane's slot rec goes into (see busy)
	if r.h.p.PerNode {
		slot = r.slotOfOff(recOff)
	}
	backoff := time.Microsecond
	// ref: when the batch whose answers the write counts last was built (holds): a write-back
	// pairs them with its read's, an own write with its own rounds'.
	ref := began
	if lease != nil {
		ref = *lease
	}
	for round := 0; ; round++ {
		// next: the build time of the batch this turn may post (read before deciding what it
		// asks, so that what it counts is what the next turn's check will count).
		next := r.rt.Now()
		if round > 0 {
			if lease != nil && next.Sub(*lease) > r.h.p.Lease {
				r.stats.LeaseRestarts++
				return first, top, firstP, installed, errRestart
			}
			if round >= MaxInstallRounds && next.Sub(began) > r.h.p.Lease {
				return first, top, firstP, installed, fmt.Errorf("maxreg: write of %v: %d rounds in %v: %w", t, round, next.Sub(began), ErrContended)
			}
		}
		// at: the time the replicas that need not be asked again must hold t beside. An own
		// write judges them beside the batch it is about to post, whose answers the next
		// turn pairs them with: a replica whose evidence will be older than the lease by then
		// is asked again in this round (and waited for), else a client descheduled longer than
		// the lease between rounds, needing one more answer per round, would let one replica's
		// evidence age out while it waits for another's, round after round. A write-back keeps
		// its read's time: it posts no round past that read's lease (above).
		at := next
		if lease != nil {
			at = ref
		}
		r.mu.Lock()
		have, fresh := 0, 0
		for i := range r.n {
			if r.holds(i, t, ref) {
				have++
			}
			if r.holds(i, t, at) {
				fresh++
			}
		}
		// A CAS expects the word's last value seen, or the tag of this handle's own CAS still
		// in flight to it, if larger: batches to one node apply in posting order, so that CAS
		// applies first (and, on a word of its own, installs its tag).
		expect := append([]Tag(nil), r.ls.word...)
		need := make([]bool, r.n)
		var skipped []int // replicas this round would ask but skips as busy
		avail := 0
		for i := range r.n {
			// Per-node lanes: a record write of another client of the node into the same
			// buffer may still be in flight there, unordered with this one: skip the replica.
			need[i] = !r.holds(i, t, at)
			if need[i] && r.busy(slot, i) {
				need[i] = false
				skipped = append(skipped, i)
			}
			expect[i] = max(expect[i], r.ls.posted[i])
			if need[i] {
				avail++
			}
		}
		r.mu.Unlock()
		if have >= r.maj && !(read && round == 0) {
			return first, top, firstP, installed, nil
		}
		if fresh+avail < r.maj && !(read && round == 0) {
			// Only with per-node lanes: wait for those writes to be done (not a round; a
			// write-back still posts nothing past its lease).
			r.stats.LaneWaits++
			if lease != nil && r.rt.Now().Sub(*lease) > r.h.p.Lease {
				r.stats.LeaseRestarts++
				return first, top, firstP, installed, errRestart
			}
			if err := r.rt.Sleep(ctx, backoff); err != nil {
				return first, top, firstP, installed, fmt.Errorf("maxreg: write: %w", err)
			}
			backoff = min(2*backoff, time.Millisecond)
			round--
			continue
		}
		b := new(farmem.Batch)
		parts := make([]install, r.n)
		ref = next
		for i, a := range r.addrs {
			parts[i] = install{write: -1, cas: -1, read: -1, at: ref}
			if need[i] {
				parts[i].write = b.Write(recAddr(i), rec)
				parts[i].expect = expect[i]
				parts[i].cas, parts[i].probe = casOp(b, a+metaOff+farmem.Addr(8*r.wi), expect[i], t)
			}
			if read && round == 0 {
				parts[i].buf = make([]byte, 8*uint64(r.h.p.Words)+r.l.recSize)
				parts[i].read = b.Read(a+metaOff, parts[i].buf)
				if extra != nil {
					extra(i, b)
				}
			}
		}
		r.stats.Rounds++
		r.mu.Lock()
		for i := range r.n {
			if parts[i].cas >= 0 {
				r.ls.posted[i] = max(r.ls.posted[i], t)
			}
		}
		r.mu.Unlock()
		p := r.m.Post(ctx, b)
		r.mu.Lock()
		r.noteFlight(slot, p, parts)
		r.mu.Unlock()
		if err := p.Then(func(p *farmem.Pending) { r.absorb(p, b, parts, t, nil, true) }); err != nil {
			return nil, 0, nil, installed, err
		}
		k := r.maj
		if !(read && round == 0) {
			k = r.maj - fresh
		}
		if read && round == 0 {
			skipped = nil // the read went to every replica: none is missing from the batch
		}
		err := r.waitRound(ctx, p, k, slot, skipped)
		r.absorb(p, b, parts, t, installed, false)
		if read && round == 0 {
			// The read half's result, taken now: the evidence of these answers is stamped
			// with this batch's build time (ref), which is what it is counted beside; later
			// rounds restamp it, up to a lease or more later.
			first, top, firstP = parts, r.maxKnown(ref), p
		}
		if errors.Is(err, errAskBusy) {
			continue // the next turn asks the replicas skipped, once free
		}
		if err != nil {
			return first, top, firstP, installed, quorumErr("write", err)
		}
	}
}

// errAskBusy: a round that skipped busy replicas goes around to ask them (waitRound).
var errAskBusy = errors.New("maxreg: ask the replicas a round skipped as busy")

// waitRound waits for k replicas of the round posted as p. A round that skipped replicas
// because a record write of the node's into the same buffer was still in flight there
// (skipped, per-node lanes) may have asked only replicas that cannot answer (a node paused or
// dead) while a skipped one, live, would complete the majority: then a quorum the posted
// replicas cannot form is no failure, and neither is a wait longer than Params.Lease (a round
// trip to live replicas is far shorter) once a skipped replica is free. Either way it returns
// errAskBusy, and the write's next turn asks the replicas still missing that are free (waiting
// for them without a round if too few are). Otherwise, and with none skipped, it is
// p.WaitNodes. No verb; with none skipped, no timer either.
func (r *Replicated) waitRound(ctx context.Context, p *farmem.Pending, k, slot int, skipped []int) error {
	if len(skipped) == 0 {
		return p.WaitNodes(ctx, k)
	}
	for {
		wctx, cancel := r.rt.WithTimeout(ctx, r.h.p.Lease)
		err := p.WaitNodes(wctx, k)
		timedOut := wctx.Err() != nil
		cancel()
		switch {
		case err == nil:
			return nil
		case ctx.Err() != nil:
			return err
		case !timedOut:
			// The posted replicas cannot form the quorum; the skipped ones may, once free. Wait
			// for one to be (its write ends within a down timeout) rather than ask again at
			// once: a dead node refuses at once, and the rounds would run out while the
			// skipped replica is still busy.
			if err := r.awaitFree(ctx, slot, skipped); err != nil {
				return err
			}
			return errAskBusy
		}
		r.mu.Lock()
		free := slices.ContainsFunc(skipped, func(i int) bool { return !r.busy(slot, i) })
		r.mu.Unlock()
		if free {
			return errAskBusy
		}
	}
}

// awaitFree sleeps, backing off from 10µs to 1ms, until one of the skipped replicas has no
// record write of the node's in flight into slot's buffer, or ctx ends. No verb.
func (r *Replicated) awaitFree(ctx context.Context, slot int, skipped []int) error {
	backoff := 10 * time.Microsecond
	for {
		r.mu.Lock()
		free := slices.ContainsFunc(skipped, func(i int) bool { return !r.busy(slot, i) })
		r.mu.Unlock()
		if free {
			return nil
		}
		r.stats.LaneWaits++
		if err := r.rt.Sleep(ctx, backoff); err != nil {
			return fmt.Errorf("maxreg: write: %w", err)
		}
		backoff = min(2*backoff, time.Millisecond)
	}
}

// ReuseDelay is how long after a buffer's tag was superseded the writer waits before reusing
// the buffer: Params.Lease + Params.Skew, so that a read that chases the buffer within its
// lease finds its record (see "Buffers" in the package doc).
func (r *Replicated) ReuseDelay() time.Duration { return r.reuse }

// stamp picks this writer's next timestamp, at least minTS and above its last, in a buffer
// it may reuse: one never written, or one whose record's tag was superseded at least the
// reuse delay ago. If no buffer is superseded, it reads the register first (every tag below
// what a read returns is superseded); if the best one is superseded but too recently, it
// sleeps.
func (r *Replicated) stamp(ctx context.Context, minTS uint64) (uint64, error) {
	S := uint64(r.h.p.Slots)
	r.mergeLate()
	r.supersede(r.majorityTag())
	for tries := 0; ; tries++ {
		now := r.rt.Now()
		r.mu.Lock()
		last := r.ls.last
		r.mu.Unlock()
		base := max(last+1, r.ticks(), minTS)
		best, bestAt := -1, farmem.Time(0)
		for k := range S {
			at, ok := r.reusable(int((base + k) % S))
			if ok && (best < 0 || at < bestAt) {
				best, bestAt = int(k), at
				if at <= now {
					break
				}
			}
		}
		switch {
		case best < 0 && tries > 2:
			return 0, fmt.Errorf("maxreg: write: no reusable buffer after reading the register: %w", ErrContended)
		case best < 0:
			r.stats.RecycleReads++
			if _, _, err := r.read(ctx, nil); err != nil {
				return 0, err
			}
		case bestAt > now && !r.opts.EarlyReuse:
			if err := r.wait(ctx, bestAt.Sub(now)); err != nil {
				return 0, err
			}
		default:
			if bestAt > now {
				r.stats.EarlyReuses++
			}
			ts := base + uint64(best)
			if ts > MaxTS {
				return 0, ErrExhausted
			}
			return ts, nil
		}
	}
}

// reusable reports whether slot s may be reused, and from when: never written (0), or its tag
// superseded (then).
func (r *Replicated) reusable(s int) (farmem.Time, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	switch {
	case r.ls.slotTag[s] == 0:
		return 0, true
	case r.ls.freeAt[s] != 0:
		return r.ls.freeAt[s], true
	}
	return 0, false
}

// wait sleeps d for a buffer to become reusable.
func (r *Replicated) wait(ctx context.Context, d time.Duration) error {
	r.stats.RecycleWaits++
	r.stats.RecycleWait += d
	if err := r.rt.Sleep(ctx, d); err != nil {
		return fmt.Errorf("maxreg: write: %w", err)
	}
	return nil
}

// use records that slot s of the lane now holds the record of t.
func (r *Replicated) use(s uint64, t Tag) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.ls.slotTag[s], r.ls.freeAt[s] = Tag(t.identity()), 0
}

// copySlot returns the slot of this handle's lane that a write-back of v copies v's record
// into: one holding v's record already (the same bytes), else one never written or
// superseded the reuse delay ago (waiting for the soonest if none is yet), else false. A slot
// holding a tag not yet superseded is never chosen: a replica whose words hold that tag may
// have no other copy of its record.
func (r *Replicated) copySlot(ctx context.Context, v Tag) (uint64, bool, error) {
	r.supersede(r.majorityTag())
	r.mu.Lock()
	slots := slices.Clone(r.ls.slotTag)
	r.mu.Unlock()
	for s, t := range slots {
		if t != 0 && t == Tag(v.identity()) {
			return uint64(s), true, nil
		}
	}
	best, bestAt := -1, farmem.Time(0)
	for s := range slots {
		if at, ok := r.reusable(s); ok && (best < 0 || at < bestAt) {
			best, bestAt = s, at
		}
	}
	if best < 0 {
		return 0, false, nil
	}
	if now := r.rt.Now(); bestAt > now {
		if r.opts.EarlyReuse {
			r.stats.EarlyReuses++
		} else if err := r.wait(ctx, bestAt.Sub(now)); err != nil {
			return 0, false, err
		}
	}
	return uint64(best), true, nil
}

// majorityTag returns the largest tag a majority of replicas is known to hold.
func (r *Replicated) majorityTag() Tag {
	r.mu.Lock()
	k := append([]Tag(nil), r.known...)
	r.mu.Unlock()
	slices.Sort(k)
	return k[len(k)-r.maj]
}

// supersede records that a majority holds v: every buffer of the lane whose record's tag is
// below v is superseded now, so reusable after the reuse delay. From then on a read that
// begins returns v or more (write-read and read-read monotonicity), so only reads begun
// earlier may still chase the buffer, within their lease.
func (r *Replicated) supersede(v Tag) {
	at := r.rt.Now().Add(r.reuse)
	r.mu.Lock()
	defer r.mu.Unlock()
	for s, t := range r.ls.slotTag {
		if t != 0 && r.ls.freeAt[s] == 0 && t|VerifiedBit < v {
			r.ls.freeAt[s] = at
		}
	}
}

// Write stamps value with the client's next timestamp, VERIFIED, and writes it; see
// WriteFlag.
func (r *Replicated) Write(ctx context.Context, value []byte) (Tag, error) {
	t, _, _, err := r.write(ctx, value, true, 0, false, nil)
	return t, err
}

// WriteFlag writes value with the client's next timestamp (at least max(last+1, now), in a
// reusable buffer) and the VERIFIED bit given: the paper's WRITE, inner_write of the new tag.
// It returns once a majority of replicas holds the tag or a larger one: one round trip
// (ReplicatedWriteRoundTrips), none if a majority was already known to hold a larger tag, one
// more per lost CAS on a shared metadata word. Replicas that had not answered keep going and
// update the handle's caches through the batch's completion hook. An error leaves the write's
// outcome unknown (ErrNoQuorum when a majority could not be reached).
func (r *Replicated) WriteFlag(ctx context.Context, value []byte, verified bool) (Tag, error) {
	t, _, _, err := r.write(ctx, value, verified, 0, false, nil)
	return t, err
}

// WriteAbove is WriteFlag with a timestamp of at least minTS: Safe-Guess's re-execution of a
// write with a fresh timestamp, above the one that overtook its guess.
func (r *Replicated) WriteAbove(ctx context.Context, value []byte, verified bool, minTS uint64) (Tag, error) {
	t, _, _, err := r.write(ctx, value, verified, minTS, false, nil)
	return t, err
}

// WriteRead is the write and the read Safe-Guess issues together: it writes value as
// WriteFlag does, with a timestamp of at least minTS, and in the same round trip reads every
// replica, and returns the tag written and the largest tag m the handle then knows a replica to
// hold (at least the tag written, unless the write was absorbed). If m is larger than the tag
// written, it is written back until a majority holds it (or a larger tag, by a full read), as
// a read returning it must: its value from an in-place copy the read half returned, else from
// its buffer (one more round trip), then the write-back (one more, unless a majority already
// holds m). One round trip (ReplicatedWriteRoundTrips) when m is the tag written and no CAS is
// lost.
func (r *Replicated) WriteRead(ctx context.Context, value []byte, verified bool, minTS uint64) (Tag, Tag, error) {
	t, m, _, err := r.write(ctx, value, verified, minTS, true, nil)
	return t, m, err
}

// WriteReadWith is WriteRead with extra ops in its first batch: extra(i, b) appends, after
// replica i's ops, ops of the caller's to the same replica (Safe-Guess reads its own lock
// words there). It also returns which replicas completed in that batch: their extra ops are
// done; the others' buffers stay the transport's until they finish (the caller must not reuse
// them).
func (r *Replicated) WriteReadWith(ctx context.Context, value []byte, verified bool, minTS uint64, extra func(replica int, b *farmem.Batch)) (Tag, Tag, []bool, error) {
	return r.write(ctx, value, verified, minTS, true, extra)
}

func (r *Replicated) write(ctx context.Context, value []byte, verified bool, minTS uint64, read bool, extra func(int, *farmem.Batch)) (Tag, Tag, []bool, error) {
	if r.closed {
		return 0, 0, nil, ErrClosed
	}
	if len(value) > r.h.p.ValueSize {
		return 0, 0, nil, fmt.Errorf("%w: %d bytes, at most %d", ErrValueSize, len(value), r.h.p.ValueSize)
	}
	if !r.writer {
		return 0, 0, nil, fmt.Errorf("%w: client %d, lanes for 1..%d", ErrNotWriter, r.id, r.h.p.Writers)
	}
	release, err := r.HoldLane(ctx)
	if err != nil {
		return 0, 0, nil, err
	}
	defer release()
	ts, err := r.stamp(ctx, minTS)
	if err != nil {
		return 0, 0, nil, err
	}
	S := uint64(r.h.p.Slots)
	r.mu.Lock()
	r.ls.last = ts
	r.mu.Unlock()
	r.use(ts%S, MakeTag(ts, r.id, false))
	t := MakeTag(ts, r.id, verified)
	rec := sealRecord(make([]byte, r.l.recSize), r.seed, t, value)
	start := r.rt.Now()
	parts, top, p, installed, err := r.innerWrite(ctx, t, rec, read, extra, nil, r.l.slotOff(t))
	var done []bool
	if p != nil {
		done = make([]bool, r.n)
		for i, a := range r.addrs {
			done[i] = p.NodeDone(a.Node())
		}
	}
	if err != nil {
		return t, 0, done, err
	}
	r.stats.Writes++
	r.supersede(t)
	r.refreshOn(installed, t, rec)
	m := r.maxKnown(start)
	if read && len(parts) > 0 {
		// The read half began when its batch was built, and its answers count beside that
		// moment (top), not only beside start: a batch built more than a lease after start
		// (the client stalled, or waited for its node's lane) would otherwise leave the very
		// answers it read out of m, and a guess below a larger tag would pass for fresh.
		start, m = parts[0].at, max(m, top)
	}
	if !read || m.identity() == t.identity() || m < t {
		return t, m, done, nil
	}
	// The read half found a larger tag: write it back, as a read returning it would, so that
	// the caller's read is complete (Safe-Guess's slow path relies on it). Its value is needed
	// only if a majority does not hold it yet.
	if r.heldBy(m, start) >= r.maj {
		r.supersede(m)
		return t, m, done, nil
	}
	for {
		val, _, ok := r.inPlace(p, parts, m)
		if !ok {
			if r.rt.Now().Sub(start) > r.h.p.Lease {
				r.stats.LeaseRestarts++
				break
			}
			if val, ok = r.chase(ctx, m, p, parts); !ok {
				r.stats.Retries++
				break
			}
		}
		rec := sealRecord(make([]byte, r.l.recSize), r.seed, m, val)
		if r.deferWB && r.rt.Now().Sub(start) <= r.h.p.Lease {
			off, err := r.copyOff(ctx, m)
			if err != nil {
				return t, m, done, err
			}
			r.pendingWB = &WriteBack{r: r, v: m, rec: rec, start: start, off: off}
			return t, m, done, nil
		}
		err := r.writeBack(ctx, m, rec, start)
		if errors.Is(err, errRestart) {
			break
		}
		if err != nil {
			return t, m, done, err
		}
		r.supersede(m)
		return t, m, done, nil
	}
	// The lease ran out or m's buffers were reused: a full read makes its result (at least m)
	// a majority's.
	m2, _, err := r.read(ctx, nil)
	return t, max(m, m2), done, err
}

// refreshOn writes rec, the sealed record of t, as the in-place copy of the replicas marked in
// on, in the background.
func (r *Replicated) refreshOn(on []bool, t Tag, rec []byte) {
	var b *farmem.Batch
	for i, ok := range on {
		if !ok {
			continue
		}
		in := r.addrs[i] + farmem.Addr(r.l.inOff)
		if f := r.opts.Refresher; f != nil {
			f.enqueue(in, t, append([]byte(nil), rec...))
			continue
		}
		if b == nil {
			b = new(farmem.Batch)
		}
		b.Unsignaled(b.Write(in, rec))
	}
	if b != nil {
		r.m.Post(context.Background(), b)
	}
}

// Mark sets the VERIFIED bit of t (a GUESSED tag, any writer's) in the background: a CAS of
// t's writer's metadata word from t to t|VERIFIED on every replica, which succeeds only where
// that word still holds t (a word is only ever raised, so a late CAS changes nothing else). No
// round trip: unsignaled on the handle's client, or the Refresher's.
func (r *Replicated) Mark(t Tag) {
	if t.Verified() || t.IsZero() {
		return
	}
	w := r.wordFor(t.Client())
	words := make([]farmem.Addr, r.n)
	for i, a := range r.addrs {
		words[i] = a + metaOff + farmem.Addr(8*w)
	}
	if f := r.opts.Refresher; f != nil {
		f.enqueueMark(words, uint64(t), uint64(t|VerifiedBit))
		return
	}
	b := new(farmem.Batch)
	for _, a := range words {
		b.Unsignaled(b.CAS(a, uint64(t), uint64(t|VerifiedBit)))
	}
	r.m.Post(context.Background(), b)
}

// Read returns the register's largest tag and its value (a new slice), or the zero Tag and
// nil if it is empty: the paper's READ. See AppendRead.
func (r *Replicated) Read(ctx context.Context) (Tag, []byte, error) {
	return r.read(ctx, nil)
}

// AppendRead reads every replica's metadata words and in-place record in one batch, waits for a
// majority, takes the largest tag v the handle then knows any replica to hold, finds v's value
// (an in-place copy that a replica returned with v and a valid hash, else v's out-of-place
// buffer on the replicas known to hold v, one more round trip), writes v back until a majority
// holds it (inner_write, usually no round trip: the replicas that answered already did), and
// appends the value to dst. ReplicatedReadRoundTrips in the common case; one more to chase the
// buffer, one more to write back. A read whose lease (Params.Lease, from its first verb) ran
// out before a verb that depended on v starts over, as does one whose chased buffers were all
// reused; see the package doc for why these are bounded.
func (r *Replicated) AppendRead(ctx context.Context, dst []byte) (Tag, []byte, error) {
	return r.read(ctx, dst)
}

func (r *Replicated) read(ctx context.Context, dst []byte) (Tag, []byte, error) {
	if r.closed {
		return 0, dst, ErrClosed
	}
	for {
		v, val, err := r.readOnce(ctx)
		if errors.Is(err, errRestart) {
			if err := ctx.Err(); err != nil {
				return 0, dst, fmt.Errorf("maxreg: read: %w", err)
			}
			continue
		}
		if err != nil {
			return 0, dst, err
		}
		r.stats.Reads++
		if v == 0 {
			r.stats.Empty++
		}
		return v, append(dst, val...), nil
	}
}

var errRestart = errors.New("maxreg: read starts over")

// readOnce is one attempt of a read: errRestart if it must start over.
func (r *Replicated) readOnce(ctx context.Context) (Tag, []byte, error) {
	start := r.rt.Now()
	b := new(farmem.Batch)
	parts := make([]install, r.n)
	for i, a := range r.addrs {
		parts[i] = install{write: -1, cas: -1, at: start}
		parts[i].buf = make([]byte, 8*uint64(r.h.p.Words)+r.l.recSize)
		parts[i].read = b.Read(a+metaOff, parts[i].buf)
	}
	p := r.m.Post(ctx, b)
	if err := p.Then(func(p *farmem.Pending) { r.absorb(p, b, parts, 0, nil, true) }); err != nil {
		return 0, nil, err
	}
	err := p.WaitNodes(ctx, r.maj)
	r.absorb(p, b, parts, 0, nil, false)
	if err != nil {
		return 0, nil, quorumErr("read", err)
	}
	v := r.maxKnown(start)
	if v == 0 {
		return 0, nil, nil
	}
	val, stale, ok := r.inPlace(p, parts, v)
	if ok {
		r.stats.InPlace++
	} else {
		if r.rt.Now().Sub(start) > r.h.p.Lease {
			r.stats.LeaseRestarts++
			return 0, nil, errRestart
		}
		if val, ok = r.chase(ctx, v, p, parts); !ok {
			r.stats.Retries++
			return 0, nil, errRestart
		}
		r.stats.Chased++
	}
	rec := sealRecord(make([]byte, r.l.recSize), r.seed, v, val)
	if err := r.writeBack(ctx, v, rec, start); err != nil {
		return 0, nil, err
	}
	r.refreshOn(stale, v, rec)
	r.supersede(v)
	return v, val, nil
}

// inPlace looks for v's value among the in-place records the complete replicas of p returned
// with v as their top tag. It also returns which of those replicas had a torn or stale copy.
func (r *Replicated) inPlace(p *farmem.Pending, parts []install, v Tag) ([]byte, []bool, bool) {
	stale := make([]bool, r.n)
	words := uint64(r.h.p.Words)
	var found []byte
	for i, a := range r.addrs {
		if !p.NodeDone(a.Node()) {
			continue
		}
		var top Tag
		for w := range words {
			top = max(top, Tag(binary.LittleEndian.Uint64(parts[i].buf[8*w:])))
		}
		if top != v {
			continue
		}
		id, val, err := openRecord(parts[i].buf[8*words:], r.seed, r.h.p.ValueSize)
		if err == nil && id == v.identity() {
			if found == nil {
				found = append([]byte{}, val...)
			}
			continue
		}
		stale[i] = true
	}
	return found, stale, found != nil
}

// chase reads v's out-of-place buffer on every replica known to hold v and returns the first
// valid record's value. If none answers with one (v's writer reused the buffer, or v reached
// those replicas by write-backs only), it reads, on each replica whose words p returned
// (parts' buffers) with v in a word, the lanes of that word's other writers, where a
// write-back copies v's record (one more round trip); false if none holds it either.
func (r *Replicated) chase(ctx context.Context, v Tag, p *farmem.Pending, parts []install) ([]byte, bool) {
	r.mu.Lock()
	var on []int
	for i := range r.n {
		if r.known[i].identity() == v.identity() {
			on = append(on, i)
		}
	}
	r.mu.Unlock()
	val, reused := r.readRecords(ctx, v, on, func(int) []uint64 { return []uint64{r.l.slotOff(v)} })
	if val != nil || reused || p == nil {
		// Found; or v's writer reused the buffer, so v is superseded and the read starts over.
		return val, val != nil
	}
	// The helpers' lanes: per replica, every buffer of the writers of a word holding v.
	lanes := make([][]uint64, r.n)
	on = on[:0]
	words := uint64(r.h.p.Words)
	for i, a := range r.addrs {
		if parts[i].read < 0 || !p.NodeDone(a.Node()) {
			continue
		}
		for w := range words {
			if Tag(binary.LittleEndian.Uint64(parts[i].buf[8*w:])).identity() != v.identity() {
				continue
			}
			for _, c := range r.mates[w] {
				if c == v.Client() {
					continue
				}
				for k := range uint64(r.h.p.Slots) {
					lanes[i] = append(lanes[i], r.l.slotOff(MakeTag(k, c, false)))
				}
			}
		}
		if len(lanes[i]) > 0 {
			on = append(on, i)
		}
	}
	total := 0
	for _, l := range lanes {
		total += len(l)
	}
	if total > farmem.MaxBatchOps {
		return nil, false
	}
	val, _ = r.readRecords(ctx, v, on, func(i int) []uint64 { return lanes[i] })
	if val != nil {
		r.stats.CopyChases++
	}
	return val, val != nil
}

// readRecords reads, on each replica of on, the records at offs(i), and returns the value of
// the first with v's identity and a valid hash (nil if none), and whether a valid record of a
// later write of v's writer was found (v's buffer reused).
func (r *Replicated) readRecords(ctx context.Context, v Tag, on []int, offs func(int) []uint64) ([]byte, bool) {
	if len(on) == 0 {
		return nil, false
	}
	reused := false
	b := new(farmem.Batch)
	bufs := make([][][]byte, r.n)
	for _, i := range on {
		for _, off := range offs(i) {
			buf := make([]byte, r.l.recSize)
			bufs[i] = append(bufs[i], buf)
			b.Read(r.addrs[i]+farmem.Addr(off), buf)
		}
	}
	p := r.m.Post(ctx, b)
	for k := 1; k <= len(on); k++ {
		if err := p.WaitNodes(ctx, k); err != nil {
			return nil, reused
		}
		for _, i := range on {
			if !p.NodeDone(r.addrs[i].Node()) {
				continue
			}
			for _, buf := range bufs[i] {
				id, val, err := openRecord(buf, r.seed, r.h.p.ValueSize)
				switch {
				case err != nil:
				case id == v.identity():
					return append([]byte{}, val...), true
				case Tag(id).Client() == v.Client() && id > v.identity():
					reused = true
				}
			}
		}
	}
	return nil, reused
}

// writeBack is inner_write(v) for a tag read (any writer's): rec, v's sealed record, goes into
// a buffer of this client's lane (copyOff) on each replica not known to hold v, and this
// client's word is raised to v. It restarts the read (errRestart) if the lease begun at start has run out
// and a batch would have to be posted.
func (r *Replicated) writeBack(ctx context.Context, v Tag, rec []byte, start farmem.Time) error {
	r.mu.Lock()
	have := 0
	for i := range r.n {
		if r.holds(i, v, start) {
			have++
		}
	}
	r.mu.Unlock()
	if have >= r.maj {
		return nil
	}
	if r.rt.Now().Sub(start) > r.h.p.Lease {
		r.stats.LeaseRestarts++
		return errRestart
	}
	release, err := r.HoldLane(ctx)
	if err != nil {
		return err
	}
	defer release()
	off, err := r.copyOff(ctx, v)
	if err != nil {
		return err
	}
	if r.rt.Now().Sub(start) > r.h.p.Lease {
		r.stats.LeaseRestarts++
		return errRestart
	}
	r.stats.WriteBacks++
	if _, _, _, _, err := r.innerWrite(ctx, v, rec, false, nil, &start, off); err != nil {
		return err
	}
	return nil
}

// copyOff returns the offset, in each replica, of the buffer a write-back of v writes v's
// record into: v's own buffer if v is this writer's, else a buffer of this handle's lane
// (copySlot), which it then records as holding v. Only the owner writes a lane, so a copy
// never lands in a buffer its writer has reused (see "Buffers" in the package doc).
func (r *Replicated) copyOff(ctx context.Context, v Tag) (uint64, error) {
	if v.Client() == r.id {
		if r.h.p.PerNode {
			// Another client of the node wrote v; if the lane reused v's buffer since, v is
			// superseded (the lane's state says so under its latch): the read starts over
			// rather than write v's record over a later one.
			r.mu.Lock()
			reused := r.ls.slotTag[v.TS()%uint64(r.h.p.Slots)] != Tag(v.identity())
			r.mu.Unlock()
			if reused {
				r.stats.LeaseRestarts++
				return 0, errRestart
			}
		}
		return r.l.slotOff(v), nil
	}
	if !r.writer {
		return 0, fmt.Errorf("%w: client %d must write back %v and has no lane (lanes for 1..%d)", ErrNotWriter, r.id, v, r.h.p.Writers)
	}
	s, ok, err := r.copySlot(ctx, v)
	if err != nil {
		return 0, err
	}
	if !ok {
		return 0, fmt.Errorf("maxreg: write-back of %v: every buffer of the lane holds a tag not yet superseded: %w", v, ErrContended)
	}
	r.use(s, v)
	r.stats.Copies++
	return r.l.slotOff(MakeTag(s, r.id, false)), nil
}
