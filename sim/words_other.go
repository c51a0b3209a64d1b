//go:build !linux

package sim

// adviseHuge is the portable twin of the Linux version: it does nothing.
func adviseHuge(w []uint64) {}
