package race_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/farmem/farmem/ds/race"
	"github.com/farmem/farmem/farmem/local"
)

// With one-bit fingerprints and one bucket group, half of the absent keys share the
// fingerprint of the one key stored, whose slot is then the only candidate of their Update and
// Delete: each reads that block, finds another key and answers ErrNotFound, leaving it as it
// was; the stored key's own Update and Delete find it.
func TestUpdateDeleteOneCandidate(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, local.Options{}, race.Params{Groups: 1, SlotsPerBucket: 2, FingerprintBits: 1, MaxDepth: 16})
	c := e.open(t, 0, race.Options{})
	require.NoError(t, c.tab.Insert(ctx, []byte("stored"), []byte("v0")))
	for i := range 64 {
		k := []byte(fmt.Sprintf("absent-%d", i))
		require.ErrorIs(t, c.tab.Update(ctx, k, []byte("x")), race.ErrNotFound, "update %s", k)
		require.ErrorIs(t, c.tab.Delete(ctx, k), race.ErrNotFound, "delete %s", k)
		got, err := c.tab.Search(ctx, []byte("stored"))
		require.NoError(t, err)
		require.Equal(t, []byte("v0"), got, "after %s", k)
	}
	require.NoError(t, c.tab.Update(ctx, []byte("stored"), []byte("v1")))
	got, err := c.tab.Search(ctx, []byte("stored"))
	require.NoError(t, err)
	require.Equal(t, []byte("v1"), got)
	require.NoError(t, c.tab.Delete(ctx, []byte("stored")))
	_, err = c.tab.Search(ctx, []byte("stored"))
	require.ErrorIs(t, err, race.ErrNotFound)
}
