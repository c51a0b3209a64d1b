package lincheck

import (
	"fmt"
	"hash/maphash"
)

var seed = maphash.MakeSeed()

// RegisterOp is a register operation.
type RegisterOp uint8

// The register operations.
const (
	RegRead RegisterOp = iota
	RegWrite
	RegCAS
)

// RegisterInput is a register operation on the register named Key: Read, Write(Value), or
// CAS(Old, Value) (store Value if the register holds Old).
type RegisterInput[V comparable] struct {
	Op         RegisterOp
	Key        uint64
	Value, Old V
}

// RegisterOutput is a register operation's result: a read's Value, a CAS's Swapped. A write
// has none.
type RegisterOutput[V comparable] struct {
	Value   V
	Swapped bool
}

// RegisterModel is a set of independent read/write/CAS registers, one per key, each starting at
// V's zero value. Histories are checked per key. Build inputs and outputs with its methods.
type RegisterModel[V comparable] struct {
	*Model[RegisterInput[V], RegisterOutput[V]]
}

// Register returns the register model.
func Register[V comparable]() *RegisterModel[V] {
	return &RegisterModel[V]{NewModel(Spec[V, RegisterInput[V], RegisterOutput[V]]{
		Name: "register",
		Init: func() V { var z V; return z },
		Apply: func(s V, in RegisterInput[V]) (RegisterOutput[V], V) {
			switch in.Op {
			case RegRead:
				return RegisterOutput[V]{Value: s}, s
			case RegWrite:
				return RegisterOutput[V]{}, in.Value
			case RegCAS:
				if s == in.Old {
					return RegisterOutput[V]{Swapped: true}, in.Value
				}
				return RegisterOutput[V]{}, s
			}
			return RegisterOutput[V]{}, s
		},
		ReadOnly:   func(in RegisterInput[V]) bool { return in.Op == RegRead },
		Key:        func(in RegisterInput[V]) any { return in.Key },
		EqualState: func(a, b V) bool { return a == b },
		HashState:  func(s V) uint64 { return maphash.Comparable(seed, s) },
		EqualOutput: func(in RegisterInput[V], want, got RegisterOutput[V]) bool {
			switch in.Op {
			case RegRead:
				return want.Value == got.Value
			case RegCAS:
				return want.Swapped == got.Swapped
			}
			return true
		},
		DescribeInput: func(in RegisterInput[V]) string {
			switch in.Op {
			case RegRead:
				return fmt.Sprintf("read(%d)", in.Key)
			case RegWrite:
				return fmt.Sprintf("write(%d, %v)", in.Key, in.Value)
			case RegCAS:
				return fmt.Sprintf("cas(%d, %v, %v)", in.Key, in.Old, in.Value)
			}
			return fmt.Sprintf("op%d(%d)", in.Op, in.Key)
		},
		DescribeOutput: func(in RegisterInput[V], o RegisterOutput[V]) string {
			switch in.Op {
			case RegRead:
				return fmt.Sprint(o.Value)
			case RegCAS:
				if o.Swapped {
					return "swapped"
				}
				return "not swapped"
			}
			return "ack"
		},
		DescribeState: func(s V) string { return fmt.Sprint(s) },
	})}
}

// Read is a read of register key.
func (*RegisterModel[V]) Read(key uint64) RegisterInput[V] {
	return RegisterInput[V]{Op: RegRead, Key: key}
}

// Write is a write of v to register key.
func (*RegisterModel[V]) Write(key uint64, v V) RegisterInput[V] {
	return RegisterInput[V]{Op: RegWrite, Key: key, Value: v}
}

// CAS stores v in register key if it holds old.
func (*RegisterModel[V]) CAS(key uint64, old, v V) RegisterInput[V] {
	return RegisterInput[V]{Op: RegCAS, Key: key, Old: old, Value: v}
}

// Value is a read's output.
func (*RegisterModel[V]) Value(v V) RegisterOutput[V] { return RegisterOutput[V]{Value: v} }

// Ack is a write's output.
func (*RegisterModel[V]) Ack() RegisterOutput[V] { return RegisterOutput[V]{} }

// Swapped is a CAS's output: whether it stored its value.
func (*RegisterModel[V]) Swapped(ok bool) RegisterOutput[V] { return RegisterOutput[V]{Swapped: ok} }

// MaxOp is a max-register operation.
type MaxOp uint8

// The max-register operations.
const (
	MaxRead MaxOp = iota
	MaxWrite
)

// MaxInput is a max-register operation on the register named Key: Read, or Write(Value), which
// raises the register to Value if Value is larger.
type MaxInput[V comparable] struct {
	Op    MaxOp
	Key   uint64
	Value V
}

// MaxRegisterModel is a set of max registers, one per key, each starting at V's zero value:
// a write raises the register to its value if larger, a read returns the largest value written
// so far (or the zero value). The output is the value a read returns; a write's output is not
// checked. Histories are checked per key.
type MaxRegisterModel[V comparable] struct {
	*Model[MaxInput[V], V]
}

// MaxRegister returns the max-register model over values ordered by compare (for example
// cmp.Compare[uint64], or a lexicographic order on (timestamp, flag, value) tuples). V's zero
// value is the initial value; compare should order it lowest.
func MaxRegister[V comparable](compare func(a, b V) int) *MaxRegisterModel[V] {
	return &MaxRegisterModel[V]{NewModel(Spec[V, MaxInput[V], V]{
		Name: "max register",
		Init: func() V { var z V; return z },
		Apply: func(s V, in MaxInput[V]) (V, V) {
			if in.Op == MaxWrite {
				var z V
				if compare(in.Value, s) > 0 {
					return z, in.Value
				}
				return z, s
			}
			return s, s
		},
		ReadOnly:    func(in MaxInput[V]) bool { return in.Op == MaxRead },
		Key:         func(in MaxInput[V]) any { return in.Key },
		EqualState:  func(a, b V) bool { return a == b },
		HashState:   func(s V) uint64 { return maphash.Comparable(seed, s) },
		EqualOutput: func(in MaxInput[V], want, got V) bool { return in.Op != MaxRead || want == got },
		DescribeOutput: func(in MaxInput[V], out V) string {
			if in.Op == MaxWrite {
				return "ok"
			}
			return fmt.Sprint(out)
		},
		DescribeInput: func(in MaxInput[V]) string {
			if in.Op == MaxWrite {
				return fmt.Sprintf("write-max(%d, %v)", in.Key, in.Value)
			}
			return fmt.Sprintf("read(%d)", in.Key)
		},
	})}
}

// Read is a read of max register key; its output is the value read.
func (*MaxRegisterModel[V]) Read(key uint64) MaxInput[V] { return MaxInput[V]{Op: MaxRead, Key: key} }

// Write raises max register key to v; its output is not checked (Return any value, or Done).
func (*MaxRegisterModel[V]) Write(key uint64, v V) MaxInput[V] {
	return MaxInput[V]{Op: MaxWrite, Key: key, Value: v}
}

// SetOp is a set operation.
type SetOp uint8

// The set operations.
const (
	SetAdd SetOp = iota
	SetRemove
	SetContains
)

// SetInput is a set operation on element Elem.
type SetInput[E comparable] struct {
	Op   SetOp
	Elem E
}

// SetModel is a set, initially empty. Outputs are booleans: Add returns whether the element
// was absent (and so added), Remove whether it was present (and so removed), Contains whether
// it is present. Histories are checked per element.
type SetModel[E comparable] struct {
	*Model[SetInput[E], bool]
}

// Set returns the set model.
func Set[E comparable]() *SetModel[E] {
	return &SetModel[E]{NewModel(Spec[bool, SetInput[E], bool]{
		Name: "set",
		Init: func() bool { return false },
		Apply: func(s bool, in SetInput[E]) (bool, bool) {
			switch in.Op {
			case SetAdd:
				return !s, true
			case SetRemove:
				return s, false
			}
			return s, s
		},
		ReadOnly:   func(in SetInput[E]) bool { return in.Op == SetContains },
		Key:        func(in SetInput[E]) any { return in.Elem },
		EqualState: func(a, b bool) bool { return a == b },
		HashState: func(s bool) uint64 {
			if s {
				return 1
			}
			return 0
		},
		EqualOutput: func(_ SetInput[E], want, got bool) bool { return want == got },
		DescribeInput: func(in SetInput[E]) string {
			return fmt.Sprintf("%s(%v)", [...]string{"add", "remove", "contains"}[min(int(in.Op), 2)], in.Elem)
		},
		DescribeState: func(s bool) string {
			if s {
				return "present"
			}
			return "absent"
		},
	})}
}

// Add adds e; its output is whether e was absent.
func (*SetModel[E]) Add(e E) SetInput[E] { return SetInput[E]{Op: SetAdd, Elem: e} }

// Remove removes e; its output is whether e was present.
func (*SetModel[E]) Remove(e E) SetInput[E] { return SetInput[E]{Op: SetRemove, Elem: e} }

// Contains tests e; its output is whether e is present.
func (*SetModel[E]) Contains(e E) SetInput[E] { return SetInput[E]{Op: SetContains, Elem: e} }

// CounterOp is a counter operation.
type CounterOp uint8

// The counter operations.
const (
	CounterRead CounterOp = iota
	CounterAdd
)

// CounterInput is a counter operation on the counter named Key: Read, or Add(Delta).
type CounterInput struct {
	Op    CounterOp
	Key   uint64
	Delta uint64
}

// CounterModel is a set of fetch-and-add counters, one per key, each starting at 0: Add adds
// Delta (modulo 2^64) and returns the value before, Read returns the value. A critical section
// that increments a counter non-atomically (read, then write) under a lock is linearizable
// exactly when the lock excludes: this is the model to check locks with. Histories are checked
// per key.
type CounterModel struct {
	*Model[CounterInput, uint64]
}

// Counter returns the counter model.
func Counter() *CounterModel {
	return &CounterModel{NewModel(Spec[uint64, CounterInput, uint64]{
		Name: "counter",
		Init: func() uint64 { return 0 },
		Apply: func(s uint64, in CounterInput) (uint64, uint64) {
			if in.Op == CounterAdd {
				return s, s + in.Delta
			}
			return s, s
		},
		ReadOnly:    func(in CounterInput) bool { return in.Op == CounterRead },
		Key:         func(in CounterInput) any { return in.Key },
		EqualState:  func(a, b uint64) bool { return a == b },
		HashState:   func(s uint64) uint64 { return s },
		EqualOutput: func(_ CounterInput, want, got uint64) bool { return want == got },
		DescribeInput: func(in CounterInput) string {
			if in.Op == CounterAdd {
				return fmt.Sprintf("fetch-add(%d, %d)", in.Key, in.Delta)
			}
			return fmt.Sprintf("read(%d)", in.Key)
		},
	})}
}

// Read reads counter key; its output is the value.
func (*CounterModel) Read(key uint64) CounterInput { return CounterInput{Op: CounterRead, Key: key} }

// Add adds delta to counter key; its output is the value before.
func (*CounterModel) Add(key, delta uint64) CounterInput {
	return CounterInput{Op: CounterAdd, Key: key, Delta: delta}
}
