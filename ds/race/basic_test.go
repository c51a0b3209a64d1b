package race_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/farmem/farmem/ds/race"
	"github.com/farmem/farmem/farmem"
	"github.com/farmem/farmem/farmem/local"
)

func TestOperations(t *testing.T) {
	e := newEnv(t, local.Options{}, race.Params{})
	c := e.open(t, 0, race.Options{})
	ctx := context.Background()
	k := []byte("hello")
	_, err := c.tab.Search(ctx, k)
	require.ErrorIs(t, err, race.ErrNotFound)
	require.ErrorIs(t, c.tab.Update(ctx, k, []byte("x")), race.ErrNotFound)
	require.ErrorIs(t, c.tab.Delete(ctx, k), race.ErrNotFound)
	require.NoError(t, c.tab.Insert(ctx, k, []byte("world")))
	require.ErrorIs(t, c.tab.Insert(ctx, k, []byte("again")), race.ErrExists)
	v, err := c.tab.Search(ctx, k)
	require.NoError(t, err)
	require.Equal(t, "world", string(v))
	require.NoError(t, c.tab.Update(ctx, k, []byte("there")))
	v, err = c.tab.Search(ctx, k)
	require.NoError(t, err)
	require.Equal(t, "there", string(v))
	require.NoError(t, c.tab.Delete(ctx, k))
	_, err = c.tab.Search(ctx, k)
	require.ErrorIs(t, err, race.ErrNotFound)
	require.NoError(t, c.tab.Insert(ctx, k, nil))
	v, err = c.tab.Search(ctx, k)
	require.NoError(t, err)
	require.Empty(t, v)

	// Empty keys, and the largest key and value that fit.
	require.NoError(t, c.tab.Insert(ctx, nil, []byte("empty key")))
	v, err = c.tab.Search(ctx, []byte{})
	require.NoError(t, err)
	require.Equal(t, "empty key", string(v))
	big := make([]byte, race.MaxKV-10)
	for i := range big {
		big[i] = byte(i * 7)
	}
	require.NoError(t, c.tab.Insert(ctx, []byte("0123456789"), big))
	v, err = c.tab.Search(ctx, []byte("0123456789"))
	require.NoError(t, err)
	require.Equal(t, big, v)
	require.ErrorIs(t, c.tab.Insert(ctx, []byte("01234567890"), big), race.ErrTooLarge)
	require.ErrorIs(t, c.tab.Update(ctx, []byte("0123456789"), append(big, 1)), farmem.ErrInvalid)

	// Another client sees it all.
	d := e.open(t, 0, race.Options{})
	v, err = d.tab.Search(ctx, k)
	require.NoError(t, err)
	require.Empty(t, v)

	require.NoError(t, c.tab.Close())
	require.NoError(t, c.tab.Close())
	_, err = c.tab.Search(ctx, k)
	require.ErrorIs(t, err, farmem.ErrClosed)
}

// TestManyKeys fills a table of small subtables from one client, so that it splits many times
// and doubles its directory, and checks every key after each phase, from a second client whose
// directory cache went stale at the start.
func TestManyKeys(t *testing.T) {
	e := newEnv(t, local.Options{}, race.Params{Groups: 2, SlotsPerBucket: 4})
	c := e.open(t, 0, race.Options{})
	stale := e.open(t, 0, race.Options{})
	ctx := context.Background()
	const n = 2000
	for i := range uint64(n) {
		require.NoError(t, c.tab.Insert(ctx, key(i), val(i, 20)), "insert %d", i)
	}
	info, err := c.tab.Info(ctx)
	require.NoError(t, err)
	t.Logf("after %d inserts: global depth %d, %d splits, %d doublings; %+v", n, info.GlobalDepth, info.Splits, info.Doublings, c.tab.Stats())
	require.GreaterOrEqual(t, info.Splits, uint64(3))
	require.GreaterOrEqual(t, info.Doublings, uint64(1))
	census := audit(t, c, true)
	require.Equal(t, n, census.Keys)
	require.Equal(t, int(info.Splits)+1, census.Subtables)
	for _, tab := range []*race.Table{c.tab, stale.tab} {
		for i := range uint64(n) {
			v, err := tab.Search(ctx, key(i))
			require.NoError(t, err, "search %d", i)
			require.Equal(t, i, unval(v))
		}
	}
	require.NotZero(t, stale.tab.Stats().Refreshes)
	for i := uint64(0); i < n; i += 2 {
		require.NoError(t, stale.tab.Update(ctx, key(i), val(i+1000000, 8)))
	}
	for i := uint64(1); i < n; i += 2 {
		require.NoError(t, stale.tab.Delete(ctx, key(i)))
	}
	for i := range uint64(n) {
		v, err := c.tab.Search(ctx, key(i))
		if i%2 == 1 {
			require.ErrorIs(t, err, race.ErrNotFound, "key %d", i)
			continue
		}
		require.NoError(t, err)
		require.Equal(t, i+1000000, unval(v))
	}

	// The directory is a hint: point every entry back at the initial subtable (an ancestor of
	// every subtable; what lost directory updates leave behind, in the extreme). A new client
	// still finds every key, walking the subtables' child words.
	info, err = c.tab.Info(ctx)
	require.NoError(t, err)
	dir := make([]byte, 8<<info.GlobalDepth)
	require.NoError(t, c.m.Read(ctx, info.Dir, dir))
	for j := 8; j < len(dir); j += 8 {
		copy(dir[j:j+8], dir[:8])
	}
	require.NoError(t, c.m.Write(ctx, info.Dir, dir))
	lost := e.open(t, 0, race.Options{})
	for i := uint64(0); i < n; i += 2 {
		v, err := lost.tab.Search(ctx, key(i))
		require.NoError(t, err, "key %d", i)
		require.Equal(t, i+1000000, unval(v))
	}
	require.NoError(t, lost.tab.Insert(ctx, key(n), val(n, 8)))
	v, err := c.tab.Search(ctx, key(n))
	require.NoError(t, err)
	require.Equal(t, uint64(n), unval(v))
	t.Logf("with a lost directory: %+v", lost.tab.Stats())
	require.Greater(t, lost.tab.Stats().Walks, uint64(0))
	require.Equal(t, n/2+1, audit(t, lost, true).Keys)

}
