//go:build !linux

package wordmem

// MapWords is the portable twin of the Linux version: no mapping (nil; callers use make).
func MapWords[T any](owner *T, n, align uint64) []uint64 { return nil }
