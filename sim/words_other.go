//go:build !linux

package sim

// adviseHuge is the portable twin of the Linux version: it does nothing.
func adviseHuge(w []uint64) {}

// mapWords is the portable twin of the Linux version: no mapping (newWords uses the heap).
func mapWords(n uint64) ([]uint64, []byte) { return nil, nil }

// unmapWords is the portable twin of the Linux version: there is nothing to release.
func unmapWords(m []byte) {}
