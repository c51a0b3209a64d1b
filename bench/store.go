package bench

import (
	"context"
	"errors"
	"fmt"

	"github.com/farmem/farmem/farmem"
)

// Store is a system under test: kvstore over some transport, or a peer (MapStore, Redis). The
// harness opens one Session per worker.
type Store interface {
	// Name names the store in reports ("gomap", "redis", "kvstore/cxl", ...).
	Name() string
	// Open returns a new session, for one goroutine.
	Open(ctx context.Context) (Session, error)
	// Close releases the store (stops a server the store started). It is idempotent.
	Close() error
}

// Session is one worker's handle on a Store, used by one goroutine at a time. Key and value
// slices passed in are the caller's and are reused after the call returns: a session that
// keeps them must copy them.
type Session interface {
	// Read returns the value of key, or an error wrapping ErrNotFound (or the store's own
	// not-found error) if there is none. The caller does not modify the returned slice, which
	// may be valid only until the session's next call.
	Read(ctx context.Context, key []byte) ([]byte, error)
	// Insert adds key with value. Inserting a key that exists is an error.
	Insert(ctx context.Context, key, value []byte) error
	// Update replaces the value of an existing key. Updating a missing key is an error.
	Update(ctx context.Context, key, value []byte) error
	// Close releases the session. It is idempotent.
	Close() error
}

// Scanner is implemented by sessions of stores with an ordered index. A workload that scans
// (YCSB's E) reports a store whose sessions are not Scanners as unsupported.
//
// The order is bytewise on the keys (bytes.Compare), the order of kvstore.OrderedIndex: with
// binary64 keys it is the key numbers' order, with YCSB's string keys it is the names' order.
type Scanner interface {
	// Scan reads up to n records whose keys are at or after start, in ascending key order,
	// calls visit (when not nil) with each record's key and value in that order, and returns
	// how many it read (none for n <= 0). The slices visit is given are valid only during that
	// call. A scan need not be atomic: each record is as some read during the scan would have
	// returned it.
	Scan(ctx context.Context, start []byte, n int, visit func(key, value []byte)) (int, error)
}

// Coster is implemented by sessions whose costs are counted (far-memory stores): the harness
// takes Costs before and after each run of consecutive operations of one kind (each one
// operation when kinds alternate; see Worker.Step) and reports the deltas per operation. Costs
// must count only this session's work (a farmem.Memory's Stats, say), so that deltas are exact.
type Coster interface {
	Costs() farmem.Stats
}

// Errors of the peers and the harness. A session may instead return its own errors; any error
// wrapping errors.ErrUnsupported or farmem.ErrNotSupported makes the harness report the store
// as unable to run the workload instead of counting failed operations.
var (
	// ErrNotFound: the key does not exist (Read, Update).
	ErrNotFound = errors.New("bench: key not found")
	// ErrExists: the key exists already (Insert).
	ErrExists = errors.New("bench: key exists")
	// ErrNeedsOrderedIndex: the workload scans and the store has no ordered index. It wraps
	// errors.ErrUnsupported.
	ErrNeedsOrderedIndex = fmt.Errorf("needs an ordered index for its scans, and this store has none yet: %w", errors.ErrUnsupported)
	// ErrRedisNotInstalled: redis-server is not on the PATH (StartRedis).
	ErrRedisNotInstalled = errors.New("bench: redis-server is not installed")
)

// isUnsupported reports whether err says the store cannot do the operation at all.
func isUnsupported(err error) bool {
	return errors.Is(err, errors.ErrUnsupported) || errors.Is(err, farmem.ErrNotSupported)
}
