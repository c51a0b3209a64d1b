package kvstore

import (
	"context"
	"fmt"
	"strings"

	"github.com/farmem/farmem/ds/cider"
	"github.com/farmem/farmem/ds/ptrsync"
	"github.com/farmem/farmem/ds/qlock"
	"github.com/farmem/farmem/farmem"
)

// Sync builds the pointer synchronizer (ptrsync.Synchronizer: the final pointer change of
// Update and Delete) of each index handle the store opens. A Sync value is shared by every
// client of a Store, so a synchronizer with state per compute node (CIDER's credits, its local
// write-combining table) keeps it in the Sync and hands each handle what its node shares.
type Sync interface {
	// Name identifies the synchronizer ("optimistic", ...), as SyncByName takes it.
	Name() string
	// New returns a synchronizer for index handle i (0 ≤ i < MaxReplicas: one handle per index
	// instance) of client m. Synchronizers that keep state in the client's slice of its compute
	// node's region (a lock node) place handle i's at a distinct offset.
	New(ctx context.Context, m farmem.Memory, i int) (ptrsync.Synchronizer, error)
}

// Optimistic is the lock-free synchronizer (ptrsync.Optimistic): a CAS on the slot, retried
// after confirming a competitor's newer block of the same key.
var Optimistic Sync = optimisticSync{}

type optimisticSync struct{}

func (optimisticSync) Name() string { return "optimistic" }

func (optimisticSync) New(context.Context, farmem.Memory, int) (ptrsync.Synchronizer, error) {
	return ptrsync.NewOptimistic(), nil
}

// syncs lists the synchronizers SyncByName knows, with their default options, the default
// first.
var syncs = []func() Sync{
	func() Sync { return CIDER(cider.Options{}) },
	func() Sync { return Optimistic },
	func() Sync { return MCS(qlock.Options{}) },
	func() Sync { return Spin(cider.SpinOptions{}) },
}

// DefaultSync returns the synchronizer a Store uses when Options.Sync is nil: CIDER with its
// default options (a new Sync, with its own per-node credits, at each call).
func DefaultSync() Sync { return syncs[0]() }

// SyncNames returns the names SyncByName accepts, the default first.
func SyncNames() []string {
	names := make([]string, len(syncs))
	for i, f := range syncs {
		names[i] = f().Name()
	}
	return names
}

// SyncByName returns a new Sync by its name (see SyncNames, and "none": None), for command
// lines.
func SyncByName(name string) (Sync, error) {
	if name == None.Name() {
		return None, nil // for the kinds that take no synchronizer (Matrix)
	}
	for _, f := range syncs {
		if s := f(); s.Name() == name {
			return s, nil
		}
	}
	return nil, fmt.Errorf("kvstore: unknown synchronizer %q (want one of %s): %w", name, strings.Join(SyncNames(), ", "), farmem.ErrInvalid)
}
