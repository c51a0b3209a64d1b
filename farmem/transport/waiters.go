package transport

import (
	"sync"
	"sync/atomic"
)

// Waiters are the Waits parked on the words of a region a transport serves from its own
// process's memory (a local fabric's compute node, an rdma process's compute region): a Wait
// registers on its word's offset with Add and parks on the channel it gets; whatever writes
// the region (a client's write or atomic, a peer's arriving through a listener) calls Notify
// with the bytes it touched, which wakes the waiters on every word those bytes overlap.
//
// A wake is a hint, never a value: the woken Wait re-reads its word and parks again if it
// still does not hold, so a wake lost to a full channel (one is pending already) or a Notify
// for a neighbouring byte costs nothing but a re-read. Notify is one atomic load when nobody
// waits; otherwise it takes the lock and looks up each word touched, or passes over the
// parked words when there are fewer of them. The zero value is ready to use.
type Waiters struct {
	count  atomic.Int32
	mu     sync.Mutex
	byWord map[uint64][]chan struct{}
}

// Add registers a waiter on the word at offset off (8-byte aligned) and returns the channel it
// is woken on (buffered, one wake pending at most). Every Add needs its Remove.
func (w *Waiters) Add(off uint64) chan struct{} {
	ch := make(chan struct{}, 1)
	w.mu.Lock()
	if w.byWord == nil {
		w.byWord = make(map[uint64][]chan struct{})
	}
	w.byWord[off] = append(w.byWord[off], ch)
	w.count.Add(1)
	w.mu.Unlock()
	return ch
}

// Remove unregisters the waiter Add returned ch for.
func (w *Waiters) Remove(off uint64, ch chan struct{}) {
	w.mu.Lock()
	list := w.byWord[off]
	for i, c := range list {
		if c == ch {
			list[i] = list[len(list)-1]
			list = list[:len(list)-1]
			break
		}
	}
	if len(list) == 0 {
		delete(w.byWord, off)
	} else {
		w.byWord[off] = list
	}
	w.count.Add(-1)
	w.mu.Unlock()
}

// Notify wakes the waiters on the words that the n bytes at offset off overlap.
func (w *Waiters) Notify(off, n uint64) {
	if w.count.Load() == 0 || n == 0 {
		return
	}
	lo, hi := off&^7, (off+n-1)&^7
	w.mu.Lock()
	if (hi-lo)/8+1 > uint64(len(w.byWord)) {
		for o, list := range w.byWord {
			if o >= lo && o <= hi {
				wake(list)
			}
		}
	} else {
		for o := lo; o <= hi; o += 8 {
			wake(w.byWord[o])
		}
	}
	w.mu.Unlock()
}

// WakeAll wakes every waiter, so that each rechecks why it waits (its client crashed or
// closed, the region went away).
func (w *Waiters) WakeAll() {
	w.mu.Lock()
	for _, list := range w.byWord {
		wake(list)
	}
	w.mu.Unlock()
}

func wake(list []chan struct{}) {
	for _, ch := range list {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
}
