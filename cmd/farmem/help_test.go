package main

import (
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

var flagLine = regexp.MustCompile(`^  -([a-z][a-z0-9-]*)`)

// helpFlags parses a flag package -h listing: each flag's name and its description block.
func helpFlags(t *testing.T, text string) map[string]string {
	t.Helper()
	out := map[string]string{}
	cur := ""
	for _, l := range strings.Split(text, "\n") {
		if m := flagLine.FindStringSubmatch(l); m != nil {
			cur = m[1]
			require.NotContains(t, out, cur, "flag -%s listed twice", cur)
			out[cur] = l
			continue
		}
		if cur != "" && strings.HasPrefix(l, "    \t") {
			out[cur] += "\n" + l
		}
	}
	return out
}

// Every command's -h has a synopsis and lists exactly the flags the command honours, each
// with at most one default.
func TestHelpListsHonouredFlags(t *testing.T) {
	want := map[string][]string{
		"bench": {"clients", "cluster", "compute-nodes", "duration", "index", "json", "kv-cache", "matrix", "mem-nodes", "mem-size", "metric", "peers", "policy",
			"process", "profile", "proxy", "records", "region", "replicas", "seed", "set", "shared-conns", "skip-load", "svg", "sweep", "sync", "transport",
			"warmup", "workload"},
		"kv":      {"cluster", "compute-nodes", "mem-nodes", "mem-size", "region", "transport"},
		"inspect": {"cluster", "region", "transport"},
		"status":  {"cluster", "region", "timeout", "transport"},
		"adopt":   {"cluster"},
		"repro":   nil, // its flags are its own; checked for synopsis and defaults only
	}
	for cmd, flags := range want {
		out, errOut, code := cli(t, cmd, "-h")
		require.Equal(t, 0, code, "%s -h", cmd)
		text := out + errOut
		require.True(t, strings.HasPrefix(text, "usage: farmem "+cmd), "%s -h starts with a synopsis:\n%s", cmd, text)
		got := helpFlags(t, text)
		require.NotEmpty(t, got, "%s -h lists its flags", cmd)
		for name, block := range got {
			require.LessOrEqual(t, strings.Count(block, "(default"), 1, "%s -%s states its default once:\n%s", cmd, name, block)
		}
		if flags == nil {
			continue
		}
		var names []string
		for n := range got {
			names = append(names, n)
		}
		slices.Sort(names)
		require.Equal(t, flags, names, "%s -h lists the flags it honours", cmd)
	}
	// The top level names every command.
	out, _, code := cli(t, "-h")
	require.Equal(t, 0, code)
	for cmd := range want {
		require.Contains(t, out, "\n  "+cmd+" ")
	}
}
