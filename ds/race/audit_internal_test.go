package race

import (
	"context"
	"encoding/binary"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/farmem/farmem/farmem"
)

// TestAuditCatches damages a table in three ways, each of which Audit must report: a key moved
// to a slot that is not one of its candidates, a key held twice, and a subtable whose header
// no longer covers its keys.
func TestAuditCatches(t *testing.T) {
	tab, m := localTable(t, Params{Groups: 8, InitialDepth: 1})
	ctx := context.Background()
	for i := range 40 {
		require.NoError(t, tab.Insert(ctx, []byte{byte(i), 'k'}, []byte("v")))
	}
	c, err := tab.Audit(ctx)
	require.NoError(t, err)
	require.Equal(t, 40, c.Keys)
	require.Equal(t, 2, c.Subtables)

	st := unpackAddr(tab.dir[0])
	s, err := tab.readSubtable(ctx, st, true)
	require.NoError(t, err)
	// A committed slot, and its key's candidates.
	var from int
	for from = range s.words {
		if s.words[from].Committed() {
			break
		}
	}
	w := s.words[from]
	b := make([]byte, w.Size())
	require.NoError(t, m.Read(ctx, w.Addr(), b))
	blk, err := DecodeBlock(w.Addr(), b)
	require.NoError(t, err)
	op := tab.newOp(blk.Key)
	candidate := func(i int) bool {
		for _, start := range op.ranges {
			if uint64(i) >= start && uint64(i) < start+2*tab.geo.perB {
				return true
			}
		}
		return false
	}
	store := func(i int, v Slot) {
		_, err := m.MaskedCAS(ctx, tab.geo.slotAddr(st, uint64(i)), 0, 0, uint64(v), ^uint64(0))
		require.NoError(t, err)
	}
	emptyWhere := func(want bool) int {
		for i, x := range s.words {
			if x == 0 && candidate(i) == want {
				return i
			}
		}
		t.Fatal("no such empty slot")
		return 0
	}

	// Moved out of its candidates.
	to := emptyWhere(false)
	store(from, 0)
	store(to, w)
	_, err = tab.Audit(ctx)
	require.ErrorIs(t, err, ErrCorrupt)
	require.ErrorContains(t, err, "not a candidate")
	store(to, 0)
	store(from, w)
	_, err = tab.Audit(ctx)
	require.NoError(t, err)

	// Held twice.
	dup := emptyWhere(true)
	store(dup, w)
	_, err = tab.Audit(ctx)
	require.ErrorContains(t, err, "and in subtable")
	store(dup, 0)

	// A header that does not cover its keys.
	var hb [8]byte
	require.NoError(t, m.Read(ctx, st.Add(stHeaderOff), hb[:]))
	h := binary.LittleEndian.Uint64(hb[:])
	_, err = m.CAS(ctx, st.Add(stHeaderOff), h, headerWord(headerDepth(h), headerSuffix(h)^1))
	require.NoError(t, err)
	_, err = tab.Audit(ctx)
	require.ErrorContains(t, err, "belongs elsewhere")
	_ = farmem.Addr(0)
}
