package maxreg_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/farmem/farmem/ds/maxreg"
	"github.com/farmem/farmem/farmem"
)

// The checkers are tests' oracles; these histories show each rule catches what it must.

func tg(ts uint64, c int) maxreg.Tag { return maxreg.MakeTag(ts, 0, true) | maxreg.Tag(c)<<1 }

func w(c int, tag maxreg.Tag, sum uint64, call, ret int) opRec {
	return opRec{client: c, kind: kWrite, tag: tag, sum: sum, call: farmem.Time(call), ret: farmem.Time(ret)}
}

func r(c int, tag maxreg.Tag, sum uint64, call, ret int) opRec {
	return opRec{client: c, kind: kRead, tag: tag, sum: sum, call: farmem.Time(call), ret: farmem.Time(ret)}
}

func TestCheckers(t *testing.T) {
	a, b := tg(10, 1), tg(20, 2)
	empty := digest(nil)
	ok := []opRec{w(1, a, 1, 0, 10), r(3, a, 1, 11, 12), w(2, b, 2, 5, 30), r(3, b, 2, 13, 14), r(4, b, 2, 15, 16)}
	require.NoError(t, checkWeak(ok))
	require.NoError(t, checkAtomic(ok))

	bad := map[string][]opRec{
		"tag never written":     {w(1, a, 1, 0, 10), r(3, b, 2, 11, 12)},
		"write invoked after":   {r(3, b, 2, 0, 5), w(2, b, 2, 6, 10)},
		"value not the write's": {w(1, a, 1, 0, 10), r(3, a, 9, 11, 12)},
		"empty with a value":    {r(3, 0, 5, 0, 1)},
		"write-read":            {w(1, a, 1, 0, 10), w(2, b, 2, 0, 10), r(3, a, 1, 11, 12)},
		"read-read":             {w(1, a, 1, 0, 10), w(2, b, 2, 0, 30), r(3, b, 2, 11, 12), r(4, a, 1, 13, 14)},
		"empty after a write":   {w(1, a, 1, 0, 10), r(3, 0, empty, 11, 12)},
		"two writes of one tag": {w(1, a, 1, 0, 10), w(1, a, 2, 11, 12)},
	}
	for name, h := range bad {
		require.Error(t, checkWeak(h), name)
	}
	// A read concurrent with two writes may miss the one that completed first and return the
	// other, which began after: the weak specification allows it, an atomic register does not.
	scan := []opRec{r(3, a, 1, 0, 30), w(2, b, 2, 1, 5), w(1, a, 1, 10, 20)}
	require.NoError(t, checkWeak(scan))
	require.Error(t, checkAtomic(scan))
	// An unknown write may have taken effect: its value may be read, and constrains nothing.
	unk := w(1, b, 2, 0, 0)
	unk.unknown = true
	require.NoError(t, checkWeak([]opRec{unk, w(2, a, 1, 1, 2), r(3, a, 1, 3, 4), r(3, b, 2, 5, 6)}))
}
