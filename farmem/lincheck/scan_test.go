package lincheck_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/farmem/farmem/farmem/lincheck"
)

type pair = lincheck.Pair[int, int]

func TestScanPerKey(t *testing.T) {
	kv := lincheck.KV[int, int]()
	at := lincheck.KVAtomicScans[int, int]()
	both := func(ok bool, rs ...lincheck.Record[lincheck.KVInput[int, int], lincheck.KVOutput[int, int]]) {
		t.Helper()
		for _, m := range []*lincheck.Model[lincheck.KVInput[int, int], lincheck.KVOutput[int, int]]{kv.Model, at.Model} {
			if ok {
				legal(t, m, rs...)
			} else {
				illegal(t, m, rs...)
			}
		}
	}
	both(true, op(0, 0, 10, kv.Put(1, 1), kv.OK()), op(0, 20, 30, kv.Put(3, 3), kv.OK()),
		op(1, 40, 50, kv.Scan(0, 10, 0), kv.Pairs([]pair{{1, 1}, {3, 3}})),
		op(1, 60, 70, kv.Scan(2, 10, 0), kv.Pairs([]pair{{3, 3}})),
		op(1, 60, 70, kv.Scan(0, 3, 0), kv.Pairs([]pair{{1, 1}})),
		op(1, 60, 70, kv.ScanFrom(0, 1), kv.Pairs([]pair{{1, 1}})),
		op(1, 60, 70, kv.ScanFrom(4, 0), kv.Pairs(nil)))
	// A key present throughout the scan is missing.
	both(false, op(0, 0, 10, kv.Put(1, 1), kv.OK()), op(1, 20, 30, kv.Scan(0, 10, 0), kv.Pairs(nil)))
	// A key deleted before the scan began is returned.
	both(false, op(0, 0, 10, kv.Put(1, 1), kv.OK()), op(0, 20, 30, kv.Delete(1), kv.OK()),
		op(1, 40, 50, kv.Scan(0, 10, 0), kv.Pairs([]pair{{1, 1}})))
	// A stale value.
	both(false, op(0, 0, 10, kv.Put(1, 1), kv.OK()), op(0, 20, 30, kv.Put(1, 2), kv.OK()),
		op(1, 40, 50, kv.Scan(0, 10, 0), kv.Pairs([]pair{{1, 1}})))
	// A key nobody wrote.
	both(false, op(1, 40, 50, kv.Scan(0, 10, 0), kv.Pairs([]pair{{4, 4}})))
	// Malformed outputs, whatever the state.
	for _, ps := range [][]pair{{{3, 3}, {1, 1}}, {{1, 1}, {1, 1}}, {{11, 1}}, {{1, 1}, {3, 3}, {4, 4}}} {
		both(false, op(0, 0, 10, kv.Put(1, 1), kv.OK()), op(0, 0, 10, kv.Put(3, 3), kv.OK()), op(0, 0, 10, kv.Put(4, 4), kv.OK()),
			op(1, 0, 50, kv.Scan(0, 10, 2), kv.Pairs(ps)))
	}
	// A scan that hit its limit says nothing about keys after its last one.
	both(true, op(0, 0, 10, kv.Put(1, 1), kv.OK()), op(0, 0, 10, kv.Put(3, 3), kv.OK()),
		op(1, 20, 30, kv.Scan(0, 10, 1), kv.Pairs([]pair{{1, 1}})))
	// But one that did not hit it covers its whole range.
	both(false, op(0, 0, 10, kv.Put(1, 1), kv.OK()), op(0, 0, 10, kv.Put(3, 3), kv.OK()),
		op(1, 20, 30, kv.Scan(0, 10, 5), kv.Pairs([]pair{{1, 1}})))

	// Non-atomic: the scan sees the later write to 3 but not the earlier one to 1. Each key's
	// report fits an instant of the scan, so the per-key spec passes; no single instant fits
	// both, so the atomic spec fails.
	nonAtomic := []lincheck.Record[lincheck.KVInput[int, int], lincheck.KVOutput[int, int]]{
		op(0, 10, 20, kv.Put(1, 1), kv.OK()), op(0, 30, 40, kv.Put(3, 3), kv.OK()),
		op(1, 0, 50, kv.Scan(0, 10, 0), kv.Pairs([]pair{{3, 3}})),
	}
	legal(t, kv.Model, nonAtomic...)
	v := illegal(t, at.Model, nonAtomic...)
	require.Equal(t, "keys [0, 10)", v.Partition)
	require.Contains(t, v.Report, "scan[0, 10) -> {3:3}")
	// Per key, the report about key 1 is checked as a get at the scan's interval.
	v = illegal(t, kv.Model, op(0, 0, 10, kv.Put(1, 1), kv.OK()), op(1, 20, 30, kv.Scan(0, 10, 0), kv.Pairs(nil)))
	require.Contains(t, v.Report, "scan[0, 10) saw: get(1) -> missing   <-- the model returns 1")
}

// Atomic scans partition the map into groups of keys their ranges connect.
func TestScanAtomicPartitions(t *testing.T) {
	at := lincheck.KVAtomicScans[int, int]()
	h := at.NewHistory(nil)
	h.Add(
		op(0, 0, 10, at.Put(1, 1), at.OK()),
		op(0, 0, 10, at.Put(5, 5), at.OK()),
		op(0, 0, 10, at.Put(12, 12), at.OK()),
		op(0, 0, 10, at.Put(20, 20), at.OK()),
		op(0, 0, 10, at.Put(30, 30), at.OK()),
		op(1, 20, 30, at.Scan(0, 6, 0), at.Pairs([]pair{{1, 1}, {5, 5}})),
		op(1, 20, 30, at.Scan(4, 13, 0), at.Pairs([]pair{{5, 5}, {12, 12}})), // joins [0, 13)
		op(1, 20, 30, at.Scan(20, 21, 0), at.Pairs([]pair{{20, 20}})),
		op(1, 20, 30, at.Scan(20, 40, 1), at.Pairs([]pair{{20, 20}})), // covers [20, 20] only
		op(1, 20, 30, at.ScanFrom(31, 0), at.Pairs(nil)),
	)
	s, err := h.Verify()
	require.NoError(t, err)
	// [0, 13), [20, 21), key 30, [31, ...).
	require.Equal(t, 4, s.Partitions)
	require.Equal(t, 5, s.Largest)

	// Per key, scans become one get per known key in their range.
	kv := lincheck.KV[int, int]()
	h2 := kv.NewHistory(nil)
	h2.Add(h.Records()...)
	s, err = h2.Verify()
	require.NoError(t, err)
	require.Equal(t, 5, s.Partitions)
	require.Equal(t, 5+2+2+1+1+0, s.Checked)
}
