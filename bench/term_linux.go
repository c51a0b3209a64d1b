package bench

import (
	"os"

	"golang.org/x/sys/unix"
)

// IsTerminal reports whether f is a terminal (so that a progress line that rewrites itself
// makes sense there).
func IsTerminal(f *os.File) bool {
	if f == nil {
		return false
	}
	_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	return err == nil
}
