package hybrid_test

import (
	"context"
	"encoding/binary"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/farmem/farmem/ds/hybrid"
	"github.com/farmem/farmem/farmem"
	"github.com/farmem/farmem/farmem/farmemtest"
	"github.com/farmem/farmem/farmem/local"
)

// A read of a node is not one snapshot: its words are read one after another (local's Tearing
// yields between them), the header's type word before the slots. A scan that reads a full
// special node's type word, then (after a split of its last leaf publishes the upper leaf in
// a slot past that type's capacity, growing the type, and swaps the old slot to the lower
// leaf) its slots, holds a copy that names the lower leaf and not the upper one: the copy's
// partials give the lower leaf the upper's range too. The scan must not take the lower leaf,
// live, for the home of that whole range (it once did, and missed every key of the upper leaf:
// TestLinearizableLocal failed about 2 times in 75 under load). Here the interleaving is made
// exactly: the scanner's read of the special node is completed with its slots read again after
// another client's insert has split the leaf, its type word kept as first read.
func TestScanTornSpecialNodeRead(t *testing.T) {
	e := newEnv(t, local.Options{}, hybrid.Params{LeafSlots: 8})
	ctx := context.Background()
	const p = uint64(0x01_00_00_00_00_00_00_00)
	w := e.open(t, 1, hybrid.Options{})
	// Ascending inserts split at the median: leaves [0,5) [5,9) [9,13) [13,256) of p, the
	// special node at its first type's 4 slots, the last leaf full (keys 13 to 20).
	for k := uint64(1); k <= 20; k++ {
		require.NoError(t, w.tree.Insert(ctx, key(p|k), k))
	}
	require.EqualValues(t, 3, w.tree.Stats().Splits)
	grown := w.tree.Stats().Growths

	var fired, tore bool
	var raw farmem.Memory
	s := e.openWith(t, 0, hybrid.Options{}, func(m farmem.Memory) farmem.Memory {
		raw = m
		return &farmemtest.Interposer{Memory: m, After: func(ctx context.Context, v farmemtest.Verb, _ uint64, err error) {
			if err != nil || fired || !v.Single || v.Op().Kind != farmem.OpRead {
				return
			}
			buf := v.Op().Buf
			if len(buf) < 24 {
				return
			}
			meta := binary.LittleEndian.Uint64(buf[8:])
			if meta&(1<<8) == 0 || meta>>16&0xff != 7 { // not a special node
				return
			}
			fired = true
			// The split, between the type word's read and the slots'.
			require.NoError(t, w.tree.Insert(ctx, key(p|21), 21))
			fresh := make([]byte, len(buf))
			require.NoError(t, raw.Read(ctx, v.Op().Addr, fresh))
			tore = binary.LittleEndian.Uint64(fresh[8:])&0xff != meta&0xff
			copy(buf[16:], fresh[16:])
		}}
	})
	got, err := s.tree.Scan(ctx, p, p+256, 0)
	require.NoError(t, err)
	require.True(t, fired, "the scan read no special node")
	require.True(t, tore, "the split did not grow the special node")
	require.Equal(t, grown+1, w.tree.Stats().Growths)
	var keys []uint64
	for _, kv := range got {
		keys = append(keys, kv.Key&0xff)
	}
	want := make([]uint64, 21)
	for i := range want {
		want[i] = uint64(i + 1)
	}
	require.Equal(t, want, keys, "keys of p the scan returned")
}

// A leaf's keys are read one word after another too. A delete makes its slot a tombstone and a
// re-insert of the key claims another slot, so a scan whose read of the keys sees the first
// slot before the delete and the second after the re-insert holds the key committed twice. It
// must report it once (as Get, from the first slot), not twice: the lincheck's churn workload
// once saw a scan return a key twice, with two values. Here the read is made torn exactly: the
// scanner's leaf read is completed with the words after the key's first slot read again after
// another client deleted and re-inserted the key.
func TestScanTornLeafRead(t *testing.T) {
	e := newEnv(t, local.Options{}, hybrid.Params{LeafSlots: 8})
	ctx := context.Background()
	const p = uint64(0x01_00_00_00_00_00_00_00)
	w := e.open(t, 1, hybrid.Options{})
	for k := uint64(1); k <= 3; k++ {
		require.NoError(t, w.tree.Insert(ctx, key(p|k), k))
	}
	var fired, twice bool
	var raw farmem.Memory
	s := e.openWith(t, 0, hybrid.Options{}, func(m farmem.Memory) farmem.Memory {
		raw = m
		return &farmemtest.Interposer{Memory: m, After: func(ctx context.Context, v farmemtest.Verb, _ uint64, err error) {
			ops := v.Batch.Ops
			if err != nil || fired || v.Single || len(ops) != 2 || ops[0].Kind != farmem.OpRead || ops[1].Kind != farmem.OpRead {
				return
			}
			const keysOff = 72
			head := ops[0].Buf
			i := -1
			for j := 0; keysOff+8*j+8 <= len(head); j++ {
				if binary.LittleEndian.Uint64(head[keysOff+8*j:]) == p|2 {
					i = j
				}
			}
			if i < 0 {
				return
			}
			fired = true
			require.NoError(t, w.tree.Delete(ctx, key(p|2)))
			require.NoError(t, w.tree.Insert(ctx, key(p|2), 200))
			var b farmem.Batch
			freshHead, freshTail := make([]byte, len(head)), make([]byte, len(ops[1].Buf))
			b.Read(ops[0].Addr, freshHead)
			b.Read(ops[1].Addr, freshTail)
			require.NoError(t, raw.Do(ctx, &b))
			copy(head[keysOff+8*(i+1):], freshHead[keysOff+8*(i+1):])
			copy(ops[1].Buf, freshTail)
			for j := i + 1; keysOff+8*j+8 <= len(head); j++ {
				twice = twice || binary.LittleEndian.Uint64(head[keysOff+8*j:]) == p|2
			}
		}}
	})
	got, err := s.tree.Scan(ctx, p, p+256, 0)
	require.NoError(t, err)
	require.True(t, fired, "the scan read no leaf holding the key")
	require.True(t, twice, "the re-insert took no later slot")
	var keys []uint64
	for _, kv := range got {
		keys = append(keys, kv.Key&0xff)
	}
	require.Equal(t, []uint64{1, 2, 3}, keys, "keys of p the scan returned")
}
