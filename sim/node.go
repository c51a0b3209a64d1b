package sim

import (
	"encoding/binary"
	"slices"
	"time"

	"github.com/farmem/farmem/farmem"
	"github.com/farmem/farmem/farmem/transport"
)

// Node states.
const (
	stateUp uint8 = iota
	stateHung
	stateCrashed
)

// node is a memory node or a compute node's region, with its NIC.
type node struct {
	s     *Sim
	id    farmem.NodeID
	size  uint64
	words []uint64
	model *NIC
	nic   *nicState // shared with a memory node's when the model co-locates them
	// sharesNIC is true on a compute node whose NIC is a memory node's (Model.CoLocated).
	sharesNIC bool
	state     uint8
	// crashAfter is -1, or the number of ops the next batch applies before the node crashes.
	crashAfter int
	tearing    bool
	c          *cnode // compute nodes only
	// nicWords has a bit per word of a compute node's region that a peer's atomic has
	// reached (see Model.LocalAccess); nil until the first.
	nicWords []uint64
}

// cnode is what a compute node has beyond its region.
type cnode struct {
	n        *node
	cpu      coreState
	handlers map[uint16]farmem.Handler
	hidle    []*client // idle handler clients
	callQ    []*call   // calls waiting for a handler
	watch    map[uint64]*proc
	ctx      *simCtx // ends when the node crashes
	paused   bool
	calls    []*call   // calls in progress to this node, in posting order
	msg      *msgState // one-way messages (send.go), made on first use
}

func (s *Sim) newNode(id farmem.NodeID, size uint64, model *NIC) *node {
	size &^= 7
	n := &node{s: s, id: id, size: size, model: model, nic: &nicState{}, crashAfter: -1, tearing: s.m.Tearing}
	n.words = newWords(n, size/8)
	n.nic.init(model)
	return n
}

func (s *Sim) initCompute(n *node) {
	c := &cnode{
		n:        n,
		handlers: make(map[uint16]farmem.Handler),
		watch:    make(map[uint64]*proc),
	}
	c.cpu.init(s.m.Cores)
	c.ctx = &simCtx{s: s, parent: contextBackground, done: make(chan struct{})}
	n.c = c
	for i := range s.m.MaxHandlers {
		h, err := s.openClient(n, s.m.ClientsPerNode-s.m.MaxHandlers+i)
		if err != nil {
			panic("sim: handler slot: " + err.Error()) // unreachable: the slots are free
		}
		c.hidle = append(c.hidle, h)
	}
}

// load and store access aligned words.
func (n *node) load(off uint64) uint64     { return n.words[off>>3] }
func (n *node) store(off uint64, v uint64) { n.words[off>>3] = v }

// readBytes copies [off, off+len(dst)) into dst.
func (n *node) readBytes(off uint64, dst []byte) {
	if littleEndian && off&7 == 0 && len(dst) > 8 && len(dst)&7 == 0 {
		// Whole aligned words: on a little-endian machine the words' bytes in memory are the
		// simulated bytes, so one copy does what the loop below does a word at a time.
		copy(dst, wordBytes(n.words[off>>3:(off>>3)+uint64(len(dst))/8]))
		return
	}
	for len(dst) > 0 {
		w := n.words[off>>3]
		if off&7 == 0 && len(dst) >= 8 {
			binary.LittleEndian.PutUint64(dst, w)
			dst, off = dst[8:], off+8
			continue
		}
		dst[0] = byte(w >> (8 * (off & 7)))
		dst, off = dst[1:], off+1
	}
}

// writeBytes copies src to [off, off+len(src)).
func (n *node) writeBytes(off uint64, src []byte) {
	if littleEndian && off&7 == 0 && len(src) > 8 && len(src)&7 == 0 {
		copy(wordBytes(n.words[off>>3:(off>>3)+uint64(len(src))/8]), src) // see readBytes
		return
	}
	for len(src) > 0 {
		i := off >> 3
		if off&7 == 0 && len(src) >= 8 {
			n.words[i] = binary.LittleEndian.Uint64(src)
			src, off = src[8:], off+8
			continue
		}
		sh := 8 * (off & 7)
		n.words[i] = n.words[i]&^(0xff<<sh) | uint64(src[0])<<sh
		src, off = src[1:], off+1
	}
}

// apply executes bytes [lo, hi) of a checked op (all of it for atomics) and returns the
// previous word for atomics.
func (n *node) apply(op *farmem.Op, lo, hi uint64) uint64 {
	off := op.Addr.Offset()
	switch op.Kind {
	case farmem.OpRead:
		n.readBytes(off+lo, op.Buf[lo:hi])
		return 0
	case farmem.OpWrite:
		n.writeBytes(off+lo, op.Buf[lo:hi])
		if n.c != nil {
			n.c.notify(off+lo, hi-lo)
		}
		return 0
	default:
		found := n.load(off)
		next, _ := transport.Apply(op, found)
		n.store(off, next)
		if n.c != nil {
			n.c.notify(off, 8)
		}
		return found
	}
}

// watchers: procs parked in Wait on a word of this compute node's region, in intrusive lists
// keyed by offset.

func (c *cnode) addWatch(p *proc, off uint64) {
	p.wn, p.woff = c, off
	p.wprev = nil
	p.wnext = c.watch[off]
	if p.wnext != nil {
		p.wnext.wprev = p
	}
	c.watch[off] = p
}

func (c *cnode) unwatch(p *proc) {
	if p.wprev != nil {
		p.wprev.wnext = p.wnext
	} else if p.wnext != nil {
		c.watch[p.woff] = p.wnext
	} else {
		delete(c.watch, p.woff)
	}
	if p.wnext != nil {
		p.wnext.wprev = p.wprev
	}
	p.wn, p.wprev, p.wnext = nil, nil, nil
}

// notify wakes the Waits on words overlapping [off, off+length).
func (c *cnode) notify(off, length uint64) {
	if len(c.watch) == 0 || length == 0 {
		return
	}
	first, last := off&^7, (off+length-1)&^7
	if (last-first)/8+1 > uint64(len(c.watch)) {
		// A long write over few watched words: wake them in address order, for determinism.
		var offs []uint64
		for o := range c.watch {
			if o >= first && o <= last {
				offs = append(offs, o)
			}
		}
		slices.Sort(offs)
		for _, o := range offs {
			c.wakeList(c.watch[o])
		}
		return
	}
	for o := first; o <= last; o += 8 {
		if p := c.watch[o]; p != nil {
			c.wakeList(p)
		}
	}
}

func (c *cnode) wakeList(p *proc) {
	for p != nil {
		nx := p.wnext
		c.n.s.wakeProc(p, wakeEvent)
		p = nx
	}
}

// nicState is the queueing state and counters of one NIC.
type nicState struct {
	units  []int64 // when each processing unit is next free
	port   int64   // when the port is next free
	issue  int64   // when the issuing side is next free
	atoms  []int64 // when each atomic slot is next free
	bwNsPB float64 // nanoseconds per byte, 0 if unlimited

	ops     [farmem.NumOpKinds]uint64
	sends   uint64
	issued  uint64
	bytes   uint64
	busy    int64 // unit time consumed
	queued  int64 // total time waited for a unit
	maxWait int64
	hist    *histogram // waiting time for a unit, of those that waited
	noWait  uint64     // requests served at once
}

func (n *nicState) init(m *NIC) {
	n.units = make([]int64, m.Units)
	if m.AtomicUnit > 0 {
		n.atoms = make([]int64, m.AtomicSlots)
	}
	if m.Bandwidth > 0 {
		n.bwNsPB = 1e9 / m.Bandwidth
	}
	n.hist = newHistogram()
}

// serve queues one inbound request arriving now, of service cost and payload bytes, and
// returns when it may take effect (the start of its service; for an atomic, when it gets its
// word) and when its service ends. For atomics, addr is the word.
func (n *nicState) serve(now, cost int64, bytes uint64, atomic bool, addr farmem.Addr, atomicUnit int64) (effect, end int64) {
	u := 0
	for i := 1; i < len(n.units); i++ {
		if n.units[i] < n.units[u] {
			u = i
		}
	}
	start := max(now, n.units[u])
	end = start + cost
	n.units[u] = end
	wait := start - now
	n.busy += cost
	if wait > 0 {
		n.queued += wait
		n.maxWait = max(n.maxWait, wait)
		n.hist.record(wait)
	} else {
		n.noWait++ // added to the histogram when it is exported
	}
	effect = start
	if n.bwNsPB > 0 && bytes > 0 {
		end = max(end, n.port) + int64(float64(bytes)*n.bwNsPB+0.5)
		n.port = end
	}
	n.bytes += bytes
	if atomic && n.atoms != nil {
		slot := n.atomSlot(addr)
		effect = max(end, n.atoms[slot])
		end = effect + atomicUnit
		n.atoms[slot] = end
	}
	return effect, end
}

// atomSlot returns the index in n.atoms of the slot of the word at addr; n.atoms must not be
// empty.
func (n *nicState) atomSlot(addr farmem.Addr) uint64 {
	return (uint64(addr) >> 3) * 0x9e3779b97f4a7c15 >> 32 % uint64(len(n.atoms))
}

// issueAt queues one outbound request handed to the NIC now and returns when it leaves.
func (n *nicState) issueAt(now, cost int64, bytes uint64) int64 {
	n.issued++
	if cost == 0 && (n.bwNsPB == 0 || bytes == 0) {
		return now
	}
	end := max(now, n.issue) + cost
	n.issue = end
	return end
}

// coreState is a compute node's cores: a FIFO queue in front of k servers. A core's fields
// are together (a verb's OpCPU reads every core's free time and updates one core), in one
// array rather than one array per field.
type coreState struct {
	cores   []core
	queued  int64
	maxWait int64
}

// core is one core of a compute node: when it is next free, the work it did and how many jobs.
type core struct {
	free int64
	busy int64
	jobs uint64
}

func (c *coreState) init(k int) {
	c.cores = make([]core, k)
}

// run queues d of work arriving now and returns when it ends.
func (c *coreState) run(now int64, d time.Duration) int64 {
	cs := c.cores
	if len(cs) == 0 || d <= 0 {
		return now + max(int64(d), 0)
	}
	k, free := 0, cs[0].free
	for i := 1; i < len(cs); i++ {
		// The first core that is free soonest, without a branch to mispredict (a flag, a mask
		// and conditional moves): which core that is changes from one verb to the next.
		f := cs[i].free
		lt := 0
		if f < free {
			lt = 1
		}
		k ^= (k ^ i) & -lt
		free = min(free, f)
	}
	start := max(now, free)
	end := start + int64(d)
	ck := &cs[k]
	ck.free = end
	ck.busy += int64(d)
	ck.jobs++
	c.queued += start - now
	c.maxWait = max(c.maxWait, start-now)
	return end
}
