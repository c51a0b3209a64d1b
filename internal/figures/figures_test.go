package figures

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

const sample = "# x\n\n" +
	"| a | b |\n|---|---|\n| text | more |\n\n" +
	"<!-- figures kind=\"simulated\" quick=\"go run ./cmd/x --quick\" golden=\"testdata/x.golden\" -->\n" +
	"```text\n$ go run ./cmd/x\n| n | 1.5 | 2 |\nline\n```\n<!-- /figures -->\n\n" +
	"<!-- figures kind=\"measured\" -->\n```\n$ go test -bench .\nBenchmarkX 100 12 ns/op\n```\n<!-- /figures -->\n" +
	"| 8 | 1.61 | text |\n"

func TestParse(t *testing.T) {
	blocks, unmarked, err := Parse([]byte(sample))
	require.NoError(t, err)
	require.Len(t, blocks, 2)
	require.Equal(t, Block{Line: 7, Kind: Simulated, Command: "go run ./cmd/x", Output: "| n | 1.5 | 2 |\nline\n",
		Quick: "go run ./cmd/x --quick", Golden: "testdata/x.golden"}, blocks[0])
	require.Equal(t, Measured, blocks[1].Kind)
	require.Equal(t, "go test -bench .", blocks[1].Command)
	require.Equal(t, []int{21}, unmarked, "the table row of figures after the blocks has no command")

	again, err := Replace([]byte(sample), blocks[0], "new output")
	require.NoError(t, err)
	b2, _, err := Parse(again)
	require.NoError(t, err)
	require.Equal(t, "new output\n", b2[0].Output)
	b2[1].Line = blocks[1].Line // the first block lost a line
	require.Equal(t, blocks[1], b2[1], "the other block is untouched")
	require.NotEqual(t, blocks[0].Digest(), b2[0].Digest())
}

func TestParseRejects(t *testing.T) {
	for name, md := range map[string]string{
		"no fence":             "<!-- figures kind=\"measured\" -->\ntext\n",
		"no command":           "<!-- figures kind=\"measured\" -->\n```\n12 ns\n```\n<!-- /figures -->\n",
		"unclosed":             "<!-- figures kind=\"measured\" -->\n```\n$ x\n```\n",
		"stray close":          "<!-- /figures -->\n",
		"bad kind":             "<!-- figures kind=\"guessed\" -->\n```\n$ x\n```\n<!-- /figures -->\n",
		"sim, no golden":       "<!-- figures kind=\"simulated\" quick=\"x\" -->\n```\n$ x\n```\n<!-- /figures -->\n",
		"unknown attr":         "<!-- figures kind=\"measured\" colour=\"red\" -->\n```\n$ x\n```\n<!-- /figures -->\n",
		"asserted, no command": "<!-- figures kind=\"asserted\" -->\n| a | 1 | 2 |\n<!-- /figures -->\n",
		"asserted, unclosed":   "<!-- figures kind=\"asserted\" command=\"go test ./x\" -->\n| a | 1 | 2 |\n",
	} {
		_, _, err := Parse([]byte(md))
		require.ErrorIs(t, err, ErrMalformed, name)
	}
}

func TestAsserted(t *testing.T) {
	md := "<!-- figures kind=\"asserted\" command=\"go test -run RoundTrips ./kvstore/\" -->\n| op | rt |\n|---|---:|\n| Get | 2 | 1 |\n<!-- /figures -->\n| x | 1 | 2 |\n"
	blocks, unmarked, err := Parse([]byte(md))
	require.NoError(t, err)
	require.Equal(t, []Block{{Line: 1, Kind: Asserted, Command: "go test -run RoundTrips ./kvstore/", Output: "| op | rt |\n|---|---:|\n| Get | 2 | 1 |\n"}}, blocks)
	require.Equal(t, []int{6}, unmarked)
}

func TestNumericCells(t *testing.T) {
	for line, want := range map[string]int{
		"| 8 | 1.61 | 1.03 | **9.16** | 56.5x |": 5,
		"| 622.8k | 2.61 µs | 4.22M | 77% |":     4,
		"| `farmem` | the contract |":            0,
		"|---|---:|":                             0,
		"not a table 1 2":                        0,
		"| A (50% read) | 12 |":                  1,
	} {
		require.Equal(t, want, numericCells(line), line)
	}
}

func TestArgs(t *testing.T) {
	env, args, err := Args(`GOMAXPROCS=1 go run ./cmd/farmem repro cider --quick --set 'a b'`)
	require.NoError(t, err)
	require.Equal(t, []string{"GOMAXPROCS=1"}, env)
	require.Equal(t, []string{"go", "run", "./cmd/farmem", "repro", "cider", "--quick", "--set", "a b"}, args)
	for _, bad := range []string{"", "x | y", "echo $HOME", "a 'b"} {
		_, _, err := Args(bad)
		require.Error(t, err, bad)
	}
}

func TestGolden(t *testing.T) {
	g := Golden{Digest: strings.Repeat("ab", 32), Quick: "a\nb\n"}
	back, err := ParseGolden(g.Bytes())
	require.NoError(t, err)
	require.Equal(t, g, back)
	_, err = ParseGolden([]byte("no header\n"))
	require.ErrorIs(t, err, ErrMalformed)
}
