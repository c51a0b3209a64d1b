package alloc

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/farmem/farmem/farmem"
)

// Options configure an Allocator. The zero value is usable.
type Options struct {
	// Nodes are the memory nodes the allocator places blocks on, in the order default placement
	// tries them (default: every memory node of the topology). Each must be formatted, and all
	// with the same home and symmetric area.
	Nodes []farmem.NodeID
	// Lease is how long an announcement in the epoch table holds reuse back after it was
	// written, in fabric time (default 1s, at least 5ms). A client paused longer than this is
	// treated as crashed: others reuse what it may still be reading, and its Unpin reports
	// ErrPinExpired.
	Lease time.Duration
	// Refresh is how old an announcement may grow before Pin writes a new one (default 10ms,
	// at most Lease/2). Shorter means more round trips and faster reuse of retired blocks.
	Refresh time.Duration
	// ClockSkew is the largest difference between the fabric clocks of two clients; a lease is
	// taken as expired only this long after its deadline (default 1ms).
	ClockSkew time.Duration
	// ScanInterval is the least time between two scans of the epoch table made on the
	// allocator's own initiative (default Refresh), but for one: an allocation that needs a new
	// chunk once the client retired 256 blocks since the last scan scans first, so a scan per
	// chunk at most (see the package doc, "Deferred free").
	ScanInterval time.Duration
	// ReclaimWait, when positive, caps how long an allocation that found no room waits for
	// the blocks this client retired to become reusable (see MaxReclaimWait, which is the
	// wait by default: about one Lease plus two Refresh periods) before it fails wrapping
	// farmem.ErrNoSpace. A client that would rather fail than wait sets it short; so do
	// tests that run with long leases, whose full wait would be hours.
	ReclaimWait time.Duration
	// Admit, if set, is asked before every Alloc, AllocOn and AllocSymmetric with the
	// request's size; a non-nil error refuses the request, which then fails with an error
	// wrapping both ErrRefused (so farmem.ErrNoSpace) and Admit's error, having done nothing.
	// It is how a caller enforces its own quota on a client, or makes allocations fail on
	// purpose to see how a structure copes with running out of memory. It runs on the
	// allocator's goroutine and must not call the allocator.
	Admit func(size uint64) error
}

// ErrRefused: Options.Admit refused an allocation. It wraps farmem.ErrNoSpace: to the caller,
// a refused allocation is memory it may not have.
var ErrRefused = fmt.Errorf("alloc: allocation refused: %w", farmem.ErrNoSpace)

// admit asks Options.Admit about a request of size bytes.
func (a *Allocator) admit(size uint64) error {
	if a.opts.Admit == nil {
		return nil
	}
	if err := a.opts.Admit(size); err != nil {
		return fmt.Errorf("alloc: %d bytes: %w: %w", size, ErrRefused, err)
	}
	return nil
}

func (o Options) withDefaults() (Options, error) {
	if o.Lease == 0 {
		o.Lease = time.Second
	}
	if o.Refresh == 0 {
		o.Refresh = min(10*time.Millisecond, o.Lease/2)
	}
	if o.ClockSkew == 0 {
		o.ClockSkew = time.Millisecond
	}
	if o.ScanInterval == 0 {
		o.ScanInterval = o.Refresh
	}
	switch {
	case o.Lease < 5*time.Millisecond:
		return o, fmt.Errorf("alloc: lease %v is below 5ms: %w", o.Lease, farmem.ErrInvalid)
	case o.Refresh < 0 || o.Refresh > o.Lease/2:
		return o, fmt.Errorf("alloc: refresh %v is not within (0, lease/2]: %w", o.Refresh, farmem.ErrInvalid)
	case o.ClockSkew < 0 || o.ScanInterval < 0 || o.ReclaimWait < 0:
		return o, fmt.Errorf("alloc: negative duration: %w", farmem.ErrInvalid)
	}
	return o, nil
}

// Stats count an allocator's work.
type Stats struct {
	// Allocs, Frees and Retires count calls that succeeded.
	Allocs, Frees, Retires uint64
	// Reclaimed counts retired blocks made reusable.
	Reclaimed uint64
	// Pending is the number of retired blocks not yet reusable.
	Pending int
	// Chunks counts FAAs on bump words (each claims one chunk or one large block).
	Chunks uint64
	// Refreshes counts announcements written by Pin; Scans counts scans of the epoch table;
	// Advances counts scans that tried to advance the global epoch.
	Refreshes, Scans, Advances uint64
	// ReclaimWaits counts the retries of allocations that found no room while retired blocks
	// were pending (each after a pause on the fabric's clock: see MaxReclaimWait).
	ReclaimWaits uint64
	// Epoch is the last value of the global epoch this allocator read.
	Epoch uint64
	// HandedOver counts handover records published by Close (0 or 1).
	HandedOver uint64
	// Orphans counts handover records of other client ids this allocator took over when an
	// allocation found no room; OrphanErrors counts those it could not (see adoptOrphans).
	Orphans, OrphanErrors uint64
	// Forgotten counts nodes whose blocks the allocator dropped because the node restarted
	// (see restart.go's doc: a node adopted with a new incarnation).
	Forgotten uint64
	// Coalesced counts whole chunks rebuilt from free blocks (or free runs of chunks broken
	// up) for any size class to carve; Pooled counts chunks this allocator pushed onto the
	// nodes' free-chunk pools, Unpooled chunks it took from them.
	Coalesced, Pooled, Unpooled uint64
	// SymRounds counts the rounds of replicated symmetric claims (one per batch of CASes on
	// the metadata nodes; a claim that met no other client takes one); SymSplits counts the
	// lost rounds some of whose CASes succeeded (votes split with other claims). Both stay 0
	// without replicated metadata.
	SymRounds, SymSplits uint64
}

// SymOffset is the offset of a symmetric block: the same block on every formatted memory node.
type SymOffset uint64

// On returns the block's address on node n.
func (o SymOffset) On(n farmem.NodeID) farmem.Addr { return farmem.MakeAddr(n, uint64(o)) }

// Allocator is one client's allocator. Like the client's farmem.Memory, it belongs to one
// goroutine; structures used from many goroutines give each its own client and Allocator.
type Allocator struct {
	m      farmem.Memory
	rt     farmem.Runtime
	opts   Options
	id     farmem.ClientID
	home   farmem.NodeID
	nodes  []farmem.NodeID // Options.Nodes (default: every memory node)
	order  []farmem.NodeID // placement order: nodes from nodes[pref] on, wrapping around
	all    []farmem.NodeID // every memory node: where symmetric blocks exist
	arenas []*arena        // by node id; nil for nodes not in the set
	sym    *arena
	pref   int // index in nodes of this client's preferred node
	// restartable says the client's Memory implements farmem.Restarts: only then can a node
	// be lost or come back with another incarnation (restart.go). Without it farmem.StatusOf
	// reports every node up at incarnation 0 forever, so placement skips nodeUsable.
	restartable bool
	// memoSize's class is memoClass (classFor): allocations mostly repeat a size.
	memoSize  uint64
	memoClass int
	stats     Stats
	closed    bool
	// orphanScan is when adoptOrphans last read the handover words (orphanScanned: ever).
	orphanScan    farmem.Time
	orphanScanned bool

	epochAddr farmem.Addr // the global epoch word on the home node
	tableAddr farmem.Addr // slot 1 of the epoch table
	slotAddr  farmem.Addr // this client's slot
	slots     int         // slots the table has (MaxClients)
	handAddr  farmem.Addr // this client's handover word

	ep       epochState
	restarts restartState
	rep      *replicaState // the metadata nodes, when the header says r > 1 (replica.go)
	tableOff uint64        // the epoch table's offset on each metadata node

	scanBuf   []byte        // scan's buffer: the global epoch, then the epoch table
	scanBatch *farmem.Batch // scan's batch
	annBuf    []byte        // announce's buffer: the global epoch
	annBatch  *farmem.Batch // announce's batch

	// forgetFn is the transport's ForgetAtomic (see forgetAtomic), nil if it has none: looked
	// up once, since handOut runs on every allocation of a recycled block.
	forgetFn func(a farmem.Addr, n uint64)

	// What a handover gave this allocator on nodes outside its set: relayed at Close.
	foreign        []arenaState
	foreignRetired []retiredState
	adoption       Adoption
}

// New opens the allocator of client m over the formatted nodes opts names, and adopts what the
// last allocator of the same client id handed over when it closed (see the package doc,
// "Handover"; [Allocator.Adopted] reports it). It costs one round trip when there is nothing to
// adopt (the headers of every node and the client's handover word, read in one batch), a second
// if the home node is not among the nodes or is not the lowest of them. Adopting a record costs
// one more (a CAS taking the word and the head's Read, in one batch), and one more if the
// record spans several segments. The client's id must be at most the MaxClients the nodes were
// formatted with (ErrNoSpace otherwise). A corrupt record does not fail New: it is reported in
// Adopted().Err and nothing of it is adopted. With replicated metadata (Header.Replicas > 1)
// New needs no particular node: it takes the parameters from any header it reads, lays out
// the nodes that do not answer or are not formatted again yet, and reads and takes its
// handover words on a majority of the metadata nodes (NewReplicatedRoundTrips,
// NewReplicatedAdoptRoundTrips).
func New(ctx context.Context, m farmem.Memory, opts Options) (*Allocator, error) {
	opts, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	t := m.Topology()
	all := t.MemoryNodes()
	nodes := slices.Clone(opts.Nodes)
	if len(nodes) == 0 {
		nodes = slices.Clone(all)
	}
	for i, n := range nodes {
		if !slices.Contains(all, n) || slices.Contains(nodes[:i], n) {
			return nil, fmt.Errorf("alloc: node %v is not a memory node, or is listed twice: %w", n, farmem.ErrInvalid)
		}
	}
	info := m.Info()
	// Nodes that restarted and are fenced cannot be read: their layout comes from the home
	// header (restart.go).
	wordAt := func(home farmem.NodeID) farmem.Addr {
		w := farmem.MakeAddr(home, HandoverOffset+8*uint64(info.ID))
		if !inNode(t, w, 8) {
			return 0 // an id far beyond the table, on a small node: refused below
		}
		return w
	}
	var (
		readable, lost, down, blank []farmem.NodeID
		guess                       farmem.NodeID
		hdrs                        map[farmem.NodeID]Header
		word                        uint64
	)
	for try := 0; ; try++ {
		readable, lost = splitLost(m, nodes)
		if len(readable) == 0 {
			return nil, lostErr(nodes[0], farmem.StatusOf(m, nodes[0]))
		}
		// The handover word's offset does not depend on the header: read it on the node that
		// is home by default (the lowest), speculatively, with the headers.
		guess = slices.Min(readable)
		hdrs, word, down, blank, err = readHeadersDegraded(ctx, m, readable, wordAt(guess))
		if errors.Is(err, farmem.ErrNodeLost) && try == 0 {
			// This read is how the fabric learnt of a node's restart: the node is fenced now,
			// and laid out as lost on the second try.
			continue
		}
		if err != nil {
			return nil, err
		}
		break
	}
	first := hdrs[firstRead(readable, hdrs)]
	home := first.Home
	replicated := first.Replicas > 1
	if len(blank) > 0 && !replicated {
		_, _, err := readHeaders(ctx, m, blank[:1], 0)
		return nil, err
	}
	// Adopted, not formatted again yet: laid out like a lost node, used once formatted.
	lost = append(lost, blank...)
	if replicated {
		// The metadata is on a majority of the metadata nodes: the home node's header and
		// handover word are not needed (any header carries the parameters; the words are
		// read from the metadata nodes below).
		word = 0
		if _, ok := hdrs[home]; !ok {
			down = append(down, home)
		}
	} else if _, ok := hdrs[home]; !ok {
		h, w, err := readHeaders(ctx, m, []farmem.NodeID{home}, wordAt(home))
		if err != nil {
			return nil, err
		}
		hdrs[home], word = h[home], w
	} else if home != guess {
		_, w, err := readHeaders(ctx, m, nil, wordAt(home))
		if err != nil {
			return nil, err
		}
		word = w
	}
	hh := hdrs[home]
	if replicated {
		hh = first
	}
	if err := layoutLost(m, hdrs, hh, append(lost, down...)); err != nil {
		return nil, err
	}
	for n, h := range hdrs {
		if h.Home != home || h.MaxClients != hh.MaxClients || h.SymBase != hh.SymBase || h.SymSize != hh.SymSize {
			return nil, fmt.Errorf("alloc: %v was formatted with home %v, %d clients, symmetric area %#x+%#x; %v with home %v, %d clients, %#x+%#x: %w",
				n, h.Home, h.MaxClients, h.SymBase, h.SymSize, home, hh.Home, hh.MaxClients, hh.SymBase, hh.SymSize, ErrFormatConflict)
		}
	}
	if int(info.ID) > hh.MaxClients || info.ID == 0 {
		return nil, fmt.Errorf("alloc: client id %d exceeds the %d slots of the epoch table: %w", info.ID, hh.MaxClients, farmem.ErrNoSpace)
	}
	a := &Allocator{
		m: m, rt: m.Runtime(), opts: opts, id: info.ID, home: home, nodes: nodes, all: all,
		arenas:    make([]*arena, slices.Max(nodes)+1),
		epochAddr: farmem.MakeAddr(home, offEpoch),
		tableAddr: farmem.MakeAddr(home, hh.TableOff+8),
		slotAddr:  farmem.MakeAddr(home, hh.TableOff+8*uint64(info.ID)),
		handAddr:  wordAt(home),
		slots:     hh.MaxClients,
		pref:      (int(info.ID) - 1) % len(nodes),
	}
	a.order = append(slices.Clone(nodes[a.pref:]), nodes[:a.pref]...)
	_, a.restartable = m.(farmem.Restarts)
	if s, ok := m.(interface{ ForgetAtomic(a farmem.Addr, n uint64) }); ok {
		a.forgetFn = s.ForgetAtomic
	}
	for _, n := range nodes {
		h := hdrs[n]
		a.arenas[n] = newArena(n.String(), false, farmem.MakeAddr(n, offBump), h.HeapBase, h.HeapLimit, h.ChunkSize, &a.stats)
		a.arenas[n].forget = a.forgetter(a.arenas[n])
	}
	a.sym = newArena("symmetric", true, farmem.MakeAddr(home, offSymBump), hh.SymBase, hh.SymBase+hh.SymSize, hh.ChunkSize, &a.stats)
	a.sym.forget = a.forgetter(a.sym)
	a.ep.cached = hh.Epoch
	a.stats.Epoch = hh.Epoch
	a.initRestarts()
	for _, n := range lost {
		a.restarts.unchecked[n] = true
	}
	if err := a.initReplicas(hh, hdrs); err != nil {
		return nil, err
	}
	if a.rep != nil {
		if word, err = a.takeRep(ctx); err != nil {
			return nil, err
		}
	}
	if word != 0 {
		if err := a.adopt(ctx, word, hdrs); err != nil {
			return nil, err
		}
	}
	return a, nil
}

// readHeaders reads and validates the headers of nodes, and the word at wordAt (if not 0), in
// one batch.
func readHeaders(ctx context.Context, m farmem.Memory, nodes []farmem.NodeID, wordAt farmem.Addr) (map[farmem.NodeID]Header, uint64, error) {
	var b farmem.Batch
	bufs := make([][]byte, len(nodes))
	for i, n := range nodes {
		bufs[i] = make([]byte, HeaderLen)
		b.Read(farmem.MakeAddr(n, 0), bufs[i])
	}
	word := make([]byte, 8)
	if wordAt != 0 {
		b.Read(wordAt, word)
	}
	if len(b.Ops) == 0 {
		return map[farmem.NodeID]Header{}, 0, nil
	}
	if err := m.Do(ctx, &b); err != nil {
		return nil, 0, fmt.Errorf("alloc: read headers: %w", err)
	}
	hdrs := make(map[farmem.NodeID]Header, len(nodes))
	for i, n := range nodes {
		h, err := validate(m.Topology(), n, bufs[i])
		if err != nil {
			if h, err = reread(ctx, m, n, err); err != nil {
				return nil, 0, err
			}
		}
		hdrs[n] = h
	}
	return hdrs, le64(word), nil
}

func (a *Allocator) usable() error {
	if a.closed {
		return fmt.Errorf("alloc: allocator of client %d: %w", a.id, farmem.ErrClosed)
	}
	return nil
}

func checkRequest(size, align uint64) error {
	switch {
	case size == 0 || size > farmem.MaxOffset:
		return fmt.Errorf("alloc: allocation of %d bytes: %w", size, farmem.ErrInvalid)
	case align > 64 || align&(align-1) != 0:
		return fmt.Errorf("alloc: alignment %d is not a power of two of at most 64: %w", align, farmem.ErrInvalid)
	}
	return nil
}

// Alloc returns a block of size bytes aligned to align (a power of two of at most 64; 0 means
// 16, the least alignment of any block). Blocks larger than half a chunk are whole chunks, so
// chunk-aligned. The block's contents are undefined (fresh blocks are zero, recycled ones hold
// old data).
//
// Placement: the client's preferred node is Nodes[(id-1) % len(Nodes)], so clients spread over
// the nodes while each keeps its chunks on one; when that node is exhausted the others are tried
// in order. The error wraps farmem.ErrNoSpace if no node has room, once blocks this client
// retired could not be reused within MaxReclaimWait (so do Alloc, AllocOn and AllocSymmetric:
// see MaxReclaimWait and the package doc).
func (a *Allocator) Alloc(ctx context.Context, size, align uint64) (farmem.Addr, error) {
	// The common case first, with no call (so nothing to keep across one): a valid request to
	// an open allocator that nothing else must admit, served from the preferred node's
	// magazine (takeAny's first step, which it then repeats: cheap), the steady state of a
	// writer that replaces its blocks, on a transport with neither restarts nor ForgetAtomic.
	if n := a.order[0]; !a.closed && validRequest(size, align) && a.opts.Admit == nil && !a.restartable && a.forgetFn == nil {
		if ar := a.arenas[n]; size <= ar.maxSmall {
			if off, ok := ar.fromMag(a.classFor(size), align); ok {
				a.stats.Allocs++
				return farmem.MakeAddr(n, off), nil
			}
		}
	}
	return a.alloc(ctx, size, align)
}

// alloc is Alloc but for its common case: then any free block of this allocator's, with no
// verb, then more room.
func (a *Allocator) alloc(ctx context.Context, size, align uint64) (farmem.Addr, error) {
	if a.closed || !validRequest(size, align) || a.opts.Admit != nil {
		if err := a.precheck(size, align); err != nil {
			return 0, err
		}
	}
	if addr, ok := a.takeAny(size, align); ok {
		return addr, nil
	}
	addr, err := a.allocMore(ctx, size, align)
	if err != nil {
		return waitReclaim(ctx, a, addr, err, func() (farmem.Addr, error) { return a.allocAny(ctx, size, align) })
	}
	return addr, nil
}

// classFor is classOf(size), remembered for the last size asked (classOf(0) is class 0 too).
func (a *Allocator) classFor(size uint64) int {
	if size != a.memoSize {
		a.memoSize, a.memoClass = size, classOf(size)
	}
	return a.memoClass
}

// validRequest reports whether checkRequest accepts size and align, cheaply enough to be
// inlined on every allocation's path (checkRequest then says what is wrong).
func validRequest(size, align uint64) bool {
	return size-1 < farmem.MaxOffset && align <= 64 && align&(align-1) == 0
}

// precheck is what every allocation checks before it looks for room: the allocator is open,
// the request valid, and Options.Admit admits it.
func (a *Allocator) precheck(size, align uint64) error {
	if err := a.usable(); err != nil {
		return err
	}
	if err := checkRequest(size, align); err != nil {
		return err
	}
	return a.admit(size)
}

// allocAny is one try of Alloc.
func (a *Allocator) allocAny(ctx context.Context, size, align uint64) (farmem.Addr, error) {
	// Reuse before growing: a free block on any node beats a new chunk on the preferred one.
	// Otherwise memory grows whenever a client frees blocks on nodes other than its preferred
	// one (it retires blocks its peers wrote), however much of it is free.
	if addr, ok := a.takeAny(size, align); ok {
		return addr, nil
	}
	return a.allocMore(ctx, size, align)
}

// allocMore is allocAny once takeAny found nothing: a scan when one is due, then a new chunk
// on the first node with room.
func (a *Allocator) allocMore(ctx context.Context, size, align uint64) (farmem.Addr, error) {
	if a.scanDue() {
		if _, err := a.scan(ctx); err == nil {
			if addr, ok := a.takeAny(size, align); ok {
				return addr, nil
			}
		}
	}
	var errs []error
	for _, n := range a.order {
		if !a.nodeUsable(n) || !a.headerReady(ctx, n) {
			errs = append(errs, lostErr(n, farmem.StatusOf(a.m, n)))
			continue
		}
		off, err := a.allocIn(ctx, a.arenas[n], size, align)
		if err == nil {
			return farmem.MakeAddr(n, off), nil
		}
		// A node that is full, lost or not answering: try the next (a claim whose outcome is
		// unknown leaks at most a chunk).
		if !errors.Is(err, farmem.ErrNoSpace) && !errors.Is(err, farmem.ErrNodeDown) {
			return 0, err
		}
		errs = append(errs, err)
	}
	return 0, fmt.Errorf("alloc: no node has room for %d bytes: %w", size, errors.Join(errs...))
}

// takeAny hands out a free block of this allocator's on any node, the preferred one first,
// with no verb.
func (a *Allocator) takeAny(size, align uint64) (farmem.Addr, bool) {
	// arena.take, unrolled: the class is computed once, and the magazine's block, which a
	// writer replacing its blocks takes at nearly every allocation, costs no call.
	c := 0
	if size <= MaxChunkSize/2 {
		c = classOf(size)
	}
	for _, n := range a.order {
		if a.restartable && !a.nodeUsable(n) {
			continue
		}
		ar := a.arenas[n]
		var off uint64
		recycled, ok := true, false
		if size > ar.maxSmall {
			off, recycled, ok = ar.takeLarge(size)
		} else if off, ok = ar.fromMag(c, align); !ok {
			off, recycled, ok = ar.takeListed(c, align)
		}
		if ok {
			if recycled && a.forgetFn != nil {
				a.handOut(ar, off, size)
			}
			a.stats.Allocs++
			return farmem.MakeAddr(n, off), true
		}
	}
	return 0, false
}

// AllocOn is Alloc on node n only: the error wraps farmem.ErrNoSpace when n is exhausted,
// however much room other nodes have.
func (a *Allocator) AllocOn(ctx context.Context, n farmem.NodeID, size, align uint64) (farmem.Addr, error) {
	if err := a.precheck(size, align); err != nil {
		return 0, err
	}
	ar := a.arena(n)
	if ar == nil {
		return 0, fmt.Errorf("alloc: %v is not one of this allocator's nodes: %w", n, farmem.ErrInvalid)
	}
	if !a.nodeUsable(n) || !a.headerReady(ctx, n) {
		return 0, lostErr(n, farmem.StatusOf(a.m, n))
	}
	off, err := a.allocIn(ctx, ar, size, align)
	off, err = waitReclaim(ctx, a, off, err, func() (uint64, error) { return a.allocIn(ctx, ar, size, align) })
	if err != nil {
		return 0, err
	}
	return farmem.MakeAddr(n, off), nil
}

// AllocSymmetric returns a block of size bytes aligned to align at the same offset on every
// formatted memory node, from the symmetric area. Symmetric chunks are claimed with one FAA on
// the home node's symmetric bump word (with replicated metadata, by a maximum over a majority
// of the metadata nodes' words: see the package doc) and carved like any others; the symmetric area is disjoint
// from every node's heap, so no regular allocation ever returns an offset a symmetric one has.
func (a *Allocator) AllocSymmetric(ctx context.Context, size, align uint64) (SymOffset, error) {
	if err := a.precheck(size, align); err != nil {
		return 0, err
	}
	off, err := a.allocIn(ctx, a.sym, size, align)
	off, err = waitReclaim(ctx, a, off, err, func() (uint64, error) { return a.allocIn(ctx, a.sym, size, align) })
	return SymOffset(off), err
}

// scanBacklog is how many retired blocks waiting make an allocation that finds no free block
// and no room in its current chunk scan the epoch table whatever Options.ScanInterval (see
// scanDue).
const scanBacklog = 256

// scanDue reports whether an allocation that found no free block and no room in its current
// chunks scans the epoch table before it takes a new chunk: when blocks this client retired
// wait and ScanInterval has passed since the last scan, or at least scanBacklog of them were
// retired since the last scan and that scan made some reusable. The second case costs at most
// one scan (one round trip) per chunk the client carves and per scanBacklog blocks it retires,
// and stops, until ScanInterval passes, at the first scan that frees nothing (other clients'
// announcements hold the blocks back); in exchange a writer
// that retires a block per update (a store's Put) reuses its blocks a few hundred allocations
// after it retired them, while their lines are still in the CPU's caches, instead of after
// several Refresh periods (about 20,000 blocks, far beyond them, for a writer of 1 KiB blocks
// at a microsecond per update).
func (a *Allocator) scanDue() bool {
	n := len(a.ep.retired)
	return n > 0 && (n-a.ep.keptAtScan >= scanBacklog && a.ep.lastFreed > 0 || a.rt.Now().Sub(a.ep.lastScan) >= a.opts.ScanInterval)
}

// allocIn allocates from one arena: free lists and the current chunk first (no verb), then,
// when retired blocks are pending and a scan is due (scanDue), a scan of the epoch table, then a
// new chunk (one FAA).
func (a *Allocator) allocIn(ctx context.Context, ar *arena, size, align uint64) (uint64, error) {
	off, err := a.allocArena(ctx, ar, size, align)
	if err == nil {
		a.stats.Allocs++
	}
	return off, err
}

func (a *Allocator) allocArena(ctx context.Context, ar *arena, size, align uint64) (uint64, error) {
	if off, recycled, ok := ar.take(size, align); ok {
		a.handOutIf(ar, off, size, recycled)
		return off, nil
	}
	scanned := false
	if a.scanDue() {
		scanned = true
		if _, err := a.scan(ctx); err == nil {
			if off, recycled, ok := ar.take(size, align); ok {
				a.handOutIf(ar, off, size, recycled)
				return off, nil
			}
		}
	}
	off, ok, err := ar.grow(ctx, a.m, size)
	if errors.Is(err, farmem.ErrNoSpace) && !scanned && len(a.ep.retired) > 0 {
		// Out of chunks: retired blocks are the last resort, whatever the scan interval.
		if _, serr := a.scan(ctx); serr == nil {
			if off, recycled, ok := ar.take(size, align); ok {
				a.handOutIf(ar, off, size, recycled)
				return off, nil
			}
		}
	}
	if err != nil {
		return 0, err
	}
	if ok {
		return off, nil
	}
	off, recycled, ok := ar.take(size, align)
	if !ok {
		return 0, fmt.Errorf("alloc: %s: a new chunk cannot hold %d bytes (a bug): %w", ar.name, size, farmem.ErrNoSpace)
	}
	a.handOutIf(ar, off, size, recycled)
	return off, nil
}

// handOutIf is handOut for a block that may not be recycled.
func (a *Allocator) handOutIf(ar *arena, off, size uint64, recycled bool) {
	if recycled && a.forgetFn != nil {
		a.handOut(ar, off, size)
	}
}

// handOut prepares a recycled block for its new owner: the words earlier owners used with
// atomics become plain data again (local's strict mode), on every node a symmetric block has.
// Callers call it only for a recycled block and a transport with ForgetAtomic (forgetFn).
func (a *Allocator) handOut(ar *arena, off, size uint64) {
	n := ar.blockSize(size)
	if ar.sym {
		for _, node := range a.all {
			a.forgetFn(farmem.MakeAddr(node, off), n)
		}
		return
	}
	a.forgetFn(farmem.MakeAddr(ar.bump.Node(), off), n)
}

// arena returns node n's arena, or nil if n is not in the allocator's set.
func (a *Allocator) arena(n farmem.NodeID) *arena {
	if int(n) < len(a.arenas) {
		return a.arenas[n]
	}
	return nil
}

// arenaOf returns the arena of a regular block.
func (a *Allocator) arenaOf(addr farmem.Addr, size uint64) (*arena, error) {
	ar := a.arena(addr.Node())
	if ar == nil {
		return nil, fmt.Errorf("alloc: %v is not on one of this allocator's nodes: %w", addr, farmem.ErrInvalid)
	}
	return ar, ar.check(addr.Offset(), size)
}

// Free makes a block reusable at once, by this client: no other client may still read it (it
// was never published, or every reader is known to be done). size is the size it was allocated
// with. Free costs no verb. Freeing a block twice is not detected.
func (a *Allocator) Free(addr farmem.Addr, size uint64) error {
	if err := a.usable(); err != nil {
		return err
	}
	ar, err := a.arenaOf(addr, size)
	if err != nil {
		return err
	}
	ar.put(addr.Offset(), size)
	a.stats.Frees++
	return nil
}

// FreeSymmetric is Free for a symmetric block.
func (a *Allocator) FreeSymmetric(o SymOffset, size uint64) error {
	if err := a.usable(); err != nil {
		return err
	}
	if err := a.sym.check(uint64(o), size); err != nil {
		return err
	}
	a.sym.put(uint64(o), size)
	a.stats.Frees++
	return nil
}

// Stats returns the allocator's counters.
func (a *Allocator) Stats() Stats {
	s := a.stats
	s.Pending = len(a.ep.retired)
	return s
}

// Home returns the node that holds the global epoch and the epoch table.
func (a *Allocator) Home() farmem.NodeID { return a.home }

// Close gives the whole free chunks it holds beyond one per node back to the nodes' pools (two
// round trips per such node), hands the rest of what the allocator holds over to the next
// allocator of its client id, and releases it; it is idempotent. It writes a handover record of its free blocks, current
// chunks and retired blocks (with their epoch tags) into blocks it holds, publishes it in the
// client's handover word and withdraws the client's announcement, all in one batch (see the
// package doc, "Handover", for the costs). An allocator that holds nothing withdraws the
// announcement only (one verb). If the record cannot be written, what it would have held is
// lost, as when a client crashes, and Close says so.
func (a *Allocator) Close() error {
	if a.closed {
		return nil
	}
	a.closed = true
	a.checkNodes()
	ctx, cancel := a.rt.WithTimeout(context.Background(), a.m.Topology().DownTimeout+time.Second)
	defer cancel()
	// Whole free chunks beyond one per node go to the nodes' pools, for every client, rather
	// than to the next allocator of this id alone. A push that failed lost its chunks (see
	// the package doc); the rest is handed over.
	err := a.giveBack(ctx, keepSpares, rebuildNone)
	err = errors.Join(err, a.handOver(ctx))
	a.ep = epochState{}
	a.arenas, a.sym = nil, nil
	a.foreign, a.foreignRetired = nil, nil
	if err != nil && !errors.Is(err, farmem.ErrClosed) {
		return fmt.Errorf("alloc: close: %w", err)
	}
	return nil
}

func le64(b []byte) uint64 { return binary.LittleEndian.Uint64(b) }

// forgetAtomic tells a transport with a strict mode (farmem/local's: it reports plain writes
// over words that were targets of atomics) that the words in [a, a+n) are being reused as plain
// data, so a later plain write over them is no violation. The allocator calls it when it
// recycles a block; other transports have no such method and nothing happens.
func forgetAtomic(m farmem.Memory, a farmem.Addr, n uint64) {
	if s, ok := m.(interface{ ForgetAtomic(a farmem.Addr, n uint64) }); ok {
		s.ForgetAtomic(a, n)
	}
}
