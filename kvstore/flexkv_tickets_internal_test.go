package kvstore

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/farmem/farmem/ds/race"
	"github.com/farmem/farmem/farmem"
)

// TestTicketBookBounded: committed tickets no writer polls are forgotten past MaxTickets and
// past TicketWindow; a forgotten ticket is told apart from a dropped one (never answered
// stale, which would make its writer write again), and a polled one is answered once.
func TestTicketBookBounded(t *testing.T) {
	t.Parallel()
	var b ticketBook
	now := farmem.Time(0)
	const n = 3 * MaxTickets
	for i := uint64(1); i <= n; i++ {
		now = now.Add(time.Microsecond)
		b.add(i, now, race.Slot(i))
		require.LessOrEqual(t, b.len(), MaxTickets, "ticket %d", i)
		require.LessOrEqual(t, len(b.order), 2*MaxTickets+1)
	}
	require.Equal(t, MaxTickets, b.len())
	// The oldest were forgotten by count: a poll of one says so.
	committed, forgotten, _ := b.take(1, now)
	require.False(t, committed)
	require.True(t, forgotten)
	// A recent one is answered committed once; polled again it reads as dropped (its writer
	// has its answer already).
	committed, forgotten, replaced := b.take(n, now)
	require.True(t, committed)
	require.False(t, forgotten)
	require.Equal(t, race.Slot(n), replaced, "the replaced word is remembered with the ticket")
	committed, _, _ = b.take(n, now)
	require.False(t, committed, "a ticket is answered committed once")
	// A ticket never committed above the forgotten ones reads as dropped (stale).
	committed, forgotten, _ = b.take(n+1, now)
	require.False(t, committed)
	require.False(t, forgotten)
	// Past the window every entry is forgotten, whatever the count.
	now = now.Add(TicketWindow)
	committed, forgotten, _ = b.take(n-1, now)
	require.False(t, committed)
	require.True(t, forgotten)
	require.Zero(t, b.len())
	// Polls keep the order compact.
	for i := uint64(n + 2); i < n+2+4*MaxTickets; i++ {
		b.add(i, now, 0)
		c, _, _ := b.take(i, now)
		require.True(t, c)
	}
	require.Zero(t, b.len())
	require.LessOrEqual(t, len(b.order), 2*MaxTickets+1)
}
