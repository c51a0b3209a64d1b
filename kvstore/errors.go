package kvstore

import (
	"errors"
	"fmt"

	"github.com/farmem/farmem/farmem"
)

// Errors of the store. Operations also return the transport's errors (farmem.ErrNodeDown, a
// context's error, ...) wrapped: such an operation may or may not have taken effect. One of
// them is farmem.ErrNodeLost (it wraps ErrNodeDown): the key's entry or value was on a memory
// node that restarted and lost its memory, until Store.Adopt (see the package doc).
var (
	// ErrNotFound: Get, Update or Delete of a key the store does not hold.
	ErrNotFound = errors.New("kvstore: key not found")
	// ErrExists: Insert of a key the store already holds.
	ErrExists = errors.New("kvstore: key exists")
	// ErrEmptyKey: a zero-length key. Keys are at least one byte long (so that the empty key
	// can mean "from the first key" in a Scan).
	ErrEmptyKey = fmt.Errorf("kvstore: empty key: %w", farmem.ErrInvalid)
	// ErrTooLarge: a key longer than the index's Limits.MaxKey, or a key and value together
	// longer than Limits.MaxKV. Nothing was sent.
	ErrTooLarge = fmt.Errorf("kvstore: key or value too large: %w", farmem.ErrInvalid)
	// ErrNoOrderedIndex: Scan on a store whose index is not ordered. It wraps
	// farmem.ErrNotSupported, so a harness can tell "cannot run this workload" from a failure.
	ErrNoOrderedIndex = fmt.Errorf("kvstore: the store has no ordered index to scan: %w", farmem.ErrNotSupported)
	// ErrNoStore: Open with Options.NoCreate found no store on the fabric (no root, or memory
	// nodes not formatted).
	ErrNoStore = errors.New("kvstore: no store on this fabric")
	// ErrBadRoot: the root word or the descriptor it names is not one this package wrote.
	ErrBadRoot = fmt.Errorf("kvstore: bad store root: %w", farmem.ErrInvalid)
	// ErrMismatch: the store on the fabric was created with another index kind or replication
	// scheme than Options names.
	ErrMismatch = fmt.Errorf("kvstore: store layout differs from the options: %w", farmem.ErrInvalid)
)

// ErrNoSpace: far memory has no room for the pair, or for the index to grow (a RACE split's new
// subtable or directory): an Insert, Update or Put that fails with it (wrapped, alongside the
// allocator's error) had no effect, and the store is exactly as usable as before: every key
// readable, updatable and deletable. It is farmem.ErrNoSpace itself, so errors.Is with either
// holds. Memory that Delete and Update free becomes reusable once no client can still read it
// (see the package doc, "Memory"); the store reclaims it when an operation runs out, before
// giving up.
var ErrNoSpace = farmem.ErrNoSpace

// errClosed is returned by operations on a closed Store or Session.
var errClosed = fmt.Errorf("kvstore: closed: %w", farmem.ErrClosed)
