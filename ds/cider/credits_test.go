package cider_test

import (
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/farmem/farmem/ds/cider"
)

// step is one event of the credit state machine: an optimistic update with its failed CASes,
// or a pessimistic one (Take, then combined or not).
type step struct {
	opt      bool
	retries  int
	combined bool
	// what must hold after it
	pess   bool // for a pessimistic step: Take must have said yes
	credit uint32
}

func optimisticStep(retries int, credit uint32) step {
	return step{opt: true, retries: retries, credit: credit}
}

func lockStep(combined bool, credit uint32) step {
	return step{combined: combined, pess: true, credit: credit}
}

// TestCreditStateMachine walks the AIMD credit state machine of Algorithm 1 through its cases.
func TestCreditStateMachine(t *testing.T) {
	hot := func(n int) []step { // two consecutive optimistic updates with >= 2 failed CASes
		return []step{optimisticStep(n, 0), optimisticStep(n, cider.InitialCredit)}
	}
	cases := []struct {
		name  string
		steps []step
	}{
		{"one severe update is not enough", []step{optimisticStep(5, 0), optimisticStep(0, 0), optimisticStep(5, 0)}},
		{"hot after two consecutive updates with two retries", hot(2)},
		{"one retry is not severe", []step{optimisticStep(1, 0), optimisticStep(1, 0), optimisticStep(2, 0), optimisticStep(1, 0)}},
		{"the two must be consecutive", []step{optimisticStep(2, 0), optimisticStep(1, 0), optimisticStep(2, 0),
			optimisticStep(3, cider.InitialCredit)}},
		{"stays hot while combining", append(hot(2),
			lockStep(true, 36), lockStep(true, 36), lockStep(true, 36), lockStep(true, 36), lockStep(true, 36))},
		{"cools after uncombined acquisitions", append(hot(2),
			// spend one, halve: (36-1)/2=17, (17-1)/2=8, (8-1)/2=3, (3-1)/2=1, (1-1)/2=0
			lockStep(false, 17), lockStep(false, 8), lockStep(false, 3), lockStep(false, 1), lockStep(false, 0),
			optimisticStep(0, 0))},
		{"a combined acquisition in between slows the cooling", append(hot(2),
			lockStep(false, 17), lockStep(true, 17), lockStep(false, 8), lockStep(true, 8))},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cr := cider.NewCredits(0)
			const key = 42
			for i, s := range c.steps {
				if s.opt {
					require.False(t, cr.Take(key), "step %d: an optimistic step found credit", i)
					cr.AfterOptimistic(key, s.retries)
				} else {
					require.Equal(t, s.pess, cr.Take(key), "step %d: Take", i)
					cr.AfterPessimistic(key, s.combined)
				}
				got, _ := cr.Get(key)
				require.Equal(t, s.credit, got, "step %d: credit", i)
			}
		})
	}
}

// TestCreditsBounded: a compute node tracks at most its capacity of keys; keys that are neither
// hot nor warm are not kept at all.
func TestCreditsBounded(t *testing.T) {
	cr := cider.NewCredits(8)
	for k := range uint64(1000) {
		cr.AfterOptimistic(k, 0) // cool: not kept
	}
	require.Zero(t, cr.Len())
	for k := range uint64(100) {
		cr.AfterOptimistic(k, 2)
		cr.AfterOptimistic(k, 2)
	}
	require.Equal(t, 8, cr.Len())
	require.Equal(t, uint64(92), cr.Evicted())
	c, _ := cr.Get(99)
	require.Equal(t, uint32(cider.InitialCredit), c, "the newest key is kept")
	// A key that cools is dropped, and its slot reused.
	for cr.Take(99) {
		cr.AfterPessimistic(99, false)
	}
	cr.AfterOptimistic(99, 0)
	require.Equal(t, 7, cr.Len())
}

// TestCreditsConcurrent: the clients of a compute node share the maps (run with -race).
func TestCreditsConcurrent(t *testing.T) {
	cr := cider.NewCredits(64)
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 2000 {
				k := uint64((i + g) % 100)
				if cr.Take(k) {
					cr.AfterPessimistic(k, i%3 != 0)
				} else {
					cr.AfterOptimistic(k, i%4)
				}
			}
		}()
	}
	wg.Wait()
	require.LessOrEqual(t, cr.Len(), 64)
}
