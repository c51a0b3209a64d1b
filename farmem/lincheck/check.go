package lincheck

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/farmem/farmem/farmem"
)

// Errors a check returns, wrapped in a [*Violation] (use errors.Is).
var (
	// ErrNotLinearizable: the history has no linearization.
	ErrNotLinearizable = errors.New("lincheck: not linearizable")
	// ErrTimeout: the checker ran out of time. It is a failure, never a pass: a history too
	// hard to check proves nothing.
	ErrTimeout = errors.New("lincheck: checker timed out")
	// ErrMisuse: the history or the model is malformed (an operation ended twice, a return
	// before its call, a model without Apply).
	ErrMisuse = errors.New("lincheck: misuse")
)

// EnvDir names the environment variable that, when set, is the directory where failing checks
// write their visualizations (instead of the test's artifact directory).
const EnvDir = "FARMEM_LINCHECK_DIR"

// DefaultTimeout is the checker's time budget unless [Timeout] says otherwise.
const DefaultTimeout = 30 * time.Second

// Option configures a check.
type Option func(*options)

type options struct {
	timeout time.Duration
	shrink  time.Duration
	dir     func() string
	name    string
}

// Timeout sets the checker's time budget (default [DefaultTimeout]). Running out of it fails
// the check with ErrTimeout.
func Timeout(d time.Duration) Option { return func(o *options) { o.timeout = d } }

// ShrinkBudget sets how long a failing check may spend shrinking its counterexample (default
// 10s). Shrinking only makes the report smaller; running out of budget reports what it has.
func ShrinkBudget(d time.Duration) Option { return func(o *options) { o.shrink = d } }

// VisualizeDir makes a failing check write porcupine's HTML visualizations under dir. Without
// it, [History.Check] uses the directory the [EnvDir] variable names or the test's artifact
// directory (kept with go test -artifacts), and [History.Verify] uses the [EnvDir] variable's
// directory or writes none.
func VisualizeDir(dir string) Option {
	return func(o *options) { o.dir = func() string { return dir } }
}

// Name sets the prefix of visualization files (default "lincheck", or the test's name).
func Name(name string) Option { return func(o *options) { o.name = name } }

// Summary describes a checked history.
type Summary struct {
	// Ops is the number of recorded operations; OK, Done, Failed and Unknown count them by
	// outcome (operations still pending count as Unknown).
	Ops, OK, Done, Failed, Unknown int
	// Checked is the number of operations given to porcupine (failed ones and read-only ones
	// whose output tells nothing are left out; scans checked per key add one read per key).
	Checked int
	// Partitions is the number of independent partitions, Largest the size of the biggest.
	Partitions, Largest int
	// Elapsed is the time the check took.
	Elapsed time.Duration
}

func (s Summary) String() string {
	return fmt.Sprintf("%d ops (%d ok, %d done, %d failed, %d unknown), %d checked in %d partitions (largest %d), %v",
		s.Ops, s.OK, s.Done, s.Failed, s.Unknown, s.Checked, s.Partitions, s.Largest, s.Elapsed.Round(time.Microsecond))
}

// Violation is a failed check: not linearizable, out of time, or misused. Its message is the
// readable report: the smallest failing partition shrunk to a minimal counterexample, listed op
// by op, and the paths of the visualizations.
type Violation struct {
	// Model is the model's name; Partition describes the failing partition ("key 7").
	Model, Partition string
	// Ops is the minimal counterexample, sorted by call time.
	Ops []string
	// Files are the visualizations written (HTML), if any.
	Files []string
	// Report is the whole readable message.
	Report string
	err    error
}

func (v *Violation) Error() string { return v.Report }

// Unwrap returns ErrNotLinearizable, ErrTimeout or ErrMisuse.
func (v *Violation) Unwrap() error { return v.err }

// Check checks the history and fails t (t.Fatal, so call it from the test's goroutine) with the
// report of a [Violation] unless it is linearizable. A timeout fails. On failure the
// visualizations are written under the directory the [EnvDir] variable names, if set, else
// under t.ArtifactDir() (kept when the test runs with go test -artifacts). It returns the
// summary.
func (h *History[I, O]) Check(t testing.TB, opts ...Option) Summary {
	t.Helper()
	o := options{name: t.Name(), dir: func() string {
		if d := os.Getenv(EnvDir); d != "" {
			return d
		}
		return t.ArtifactDir()
	}}
	s, err := h.verify(o, opts)
	if err != nil {
		t.Fatalf("%v", err)
	}
	t.Logf("lincheck %s: linearizable: %v", h.model.name, s)
	return s
}

// Verify checks the history and returns its summary and nil if it is linearizable, or a
// [*Violation].
func (h *History[I, O]) Verify(opts ...Option) (Summary, error) {
	o := options{dir: func() string { return os.Getenv(EnvDir) }}
	return h.verify(o, opts)
}

func (h *History[I, O]) verify(o options, opts []Option) (Summary, error) {
	start := time.Now()
	o.timeout, o.shrink = DefaultTimeout, 10*time.Second
	if o.name == "" {
		o.name = "lincheck"
	}
	for _, f := range opts {
		f(&o)
	}
	m := h.model
	var sum Summary
	if m == nil {
		return sum, &Violation{Report: "lincheck: history has no model", err: ErrMisuse}
	}
	if m.err != nil {
		return sum, &Violation{Model: m.name, Report: m.err.Error(), err: ErrMisuse}
	}
	recs, misuse := h.snapshot()
	sum.Ops = len(recs)
	ops := make([]cop[I, O], 0, len(recs))
	for _, r := range recs {
		switch r.Outcome {
		case OK:
			sum.OK++
		case Done:
			sum.Done++
		case Failed:
			sum.Failed++
			continue
		default:
			sum.Unknown++
			r.Outcome = Unknown
		}
		if r.Outcome != Unknown && r.Return < r.Call {
			misuse = append(misuse, fmt.Sprintf("client %d: %s returned at %d before its call at %d",
				r.Client, m.descIn(r.In), r.Return, r.Call))
		}
		ops = append(ops, cop[I, O]{client: r.Client, call: r.Call, ret: r.Return, in: r.In, out: r.Out, oc: r.Outcome})
	}
	if len(misuse) > 0 {
		return sum, &Violation{Model: m.name, err: ErrMisuse,
			Report: "lincheck: misused history:\n  " + strings.Join(misuse, "\n  ")}
	}
	if m.prepare != nil {
		var bad *structural[I, O]
		ops, bad = m.prepare(ops)
		if bad != nil {
			return sum, m.structuralViolation(bad)
		}
	}
	ops = m.normalize(ops)
	sum.Checked = len(ops)
	var groups []group[I, O]
	if m.partition != nil {
		groups = m.partition(ops)
	} else if len(ops) > 0 {
		groups = []group[I, O]{{key: "the whole history", ops: ops}}
	}
	sum.Partitions = len(groups)
	for _, g := range groups {
		sum.Largest = max(sum.Largest, len(g.ops))
	}
	res, _, _ := m.run(groups, false, o.timeout)
	sum.Elapsed = time.Since(start)
	switch res {
	case porcupine.Ok:
		return sum, nil
	case porcupine.Unknown:
		return sum, &Violation{Model: m.name, err: ErrTimeout, Report: fmt.Sprintf(
			"lincheck %s: the checker timed out after %v, which counts as a failure: %v. "+
				"Check smaller histories (fewer operations per partition, fewer concurrent unknown outcomes) or raise lincheck.Timeout.",
			m.name, o.timeout, sum)}
	}
	return sum, m.explainFailure(groups, sum, o)
}

// cop is an operation as the checker sees it.
type cop[I, O any] struct {
	client    int
	call, ret farmem.Time
	in        I
	out       O
	oc        Outcome // OK, Done or Unknown
	// note, for operations the checker made up (a scan's read of one key), says where from.
	note string
	// cut: the shrinker cut the history before this operation returned, so its outcome is
	// left open.
	cut bool
}

// group is one partition: its description and operations, and its initial state if it is not
// the model's (a shrunk counterexample starts where the operations cut off before it left).
type group[I, O any] struct {
	key      string
	ops      []cop[I, O]
	start    any
	hasStart bool
}

// structural is an operation whose output is malformed whatever the state (an unsorted scan).
type structural[I, O any] struct {
	op  cop[I, O]
	why string
}

func (m *Model[I, O]) structuralViolation(b *structural[I, O]) error {
	line := m.describeOp(b.op, 0)
	return &Violation{Model: m.name, Partition: "one operation", Ops: []string{line}, err: ErrNotLinearizable,
		Report: fmt.Sprintf("lincheck %s: not linearizable: an output no state can produce: %s\n  %s", m.name, b.why, line)}
}

// normalize drops operations that tell nothing: read-only ones with an unknown or unchecked
// output.
func (m *Model[I, O]) normalize(ops []cop[I, O]) []cop[I, O] {
	return slices.DeleteFunc(ops, func(o cop[I, O]) bool { return o.oc != OK && m.readOnly(o.in) })
}

// pin is the porcupine input of an operation; the output is unused (the operation holds it).
type pin[I, O any] struct {
	op *cop[I, O]
}

// porcupine returns the porcupine model of m.
func (m *Model[I, O]) porcupine() porcupine.Model {
	pm := porcupine.Model{
		Init: m.init,
		Step: func(s, in, _ any) (bool, any) {
			p := in.(pin[I, O])
			got, next := m.apply(s, p.op.in)
			if p.op.oc == OK && !m.eqOut(p.op.in, got, p.op.out) {
				return false, s
			}
			return true, next
		},
		Equal:         m.eqState,
		DescribeState: m.descState,
		DescribeOperation: func(in, _ any) string {
			p := in.(pin[I, O])
			return m.describeResult(*p.op)
		},
		DescribeOperationMetadata: func(md any) string {
			if md == nil {
				return ""
			}
			return fmt.Sprintf("client %v", md)
		},
	}
	if m.hashState != nil {
		pm.Hash = m.hashState
	}
	return pm
}

// run checks groups with porcupine, each group one partition.
func (m *Model[I, O]) run(groups []group[I, O], verbose bool, timeout time.Duration) (porcupine.CheckResult, porcupine.LinearizationInfo, porcupine.Model) {
	pm := m.porcupine()
	if len(groups) == 1 && groups[0].hasStart {
		start := groups[0].start
		pm.Init = func() any { return start }
	}
	if timeout <= 0 {
		return porcupine.Unknown, porcupine.LinearizationInfo{}, pm
	}
	parts := make([][]porcupine.Operation, len(groups))
	dense := make(map[int]int)
	for gi, g := range groups {
		var end farmem.Time
		for _, o := range g.ops {
			end = max(end, o.call, o.ret)
		}
		ps := make([]porcupine.Operation, len(g.ops))
		for i := range g.ops {
			o := &g.ops[i]
			ret := o.ret
			if o.oc == Unknown {
				// Open-ended: it may take effect at any instant after its call, including
				// after every other operation (which is the same as never).
				ret = end + 1
			}
			d, ok := dense[o.client]
			if !ok {
				d = len(dense)
				dense[o.client] = d
			}
			ps[i] = porcupine.Operation{ClientId: d, Input: pin[I, O]{op: o},
				Call: int64(o.call), Return: int64(ret), Metadata: o.client}
		}
		parts[gi] = ps
	}
	var flat []porcupine.Operation
	for _, p := range parts {
		flat = append(flat, p...)
	}
	pm.Partition = func([]porcupine.Operation) [][]porcupine.Operation { return parts }
	if verbose {
		res, info := porcupine.CheckOperationsVerbose(pm, flat, timeout)
		return res, info, pm
	}
	return porcupine.CheckOperationsTimeout(pm, flat, timeout), porcupine.LinearizationInfo{}, pm
}

// describeResult renders "op -> output".
func (m *Model[I, O]) describeResult(o cop[I, O]) string {
	var b strings.Builder
	if o.note != "" {
		b.WriteString(o.note)
		b.WriteString(": ")
	}
	b.WriteString(m.descIn(o.in))
	switch o.oc {
	case OK:
		b.WriteString(" -> ")
		b.WriteString(m.descOut(o.in, o.out))
	case Done:
		b.WriteString(" -> (not checked)")
	default:
		if o.cut {
			b.WriteString(" -> ? (returns after the cut)")
		} else {
			b.WriteString(" -> ? (unknown outcome)")
		}
	}
	return b.String()
}

// describeOp renders one line: client, times relative to t0, the operation and its result.
func (m *Model[I, O]) describeOp(o cop[I, O], t0 farmem.Time) string {
	ret := "open"
	switch {
	case o.cut:
		ret = "cut"
	case o.oc != Unknown:
		ret = fmtRel(o.ret - t0)
	}
	return fmt.Sprintf("client %-5d %-24s %s", o.client, "["+fmtRel(o.call-t0)+", "+ret+"]", m.describeResult(o))
}

func fmtRel(d farmem.Time) string { return time.Duration(d).String() }
