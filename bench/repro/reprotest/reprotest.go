// Package reprotest holds what the tests of the reproductions (package repro and its per-paper
// test packages) share.
package reprotest

import (
	"bytes"
	"io"
	"testing"

	"github.com/stretchr/testify/require"
)

// A Report is a reproduction's result: its tables, written as text.
type Report interface {
	WriteText(w io.Writer) error
}

// SameText requires that a and b (the same configuration run twice, say with one worker and
// with several) write the same text, and returns it.
func SameText(t testing.TB, a, b Report) string {
	t.Helper()
	var x, y bytes.Buffer
	require.NoError(t, a.WriteText(&x))
	require.NoError(t, b.WriteText(&y))
	require.Equal(t, x.String(), y.String(), "the same configuration printed different tables")
	return x.String()
}
