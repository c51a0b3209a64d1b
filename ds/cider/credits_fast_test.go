package cider

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// The no-entry fast path answers as the locked path would: a cool key has no credit and leaves
// no entry; a key that turns hot (two updates of HotnessThreshold failures) is tracked and gets
// credit, which Take then spends; once its credit and retry record cool down it is dropped and
// the fast path applies again.
func TestCreditsFastPathAgrees(t *testing.T) {
	c := NewCredits(0)
	require.False(t, c.Take(1))
	c.AfterOptimistic(1, HotnessThreshold-1)
	require.Zero(t, c.Len())
	require.Zero(t, c.tracked.Load())
	c.AfterOptimistic(1, HotnessThreshold)
	c.AfterOptimistic(1, HotnessThreshold)
	require.EqualValues(t, 1, c.tracked.Load())
	require.True(t, c.Take(1), "a hot key's credit is spent")
	require.False(t, c.Take(2), "another key has none, with the map in use")
	c.AfterPessimistic(1, false)
	for c.Take(1) {
	}
	c.AfterOptimistic(1, 0)
	require.Zero(t, c.Len())
	require.Zero(t, c.tracked.Load(), "a cooled key is dropped and the count follows")
}
