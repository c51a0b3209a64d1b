package kvstore_test

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/farmem/farmem/alloc"
	"github.com/farmem/farmem/ds/race"
	"github.com/farmem/farmem/farmem/local"
	"github.com/farmem/farmem/kvstore"
)

// mirror is a test Replicator: every write goes to each instance in turn, reads go to the
// first. (Not linearizable under concurrency; it shows how a replicator plugs in.)
type mirror struct{ n int }

func (m mirror) Name() string  { return "mirror" }
func (m mirror) Replicas() int { return m.n }
func (m mirror) Combine(rs []kvstore.Index) (kvstore.Index, error) {
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

// TestReplicatorPlugsIn: a store created with a two-instance replicator records two roots, its
// writes reach both instances, and it reopens only with that replicator.
func TestReplicatorPlugsIn(t *testing.T) {
	t.Parallel()
	f := newLocal(t, local.Options{Shape: local.Shape{MemoryNodes: 2}})
	ctx := context.Background()
	s := openStore(t, f, kvstore.Options{Alloc: quietAlloc, Replication: mirror{n: 2}})
	d := s.Descriptor()
	require.Equal(t, "mirror", d.Replication)
	require.Len(t, d.Roots, 2)
	require.NotEqual(t, d.Roots[0], d.Roots[1])
	semantics(t, s, "mirror")
	require.NoError(t, s.Put(ctx, []byte("k"), []byte("v")))

	m, err := f.Open(ctx, f.Topology().ComputeNodes()[0])
	require.NoError(t, err)
	defer m.Close()
	a, err := alloc.New(ctx, m, quietAlloc)
	require.NoError(t, err)
	defer a.Close()
	for i, root := range d.Roots {
		tab, err := race.Open(ctx, m, a, root, race.Options{})
		require.NoError(t, err)
		v, err := tab.Search(ctx, []byte("k"))
		require.NoError(t, err, "instance %d", i)
		require.Equal(t, "v", string(v))
		require.Equal(t, kvstore.DefaultMetaSize, tab.Params().MetaSize)
		require.NoError(t, tab.Close())
	}
	_, err = kvstore.Open(ctx, f, kvstore.Options{})
	require.ErrorIs(t, err, kvstore.ErrMismatch, "opened without its replicator")
	again := openStore(t, f, kvstore.Options{Alloc: quietAlloc, Replication: mirror{n: 2}})
	v, err := again.Get(ctx, []byte("k"))
	require.NoError(t, err)
	require.Equal(t, "v", string(v))
}
