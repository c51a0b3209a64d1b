//go:build !linux

package bench

import "os"

// IsTerminal reports whether f is a terminal (so that a progress line that rewrites itself
// makes sense there). Off Linux it reports character devices, /dev/null included.
func IsTerminal(f *os.File) bool {
	if f == nil {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}
