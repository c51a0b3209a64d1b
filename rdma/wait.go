package rdma

import (
	"sync"
	"sync/atomic"
)

// waiters are the Waits parked on words of this process's compute region, by word offset.
// Every write or atomic that lands in the region (a local client's, or a peer's through the
// listener) notifies the words it touched.
type waiters struct {
	count  atomic.Int32
	mu     sync.Mutex
	byWord map[uint64][]chan struct{}
}

// add registers a waiter on the word at off and returns its wake channel.
func (w *waiters) add(off uint64) chan struct{} {
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

func (w *waiters) remove(off uint64, ch chan struct{}) {
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

// notify wakes the waiters on the words [off, off+n) overlaps.
func (w *waiters) notify(off, n uint64) {
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

// wakeAll wakes every waiter, so each rechecks why it waits (a crash, a close).
func (w *waiters) wakeAll() {
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
