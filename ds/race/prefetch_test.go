package race_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/farmem/farmem/ds/race"
	"github.com/farmem/farmem/farmem"
	"github.com/farmem/farmem/farmem/farmemtest"
	"github.com/farmem/farmem/farmem/local"
)

// hintLog is a Memory that offers the hints a table asks a cxl client for (Prefetch,
// Prefetch2, DoHinted) and records them in order, with each batch the table runs: "do" (Do)
// or "do hinted" (DoHinted, whose reads' lines the table asked for already).
type hintLog struct {
	farmem.Memory
	log []string
}

func (h *hintLog) Prefetch(a farmem.Addr, n int) {
	h.log = append(h.log, fmt.Sprintf("hint %v+%d", a, n))
}

func (h *hintLog) Prefetch2(a farmem.Addr, n int, b farmem.Addr, m int) {
	h.log = append(h.log, fmt.Sprintf("hint2 %v+%d %v+%d", a, n, b, m))
}

func (h *hintLog) DoHinted(ctx context.Context, b *farmem.Batch) error {
	h.log = append(h.log, "do hinted")
	return h.Memory.Do(ctx, b)
}

func (h *hintLog) Do(ctx context.Context, b *farmem.Batch) error {
	h.log = append(h.log, "do")
	return h.Memory.Do(ctx, b)
}

// TestCachedHints: through a key's address-cache entry, an Update (the straight path) asks for
// the slot's word and the old block's head in one Prefetch2, before it allocates and encodes
// the new block (whose lines it asks for next), so that those misses overlap the block's making;
// then come its two batches, neither asking for lines again (the second's, the slot's and the
// old block's valid word's, the first read). A Search through the entry asks for the slot's
// word and the whole block in one Prefetch2, then runs its one batch.
func TestCachedHints(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, local.Options{}, race.Params{Groups: 8})
	opts := race.Options{Invalidate: true, AddressCache: 100}
	h := &hintLog{}
	c := e.openWith(t, 0, opts, func(m farmem.Memory) farmem.Memory { h.Memory = m; return h })
	p := e.open(t, 1, race.Options{})
	require.NoError(t, c.tab.Insert(ctx, key(1), val(1, 40)))
	entry := func() race.Entry {
		t.Helper()
		_, ent, err := p.tab.SearchEntry(ctx, key(1))
		require.NoError(t, err)
		return ent
	}

	old := entry()
	h.log = nil
	require.NoError(t, c.tab.Update(ctx, key(1), val(2, 40)))
	require.Equal(t, uint64(1), c.tab.Stats().Straight, "the update took the straight path")
	nw := entry()
	head := 24 + len(key(1)) // the block's header and the key, whole words
	head = (head + 7) &^ 7
	require.Equal(t, []string{
		fmt.Sprintf("hint2 %v+8 %v+%d", old.Slot, old.Word.Addr(), head),
		fmt.Sprintf("hint %v+%d", nw.Word.Addr(), (int(nw.Word.Size())+race.Unit-1)&^(race.Unit-1)),
		"do hinted", "do hinted",
	}, h.log)

	h.log = nil
	v, err := c.tab.Search(ctx, key(1))
	require.NoError(t, err)
	require.Equal(t, uint64(2), unval(v))
	require.Equal(t, []string{
		fmt.Sprintf("hint2 %v+8 %v+%d", nw.Slot, nw.Word.Addr(), nw.Word.Size()),
		"do hinted",
	}, h.log)
}

// TestCachedSearchChecksBlock: a Search through its key's entry, the slot and the block on one
// node (the path searchCached makes itself), takes the block only if it validates and holds the
// key with the entry's stamp, on a Memory that hints and on one that does not. Each key's block
// is rewritten in place (its slot's word unchanged) with another stamp or another key, or the
// cached read's copy of it is corrupted (a torn read: the checksum fails, a bad block): the
// cached read refuses it (a stale entry) and the Search goes on to the lookup; a block left as
// it was is a hit.
func TestCachedSearchChecksBlock(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, local.Options{}, race.Params{Groups: 8})
	opts := race.Options{Invalidate: true, AddressCache: 100}
	for _, hinting := range []bool{false, true} {
		var tear bool // corrupt the block in the next cached read's batch
		c := e.openWith(t, 0, opts, func(m farmem.Memory) farmem.Memory {
			var w farmem.Memory = &farmemtest.Interposer{Memory: m, After: func(_ context.Context, v farmemtest.Verb, _ uint64, err error) {
				if ops := v.Batch.Ops; tear && err == nil && len(ops) == 2 && len(ops[0].Buf) == 8 && ops[1].Kind == farmem.OpRead {
					ops[1].Buf[40] ^= 1 // a byte of the value
					tear = false
				}
			}}
			if hinting {
				w = &hintLog{Memory: w}
			}
			return w
		})
		p := e.open(t, 1, race.Options{})
		base := uint64(100)
		if hinting {
			base = 200
		}
		for i, rewrite := range []string{"none", "stamp", "key", "torn"} {
			k := key(base + uint64(i))
			require.NoError(t, c.tab.Insert(ctx, k, val(1, 40)))
			_, ent, err := p.tab.SearchEntry(ctx, k)
			require.NoError(t, err)
			require.Equal(t, ent.Slot.Node(), ent.Word.Addr().Node(), "slot and block on one node")
			a := ent.Word.Addr()
			var img []byte
			switch rewrite {
			case "stamp":
				img = race.BlockImage(a, k, val(1, 40), ent.Stamp+1)
			case "key":
				img = race.BlockImage(a, key(base+50), val(1, 40), ent.Stamp)
			case "torn":
				tear = true
			}
			if img != nil {
				require.NoError(t, p.m.Write(ctx, a, img))
			}
			before := c.tab.Stats()
			_, _ = c.tab.Search(ctx, k)
			d := c.tab.Stats()
			require.False(t, tear, "%v hinting=%v: the cached read's batch was seen", rewrite, hinting)
			if rewrite == "none" {
				require.Equal(t, before.CacheHits+1, d.CacheHits, "%v hinting=%v", rewrite, hinting)
				continue
			}
			require.Equal(t, before.CacheHits, d.CacheHits, "%v hinting=%v: refused", rewrite, hinting)
			require.Equal(t, before.CacheStale+1, d.CacheStale, "%v hinting=%v: a stale entry", rewrite, hinting)
			if rewrite == "torn" {
				require.Equal(t, before.BadBlocks+1, d.BadBlocks, "%v hinting=%v", rewrite, hinting)
			}
		}
	}
}
