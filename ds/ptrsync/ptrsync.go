package ptrsync

import (
	"context"
	"fmt"

	"github.com/farmem/farmem/farmem"
)

// Kind is the operation a pointer change belongs to. Inserts never go through a synchronizer:
// a structure CASes an empty pointer itself.
type Kind uint8

// The kinds of change.
const (
	// Update replaces the key's block with a new one.
	Update Kind = iota + 1
	// Delete empties the key's pointer.
	Delete
)

// String names the kind ("update", "delete").
func (k Kind) String() string {
	switch k {
	case Update:
		return "update"
	case Delete:
		return "delete"
	}
	return fmt.Sprintf("kind(%d)", uint8(k))
}

// Outcome is what a Commit did (see the package doc).
type Outcome uint8

// The outcomes of Commit.
const (
	// Retry: nothing took effect; the structure looks again.
	Retry Outcome = iota
	// Committed: the pointer changed from Result.Replaced to the new word.
	Committed
	// Combined: the change took effect within another client's commit (linearized just before
	// it, and overwritten by it); its own block was never published.
	Combined
)

// String names the outcome ("retry", "committed", "combined").
func (o Outcome) String() string {
	switch o {
	case Retry:
		return "retry"
	case Committed:
		return "committed"
	case Combined:
		return "combined"
	}
	return fmt.Sprintf("outcome(%d)", uint8(o))
}

// Result is what Commit did: its Outcome, and on Committed the word its CAS replaced (whose
// block the structure retires).
type Result struct {
	Outcome  Outcome
	Replaced uint64
	// CheckedAt, for a Committed result of Execute, is the clock reading of the deadline check
	// that preceded the committing Install (0 when the synchronizer does not know it): a
	// structure whose own rules need a reading taken during the section, at most its budget
	// past its start, may use it instead of reading the clock again after the CAS (ds/race's
	// retire of the replaced block).
	CheckedAt farmem.Time
}

// Plan is what a synchronizer wants from the structure for one operation.
type Plan struct {
	// DeferWrite leaves an update's new block unwritten until Target.Install, which writes it
	// only if this client publishes it (a combining synchronizer writes only the last writer's
	// block). Otherwise the structure writes it in its first round trip, in parallel with its
	// lookup.
	DeferWrite bool
	// Prefetch asks the structure to read the pointer's lock entry (LockSize bytes, if any)
	// with its lookup, into Target.LockBytes; structures that read the entry with the pointer
	// anyway may ignore it.
	Prefetch bool
}

// Target is one attempt at changing a data pointer, as a structure presents it to Commit. It is
// valid only during Commit: a structure may reuse it for its next operation.
type Target interface {
	// Kind is the operation.
	Kind() Kind
	// Pointer is the address of the data pointer word.
	Pointer() farmem.Addr
	// Lock is the address of the pointer's lock entry (LockSize bytes), or nil if the
	// structure keeps none.
	Lock() farmem.Addr
	// LockBytes is the lock entry as the structure read it with its lookup when the plan asked
	// for a prefetch, else nil.
	LockBytes() []byte
	// Old is the pointer word the structure read and confirmed to hold a block of the key.
	Old() uint64
	// Install CASes the pointer from expected to the new word: the new block's (written first
	// if it is not yet) or 0 for a delete. It returns the word it found (expected if it
	// succeeded) and the new word.
	Install(ctx context.Context, expected uint64) (found, installed uint64, err error)
	// Same reports whether w, a nonzero word read during this operation, names a block of the
	// key: at once for Old; a structure whose pointers change keys reads the block otherwise.
	Same(ctx context.Context, w uint64) (bool, error)
	// Deadline is the fabric time after which no CAS may use a word read during this attempt
	// (the structure's epoch pin runs out): Commit returns Retry instead.
	Deadline() farmem.Time
	// Memory is the client's Memory, for the synchronizer's own verbs.
	Memory() farmem.Memory
}

// Synchronizer makes the final pointer change of updates and deletes (see the package doc for
// its promises and costs).
type Synchronizer interface {
	// LockSize is the bytes of lock entry the synchronizer needs per pointer: 0, or a multiple
	// of 8.
	LockSize() int
	// Plan is called once per update or delete, before the operation's first round trip. key
	// identifies the key for contention tracking (the pointer array's index, KeyHash of a
	// byte-string key).
	Plan(kind Kind, key uint64) Plan
	// Commit attempts the change. An error means the outcome is unknown.
	Commit(ctx context.Context, t Target) (Result, error)
}

// KeyHash is the contention-tracking identity of a byte-string key (64-bit FNV-1a), what a
// structure with byte-string keys passes to Plan.
func KeyHash(key []byte) uint64 {
	h := uint64(14695981039346656037)
	for _, b := range key {
		h ^= uint64(b)
		h *= 1099511628211
	}
	return h
}
