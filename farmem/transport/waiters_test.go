package transport_test

import (
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/farmem/farmem/farmem/transport"
)

// woken reports whether ch holds a wake, consuming it.
func woken(ch chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// Notify wakes exactly the waiters on the words its bytes overlap, by either of its two
// passes (few words touched, or many), and WakeAll wakes every one.
func TestWaitersNotify(t *testing.T) {
	var w transport.Waiters
	w.Notify(0, 64) // nobody waits: nothing to do
	a, a2, b, c := w.Add(64), w.Add(64), w.Add(72), w.Add(4096)
	w.Notify(70, 1) // one byte of the word at 64
	require.True(t, woken(a))
	require.True(t, woken(a2))
	require.False(t, woken(b))
	w.Notify(71, 2) // straddles 64 and 72
	require.True(t, woken(a))
	require.True(t, woken(b))
	require.False(t, woken(c))
	w.Notify(0, 1<<20) // more words than waiters: the pass over the parked words
	require.True(t, woken(a) && woken(b) && woken(c))
	w.Notify(64, 0)
	require.False(t, woken(a))

	// One wake stays pending however many Notifies come before the waiter looks.
	w.Notify(64, 8)
	w.Notify(64, 8)
	require.True(t, woken(a))
	require.False(t, woken(a))

	w.Remove(64, a)
	w.Notify(64, 8)
	require.False(t, woken(a), "removed")
	require.True(t, woken(a2), "its neighbour on the word stays")
	w.WakeAll()
	require.True(t, woken(a2) && woken(b) && woken(c))
	for off, ch := range map[uint64]chan struct{}{64: a2, 72: b, 4096: c} {
		w.Remove(off, ch)
	}
	w.Notify(0, 1<<20)
	require.False(t, woken(a2) || woken(b) || woken(c))
}

// Concurrent Adds, Removes and Notifies (under the race detector): a waiter that re-checks
// after every wake never misses the write it waits for.
func TestWaitersConcurrent(t *testing.T) {
	var w transport.Waiters
	var mu sync.Mutex
	words := make([]uint64, 8)
	var wg sync.WaitGroup
	for i := range words {
		wg.Go(func() {
			off := uint64(i) * 8
			ch := w.Add(off)
			defer w.Remove(off, ch)
			for {
				mu.Lock()
				v := words[i]
				mu.Unlock()
				if v >= 100 {
					return
				}
				<-ch
			}
		})
	}
	for range 100 {
		for i := range words {
			mu.Lock()
			words[i]++
			mu.Unlock()
			w.Notify(uint64(i)*8, 8)
		}
	}
	wg.Wait()
}
