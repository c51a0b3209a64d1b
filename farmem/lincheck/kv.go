package lincheck

import (
	"cmp"
	"fmt"
	"hash/maphash"
	"slices"
	"strings"
)

// KVOp is a key-value map operation.
type KVOp uint8

// The key-value map operations.
const (
	// KVGet returns the key's value, or KVMissing.
	KVGet KVOp = iota
	// KVPut (upsert) stores the value; it always succeeds.
	KVPut
	// KVInsert stores the value if the key is absent, else fails with KVExists.
	KVInsert
	// KVUpdate stores the value if the key is present, else fails with KVMissing.
	KVUpdate
	// KVDelete removes the key if present, else fails with KVMissing.
	KVDelete
	// KVScan returns the pairs with Key <= key (< End if HasEnd), ascending, at most Limit of
	// them if Limit > 0.
	KVScan
)

var kvOpNames = [...]string{"get", "put", "insert", "update", "delete", "scan"}

func (o KVOp) String() string {
	if int(o) < len(kvOpNames) {
		return kvOpNames[o]
	}
	return fmt.Sprintf("kvop(%d)", uint8(o))
}

// KVStatus is a key-value operation's result.
type KVStatus uint8

// The statuses.
const (
	// KVOK: done (a get found its key).
	KVOK KVStatus = iota
	// KVMissing: a get, update or delete of an absent key.
	KVMissing
	// KVExists: an insert of a present key.
	KVExists
)

func (s KVStatus) String() string {
	switch s {
	case KVOK:
		return "ok"
	case KVMissing:
		return "missing"
	case KVExists:
		return "exists"
	}
	return fmt.Sprintf("status(%d)", uint8(s))
}

// Pair is a key and its value.
type Pair[K cmp.Ordered, V comparable] struct {
	Key   K
	Value V
}

// KVInput is a key-value map operation. Scans use Key as the (inclusive) start, End as the
// exclusive end if HasEnd, and Limit (0: none).
type KVInput[K cmp.Ordered, V comparable] struct {
	Op     KVOp
	Key    K
	Value  V
	End    K
	HasEnd bool
	Limit  int
}

// KVOutput is a key-value operation's result: its status, a get's value, a scan's pairs.
type KVOutput[K cmp.Ordered, V comparable] struct {
	Status KVStatus
	Value  V
	Pairs  []Pair[K, V]
}

// KVModel is a key-value map, initially empty, whose operations return their invalid-operation
// results: insert of a present key fails with KVExists, update or delete of an absent key with
// KVMissing, get of an absent key returns KVMissing, put always succeeds. Build inputs and
// outputs with its methods. See the package documentation for what scans may return.
type KVModel[K cmp.Ordered, V comparable] struct {
	*Model[KVInput[K, V], KVOutput[K, V]]
	atomicScans bool
}

// KV returns the key-value model whose scans are checked per key: for every key in the range
// a scan covers, the scan's report about it (its value, or its absence) must be what a get
// linearized at some instant within the scan would return, each key at its own instant; and
// the scan's output must be sorted, without duplicates, within its range and its limit. This is
// what a scan that reads leaves one by one can promise. Everything else is checked per key.
func KV[K cmp.Ordered, V comparable]() *KVModel[K, V] {
	kv := &KVModel[K, V]{}
	kv.Model = NewModel(kv.cellSpec())
	kv.Model.prepare = kv.scansPerKey
	return kv
}

// KVAtomicScans returns the key-value model whose scans are atomic: each is one operation over
// the whole map, linearized at one instant. Histories are partitioned into groups of keys that
// no scan's range connects, so scans over small ranges keep checking fast, and a scan over
// everything makes the history one partition.
func KVAtomicScans[K cmp.Ordered, V comparable]() *KVModel[K, V] {
	kv := &KVModel[K, V]{atomicScans: true}
	kv.Model = NewModel(kv.mapSpec())
	kv.Model.prepare = kv.checkScans
	kv.Model.partition = kv.partitionByRanges
	return kv
}

// Get reads k.
func (*KVModel[K, V]) Get(k K) KVInput[K, V] { return KVInput[K, V]{Op: KVGet, Key: k} }

// Put stores v at k, present or not.
func (*KVModel[K, V]) Put(k K, v V) KVInput[K, V] { return KVInput[K, V]{Op: KVPut, Key: k, Value: v} }

// Insert stores v at k if k is absent.
func (*KVModel[K, V]) Insert(k K, v V) KVInput[K, V] {
	return KVInput[K, V]{Op: KVInsert, Key: k, Value: v}
}

// Update stores v at k if k is present.
func (*KVModel[K, V]) Update(k K, v V) KVInput[K, V] {
	return KVInput[K, V]{Op: KVUpdate, Key: k, Value: v}
}

// Delete removes k if present.
func (*KVModel[K, V]) Delete(k K) KVInput[K, V] { return KVInput[K, V]{Op: KVDelete, Key: k} }

// Scan returns the pairs with from <= key < to, ascending, at most limit of them (0: no limit).
func (*KVModel[K, V]) Scan(from, to K, limit int) KVInput[K, V] {
	return KVInput[K, V]{Op: KVScan, Key: from, End: to, HasEnd: true, Limit: limit}
}

// ScanFrom returns the pairs with from <= key, ascending, at most limit of them (0: no limit).
func (*KVModel[K, V]) ScanFrom(from K, limit int) KVInput[K, V] {
	return KVInput[K, V]{Op: KVScan, Key: from, Limit: limit}
}

// OK is the output of a put, and of an insert, update or delete that succeeded.
func (*KVModel[K, V]) OK() KVOutput[K, V] { return KVOutput[K, V]{} }

// Found is the output of a get that found v.
func (*KVModel[K, V]) Found(v V) KVOutput[K, V] { return KVOutput[K, V]{Value: v} }

// Missing is the output of a get, update or delete of an absent key.
func (*KVModel[K, V]) Missing() KVOutput[K, V] { return KVOutput[K, V]{Status: KVMissing} }

// Exists is the output of an insert of a present key.
func (*KVModel[K, V]) Exists() KVOutput[K, V] { return KVOutput[K, V]{Status: KVExists} }

// Pairs is the output of a scan.
func (*KVModel[K, V]) Pairs(ps []Pair[K, V]) KVOutput[K, V] { return KVOutput[K, V]{Pairs: ps} }

func (kv *KVModel[K, V]) equalOutput(in KVInput[K, V], want, got KVOutput[K, V]) bool {
	switch {
	case want.Status != got.Status:
		return false
	case in.Op == KVGet && want.Status == KVOK:
		return want.Value == got.Value
	case in.Op == KVScan:
		return slices.Equal(want.Pairs, got.Pairs)
	}
	return true
}

func (kv *KVModel[K, V]) describeInput(in KVInput[K, V]) string {
	switch in.Op {
	case KVGet, KVDelete:
		return fmt.Sprintf("%s(%v)", in.Op, in.Key)
	case KVPut, KVInsert, KVUpdate:
		return fmt.Sprintf("%s(%v, %v)", in.Op, in.Key, in.Value)
	case KVScan:
		return describeRange(in)
	}
	return fmt.Sprintf("%s(%v)", in.Op, in.Key)
}

func describeRange[K cmp.Ordered, V comparable](in KVInput[K, V]) string {
	end := "..."
	if in.HasEnd {
		end = fmt.Sprint(in.End)
	}
	if in.Limit > 0 {
		return fmt.Sprintf("scan[%v, %s) limit %d", in.Key, end, in.Limit)
	}
	return fmt.Sprintf("scan[%v, %s)", in.Key, end)
}

func describePairs[K cmp.Ordered, V comparable](ps []Pair[K, V]) string {
	var b strings.Builder
	b.WriteByte('{')
	for i, p := range ps {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%v:%v", p.Key, p.Value)
	}
	b.WriteByte('}')
	return b.String()
}

func (kv *KVModel[K, V]) describeOutput(in KVInput[K, V], o KVOutput[K, V]) string {
	switch {
	case in.Op == KVScan:
		return describePairs(o.Pairs)
	case o.Status != KVOK:
		return o.Status.String()
	case in.Op == KVGet:
		return fmt.Sprint(o.Value)
	}
	return "ok"
}

// cell is the state of one key.
type cell[V comparable] struct {
	present bool
	value   V
}

// cellSpec is the per-key model: scans have been rewritten into gets by then.
func (kv *KVModel[K, V]) cellSpec() Spec[cell[V], KVInput[K, V], KVOutput[K, V]] {
	return Spec[cell[V], KVInput[K, V], KVOutput[K, V]]{
		Name: "kv",
		Init: func() cell[V] { return cell[V]{} },
		Apply: func(s cell[V], in KVInput[K, V]) (KVOutput[K, V], cell[V]) {
			var out KVOutput[K, V]
			switch in.Op {
			case KVGet:
				if !s.present {
					out.Status = KVMissing
				}
				out.Value = s.value
			case KVPut:
				s = cell[V]{true, in.Value}
			case KVInsert:
				if s.present {
					out.Status = KVExists
				} else {
					s = cell[V]{true, in.Value}
				}
			case KVUpdate:
				if s.present {
					s = cell[V]{true, in.Value}
				} else {
					out.Status = KVMissing
				}
			case KVDelete:
				if s.present {
					s = cell[V]{}
				} else {
					out.Status = KVMissing
				}
			}
			return out, s
		},
		ReadOnly:      func(in KVInput[K, V]) bool { return in.Op == KVGet || in.Op == KVScan },
		Key:           func(in KVInput[K, V]) any { return in.Key },
		EqualState:    func(a, b cell[V]) bool { return a == b },
		HashState:     func(s cell[V]) uint64 { return maphash.Comparable(seed, s) },
		EqualOutput:   kv.equalOutput,
		DescribeInput: kv.describeInput, DescribeOutput: kv.describeOutput,
		DescribeState: func(s cell[V]) string {
			if !s.present {
				return "absent"
			}
			return fmt.Sprint(s.value)
		},
	}
}

// checkScans reports a scan whose output no map could give: unsorted, duplicated, outside its
// range, or over its limit.
func (kv *KVModel[K, V]) checkScans(ops []cop[kvIn[K, V], kvOut[K, V]]) ([]cop[kvIn[K, V], kvOut[K, V]], *structural[kvIn[K, V], kvOut[K, V]]) {
	for _, o := range ops {
		if o.in.Op != KVScan || o.oc != OK {
			continue
		}
		if why := malformedScan(o.in, o.out); why != "" {
			return nil, &structural[kvIn[K, V], kvOut[K, V]]{op: o, why: why}
		}
	}
	return ops, nil
}

// kvIn and kvOut abbreviate the KV model's input and output types.
type (
	kvIn[K cmp.Ordered, V comparable]  = KVInput[K, V]
	kvOut[K cmp.Ordered, V comparable] = KVOutput[K, V]
)

func malformedScan[K cmp.Ordered, V comparable](in KVInput[K, V], out KVOutput[K, V]) string {
	if out.Status != KVOK {
		return "a scan returned status " + out.Status.String()
	}
	if in.Limit > 0 && len(out.Pairs) > in.Limit {
		return fmt.Sprintf("it returned %d pairs, over its limit of %d", len(out.Pairs), in.Limit)
	}
	for i, p := range out.Pairs {
		if p.Key < in.Key || in.HasEnd && p.Key >= in.End {
			return fmt.Sprintf("key %v is outside its range", p.Key)
		}
		if i > 0 && out.Pairs[i-1].Key >= p.Key {
			return fmt.Sprintf("keys %v and %v are not strictly ascending", out.Pairs[i-1].Key, p.Key)
		}
	}
	return ""
}

// covers returns the range of keys a scan's output depends on: [from, to) if it returned fewer
// than its limit, [from, last returned key] if it hit it.
func covers[K cmp.Ordered, V comparable](in KVInput[K, V], out KVOutput[K, V]) (r keyRange[K]) {
	r.lo = in.Key
	switch {
	case in.Limit > 0 && len(out.Pairs) == in.Limit:
		r.hi, r.bounded, r.incl = out.Pairs[len(out.Pairs)-1].Key, true, true
	case in.HasEnd:
		r.hi, r.bounded = in.End, true
	}
	return r
}

// keyRange is [lo, hi) or [lo, hi] (incl), or [lo, ...) if not bounded.
type keyRange[K cmp.Ordered] struct {
	lo, hi        K
	bounded, incl bool
}

func (r keyRange[K]) has(k K) bool {
	switch {
	case k < r.lo:
		return false
	case !r.bounded:
		return true
	case r.incl:
		return k <= r.hi
	}
	return k < r.hi
}

func (r keyRange[K]) String() string {
	switch {
	case !r.bounded:
		return fmt.Sprintf("[%v, ...)", r.lo)
	case r.incl:
		return fmt.Sprintf("[%v, %v]", r.lo, r.hi)
	}
	return fmt.Sprintf("[%v, %v)", r.lo, r.hi)
}

// scansPerKey checks each scan's shape and replaces it by one get per key of its range that
// the history knows (every key any other operation names, and every key a scan returned), each
// with the scan's interval: the per-key scan specification.
func (kv *KVModel[K, V]) scansPerKey(ops []cop[kvIn[K, V], kvOut[K, V]]) ([]cop[kvIn[K, V], kvOut[K, V]], *structural[kvIn[K, V], kvOut[K, V]]) {
	if _, bad := kv.checkScans(ops); bad != nil {
		return nil, bad
	}
	var keys []K
	scans := 0
	for _, o := range ops {
		switch {
		case o.in.Op != KVScan:
			keys = append(keys, o.in.Key)
		case o.oc == OK:
			scans++
			for _, p := range o.out.Pairs {
				keys = append(keys, p.Key)
			}
		}
	}
	if scans == 0 {
		return slices.DeleteFunc(ops, func(o cop[kvIn[K, V], kvOut[K, V]]) bool { return o.in.Op == KVScan }), nil
	}
	slices.Sort(keys)
	keys = slices.Compact(keys)
	out := make([]cop[kvIn[K, V], kvOut[K, V]], 0, len(ops))
	for _, o := range ops {
		if o.in.Op != KVScan {
			out = append(out, o)
			continue
		}
		if o.oc != OK {
			continue // a scan whose output is unknown or unchecked tells nothing
		}
		r := covers(o.in, o.out)
		note := describeRange(o.in) + " saw"
		i, _ := slices.BinarySearch(keys, r.lo)
		for ; i < len(keys) && r.has(keys[i]); i++ {
			k := keys[i]
			get := o
			get.in = KVInput[K, V]{Op: KVGet, Key: k}
			get.note = note
			if j, found := slices.BinarySearchFunc(o.out.Pairs, k, func(p Pair[K, V], k K) int { return cmp.Compare(p.Key, k) }); found {
				get.out = KVOutput[K, V]{Value: o.out.Pairs[j].Value}
			} else {
				get.out = KVOutput[K, V]{Status: KVMissing}
			}
			out = append(out, get)
		}
	}
	return out, nil
}

// mapState is the state of a group of keys: its pairs, ascending. It is never modified.
type mapState[K cmp.Ordered, V comparable] []Pair[K, V]

// mapSpec is the model of a whole map (a partition of keys connected by scans).
func (kv *KVModel[K, V]) mapSpec() Spec[mapState[K, V], KVInput[K, V], KVOutput[K, V]] {
	find := func(s mapState[K, V], k K) (int, bool) {
		return slices.BinarySearchFunc(s, k, func(p Pair[K, V], k K) int { return cmp.Compare(p.Key, k) })
	}
	set := func(s mapState[K, V], i int, found bool, k K, v V) mapState[K, V] {
		if found {
			n := slices.Clone(s)
			n[i].Value = v
			return n
		}
		return slices.Insert(slices.Clip(slices.Clone(s)), i, Pair[K, V]{k, v})
	}
	return Spec[mapState[K, V], KVInput[K, V], KVOutput[K, V]]{
		Name: "kv (atomic scans)",
		Init: func() mapState[K, V] { return nil },
		Apply: func(s mapState[K, V], in KVInput[K, V]) (KVOutput[K, V], mapState[K, V]) {
			var out KVOutput[K, V]
			if in.Op == KVScan {
				i, _ := find(s, in.Key)
				out.Pairs = []Pair[K, V]{}
				for ; i < len(s) && (!in.HasEnd || s[i].Key < in.End) && (in.Limit <= 0 || len(out.Pairs) < in.Limit); i++ {
					out.Pairs = append(out.Pairs, s[i])
				}
				return out, s
			}
			i, found := find(s, in.Key)
			switch in.Op {
			case KVGet:
				if found {
					out.Value = s[i].Value
				} else {
					out.Status = KVMissing
				}
			case KVPut:
				s = set(s, i, found, in.Key, in.Value)
			case KVInsert:
				if found {
					out.Status = KVExists
				} else {
					s = set(s, i, false, in.Key, in.Value)
				}
			case KVUpdate:
				if found {
					s = set(s, i, true, in.Key, in.Value)
				} else {
					out.Status = KVMissing
				}
			case KVDelete:
				if found {
					s = slices.Delete(slices.Clone(s), i, i+1)
				} else {
					out.Status = KVMissing
				}
			}
			return out, s
		},
		ReadOnly:   func(in KVInput[K, V]) bool { return in.Op == KVGet || in.Op == KVScan },
		EqualState: func(a, b mapState[K, V]) bool { return slices.Equal(a, b) },
		HashState: func(s mapState[K, V]) uint64 {
			var h uint64
			for _, p := range s {
				h = h*0x100000001b3 ^ maphash.Comparable(seed, p)
			}
			return h
		},
		EqualOutput:    kv.equalOutput,
		DescribeInput:  kv.describeInput,
		DescribeOutput: kv.describeOutput,
		DescribeState:  func(s mapState[K, V]) string { return describePairs(s) },
	}
}

// partitionByRanges groups keys that scan ranges connect: the union of overlapping scan ranges
// is one partition, and every key outside them is a partition of its own.
func (kv *KVModel[K, V]) partitionByRanges(ops []cop[kvIn[K, V], kvOut[K, V]]) []group[kvIn[K, V], kvOut[K, V]] {
	var rs []keyRange[K]
	for _, o := range ops {
		if o.in.Op == KVScan {
			rs = append(rs, covers(o.in, o.out))
		}
	}
	slices.SortFunc(rs, func(a, b keyRange[K]) int { return cmp.Compare(a.lo, b.lo) })
	var merged []keyRange[K]
	for _, r := range rs {
		if n := len(merged); n > 0 && (merged[n-1].has(r.lo) || !merged[n-1].bounded) {
			last := &merged[n-1]
			switch {
			case !r.bounded:
				last.bounded = false
			case !last.bounded:
			case r.hi > last.hi || r.hi == last.hi && r.incl:
				last.hi, last.incl = r.hi, r.incl
			}
			continue
		}
		merged = append(merged, r)
	}
	// The range containing k, or -1.
	rangeOf := func(k K) int {
		i, _ := slices.BinarySearchFunc(merged, k, func(r keyRange[K], k K) int { return cmp.Compare(r.lo, k) })
		// merged[i-1].lo < k <= merged[i].lo
		if i < len(merged) && merged[i].lo == k {
			return i
		}
		if i > 0 && merged[i-1].has(k) {
			return i - 1
		}
		return -1
	}
	byRange := make([]int, len(merged))
	for i := range byRange {
		byRange[i] = -1
	}
	byKey := make(map[K]int)
	var gs []group[kvIn[K, V], kvOut[K, V]]
	for _, o := range ops {
		var g int
		if r := rangeOf(o.in.Key); r >= 0 {
			if byRange[r] < 0 {
				byRange[r] = len(gs)
				gs = append(gs, group[kvIn[K, V], kvOut[K, V]]{key: "keys " + merged[r].String()})
			}
			g = byRange[r]
		} else {
			var ok bool
			if g, ok = byKey[o.in.Key]; !ok {
				g = len(gs)
				byKey[o.in.Key] = g
				gs = append(gs, group[kvIn[K, V], kvOut[K, V]]{key: fmt.Sprintf("key %v", o.in.Key)})
			}
		}
		gs[g].ops = append(gs[g].ops, o)
	}
	return gs
}
