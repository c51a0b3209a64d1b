// Package figurestest runs the checks of package figures over the module's markdown files, for
// the test packages that share them out.
//
// Re-running every simulated block's quick mode costs a minute of CPU, too much for one test
// package, so the check is split: each package under internal/figures/check names the
// markdown files it checks in a call of [CheckREADMEs] (one package per paper), and
// internal/figures' own test checks every other markdown file and fails when a file holding a
// simulated block is named by no check package, or by two ([Owners] reads the check packages'
// test sources to tell). A file is checked whole by the package that names it: markers well
// formed, no table of figures outside a block, each simulated block's golden matching the
// block's digest and what its quick mode prints now, and the -update and -measure
// regenerations of its blocks.
//
// The flags -update REGEXP (regenerate the simulated blocks whose golden path matches: the
// full command runs, its output replaces the block, the quick mode's output and the new digest
// replace the golden) and -measure REGEXP (re-run the measured blocks whose command matches)
// are registered by this package, so every test binary that imports it accepts them; a
// regeneration is run from the package that checks the block's file.
//
// Costs: each "go run ./pkg" command is built once per call of [CheckREADMEs], into the test's
// temporary directory, and the quick modes then run as parallel subtests (at most -parallel
// at once). A binary built with the race detector (the whole tree's go test -race) checks the
// digests only: the quick modes, about a minute of CPU, are re-run by go test
// ./internal/figures/... without -race, which CI runs as a step of its own. Limits: commands are run without a shell (see [figures.Args]); a quick mode has
// five minutes, a full command an hour (so a regeneration needs go test's -timeout raised past
// its ten-minute default).
package figurestest

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/farmem/farmem/internal/figures"
)

var (
	update  = flag.String("update", "", "regenerate the simulated blocks whose golden path matches this regexp")
	measure = flag.String("measure", "", "re-run the measured blocks whose command matches this regexp")
)

// CheckDir is the directory, relative to the module root, whose subdirectories are the check
// packages that [Owners] reads.
const CheckDir = "internal/figures/check"

// UpdateMatches reports whether the -update flag is set and matches golden, a block's golden
// path as written in its marker.
func UpdateMatches(golden string) bool {
	return *update != "" && regexp.MustCompile(*update).MatchString(golden)
}

// MeasureMatches reports whether the -measure flag is set and matches command, a measured
// block's command.
func MeasureMatches(command string) bool {
	return *measure != "" && regexp.MustCompile(*measure).MatchString(command)
}

// ModuleRoot returns the directory of the go.mod above the test's working directory.
func ModuleRoot(t testing.TB) string {
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

// Markdown returns every markdown file of the module at root, as slash-separated paths
// relative to root, sorted (testdata, .git and node_modules directories are skipped).
func Markdown(t testing.TB, root string) []string {
	t.Helper()
	var files []string
	require.NoError(t, filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == ".git" || d.Name() == "testdata" || d.Name() == "node_modules") {
			return filepath.SkipDir
		}
		if !d.IsDir() && strings.HasSuffix(d.Name(), ".md") {
			rel, err := filepath.Rel(root, p)
			if err != nil {
				return err
			}
			files = append(files, filepath.ToSlash(rel))
		}
		return nil
	}))
	require.NotEmpty(t, files)
	sort.Strings(files)
	return files
}

// ErrUnchecked is wrapped by [Unchecked]'s errors: a markdown file that holds a simulated
// block is checked by no package under [CheckDir], or by more than one, or a check package
// names a file that is not a markdown file of the module or names it other than by a literal.
var ErrUnchecked = errors.New("figurestest: README block not checked by exactly one package")

// Owners reads the test sources of the packages under [CheckDir] of the module at root and
// returns, for each markdown file named in a call of [CheckREADMEs], the packages
// (slash-separated directories relative to root) that name it. An argument that is not a
// string literal is an error wrapping [ErrUnchecked]: the map must say exactly which files
// are checked.
func Owners(root string) (map[string][]string, error) {
	tests, err := filepath.Glob(filepath.Join(root, filepath.FromSlash(CheckDir), "*", "*_test.go"))
	if err != nil {
		return nil, err
	}
	owners := map[string][]string{}
	fset := token.NewFileSet()
	var bad []error
	for _, file := range tests {
		f, err := parser.ParseFile(fset, file, nil, parser.SkipObjectResolution)
		if err != nil {
			return nil, err
		}
		rel, err := filepath.Rel(root, filepath.Dir(file))
		if err != nil {
			return nil, err
		}
		pkg := filepath.ToSlash(rel)
		ast.Inspect(f, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok {
				return true
			}
			sel, ok := call.Fun.(*ast.SelectorExpr)
			if !ok || sel.Sel.Name != "CheckREADMEs" || len(call.Args) == 0 {
				return true
			}
			for _, arg := range call.Args[1:] {
				lit, ok := arg.(*ast.BasicLit)
				name, err := "", error(nil)
				if ok && lit.Kind == token.STRING {
					name, err = strconv.Unquote(lit.Value)
				}
				if !ok || lit.Kind != token.STRING || err != nil {
					bad = append(bad, fmt.Errorf("%w: %s: CheckREADMEs names its files with string literals only",
						ErrUnchecked, fset.Position(arg.Pos())))
					continue
				}
				if !slices.Contains(owners[name], pkg) {
					owners[name] = append(owners[name], pkg)
				}
			}
			return true
		})
	}
	return owners, errors.Join(bad...)
}

// Unchecked returns what leaves a simulated block of files (slash-separated markdown paths
// relative to root, the module's whole list) unchecked or checked twice, given owners from
// [Owners]: each error wraps [ErrUnchecked] or, for a file that does not parse,
// [figures.ErrMalformed].
func Unchecked(root string, files []string, owners map[string][]string) []error {
	var errs []error
	for _, name := range slices.Sorted(maps.Keys(owners)) {
		if !slices.Contains(files, name) {
			errs = append(errs, fmt.Errorf("%w: %s names %s, which is not a markdown file of the module",
				ErrUnchecked, strings.Join(owners[name], ", "), name))
		}
		if len(owners[name]) > 1 {
			errs = append(errs, fmt.Errorf("%w: %s is checked by %s: one package each",
				ErrUnchecked, name, strings.Join(owners[name], " and ")))
		}
	}
	for _, rel := range files {
		md, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(rel)))
		if err != nil {
			errs = append(errs, err)
			continue
		}
		blocks, _, err := figures.Parse(md)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", rel, err))
			continue
		}
		for _, b := range blocks {
			if b.Kind == figures.Simulated && len(owners[rel]) == 0 {
				errs = append(errs, fmt.Errorf("%w: %s:%d: a simulated block that no package under %s checks "+
					"(add one whose test calls figurestest.CheckREADMEs(t, %q))", ErrUnchecked, rel, b.Line, CheckDir, rel))
			}
		}
	}
	return errs
}

// CheckREADMEs checks each of files (slash-separated markdown paths relative to the module
// root) whole: every block is well formed, no table of figures stands outside a block, and each
// simulated block's golden matches both the block (its digest) and what its quick mode prints
// now. Blocks matched by -update or -measure are regenerated first. The quick modes run as
// parallel subtests after the files are all parsed; with -short, or in a binary built with the
// race detector, only the digests are checked (the quick modes' programs are built without it,
// so a race-enabled run adds nothing to their check but its cost: go test ./internal/figures/...
// is the command that re-runs them).
func CheckREADMEs(t *testing.T, files ...string) {
	t.Helper()
	root := ModuleRoot(t)
	require.NotEmpty(t, files, "no markdown file to check")
	wd, err := os.Getwd()
	require.NoError(t, err)
	self, err := filepath.Rel(root, wd)
	require.NoError(t, err)
	regen := "go test -timeout 2h ./" + filepath.ToSlash(self) + " -run TestREADMEs -update "
	r := &runner{root: root, bin: t.TempDir(), builds: map[string]*built{}}
	for _, rel := range files {
		file := filepath.Join(root, filepath.FromSlash(rel))
		md, err := os.ReadFile(file)
		require.NoError(t, err)
		blocks, unmarked, err := figures.Parse(md)
		require.NoError(t, err, rel)
		for _, line := range unmarked {
			t.Errorf("%s:%d: a table of figures outside a marked block (mark it with the command that prints it)", rel, line)
		}
		// Bottom up, so that rewriting a block leaves the lines of those above it valid.
		for i := len(blocks) - 1; i >= 0; i-- {
			b := blocks[i]
			if b.Kind == figures.Measured && MeasureMatches(b.Command) {
				out := r.run(t, b.Command, time.Hour)
				md, err = figures.Replace(md, b, out)
				require.NoError(t, err)
				require.NoError(t, os.WriteFile(file, md, 0o644))
				t.Logf("%s:%d: measured again with %q", rel, b.Line, b.Command)
			}
			if b.Kind != figures.Simulated {
				continue
			}
			golden := filepath.Join(filepath.Dir(file), b.Golden)
			if UpdateMatches(b.Golden) {
				out := r.run(t, b.Command, time.Hour)
				md, err = figures.Replace(md, b, out)
				require.NoError(t, err)
				require.NoError(t, os.WriteFile(file, md, 0o644))
				b.Output = out
				quick := r.run(t, b.Quick, 5*time.Minute)
				require.NoError(t, os.MkdirAll(filepath.Dir(golden), 0o755))
				require.NoError(t, os.WriteFile(golden, figures.Golden{Digest: b.Digest(), Quick: quick}.Bytes(), 0o644))
				t.Logf("%s:%d: regenerated with %q and %q", rel, b.Line, b.Command, b.Quick)
				continue
			}
			raw, err := os.ReadFile(golden)
			require.NoError(t, err, "%s:%d: the block's golden", rel, b.Line)
			g, err := figures.ParseGolden(raw)
			require.NoError(t, err, golden)
			require.Equal(t, g.Digest, b.Digest(), "%s:%d: the block differs from the output its golden was made with: "+
				"regenerate it (%s%s), never edit it by hand", rel, b.Line, regen, b.Golden)
			if raceDetector && !testing.Short() {
				t.Logf("%s:%d: the digest matches; %q is not re-run under the race detector (go test ./internal/figures/... re-runs it)",
					rel, b.Line, b.Quick)
			}
			if testing.Short() || raceDetector {
				continue
			}
			t.Run(fmt.Sprintf("%s:%d", rel, b.Line), func(t *testing.T) {
				t.Parallel()
				quick := r.run(t, b.Quick, 5*time.Minute)
				require.Equal(t, g.Quick, quick, "%s:%d: %q prints something else than when the block was made: "+
					"the figures are stale; regenerate them (%s%s)", rel, b.Line, b.Quick, regen, b.Golden)
			})
		}
	}
}

// runner runs blocks' commands in the module root, building each "go run" package once.
type runner struct {
	root, bin string

	mu     sync.Mutex
	builds map[string]*built
}

// built is one main package built into the runner's directory: the first command that runs it
// builds it and the others wait for that build and share it.
type built struct {
	once sync.Once
	path string
	out  []byte
	err  error
}

// program returns the path of pkg (a "./cmd/x" path in the module) built once. Every quick mode
// is a "go run" of the same command: building it once, not once per block (each go run links
// its own copy), takes the builds out of the package's time; running the binary is what go run
// does next.
func (r *runner) program(t testing.TB, pkg string) string {
	t.Helper()
	r.mu.Lock()
	b := r.builds[pkg]
	if b == nil {
		b = &built{path: filepath.Join(r.bin, fmt.Sprintf("prog%d", len(r.builds)))}
		r.builds[pkg] = b
	}
	r.mu.Unlock()
	b.once.Do(func() {
		cmd := exec.Command("go", "build", "-o", b.path, pkg)
		cmd.Dir = r.root
		b.out, b.err = cmd.CombinedOutput()
	})
	require.NoError(t, b.err, "go build %s: %s", pkg, b.out)
	return b.path
}

// run runs a block's command in the module root and returns its standard output. A
// "go run ./pkg args" runs the package's program built once by program, with the same args.
func (r *runner) run(t testing.TB, command string, limit time.Duration) string {
	t.Helper()
	env, args, err := figures.Args(command)
	require.NoError(t, err)
	if len(args) >= 3 && args[0] == "go" && args[1] == "run" && strings.HasPrefix(args[2], "./") {
		args = append([]string{r.program(t, args[2])}, args[3:]...)
	}
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	cmd := exec.CommandContext(ctx, args[0], args[1:]...)
	cmd.Dir = r.root
	cmd.Env = append(os.Environ(), env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	require.NoError(t, cmd.Run(), "%s: %s", command, stderr.String())
	return stdout.String()
}
