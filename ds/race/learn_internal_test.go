package race

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/farmem/farmem/farmem/local"
)

// TestLearnKeepsEachValue: when a view holds the key in two committed slots (reads spread over
// time may see it so), learn appends the first block of the key it reads to the caller's buffer
// and gives any other a copy of its own, so that with spare capacity in the buffer the second's
// append does not overwrite the first's value, which findKey answers.
func TestLearnKeepsEachValue(t *testing.T) {
	ctx := context.Background()
	_, _, _, _, tab := regionTable(t, local.Options{Shape: local.Shape{MemorySize: 16 << 20}, Strict: true})
	k := []byte("the-key")
	require.NoError(t, tab.Insert(ctx, k, []byte("inserted")))
	other := []byte("written-beside")
	placeAnotherBlock(t, tab, k, other)

	op := tab.newOp(k)
	op.keepValue = true
	dst := make([]byte, 2, 64) // spare capacity, and a prefix the values go after
	dst[0], dst[1] = 'p', 'q'
	op.dst = dst
	require.NoError(t, tab.pinRead(ctx))
	defer tab.unpin()
	v, err := tab.locate(ctx, op, nil)
	require.NoError(t, err)
	j, err := tab.findKey(ctx, op, &v, false)
	require.NoError(t, err)
	require.GreaterOrEqual(t, j, 0)
	values := map[string]bool{}
	for _, w := range v.words {
		info, ok := op.info(blockKey(w))
		if !ok || !info.isKey {
			continue
		}
		require.Equal(t, "pq", string(info.value[:2]), "appended after the caller's bytes")
		values[string(info.value[2:])] = true
	}
	require.Equal(t, map[string]bool{"inserted": true, string(other): true}, values,
		"each block of the key keeps its own value")
	first, _ := op.info(blockKey(v.words[j]))
	require.Contains(t, []string{"inserted", string(other)}, string(first.value[2:]))
}
