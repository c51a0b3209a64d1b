package kvstore

import (
	"context"
	"errors"
	"fmt"

	"github.com/farmem/farmem/ds/race"
	"github.com/farmem/farmem/farmem"
)

// DefaultMetaSize is the per-slot synchronizer metadata a Race index is created with when its
// Params leave MetaSize zero: room for the lock entry of every synchronizer of ds/cider (16
// bytes), so that any of them can be selected on a store created with the defaults.
const DefaultMetaSize = 16

// DefaultAddressCache is the address cache of each handle of a Race index whose Options leave
// AddressCache 0: 2^16 entries in sets of two, 2 MiB (a set is a cache line), allocated at the
// handle's first operation that finds or commits a key. Over 10^4 keys read at random it answers about 98 Gets in 100 in one round trip
// once each key was read (BenchmarkLimit: 1.02 round trips per Get), and about 65,536/n of
// them over n keys beyond its size.
const DefaultAddressCache = 1 << 16

// Race is the RACE extendible hash index (package ds/race), the store's default kind. It is not
// ordered: Store.Scan returns ErrNoOrderedIndex. Round trips, uncontended, with Optimistic:
// Get 1 when the session's address cache names the key's block and the block is still its
// value, 2 otherwise (1 if absent), Insert 3, Update 3, Delete 3; an Update or Delete of a key
// the cache names, its slot and block on one memory node, 2 (see the package doc).
//
// Every handle invalidates the blocks it replaces (race.Options.Invalidate, one 8-byte write
// in the round trip that reads the block's head, no round trip more), whatever Options says, so
// that every session may keep an address cache (race.Options.AddressCache, DefaultAddressCache
// entries unless Options sets it; negative: none): a Get of a key the session read, inserted or updated before
// reads the key's slot word and block in one round trip (no bucket, no pin), and an Update or
// Delete of it reads the slot word and the block's head in its first round trip instead of
// the buckets, then the block's (CachedUpdateRoundTrips). A program that writes a store's table through race
// directly, rather than through a store, must set Invalidate too.
type Race struct {
	// Params lay out a table when the store is created (race's defaults, with MetaSize
	// DefaultMetaSize when zero). An existing store's table keeps its own.
	Params race.Params
	// Options configure each client's handle; the store sets Sync from Options.Sync, sets
	// Invalidate, and AddressCache to DefaultAddressCache when 0 (negative: no cache). A
	// replicated index or block copies keep no cache (race.Options.AddressCache).
	Options race.Options
	// Plain runs RACE as its paper does: no address cache and no invalidation (Options'
	// AddressCache and Invalidate are ignored), so a Get always reads the buckets and an update
	// writes nothing into the block it replaces. Every client of a store must agree: a plain
	// client's writes would let other clients' caches go on reading values it replaced. The
	// reproductions' RACE baseline runs it.
	Plain bool
	// Replicas, 3, 5 or 7, replicates the index on that many memory nodes when the store is
	// created (race.Params.IndexReplicas; 1: not replicated): the index then survives any
	// (Replicas-1)/2 of them crashed, the first one included, at the costs race's package doc
	// states (see "Replicated index"). 0 takes the store's factor, Options.Replicas (so that
	// one knob replicates the metadata and the index, on the same nodes:
	// race.IndexReplicaNodes); any other value above 1 must equal Options.Replicas when that
	// is above 1, or Open fails with farmem.ErrInvalid. Under unreplicated metadata the index's
	// replicas are the highest Replicas memory nodes. The count is recorded in the table's
	// root, and an existing store's table keeps its own. A replicated index changes its
	// pointers with the Optimistic synchronizer only: a store created with one and no
	// Options.Sync records Optimistic; the others keep their lock state in memory they reach
	// with their own client, outside the replicated memory, and Open refuses them with
	// farmem.ErrInvalid.
	Replicas int
}

// Name implements IndexKind: "race".
func (Race) Name() string { return "race" }

// Limits implements IndexKind: a key and value together of at most race.MaxKV bytes (16288; 16296 before race layout version 2).
func (Race) Limits() Limits { return Limits{MaxKey: race.MaxKV, MaxKV: race.MaxKV} }

// Create implements IndexKind.
func (r Race) Create(ctx context.Context, c IndexEnv) (farmem.Addr, error) {
	p := r.Params
	if p.MetaSize == 0 {
		p.MetaSize = DefaultMetaSize
	}
	if p.IndexReplicas == 0 && r.Replicas > 1 {
		p.IndexReplicas = r.Replicas
	}
	return race.Create(ctx, c.Memory, c.Alloc, p)
}

// Open implements IndexKind.
func (r Race) Open(ctx context.Context, c IndexEnv, root farmem.Addr) (Index, error) {
	o := r.Options
	if c.Sync != nil {
		o.Sync = c.Sync
	}
	if o.Health == nil {
		o.Health = c.Health
	}
	o.Invalidate = !r.Plain
	switch {
	case r.Plain:
		o.AddressCache = 0
	case o.AddressCache == 0:
		o.AddressCache = DefaultAddressCache
	case o.AddressCache < 0:
		o.AddressCache = 0
	}
	if err := checkReplicatedSync(root, o.Sync); err != nil {
		return nil, err
	}
	t, err := race.Open(ctx, c.Memory, c.Alloc, root, o)
	if err != nil {
		return nil, err
	}
	return &raceIndex{t: t}, nil
}

// raceIndex adapts a race.Table to Index.
type raceIndex struct {
	t *race.Table
}

// mapRace turns race's answers into the store's sentinels.
func mapRace(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, race.ErrNotFound):
		return ErrNotFound
	case errors.Is(err, race.ErrExists):
		return ErrExists
	case errors.Is(err, race.ErrTooLarge):
		return fmt.Errorf("%w: %w", ErrTooLarge, err)
	}
	return err
}

func (x *raceIndex) Get(ctx context.Context, key []byte) ([]byte, error) {
	v, err := x.t.Search(ctx, key)
	return v, mapRace(err)
}

func (x *raceIndex) AppendGet(ctx context.Context, dst, key []byte) ([]byte, error) {
	v, err := x.t.AppendSearch(ctx, dst, key)
	if err == nil {
		return v, nil
	}
	return v, mapRace(err)
}

func (x *raceIndex) Insert(ctx context.Context, key, value []byte) error {
	return mapRace(x.t.Insert(ctx, key, value))
}

func (x *raceIndex) Update(ctx context.Context, key, value []byte) error {
	if err := x.t.Update(ctx, key, value); err != nil {
		return mapRace(err)
	}
	return nil
}

func (x *raceIndex) Delete(ctx context.Context, key []byte) error {
	return mapRace(x.t.Delete(ctx, key))
}

func (x *raceIndex) Close() error { return x.t.Close() }

// Table returns the race table behind the handle (for Audit, Info and Stats).
func (x *raceIndex) Table() *race.Table { return x.t }
