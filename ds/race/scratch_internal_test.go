package race

import (
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/farmem/farmem/alloc"
	"github.com/farmem/farmem/farmem"
	"github.com/farmem/farmem/farmem/local"
)

// localTable opens a handle on a new table with p, on a fresh local fabric in strict mode,
// and returns it with its client's Memory.
func localTable(t *testing.T, p Params) (*Table, farmem.Memory) {
	f, err := local.New(local.Options{Shape: local.Shape{MemorySize: 16 << 20}, Strict: true})
	require.NoError(t, err)
	t.Cleanup(func() { _ = f.Close() })
	ctx := context.Background()
	m, err := f.Open(ctx, f.Topology().ComputeNodes()[0])
	require.NoError(t, err)
	require.NoError(t, alloc.FormatAll(ctx, m, alloc.FormatOptions{}))
	a, err := alloc.New(ctx, m, alloc.Options{})
	require.NoError(t, err)
	root, err := Create(ctx, m, a, p)
	require.NoError(t, err)
	tab, err := Open(ctx, m, a, root, Options{})
	require.NoError(t, err)
	return tab, m
}

// newScratchTable opens a table holding keys "k0".."k9" with values "value-i".
func newScratchTable(t *testing.T) *Table {
	tab, _ := localTable(t, Params{Groups: 8})
	for i := range 10 {
		require.NoError(t, tab.Insert(context.Background(), []byte{'k', '0' + byte(i)}, []byte("value-"+string('0'+rune(i)))))
	}
	return tab
}

// TestSearchValueIsFresh: a value Search returns is the caller's: later operations of the
// handle (which reuse its scratch buffers) do not change it, and changing it changes nothing
// the handle reads later.
func TestSearchValueIsFresh(t *testing.T) {
	tab := newScratchTable(t)
	ctx := context.Background()
	v0, err := tab.Search(ctx, []byte("k0"))
	require.NoError(t, err)
	require.Equal(t, "value-0", string(v0))
	for i := range 10 {
		v, err := tab.Search(ctx, []byte{'k', '0' + byte(i)})
		require.NoError(t, err)
		require.Equal(t, "value-"+string('0'+rune(i)), string(v))
		copy(v, "XXXXXXX")
	}
	require.NoError(t, tab.Update(ctx, []byte("k1"), []byte("other")))
	require.NoError(t, tab.Insert(ctx, []byte("k10"), []byte("ten")))
	require.Equal(t, "value-0", string(v0), "a returned value aliases the handle's buffers")
	v1, err := tab.Search(ctx, []byte("k1"))
	require.NoError(t, err)
	require.Equal(t, "other", string(v1))
	v2, err := tab.Search(ctx, []byte("k2"))
	require.NoError(t, err)
	require.Equal(t, "value-2", string(v2))
}

// TestScratchDroppedOnError: an operation whose batch fails (here on a canceled context) may
// leave the batch and its buffers with the transport, so the handle must not reuse them.
func TestScratchDroppedOnError(t *testing.T) {
	tab := newScratchTable(t)
	canceled, cancel := context.WithCancel(context.Background())
	cancel()
	for name, op := range map[string]func() error{
		"search": func() error { _, err := tab.Search(canceled, []byte("k3")); return err },
		"insert": func() error { return tab.Insert(canceled, []byte("new"), []byte("v")) },
		"update": func() error { return tab.Update(canceled, []byte("k4"), []byte("v")) },
		"delete": func() error { return tab.Delete(canceled, []byte("k5")) },
	} {
		// An operation whose pin must announce first (the allocator's announcement was
		// withdrawn or is due for a refresh, which a slow run makes likely) fails in that
		// announcement, before any batch of the table: the scratch is then still its own.
		// Such a try is repeated after a successful operation has announced again.
		for try := 0; ; try++ {
			require.Less(t, try, 20, "%s: every try failed in the pin", name)
			before := tab.scr
			err := op()
			require.ErrorIs(t, err, context.Canceled, name)
			if strings.Contains(err.Error(), "race: pin:") {
				require.True(t, before == tab.scr, "%s: a failed pin dropped the scratch", name)
				_, err := tab.Search(context.Background(), []byte("k0"))
				require.NoError(t, err)
				continue
			}
			require.True(t, before != tab.scr, "%s: the scratch of a failed batch is reused", name)
			break
		}
	}
	v, err := tab.Search(context.Background(), []byte("k3"))
	require.NoError(t, err)
	require.Equal(t, "value-3", string(v))
}
