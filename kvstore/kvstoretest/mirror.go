package kvstoretest

import (
	"context"
	"errors"

	"github.com/farmem/farmem/kvstore"
)

// Mirror is a Replicator for tests of how a replicator plugs in: every write goes to each of
// its N instances in turn, reads go to the first. It is not linearizable under concurrency
// (two writers may reach the instances in different orders).
type Mirror struct{ N int }

// Name is "mirror".
func (m Mirror) Name() string { return "mirror" }

// Replicas is N.
func (m Mirror) Replicas() int { return m.N }

// Combine returns the index over rs that writes to all and reads from rs[0].
func (m Mirror) Combine(rs []kvstore.Index) (kvstore.Index, error) {
	return &mirrored{rs: rs}, nil
}

type mirrored struct{ rs []kvstore.Index }

func (x *mirrored) Get(ctx context.Context, k []byte) ([]byte, error) { return x.rs[0].Get(ctx, k) }
func (x *mirrored) all(f func(kvstore.Index) error) error {
	err := f(x.rs[0])
	if err != nil {
		return err
	}
	for _, r := range x.rs[1:] {
		if err := f(r); err != nil {
			return err
		}
	}
	return nil
}
func (x *mirrored) Insert(ctx context.Context, k, v []byte) error {
	return x.all(func(i kvstore.Index) error { return i.Insert(ctx, k, v) })
}
func (x *mirrored) Update(ctx context.Context, k, v []byte) error {
	return x.all(func(i kvstore.Index) error { return i.Update(ctx, k, v) })
}
func (x *mirrored) Delete(ctx context.Context, k []byte) error {
	return x.all(func(i kvstore.Index) error { return i.Delete(ctx, k) })
}
func (x *mirrored) Close() error {
	var errs []error
	for _, r := range x.rs {
		errs = append(errs, r.Close())
	}
	return errors.Join(errs...)
}
