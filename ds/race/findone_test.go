package race_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/farmem/farmem/ds/race"
	"github.com/farmem/farmem/farmem"
	"github.com/farmem/farmem/farmem/farmemtest"
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

// An Update or Delete with one candidate reads only the head of its block (the header and the
// key): with a 4,000-byte value its reads bring in less than a quarter of it. Keys that are a
// prefix or an extension of the stored key, some of them its candidates with one-bit
// fingerprints, are told from it by the head's key length, and leave it as it was.
func TestUpdateReadsKeyOnly(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, local.Options{}, race.Params{Groups: 1, SlotsPerBucket: 2, FingerprintBits: 1, MaxDepth: 16})
	c := e.open(t, 0, race.Options{})
	stored := []byte("stored-key-0123")
	require.NoError(t, c.tab.Insert(ctx, stored, val(1, 4000)))
	before := c.m.Stats()
	require.NoError(t, c.tab.Update(ctx, stored, val(2, 4000)))
	in := c.m.Stats().Sub(before).BytesIn
	require.Less(t, in, uint64(1000), "the Update read %d bytes: more than the old block's head", in)
	for n := range len(stored) {
		for _, k := range [][]byte{stored[:n], append(append([]byte(nil), stored...), stored[:n+1]...)} {
			if len(k) == 0 {
				continue
			}
			require.ErrorIs(t, c.tab.Update(ctx, k, []byte("x")), race.ErrNotFound, "update %q", k)
			require.ErrorIs(t, c.tab.Delete(ctx, k), race.ErrNotFound, "delete %q", k)
		}
	}
	got, err := c.tab.Search(ctx, stored)
	require.NoError(t, err)
	require.Equal(t, val(2, 4000), got)
	require.Zero(t, c.tab.Stats().BadBlocks)
}

// A block head that comes back damaged (changed by the client's Memory, as a block reused
// under the reader would be) is not taken for an answer: lengths that do not give the slot
// word's size, or a shorter key (part of the real one) that does not hash to the slot's
// fingerprint, count a bad block and the Update reads again; a longer key, which the head cuts
// short, sends the Update to the whole block, whose checksum decides. Each Update updates.
func TestUpdateBadHeadRejected(t *testing.T) {
	for _, c := range []struct {
		name   string
		damage func(head []byte)
		bad    bool
	}{
		{"value length", func(h []byte) { h[3] ^= 0x04 }, true}, // 1,024 bytes more or less
		{"shorter key", func(h []byte) { h[0]-- }, true},
		{"longer key", func(h []byte) { h[0]++ }, false},
	} {
		t.Run(c.name, func(t *testing.T) { updateBadHead(t, c.damage, c.bad) })
	}
}

func updateBadHead(t *testing.T, damage func(head []byte), bad bool) {
	ctx := context.Background()
	e := newEnv(t, local.Options{}, race.Params{Groups: 8})
	w := e.open(t, 0, race.Options{})
	const n = 20
	for i := range uint64(n) {
		require.NoError(t, w.tab.Insert(ctx, key(i), val(i, 200)))
	}
	damaged := 0
	next := true // every other head read: an Update's first, not its re-read
	r := e.openWith(t, 1, race.Options{}, func(m farmem.Memory) farmem.Memory {
		return &farmemtest.Interposer{Memory: m, After: func(_ context.Context, v farmemtest.Verb, _ uint64, err error) {
			if err != nil || v.Single || v.Posted || len(v.Batch.Ops) != 1 {
				return
			}
			op := v.Batch.Ops[0]
			if op.Kind != farmem.OpRead || len(op.Buf) >= 64 || binary.LittleEndian.Uint16(op.Buf) != uint16(len(key(0))) {
				return
			}
			if next {
				damage(op.Buf)
				damaged++
			}
			next = !next
		}}
	})
	for i := range uint64(n) {
		require.NoError(t, r.tab.Update(ctx, key(i), val(i+n, 200)), "update %d", i)
	}
	for i := range uint64(n) {
		got, err := r.tab.Search(ctx, key(i))
		require.NoError(t, err)
		require.Equal(t, val(i+n, 200), got)
	}
	// Updates whose view holds other candidates too read whole blocks (findKey), undamaged.
	require.GreaterOrEqual(t, damaged, n/2)
	if bad {
		require.Equal(t, uint64(damaged), r.tab.Stats().BadBlocks, "every damaged head rejected, nothing else")
	} else {
		require.Zero(t, r.tab.Stats().BadBlocks, "the whole block answered each damaged head")
	}
}
