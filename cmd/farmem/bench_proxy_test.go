package main

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/farmem/farmem/kvstore"
)

// --proxy chooses FlexKV's proxying for the RACE index: it maps onto the flexkv and aceso kinds
// (the report's header names the kind that ran, but for the default, race), and is refused, with the options matrix's
// error, on a kind that is not RACE or against a RACE kind's own choice.
func TestBenchProxy(t *testing.T) {
	t.Parallel()
	base := []string{"bench", "--transport", "local", "--mem-nodes", "3", "--mem-size", "8MiB", "--records", "20",
		"--duration", "10ms", "--warmup", "0s", "--peers", "none"}
	for _, c := range []struct{ index, proxy, kind string }{
		{"race", "none", "race"},
		{"race", "aceso", "aceso"},
		{"race", "flexkv", "flexkv"},
		{"aceso", "aceso", "aceso"},
		{"hybrid", "none", "hybrid"},
	} {
		args := append(append([]string(nil), base...), "--index", c.index, "--proxy", c.proxy)
		if c.index == "hybrid" {
			args = append(args, "--set", "keyformat=binary64")
		}
		out, errOut, code := cli(t, args...)
		require.Equal(t, 0, code, "%v\n%s\n%s", c, out, errOut)
		if c.kind == "race" {
			require.NotContains(t, out, " index ", "%v: the default kind goes unnamed", c)
			continue
		}
		require.Contains(t, out, "index "+c.kind+",", "%v", c)
	}
	for _, c := range []struct{ index, proxy string }{
		{"hybrid", "flexkv"},
		{"blink", "aceso"},
		{"swarm", "flexkv"},
		{"flexkv", "none"},
		{"aceso", "flexkv"},
		{"race", "redis"},
	} {
		args := append(append([]string(nil), base...), "--index", c.index, "--proxy", c.proxy)
		out, errOut, code := cli(t, args...)
		require.NotEqual(t, 0, code, "%v\n%s", c, out)
		_, err := kvstore.ProxyIndex(c.index, c.proxy)
		var re *kvstore.RefusalError
		require.ErrorAs(t, err, &re, "%v", c)
		require.Contains(t, errOut, strings.TrimPrefix(re.Error(), "kvstore: "), "%v: the matrix's refusal", c)
		require.Contains(t, errOut, "refuses proxy "+c.proxy)
	}
	// --matrix chooses the proxying itself.
	_, errOut, code := cli(t, "bench", "--matrix", "--proxy", "flexkv")
	require.Equal(t, 2, code)
	require.Contains(t, errOut, "--proxy")
}
