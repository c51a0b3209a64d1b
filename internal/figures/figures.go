// Package figures keeps the figures in the project's READMEs tied to the commands that print
// them, so that a figure cannot go stale unnoticed.
//
// A block of figures in a markdown file is a fenced code block holding a command's verbatim
// output, opened by a marker comment and closed by another:
//
//	<!-- figures kind="simulated" quick="go run ./cmd/farmem repro cider --quick" golden="testdata/cider.golden" -->
//	```text
//	$ go run ./cmd/farmem repro cider
//	...the command's output, verbatim...
//	```
//	<!-- /figures -->
//
// The fence's first line is the command, after "$ ", so a reader always sees what produced the
// figures. Kind is "measured" (wall-clock figures: they depend on the machine, so nothing can
// re-derive them; the marker records only that they are a command's output) or "simulated"
// (deterministic figures from the simulator). A simulated block also names a quick mode of its
// command and a golden file (relative to the markdown file) that holds the quick mode's output
// and a digest of the block as it was when both were last generated. The check re-runs the
// quick mode and compares it with the golden, so a change of the code behind the figures
// fails until they are regenerated; the digest makes a hand edit of the block fail too. The
// check lives in package figurestest and runs in several test packages, one per paper's README
// (internal/figures/check/<paper>, where that paper's block is regenerated with -update), so
// that no one package re-runs every quick mode; this package's test checks the other markdown
// files and that every simulated block is checked by exactly one package.
//
// A third kind, "asserted", marks figures that are not measured at all but asserted exactly by
// tests (round trips per operation, say): its marker names the test command in command="...",
// and its content is ordinary markdown (a table), not a fence.
//
//	<!-- figures kind="asserted" command="go test -run RoundTrips ./kvstore/" -->
//	| op | round trips |
//	...
//	<!-- /figures -->
//
// Outside blocks, a markdown table with two or more numeric cells in a row is reported as a
// figure without its command.
package figures

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
)

// Kind says whether a block's figures can be re-derived.
type Kind string

// The kinds of block.
const (
	// Measured figures come from the wall clock of the machine that ran the command.
	Measured Kind = "measured"
	// Simulated figures are deterministic: the same command prints the same block.
	Simulated Kind = "simulated"
	// Asserted figures are exact counts that the tests of Command assert.
	Asserted Kind = "asserted"
)

// ErrMalformed is wrapped by every error about a file's markers or blocks.
var ErrMalformed = errors.New("figures: malformed block")

// Block is one marked block of figures in a markdown file.
type Block struct {
	// Line is the 1-based line of the opening marker.
	Line int
	// Kind is measured or simulated.
	Kind Kind
	// Command printed the block's output; it is the fence's first line, after "$ ".
	Command string
	// Output is the block's content after the command line, ending in a newline.
	Output string
	// Quick is a fast mode of Command whose output the golden holds (simulated blocks).
	Quick string
	// Golden is the golden file's path relative to the markdown file (simulated blocks).
	Golden string
}

// Digest is the SHA-256 of the block's command and output, as recorded in its golden.
func (b Block) Digest() string {
	h := sha256.Sum256([]byte("$ " + b.Command + "\n" + b.Output))
	return hex.EncodeToString(h[:])
}

var (
	openRE  = regexp.MustCompile(`^<!--\s*figures\s+(.*?)\s*-->\s*$`)
	closeRE = regexp.MustCompile(`^<!--\s*/figures\s*-->\s*$`)
	attrRE  = regexp.MustCompile(`(\w+)="([^"]*)"`)
	numRE   = regexp.MustCompile(`^[*_~]*[-+]?[0-9][0-9,]*(\.[0-9]+)?\s*(%|x|×|[kKMG]|µs|ns|ms|s|[kKMG]?i?B)?[*_~]*$`)
)

// Parse finds the marked blocks of a markdown file. Unmarked is the 1-based lines of table
// rows outside blocks that hold two or more numeric cells: figures with no command.
func Parse(md []byte) (blocks []Block, unmarked []int, err error) {
	sc := bufio.NewScanner(bytes.NewReader(md))
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	var (
		cur     *Block
		state   int // 0 outside, 1 after the marker, 2 in the fence, 3 after the fence
		out     strings.Builder
		lineNum int
		fence   string
		inCode  bool // a fence outside any block
	)
	bad := func(format string, a ...any) error {
		return fmt.Errorf("%w: line %d: %s", ErrMalformed, lineNum, fmt.Sprintf(format, a...))
	}
	for sc.Scan() {
		lineNum++
		line := sc.Text()
		trimmed := strings.TrimSpace(line)
		switch state {
		case 0:
			if strings.HasPrefix(trimmed, "```") {
				inCode = !inCode
				continue
			}
			if inCode {
				continue
			}
			if m := openRE.FindStringSubmatch(trimmed); m != nil {
				b, err := parseMarker(m[1])
				if err != nil {
					return nil, nil, bad("%v", err)
				}
				b.Line = lineNum
				cur, state = &b, 1
				if b.Kind == Asserted {
					state = 4
					out.Reset()
				}
				continue
			}
			if closeRE.MatchString(trimmed) {
				return nil, nil, bad("a closing marker with no block open")
			}
			if numericCells(trimmed) >= 2 {
				unmarked = append(unmarked, lineNum)
			}
		case 1:
			if trimmed == "" {
				continue
			}
			if !strings.HasPrefix(trimmed, "```") {
				return nil, nil, bad("a figures marker must be followed by a fenced block")
			}
			fence, state = trimmed[:strings.LastIndex(trimmed, "`")+1], 2
			out.Reset()
		case 2:
			if trimmed == fence {
				text := out.String()
				cmd, rest, _ := strings.Cut(text, "\n")
				if !strings.HasPrefix(cmd, "$ ") || strings.TrimSpace(cmd[2:]) == "" {
					return nil, nil, bad("the block opened at line %d must start with the command, as \"$ command\"", cur.Line)
				}
				cur.Command, cur.Output = strings.TrimSpace(cmd[2:]), rest
				state = 3
				continue
			}
			out.WriteString(line)
			out.WriteByte('\n')
		case 4:
			if closeRE.MatchString(trimmed) {
				cur.Output = out.String()
				blocks = append(blocks, *cur)
				cur, state = nil, 0
				continue
			}
			if openRE.MatchString(trimmed) {
				return nil, nil, bad("the block opened at line %d is not closed before another opens", cur.Line)
			}
			out.WriteString(line)
			out.WriteByte('\n')
		case 3:
			if trimmed == "" {
				continue
			}
			if !closeRE.MatchString(trimmed) {
				return nil, nil, bad("the block opened at line %d must be closed by <!-- /figures --> after its fence", cur.Line)
			}
			blocks = append(blocks, *cur)
			cur, state = nil, 0
		}
	}
	if err := sc.Err(); err != nil {
		return nil, nil, err
	}
	if state != 0 {
		return nil, nil, fmt.Errorf("%w: the block opened at line %d is not closed", ErrMalformed, cur.Line)
	}
	return blocks, unmarked, nil
}

func parseMarker(attrs string) (Block, error) {
	var b Block
	rest := attrRE.ReplaceAllStringFunc(attrs, func(kv string) string {
		m := attrRE.FindStringSubmatch(kv)
		switch m[1] {
		case "kind":
			b.Kind = Kind(m[2])
		case "quick":
			b.Quick = m[2]
		case "golden":
			b.Golden = m[2]
		case "command":
			b.Command = m[2]
		default:
			return kv // unknown: left in rest
		}
		return ""
	})
	if strings.TrimSpace(rest) != "" {
		return b, fmt.Errorf("unknown marker text %q", strings.TrimSpace(rest))
	}
	switch b.Kind {
	case Measured:
		if b.Quick != "" || b.Golden != "" || b.Command != "" {
			return b, errors.New("a measured block has no quick mode or golden")
		}
	case Simulated:
		if b.Quick == "" || b.Golden == "" {
			return b, errors.New("a simulated block names its quick command and its golden file")
		}
	case Asserted:
		if b.Command == "" || b.Quick != "" || b.Golden != "" {
			return b, errors.New("an asserted block names the test command that asserts it, and nothing else")
		}
	default:
		return b, fmt.Errorf("kind %q: want measured, simulated or asserted", b.Kind)
	}
	return b, nil
}

// numericCells counts the cells of a markdown table row that hold a number (with an optional
// unit or suffix); a line that is not a table row has none.
func numericCells(line string) int {
	if !strings.HasPrefix(line, "|") || !strings.HasSuffix(line, "|") || len(line) < 3 {
		return 0
	}
	n := 0
	for _, cell := range strings.Split(line[1:len(line)-1], "|") {
		c := strings.TrimSpace(cell)
		if c != "" && numRE.MatchString(c) {
			n++
		}
	}
	return n
}

// Golden is the content of a simulated block's golden file: the digest of the block it was
// generated with, and the quick mode's output.
type Golden struct {
	Digest string
	Quick  string
}

const goldenHeader = "# figures golden: block sha256 "

// ParseGolden reads a golden file's content.
func ParseGolden(b []byte) (Golden, error) {
	first, rest, ok := strings.Cut(string(b), "\n")
	if !ok || !strings.HasPrefix(first, goldenHeader) {
		return Golden{}, fmt.Errorf("%w: a golden file starts with %q", ErrMalformed, goldenHeader)
	}
	d := strings.TrimPrefix(first, goldenHeader)
	if _, err := hex.DecodeString(d); err != nil || len(d) != 64 {
		return Golden{}, fmt.Errorf("%w: golden digest %q", ErrMalformed, d)
	}
	return Golden{Digest: d, Quick: rest}, nil
}

// Bytes is the golden file's content.
func (g Golden) Bytes() []byte {
	return []byte(goldenHeader + g.Digest + "\n" + g.Quick)
}

// Replace returns md with the block at b.Line holding output (after its command line) instead
// of its current output.
func Replace(md []byte, b Block, output string) ([]byte, error) {
	lines := strings.SplitAfter(string(md), "\n")
	if b.Line < 1 || b.Line > len(lines) || !openRE.MatchString(strings.TrimSpace(lines[b.Line-1])) {
		return nil, fmt.Errorf("%w: no marker at line %d", ErrMalformed, b.Line)
	}
	i := b.Line
	for i < len(lines) && !strings.HasPrefix(strings.TrimSpace(lines[i]), "```") {
		i++
	}
	start := i + 2 // after the fence and the command line
	end := start
	for end < len(lines) && !strings.HasPrefix(strings.TrimSpace(lines[end]), "```") {
		end++
	}
	if start > len(lines) || end >= len(lines) {
		return nil, fmt.Errorf("%w: the block at line %d has no closing fence", ErrMalformed, b.Line)
	}
	if output != "" && !strings.HasSuffix(output, "\n") {
		output += "\n"
	}
	var s strings.Builder
	for _, l := range lines[:start] {
		s.WriteString(l)
	}
	s.WriteString(output)
	for _, l := range lines[end:] {
		s.WriteString(l)
	}
	return []byte(s.String()), nil
}

// Args splits a command line into words the way a POSIX shell does for plain words, single
// and double quotes (no expansions). Leading NAME=value words are returned as env.
func Args(cmd string) (env, args []string, err error) {
	var (
		cur    strings.Builder
		inWord bool
		quote  rune
	)
	flush := func() {
		if inWord {
			args = append(args, cur.String())
			cur.Reset()
			inWord = false
		}
	}
	for _, r := range cmd {
		switch {
		case quote != 0:
			if r == quote {
				quote = 0
			} else {
				cur.WriteRune(r)
			}
		case r == '\'' || r == '"':
			quote, inWord = r, true
		case r == ' ' || r == '\t':
			flush()
		case strings.ContainsRune("|&;<>()$`\\*?[#~", r):
			return nil, nil, fmt.Errorf("figures: command %q: %q needs a shell; keep commands plain", cmd, r)
		default:
			cur.WriteRune(r)
			inWord = true
		}
	}
	if quote != 0 {
		return nil, nil, fmt.Errorf("figures: command %q: unclosed quote", cmd)
	}
	flush()
	for len(args) > 0 {
		name, _, ok := strings.Cut(args[0], "=")
		if !ok || name == "" || strings.ContainsAny(name, "-./") {
			break
		}
		if _, err := strconv.Atoi(name[:1]); err == nil {
			break
		}
		env = append(env, args[0])
		args = args[1:]
	}
	if len(args) == 0 {
		return nil, nil, fmt.Errorf("figures: command %q: nothing to run", cmd)
	}
	return env, args, nil
}
