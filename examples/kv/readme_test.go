package main

import (
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// The README's code sample is this program's block between its README markers, one tab less:
// the program compiles and its test runs it, so the sample in the README does too.
func TestREADMESample(t *testing.T) {
	src, err := os.ReadFile("main.go")
	require.NoError(t, err)
	const begin, end = "// README:begin\n", "\t// README:end"
	b, e := strings.Index(string(src), begin), strings.Index(string(src), end)
	require.True(t, b >= 0 && e > b, "main.go has no README markers")
	var sample strings.Builder
	for _, l := range strings.SplitAfter(string(src)[b+len(begin):e], "\n") {
		sample.WriteString(strings.TrimPrefix(l, "\t"))
	}
	readme, err := os.ReadFile("../../README.md")
	require.NoError(t, err)
	require.Contains(t, string(readme), "```go\n"+sample.String()+"```\n",
		"the README's code sample is examples/kv/main.go's README block")
}
