package sim

import (
	"math/bits"
	"unsafe"
)

// evKind says what an event does when its time comes.
type evKind uint8

const (
	evResume evKind = iota // resume proc p if it is still parked with sequence arg
	evTimer                // run timer t's function
	evArrive               // group g reaches its target's NIC
	evApply                // the next op (or piece) of group g takes effect at the target
	evReply                // group g's answer reaches its client
	evDown                 // group g's down timeout: its unanswered ops fail
	evCall                 // call c advances one stage (arg)
)

// Virtual time is kept to a horizon of 2^52 ns (about 52 days) after Epoch: later times are
// clamped to it. That leaves 12 bits of an event's priority word for the tie-break.
const (
	tieBits = 12
	horizon = int64(1)<<(64-tieBits) - 1
)

// event is one entry of the event heap, a value: pushing one allocates nothing once the heap
// has grown to its working size. It is ordered by prio, the time since Epoch shifted left with
// the top bits of key below it, then by key, a bijective mix of a counter and the seed: events
// at the same time run in an order the seed decides.
type event struct {
	prio uint64
	key  uint64
	arg  uint64
	obj  unsafe.Pointer // *proc, *timer, *group or *call, by kind
	kind evKind
}

func (e *event) timer() *timer { return (*timer)(e.obj) }

// mkEvent builds an event at virtual time at with tie-break key.
func mkEvent(at int64, key uint64, kind evKind, obj unsafe.Pointer, arg uint64) event {
	rel := min(max(at-int64(Epoch), 0), horizon)
	return event{prio: uint64(rel)<<tieBits | key>>(64-tieBits), key: key, kind: kind, obj: obj, arg: arg}
}

// evHeap is a 4-ary min-heap of events. The heap itself holds 16-byte entries (the priority
// word, the event's kind and its slot in a pool), so that a node's four children share a cache
// line; the events live in the pool, recycled through a free list. Timers record their heap
// index so they can be removed when stopped.
type evHeap struct {
	h    []hent
	pool []event
	free []uint32
}

type hent struct {
	prio uint64
	slot uint32
	kind evKind
}

func (h *evHeap) len() int { return len(h.h) }

// less orders heap entries: by priority word, then (rarely needed) by the full key.
func (h *evHeap) less(a, b *hent) bool {
	if a.prio != b.prio {
		return a.prio < b.prio
	}
	return h.pool[a.slot].key < h.pool[b.slot].key
}

func (h *evHeap) place(i int, e hent) {
	h.h[i] = e
	if e.kind == evTimer {
		h.pool[e.slot].timer().idx = i
	}
}

func (h *evHeap) push(e event) {
	var slot uint32
	if n := len(h.free); n > 0 {
		slot = h.free[n-1]
		h.free = h.free[:n-1]
		h.pool[slot] = e
	} else {
		slot = uint32(len(h.pool))
		h.pool = append(h.pool, e)
	}
	he := hent{prio: e.prio, slot: slot, kind: e.kind}
	h.h = append(h.h, he)
	h.up(len(h.h)-1, he)
}

func (h *evHeap) up(i int, e hent) {
	for i > 0 {
		parent := (i - 1) / 4
		if !h.less(&e, &h.h[parent]) {
			break
		}
		h.place(i, h.h[parent])
		i = parent
	}
	h.place(i, e)
}

// down sifts e down from index i: the hole moves to the smallest child while that child is
// smaller than e. Comparisons are on the priority word alone unless two are equal.
func (h *evHeap) down(i int, e hent) {
	hs := h.h
	n := len(hs)
	for {
		c := 4*i + 1
		if c >= n {
			break
		}
		best := c
		bp := hs[c].prio
		end := min(c+4, n)
		for j := c + 1; j < end; j++ {
			if p := hs[j].prio; p < bp || (p == bp && h.pool[hs[j].slot].key < h.pool[hs[best].slot].key) {
				best, bp = j, p
			}
		}
		if bp > e.prio || (bp == e.prio && h.pool[hs[best].slot].key > h.pool[e.slot].key) {
			break
		}
		h.place(i, hs[best])
		i = best
	}
	h.place(i, e)
}

// peekAt returns the time of the earliest event; the heap must not be empty.
func (h *evHeap) peekAt() int64 { return int64(Epoch) + int64(h.h[0].prio>>tieBits) }

// pop removes and returns the earliest event; the heap must not be empty.
func (h *evHeap) pop() event {
	top := h.h[0]
	n := len(h.h) - 1
	last := h.h[n]
	h.h = h.h[:n]
	if n > 0 {
		h.down(0, last)
	}
	return h.take(top.slot)
}

// take frees pool slot i and returns its event.
func (h *evHeap) take(i uint32) event {
	e := h.pool[i]
	h.pool[i] = event{}
	h.free = append(h.free, i)
	if e.kind == evTimer {
		e.timer().idx = -1
	}
	return e
}

// remove deletes the entry at heap index i.
func (h *evHeap) remove(i int) {
	n := len(h.h) - 1
	removed := h.h[i]
	last := h.h[n]
	h.h = h.h[:n]
	if i < n {
		if i > 0 && h.less(&last, &h.h[(i-1)/4]) {
			h.up(i, last)
		} else {
			h.down(i, last)
		}
	}
	h.take(removed.slot)
}

// The event queue: a timing wheel for the near future, backed by the heap for the far future
// and for timers (which may be removed). Nearly every event of a verb is due within a few
// microseconds, so the wheel serves them in constant time: wheelSize buckets of one nanosecond
// each, a bitmap to find the next nonempty one. Every event in the wheel is due in [cursor,
// cursor + wheelSize), so buckets never alias. The events of one bucket are due at the same
// instant; they leave it in a random order drawn from the seed (swap-remove of a random
// element of the bucket, seen as an array in push order), which is how the wheel breaks ties
// by the seed at constant cost.
//
// The wheel is laid out for the caches, since a simulated verb pushes and pops two or three
// events: a bucket is a 4-byte head (its events, latest first, in a list of nodes), and the
// nodes, each an event without its time (which is its bucket's), come from one slice recycled
// through a free list, so the nodes in use stay few and warm. Buckets hold a handful of events
// at most (the simultaneous ones), so walking one is short. The wheel keeps the time of its
// earliest event (first): pop finds the next one as it takes an event, rather than as it next
// pops, and prefetches that next event's object (its group or proc, cold with hundreds of
// clients) while the effect of the event it returns runs.
const wheelSize = 1 << 14

// wevent is an event in the wheel: an event without its time, which is its bucket's, and
// without a key, which the wheel does not use.
type wevent struct {
	obj  unsafe.Pointer
	arg  uint64
	kind evKind
}

// wnode holds one wheel event, or links free nodes.
type wnode struct {
	ev   wevent
	next uint32 // the next (earlier pushed) node of its bucket, or the next free node, plus one
}

type evQueue struct {
	heap   evHeap // far events and timers
	head   [wheelSize]uint32
	bits   [wheelSize / 64]uint64
	nodes  []wnode
	free   uint32 // first free node, plus one; 0: none
	n      int    // events in the wheel
	cursor uint64 // the current instant, in ns since Epoch
	first  uint64 // when the wheel's earliest event is due, if it holds any (n > 0)
	rng    uint64 // tie-break state, seeded
}

func (q *evQueue) len() int { return q.n + q.heap.len() }

// pushWheel queues an event due at rel (ns since Epoch), before cursor + wheelSize, in the
// wheel.
func (q *evQueue) pushWheel(rel uint64, kind evKind, obj unsafe.Pointer, arg uint64) {
	x := q.free
	if x != 0 {
		q.free = q.nodes[x-1].next
	} else {
		q.nodes = append(q.nodes, wnode{})
		x = uint32(len(q.nodes))
	}
	b := rel & (wheelSize - 1)
	q.nodes[x-1] = wnode{ev: wevent{obj: obj, arg: arg, kind: kind}, next: q.head[b]}
	q.head[b] = x
	q.bits[b/64] |= 1 << (b % 64)
	if q.n == 0 || rel < q.first {
		q.first = rel
	}
	q.n++
}

// takeWheel unlinks and returns the event of bucket b that leaves first: the element at a
// random index of the bucket seen as an array in push order, the last element taking its
// place. The list runs from the last element to the first, so array index i is list position
// len-1-i.
func (q *evQueue) takeWheel(b uint64) wevent {
	h := q.head[b]
	hn := &q.nodes[h-1]
	x := h
	if hn.next == 0 {
		q.head[b] = 0
		q.bits[b/64] &^= 1 << (b % 64)
	} else {
		n := 0
		for y := h; y != 0; y = q.nodes[y-1].next {
			n++
		}
		// xorshift64*, seeded: which of the simultaneous events goes first.
		q.rng ^= q.rng >> 12
		q.rng ^= q.rng << 25
		q.rng ^= q.rng >> 27
		i := int(((q.rng * 2685821657736338717) >> 32) * uint64(n) >> 32)
		if pos := n - 1 - i; pos == 0 {
			// The last element itself: it just leaves.
			q.head[b] = hn.next
		} else {
			prev := h
			for k := 1; k < pos; k++ {
				prev = q.nodes[prev-1].next
			}
			x = q.nodes[prev-1].next
			after := q.nodes[x-1].next
			// The last element (the head) takes x's place.
			if prev == h {
				hn.next = after // [h, x, rest...] becomes [h, rest...]
			} else {
				// [h, a, ..., prev, x, rest...] becomes [a, ..., prev, h, rest...]
				q.head[b] = hn.next
				q.nodes[prev-1].next = h
				hn.next = after
			}
		}
	}
	xn := &q.nodes[x-1]
	ev := xn.ev
	*xn = wnode{next: q.free}
	q.free = x
	return ev
}

// firstBucket returns the first nonempty bucket at or after the cursor, circularly.
func (q *evQueue) firstBucket() uint64 {
	start := q.cursor & (wheelSize - 1)
	w := start / 64
	if m := q.bits[w] &^ (1<<(start%64) - 1); m != 0 {
		return w*64 + uint64(bits.TrailingZeros64(m))
	}
	for i := uint64(1); i <= wheelSize/64; i++ {
		j := (w + i) % (wheelSize / 64)
		if m := q.bits[j]; m != 0 {
			return j*64 + uint64(bits.TrailingZeros64(m))
		}
	}
	panic("sim: event wheel count and bitmap disagree") // unreachable
}

// bucketTime returns the instant of bucket b, the first at or after the cursor.
func (q *evQueue) bucketTime(b uint64) uint64 {
	return q.cursor + (b-q.cursor)&(wheelSize-1)
}

// pop removes the earliest event and returns its time (in ns since Epoch), what it does and
// on what; the queue must not be empty. Its parts come back in registers, not as an event
// copied through memory.
func (q *evQueue) pop() (rel uint64, kind evKind, obj unsafe.Pointer, arg uint64) {
	h := &q.heap
	if q.n > 0 {
		t := q.first
		if h.len() == 0 || h.h[0].prio>>tieBits >= t {
			b := t & (wheelSize - 1)
			w := q.takeWheel(b)
			q.n--
			q.cursor = t
			if q.n > 0 && q.head[b] == 0 {
				// Find the next event now, and ask for its object: its line comes while this
				// event's effect runs (a hint, with no effect on the run).
				q.first = q.bucketTime(q.firstBucket())
				prefetch(q.nodes[q.head[q.first&(wheelSize-1)]-1].ev.obj)
			}
			return t, w.kind, w.obj, w.arg
		}
	}
	e := h.pop()
	q.cursor = e.prio >> tieBits
	return q.cursor, e.kind, e.obj, e.arg
}
