package lincheck

import (
	"fmt"
	"reflect"
)

// Spec is a deterministic sequential specification with states S, inputs I and outputs O. Apply
// must be a pure function: it must not modify s or anything s shares, but return a new state.
//
// Determinism is what gives unknown outcomes their meaning: an operation whose output is
// unknown changes the state exactly as Apply says, at whatever point it is linearized.
type Spec[S, I, O any] struct {
	// Name names the model in messages.
	Name string
	// Init returns the initial state (of one partition, if Key is set).
	Init func() S
	// Apply returns the output the operation with input in produces in state s, and the state
	// after it.
	Apply func(s S, in I) (O, S)
	// ReadOnly reports that in never changes the state. Such an operation with an unknown or
	// unchecked output tells nothing and is dropped, and the counterexample shrinker may drop
	// completed ones. Optional.
	ReadOnly func(in I) bool
	// Key returns the partition of in: the history is checked per key, each partition from
	// Init, so operations with different keys must be independent. nil: no partitioning.
	Key func(in I) any
	// EqualState compares states (default reflect.DeepEqual). HashState, optional, must give
	// equal states equal hashes; it speeds the checker up.
	EqualState func(a, b S) bool
	HashState  func(s S) uint64
	// EqualOutput reports whether got, recorded for input in, matches want, what Apply
	// produced (default reflect.DeepEqual of the outputs).
	EqualOutput func(in I, want, got O) bool
	// DescribeInput, DescribeOutput (of an output, given its input) and DescribeState render for messages and visualizations
	// (default fmt's %v).
	DescribeInput  func(in I) string
	DescribeOutput func(in I, out O) string
	DescribeState  func(s S) string
}

// Model is a sequential specification over inputs I and outputs O, ready to check histories.
// Build one with [NewModel] or one of the ready models: [Register], [KV], [KVAtomicScans],
// [MaxRegister], [Set], [Counter].
type Model[I, O any] struct {
	name      string
	err       error
	init      func() any
	apply     func(s any, in I) (O, any)
	readOnly  func(I) bool
	eqState   func(a, b any) bool
	hashState func(any) uint64
	eqOut     func(in I, want, got O) bool
	descIn    func(I) string
	descOut   func(I, O) string
	descState func(any) string

	// partition groups ops; nil puts them all in one group.
	partition func(ops []cop[I, O]) []group[I, O]
	// prepare checks and rewrites the history before partitioning (scans); nil keeps it.
	prepare func(ops []cop[I, O]) ([]cop[I, O], *structural[I, O])
}

// NewModel returns a Model for sp.
func NewModel[S, I, O any](sp Spec[S, I, O]) *Model[I, O] {
	m := &Model[I, O]{name: sp.Name}
	if m.name == "" {
		m.name = "model"
	}
	if sp.Init == nil || sp.Apply == nil {
		m.err = fmt.Errorf("lincheck: model %q needs Init and Apply", m.name)
		return m
	}
	m.init = func() any { return sp.Init() }
	m.apply = func(s any, in I) (O, any) { return sp.Apply(s.(S), in) }
	m.readOnly = sp.ReadOnly
	if m.readOnly == nil {
		m.readOnly = func(I) bool { return false }
	}
	if sp.EqualState != nil {
		m.eqState = func(a, b any) bool { return sp.EqualState(a.(S), b.(S)) }
	} else {
		m.eqState = reflect.DeepEqual
	}
	if sp.HashState != nil {
		m.hashState = func(s any) uint64 { return sp.HashState(s.(S)) }
	}
	m.eqOut = sp.EqualOutput
	if m.eqOut == nil {
		m.eqOut = func(_ I, a, b O) bool { return reflect.DeepEqual(a, b) }
	}
	m.descIn = sp.DescribeInput
	if m.descIn == nil {
		m.descIn = func(in I) string { return fmt.Sprintf("%v", in) }
	}
	m.descOut = sp.DescribeOutput
	if m.descOut == nil {
		m.descOut = func(_ I, o O) string { return fmt.Sprintf("%v", o) }
	}
	if sp.DescribeState != nil {
		m.descState = func(s any) string { return sp.DescribeState(s.(S)) }
	} else {
		m.descState = func(s any) string { return fmt.Sprintf("%v", s) }
	}
	if sp.Key != nil {
		m.partition = partitionByKey[I, O](sp.Key)
	}
	return m
}

// Name returns the model's name.
func (m *Model[I, O]) Name() string { return m.name }

func (m *Model[I, O]) describeIn(in I) string {
	if m == nil || m.descIn == nil {
		return fmt.Sprintf("%v", in)
	}
	return m.descIn(in)
}

// partitionByKey groups ops by key, in order of first appearance.
func partitionByKey[I, O any](key func(I) any) func([]cop[I, O]) []group[I, O] {
	return func(ops []cop[I, O]) []group[I, O] {
		idx := make(map[any]int)
		var gs []group[I, O]
		for _, o := range ops {
			k := key(o.in)
			g, ok := idx[k]
			if !ok {
				g = len(gs)
				idx[k] = g
				gs = append(gs, group[I, O]{key: fmt.Sprintf("key %v", k)})
			}
			gs[g].ops = append(gs[g].ops, o)
		}
		return gs
	}
}
