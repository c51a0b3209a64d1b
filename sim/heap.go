package sim

import "unsafe"

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

func (e *event) at() int64 { return int64(Epoch) + int64(e.prio>>tieBits) }

func (e *event) less(o *event) bool {
	return e.prio < o.prio || (e.prio == o.prio && e.key < o.key)
}

func (e *event) proc() *proc   { return (*proc)(e.obj) }
func (e *event) timer() *timer { return (*timer)(e.obj) }
func (e *event) group() *group { return (*group)(e.obj) }
func (e *event) call() *call   { return (*call)(e.obj) }

// mkEvent builds an event at virtual time at with tie-break key.
func mkEvent(at int64, key uint64, kind evKind, obj unsafe.Pointer, arg uint64) event {
	rel := min(max(at-int64(Epoch), 0), horizon)
	return event{prio: uint64(rel)<<tieBits | key>>(64-tieBits), key: key, kind: kind, obj: obj, arg: arg}
}

// evHeap is a 4-ary min-heap of events. Timers record their index so they can be removed
// when stopped.
type evHeap struct {
	es []event
}

func (h *evHeap) len() int { return len(h.es) }

func (h *evHeap) place(i int, e *event) {
	h.es[i] = *e
	if e.kind == evTimer {
		e.timer().idx = i
	}
}

func (h *evHeap) push(e event) {
	h.es = append(h.es, e)
	h.up(len(h.es)-1, &e)
}

func (h *evHeap) up(i int, e *event) {
	for i > 0 {
		parent := (i - 1) / 4
		if !e.less(&h.es[parent]) {
			break
		}
		h.place(i, &h.es[parent])
		i = parent
	}
	h.place(i, e)
}

func (h *evHeap) down(i int, e *event) {
	n := len(h.es)
	for {
		first := 4*i + 1
		if first >= n {
			break
		}
		best := first
		end := min(first+4, n)
		for j := first + 1; j < end; j++ {
			if h.es[j].less(&h.es[best]) {
				best = j
			}
		}
		if !h.es[best].less(e) {
			break
		}
		h.place(i, &h.es[best])
		i = best
	}
	h.place(i, e)
}

// peek returns the earliest event; the heap must not be empty.
func (h *evHeap) peek() *event { return &h.es[0] }

// pop removes and returns the earliest event; the heap must not be empty.
func (h *evHeap) pop() event {
	top := h.es[0]
	n := len(h.es) - 1
	last := h.es[n]
	h.es[n] = event{}
	h.es = h.es[:n]
	if n > 0 {
		h.down(0, &last)
	}
	if top.kind == evTimer {
		top.timer().idx = -1
	}
	return top
}

// remove deletes the event at index i.
func (h *evHeap) remove(i int) {
	n := len(h.es) - 1
	removed := h.es[i]
	last := h.es[n]
	h.es[n] = event{}
	h.es = h.es[:n]
	if i < n {
		if i > 0 && last.less(&h.es[(i-1)/4]) {
			h.up(i, &last)
		} else {
			h.down(i, &last)
		}
	}
	if removed.kind == evTimer {
		removed.timer().idx = -1
	}
}
