package qlock

import (
	"fmt"

	"github.com/farmem/farmem/farmem"
)

// EntrySize is the size in bytes of a lock entry in far memory: the lock word and the epoch
// word. An entry must be 8-byte aligned; a zero entry is a free lock.
const EntrySize = 16

// NodeSize is the size in bytes of a client's lock node in its slice of its compute node's
// region (Options.Offset says where).
const NodeSize = 32

// Offsets of the words of a lock entry and of a lock node.
const (
	entryWord  = 0 // lock word: tail ticket, closed bit, generation
	entryEpoch = 8 // epoch: advanced by every hand-over to a waiting successor

	nodeGrant = 0  // grant word: kind, acquisition number, check of the payload
	nodeWordA = 8  // payload: Msg.Word
	nodeWordB = 16 // payload: Msg.From | Msg.Aux << 45
	nodeNext  = 24 // link word: written by the successor
)

// Field widths.
const (
	// SeqBits is the width of an acquisition number: a client numbers its acquisitions modulo
	// 2^29, and every message names the acquisition it is for.
	SeqBits = 29
	// GenBits is the width of a lock's generation, advanced by every reset.
	GenBits = 18
	// AuxBits is the width of Msg.Aux.
	AuxBits = 19

	seqMask    = 1<<SeqBits - 1
	ticketBits = 16 + SeqBits
	ticketMask = 1<<ticketBits - 1
	closedBit  = uint64(1) << ticketBits
	genShift   = ticketBits + 1
	auxMask    = 1<<AuxBits - 1
	linkTag    = 64 - 1 - ticketBits // bits of the predecessor's number in a link word
	linkedBit  = uint64(1) << 63
)

// Ticket names one acquisition: the client's id in the low 16 bits and its acquisition number
// (SeqBits wide) above. The zero Ticket names nobody.
type Ticket uint64

// MakeTicket returns the ticket of acquisition seq (taken modulo 2^SeqBits) of client id.
func MakeTicket(id farmem.ClientID, seq uint32) Ticket {
	return Ticket(uint64(id) | uint64(seq&seqMask)<<16)
}

// Client returns the ticket's client.
func (t Ticket) Client() farmem.ClientID { return farmem.ClientID(t) }

// Seq returns the ticket's acquisition number.
func (t Ticket) Seq() uint32 { return uint32(t>>16) & seqMask }

// IsZero reports whether the ticket names nobody.
func (t Ticket) IsZero() bool { return t.Client() == 0 }

func (t Ticket) String() string { return fmt.Sprintf("%d#%d", t.Client(), t.Seq()) }

// Word is a decoded lock word (the first word of an entry).
type Word uint64

// MakeWord builds a lock word.
func MakeWord(tail Ticket, closed bool, gen uint32) Word {
	w := uint64(tail) & ticketMask
	if closed {
		w |= closedBit
	}
	return Word(w | uint64(gen)<<genShift)
}

// Tail is the acquisition at the end of the queue (zero: the lock is free).
func (w Word) Tail() Ticket { return Ticket(uint64(w) & ticketMask) }

// Closed reports whether a closing acquisition (see Locker.Enqueue) is in the queue: no other
// acquisition can join it until that one releases.
func (w Word) Closed() bool { return uint64(w)&closedBit != 0 }

// Gen is the lock's generation, advanced by every reset.
func (w Word) Gen() uint32 { return uint32(uint64(w) >> genShift) }

func (w Word) String() string {
	c := ""
	if w.Closed() {
		c = " closed"
	}
	return fmt.Sprintf("tail %v%s gen %d", w.Tail(), c, w.Gen())
}

// reset is the word a reset installs over w: no tail, not closed, the next generation.
func (w Word) reset() Word { return MakeWord(0, false, (w.Gen()+1)&(1<<GenBits-1)) }

// Kind is the kind of a message written into a lock node.
type Kind uint8

// The kinds of message. Granted is the MCS hand-over; Exec, Done and Combined are the steps of
// ds/cider's global write combining (the lock passes along with each of them).
const (
	// Granted: the lock is the receiver's. Word may carry a hint from the previous holder.
	Granted Kind = iota + 1
	// Exec: the receiver, the tail of the queue, holds the lock to execute a combined batch
	// for the coordinator From; Word carries a hint.
	Exec
	// Done: the executor's answer to the coordinator: the lock is back, Word and Aux carry the
	// outcome.
	Done
	// Combined: the lock passes along a combined batch; Word and Aux carry the outcome.
	Combined
	numKinds
)

func (k Kind) String() string {
	switch k {
	case Granted:
		return "granted"
	case Exec:
		return "exec"
	case Done:
		return "done"
	case Combined:
		return "combined"
	}
	return fmt.Sprintf("kind(%d)", uint8(k))
}

// Msg is a message from one acquisition to another, written into the receiver's lock node with
// one-sided writes.
type Msg struct {
	Kind Kind
	// Word is a 64-bit payload (a hint or a result).
	Word uint64
	// From is a ticket the message carries (the coordinator's, for Exec).
	From Ticket
	// Aux is AuxBits of small data (a result code, a count).
	Aux uint32
	// Damaged is set on a received message whose payload failed its check: a writer stalled
	// across a reset overwrote it after it was written. Only Kind is to be trusted.
	Damaged bool
}

// grantWord encodes the grant word of a message for acquisition seq with payload words a, b.
func grantWord(k Kind, seq uint32, a, b uint64) uint64 {
	return uint64(k)<<61 | uint64(seq&seqMask)<<32 | uint64(check(k, seq, a, b))
}

// decodeGrant splits a grant word.
func decodeGrant(g uint64) (k Kind, seq uint32, chk uint32) {
	return Kind(g >> 61), uint32(g>>32) & seqMask, uint32(g)
}

// check is a 32-bit digest of a message, so that a payload overwritten by a stale writer is
// detected.
func check(k Kind, seq uint32, a, b uint64) uint32 {
	h := mix(uint64(k)<<32 | uint64(seq&seqMask))
	h = mix(h ^ a)
	h = mix(h ^ b)
	return uint32(h ^ h>>32)
}

// mix is SplitMix64's finalizer.
func mix(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ x>>30) * 0xbf58476d1ce4e5b9
	x = (x ^ x>>27) * 0x94d049bb133111eb
	return x ^ x>>31
}

// wordB packs a message's ticket and aux.
func wordB(m Msg) uint64 { return uint64(m.From)&ticketMask | uint64(m.Aux&auxMask)<<ticketBits }

// decodeMsg rebuilds a message from its grant word and payload, checking the payload.
func decodeMsg(g, a, b uint64) Msg {
	k, seq, chk := decodeGrant(g)
	m := Msg{Kind: k, Word: a, From: Ticket(b & ticketMask), Aux: uint32(b>>ticketBits) & auxMask}
	if check(k, seq, a, b) != chk {
		m = Msg{Kind: k, Damaged: true}
	}
	return m
}

// linkWord is what successor s writes into the lock node of its predecessor, whose acquisition
// number is pseq: the successor's ticket and the predecessor's number (its low bits).
func linkWord(pseq uint32, s Ticket) uint64 {
	return linkedBit | uint64(pseq&(1<<linkTag-1))<<ticketBits | uint64(s)&ticketMask
}

// decodeLink returns the successor a link word names for acquisition seq, or false if the word
// is no link for it.
func decodeLink(w uint64, seq uint32) (Ticket, bool) {
	if w&linkedBit == 0 || uint32(w>>ticketBits)&(1<<linkTag-1) != seq&(1<<linkTag-1) {
		return 0, false
	}
	t := Ticket(w & ticketMask)
	return t, !t.IsZero()
}
