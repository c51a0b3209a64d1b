package kvstore

import (
	"fmt"
	"time"

	"github.com/farmem/farmem/ds/race"
	"github.com/farmem/farmem/farmem"
)

// A proxy remembers the tickets of pending writes it committed until their writers poll them
// (a writer that gave up never does). The set is bounded twice: an entry is forgotten
// TicketWindow after its commit (by the proxy's clock), and the oldest entries are forgotten
// past MaxTickets. A poll of a forgotten ticket is answered "forgotten": its writer returns an
// outcome-unknown error (wrapping farmem.ErrNodeDown, as when the proxy does not answer), never
// "stale", which would make it resolve and write again. Tickets are issued in increasing order,
// so the proxy tells a forgotten ticket from one dropped uncommitted with a hand-over (stale)
// by the highest ticket it forgot; a dropped ticket below it is answered forgotten too, which
// is merely conservative.
const (
	// TicketWindow is how long a proxy remembers a committed ticket no one has polled. A
	// polling writer asks again within a millisecond (its backoff's cap) plus a round trip.
	TicketWindow = time.Second
	// MaxTickets bounds a proxy's committed tickets that no one has polled.
	MaxTickets = 4096
)

// errTicketForgotten is a writer's poll answered "forgotten": the write may have committed.
var errTicketForgotten = fmt.Errorf("kvstore: flexkv: commit outcome unknown: the proxy forgot the ticket: %w", farmem.ErrNodeDown)

// ticketBook is a proxy's committed, unpolled tickets. Its owner's mutex guards it.
type ticketBook struct {
	at        map[uint64]ticketRec // commit time and replaced word by ticket
	order     []uint64             // tickets in commit order (polled ones are skipped)
	forgotten uint64               // the highest ticket dropped unpolled
}

// add records ticket t committed at now, forgetting what the bounds require.
// ticketRec is a committed ticket's record: when it committed and the word it replaced.
type ticketRec struct {
	at       farmem.Time
	replaced race.Slot
}

func (b *ticketBook) add(t uint64, now farmem.Time, replaced race.Slot) {
	if b.at == nil {
		b.at = map[uint64]ticketRec{}
	}
	b.at[t] = ticketRec{at: now, replaced: replaced}
	b.order = append(b.order, t)
	b.prune(now)
}

// prune forgets entries older than TicketWindow and the oldest past MaxTickets, and compacts
// the order of polled entries.
func (b *ticketBook) prune(now farmem.Time) {
	i := 0
	for ; i < len(b.order); i++ {
		t := b.order[i]
		rec, ok := b.at[t]
		if !ok {
			continue // polled
		}
		if len(b.at) <= MaxTickets && now.Sub(rec.at) < TicketWindow {
			break
		}
		delete(b.at, t)
		b.forgotten = max(b.forgotten, t)
	}
	b.order = b.order[i:]
	if len(b.order) > 2*MaxTickets {
		live := make([]uint64, 0, len(b.at))
		for _, t := range b.order {
			if _, ok := b.at[t]; ok {
				live = append(live, t)
			}
		}
		b.order = live
	}
}

// take answers a poll of ticket t that is not pending: committed (and forgets it), forgotten,
// or neither (dropped uncommitted with a hand-over).
func (b *ticketBook) take(t uint64, now farmem.Time) (committed, forgotten bool, replaced race.Slot) {
	b.prune(now)
	if rec, ok := b.at[t]; ok {
		delete(b.at, t)
		return true, false, rec.replaced
	}
	return false, t <= b.forgotten, 0
}

// len is how many committed tickets the book holds.
func (b *ticketBook) len() int { return len(b.at) }
