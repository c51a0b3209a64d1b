package main

import (
	"bytes"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/farmem/farmem/rdma"
)

// Every farmemd command's -h has a synopsis and lists each flag once with at most one default;
// the top level names its subcommands.
func TestHelp(t *testing.T) {
	flagLine := regexp.MustCompile(`^  -([a-z][a-z0-9-]*)`)
	for _, c := range []struct {
		args     []string
		synopsis string
		flags    int
	}{
		{[]string{"-h"}, "usage: farmemd [serve]", 18},
		{[]string{"serve", "-h"}, "usage: farmemd [serve]", 18},
		{[]string{"status", "-h"}, "usage: farmemd status", 3},
		{[]string{"secret", "-h"}, "usage: farmemd secret", 0},
	} {
		var out, errb bytes.Buffer
		code := run(c.args, &out, &errb, nil)
		require.Equal(t, 0, code, "%v", c.args)
		text := out.String() + errb.String()
		require.True(t, strings.HasPrefix(text, c.synopsis), "%v:\n%s", c.args, text)
		blocks := map[string]string{}
		cur := ""
		for _, l := range strings.Split(text, "\n") {
			if m := flagLine.FindStringSubmatch(l); m != nil {
				cur = m[1]
				require.NotContains(t, blocks, cur, "%v lists -%s twice", c.args, cur)
				blocks[cur] = l
			} else if cur != "" && strings.HasPrefix(l, "    \t") {
				blocks[cur] += l
			}
		}
		require.Len(t, blocks, c.flags, "%v: %v", c.args, blocks)
		for n, b := range blocks {
			require.LessOrEqual(t, strings.Count(b, "(default"), 1, "%v -%s: %s", c.args, n, b)
		}
		if c.args[0] == "-h" {
			for _, sub := range []string{"serve", "status", "secret"} {
				require.Contains(t, text, "\n  "+sub+" ")
			}
		}
	}
}

// `farmemd secret` prints a fresh secret that the nodes and clients accept as a secret file.
func TestSecret(t *testing.T) {
	var a, b, errb bytes.Buffer
	require.Equal(t, 0, run([]string{"secret"}, &a, &errb, nil), errb.String())
	require.Equal(t, 0, run([]string{"secret"}, &b, &errb, nil), errb.String())
	require.Regexp(t, `^[0-9a-f]{64}\n$`, a.String())
	require.NotEqual(t, a.String(), b.String(), "each secret is fresh")
	p := filepath.Join(t.TempDir(), "secret")
	require.NoError(t, os.WriteFile(p, a.Bytes(), 0o600))
	s, err := rdma.ReadSecret(p)
	require.NoError(t, err)
	require.Equal(t, strings.TrimSpace(a.String()), string(s), "the trailing newline is trimmed")
	require.Equal(t, 2, run([]string{"secret", "extra"}, &a, &errb, nil))
}
