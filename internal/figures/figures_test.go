package figures

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// -update regenerates the simulated blocks whose golden path matches it: it runs each one's
// full command (minutes), writes the output into the markdown file, runs the quick mode and
// writes the golden.
var update = flag.String("update", "", "regenerate the simulated blocks whose golden path matches this regexp")

// -measure re-runs the measured blocks whose command matches it and writes their output into
// the markdown files: measured figures are regenerated on a quiet machine, by hand, never in CI.
var measure = flag.String("measure", "", "re-run the measured blocks whose command matches this regexp")

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

// TestREADMEs checks every markdown file of the module: each block is well formed, no table
// of figures stands outside a block, and each simulated block's golden matches both the block
// (its digest) and what the quick mode prints now.
func TestREADMEs(t *testing.T) {
	root := moduleRoot(t)
	var files []string
	require.NoError(t, filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == ".git" || d.Name() == "testdata" || d.Name() == "node_modules") {
			return filepath.SkipDir
		}
		if !d.IsDir() && strings.HasSuffix(d.Name(), ".md") {
			files = append(files, path)
		}
		return nil
	}))
	require.NotEmpty(t, files)
	var updateRE, measureRE *regexp.Regexp
	if *update != "" {
		updateRE = regexp.MustCompile(*update)
	}
	if *measure != "" {
		measureRE = regexp.MustCompile(*measure)
	}
	for _, file := range files {
		rel, _ := filepath.Rel(root, file)
		md, err := os.ReadFile(file)
		require.NoError(t, err)
		blocks, unmarked, err := Parse(md)
		require.NoError(t, err, rel)
		for _, line := range unmarked {
			t.Errorf("%s:%d: a table of figures outside a marked block (mark it with the command that prints it)", rel, line)
		}
		// Bottom up, so that rewriting a block leaves the lines of those above it valid.
		for i := len(blocks) - 1; i >= 0; i-- {
			b := blocks[i]
			if b.Kind == Measured && measureRE != nil && measureRE.MatchString(b.Command) {
				out := runCommand(t, root, b.Command, time.Hour)
				md, err = Replace(md, b, out)
				require.NoError(t, err)
				require.NoError(t, os.WriteFile(file, md, 0o644))
				t.Logf("%s:%d: measured again with %q", rel, b.Line, b.Command)
			}
			if b.Kind != Simulated {
				continue
			}
			golden := filepath.Join(filepath.Dir(file), b.Golden)
			if updateRE != nil && updateRE.MatchString(b.Golden) {
				out := runCommand(t, root, b.Command, time.Hour)
				md, err = Replace(md, b, out)
				require.NoError(t, err)
				require.NoError(t, os.WriteFile(file, md, 0o644))
				b.Output = out
				quick := runCommand(t, root, b.Quick, 5*time.Minute)
				require.NoError(t, os.MkdirAll(filepath.Dir(golden), 0o755))
				require.NoError(t, os.WriteFile(golden, Golden{Digest: b.Digest(), Quick: quick}.Bytes(), 0o644))
				t.Logf("%s:%d: regenerated with %q and %q", rel, b.Line, b.Command, b.Quick)
				continue
			}
			raw, err := os.ReadFile(golden)
			require.NoError(t, err, "%s:%d: the block's golden", rel, b.Line)
			g, err := ParseGolden(raw)
			require.NoError(t, err, golden)
			require.Equal(t, g.Digest, b.Digest(), "%s:%d: the block differs from the output its golden was made with: "+
				"regenerate it (go test ./internal/figures -run TestREADMEs -update %s), never edit it by hand", rel, b.Line, b.Golden)
			if testing.Short() {
				continue
			}
			// The quick runs are independent processes: they run as parallel subtests (at most
			// -parallel at once), after the files are all parsed.
			t.Run(fmt.Sprintf("%s:%d", rel, b.Line), func(t *testing.T) {
				t.Parallel()
				quick := runCommand(t, root, b.Quick, 5*time.Minute)
				require.Equal(t, g.Quick, quick, "%s:%d: %q prints something else than when the block was made: "+
					"the figures are stale; regenerate them (go test ./internal/figures -run TestREADMEs -update %s)", rel, b.Line, b.Quick, b.Golden)
			})
		}
	}
}

// binDir holds the programs that runCommand builds once for the whole test binary.
var binDir string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "figures-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binDir = dir
	code := m.Run()
	_ = os.RemoveAll(dir)
	os.Exit(code)
}

// built is one main package built into binDir: the first command that runs it builds it and
// the others wait for that build and share it.
type built struct {
	once sync.Once
	path string
	out  []byte
	err  error
}

var (
	builtMu sync.Mutex
	builds  = map[string]*built{}
)

// program returns the path of pkg (a "./cmd/x" path in the module at root) built into binDir.
// Every quick mode is a "go run" of the same command: building it once, not once per block
// (each go run links its own copy, and runs at once compile the same packages side by side),
// takes the builds out of the package's time; running the binary is what go run does next.
func program(t *testing.T, root, pkg string) string {
	t.Helper()
	builtMu.Lock()
	b := builds[pkg]
	if b == nil {
		b = &built{path: filepath.Join(binDir, fmt.Sprintf("prog%d", len(builds)))}
		builds[pkg] = b
	}
	builtMu.Unlock()
	b.once.Do(func() {
		cmd := exec.Command("go", "build", "-o", b.path, pkg)
		cmd.Dir = root
		b.out, b.err = cmd.CombinedOutput()
	})
	require.NoError(t, b.err, "go build %s: %s", pkg, b.out)
	return b.path
}

// runCommand runs a block's command in the module root and returns its standard output. A
// "go run ./pkg args" runs the package's program built once by program, with the same args.
func runCommand(t *testing.T, root, command string, limit time.Duration) string {
	t.Helper()
	env, args, err := Args(command)
	require.NoError(t, err)
	if len(args) >= 3 && args[0] == "go" && args[1] == "run" && strings.HasPrefix(args[2], "./") {
		args = append([]string{program(t, root, args[2])}, args[3:]...)
	}
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	cmd := exec.CommandContext(ctx, args[0], args[1:]...)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	require.NoError(t, cmd.Run(), "%s: %s", command, stderr.String())
	return stdout.String()
}

func moduleRoot(t *testing.T) string {
	t.Helper()
	dir, err := os.Getwd()
	require.NoError(t, err)
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		require.NotEqual(t, parent, dir, "no go.mod above the test")
		dir = parent
	}
}
