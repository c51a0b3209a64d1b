package main

import (
	"context"
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestVisits runs the guide's program over cxl and over in-process tcp memory nodes: the same
// run, only the fabric differs. run itself checks that the counter, the histogram, the map and
// the queue agree.
func TestVisits(t *testing.T) {
	for _, name := range []string{"cxl", "tcp"} {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			f, closeFabric, err := open(ctx, name)
			require.NoError(t, err)
			defer closeFabric()
			r, err := run(ctx, f, 4, 150)
			require.NoError(t, err)
			require.Equal(t, uint64(600), r.Requests)
			require.NotZero(t, r.Slow, "the latency pattern has slow requests")
			require.Equal(t, r.Slow, r.Events)
			require.Len(t, r.Pages, pageCount)
			t.Logf("%s: %s", name, r)
		})
	}
}

// TestGuideExcerpts: every line of the Go excerpts in docs/typed.md's "The program" section is
// a line of this program (spaces at either end aside), so the guide cannot show code that the
// program, which CI runs, does not have.
func TestGuideExcerpts(t *testing.T) {
	guide, err := os.ReadFile("../../docs/typed.md")
	require.NoError(t, err)
	src, err := os.ReadFile("main.go")
	require.NoError(t, err)
	lines := map[string]bool{}
	for _, l := range strings.Split(string(src), "\n") {
		lines[strings.TrimSpace(l)] = true
	}
	_, section, ok := strings.Cut(string(guide), "\n## The program\n")
	require.True(t, ok, "docs/typed.md has no section \"The program\"")
	section, _, _ = strings.Cut(section, "\n## ")
	blocks := strings.Split(section, "```go\n")[1:]
	require.Len(t, blocks, 2, "the section's Go excerpts")
	checked := 0
	for _, b := range blocks {
		code, _, ok := strings.Cut(b, "```")
		require.True(t, ok, "an unclosed Go excerpt")
		for _, l := range strings.Split(code, "\n") {
			if l = strings.TrimSpace(l); l == "" {
				continue
			}
			require.True(t, lines[l], "docs/typed.md shows a line that is not in main.go:\n%s", l)
			checked++
		}
	}
	require.GreaterOrEqual(t, checked, 10)
}
