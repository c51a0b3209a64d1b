package lincheck

import (
	"cmp"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/farmem/farmem/farmem"
)

// explainFailure builds the Violation of a history porcupine found illegal: it isolates the
// smallest failing partition, shrinks it, explains where linearization gets stuck and writes
// the visualizations.
func (m *Model[I, O]) explainFailure(groups []group[I, O], sum Summary, o options) error {
	v := &Violation{Model: m.name, err: ErrNotLinearizable}
	// One verbose run tells which partitions failed: a partition passed iff one of its partial
	// linearizations covers it.
	fail := -1
	res, info, _ := m.run(groups, true, o.timeout)
	if res == porcupine.Illegal {
		partials := info.PartialLinearizations()
		for gi, g := range groups {
			full := false
			for _, p := range partials[gi] {
				if len(p) == len(g.ops) {
					full = true
					break
				}
			}
			if !full && (fail < 0 || len(g.ops) < len(groups[fail].ops)) {
				fail = gi
			}
		}
	}
	if fail < 0 {
		v.Report = fmt.Sprintf("lincheck %s: not linearizable (%v), but the failing partition could not be isolated within %v",
			m.name, sum, o.timeout)
		return v
	}
	g := groups[fail]
	v.Partition = g.key
	deadline := time.Now().Add(o.shrink)
	mg, dropped := m.shrink(g.ops, deadline)
	minimal := mg.ops

	var b strings.Builder
	fmt.Fprintf(&b, "lincheck %s: not linearizable: partition %s (%d ops; whole history: %v)\n", m.name, g.key, len(g.ops), sum)
	fmt.Fprintf(&b, "minimal counterexample, %d ops (times from the first call; \"open\": unknown outcome, may take effect at any instant after its call, or never; \"cut\": returned after the point where the history stopped being linearizable, so left open):\n", len(minimal))
	if mg.hasStart {
		fmt.Fprintf(&b, "  starting from state %s, the only state the %d earlier ops of the partition can leave\n", m.descState(mg.start), dropped)
	}
	t0 := farmem.Time(0)
	if len(minimal) > 0 {
		t0 = minimal[0].call
	}
	mg.key = g.key
	res, info, pm := m.run([]group[I, O]{mg}, true, max(time.Until(deadline), time.Second))
	stuck := map[int]string{}
	var explain string
	if res == porcupine.Illegal {
		stuck, explain = m.stuck(mg, info)
	}
	const maxLines = 40
	from := max(0, len(minimal)-maxLines)
	if from > 0 {
		fmt.Fprintf(&b, "  ... %d earlier ops left out (see the visualization)\n", from)
	}
	for i := from; i < len(minimal); i++ {
		line := fmt.Sprintf("#%-3d %s", i+1, m.describeOp(minimal[i], t0))
		v.Ops = append(v.Ops, line)
		b.WriteString("  " + line)
		if why, ok := stuck[i]; ok {
			b.WriteString("   <-- " + why)
		}
		b.WriteByte('\n')
	}
	b.WriteString(explain)
	if dir := o.dir(); dir != "" {
		var files []string
		if res == porcupine.Illegal {
			if f, err := writeVisualization(dir, o.name+"-minimal", pm, info); err == nil {
				files = append(files, f)
			} else {
				fmt.Fprintf(&b, "visualization not written: %v\n", err)
			}
		}
		if r2, info2, pm2 := m.run([]group[I, O]{g}, true, max(time.Until(deadline), time.Second)); r2 == porcupine.Illegal {
			if f, err := writeVisualization(dir, o.name+"-partition", pm2, info2); err == nil {
				files = append(files, f)
			} else {
				fmt.Fprintf(&b, "visualization not written: %v\n", err)
			}
		}
		v.Files = files
		for _, f := range files {
			fmt.Fprintf(&b, "visualization: %s\n", f)
		}
	}
	v.Report = strings.TrimRight(b.String(), "\n")
	return v
}

// stuck explains where linearization of an illegal history stops: the state after the longest
// linearizable prefix, and for each operation that could go next, what the model says.
func (m *Model[I, O]) stuck(g group[I, O], info porcupine.LinearizationInfo) (map[int]string, string) {
	ops := g.ops
	lines := map[int]string{}
	partials := info.PartialLinearizations()
	if len(partials) == 0 {
		return lines, ""
	}
	// The longest partial linearization, preferring ones that leave open operations out (they
	// may as well go last), so the explanation shows what completed operations force.
	var longest []int
	score := func(p []int) int {
		n := 0
		for _, id := range p {
			if ops[id].oc == Unknown {
				n++
			}
		}
		return len(p)*(len(ops)+1) - n
	}
	for _, p := range partials[0] {
		if longest == nil || score(p) > score(longest) {
			longest = p
		}
	}
	done := make([]bool, len(ops))
	state := m.init()
	if g.hasStart {
		state = g.start
	}
	for _, id := range longest {
		done[id] = true
		_, state = m.apply(state, ops[id].in)
	}
	// The operations that could be linearized next: not yet linearized, called before the
	// first return among the rest.
	first := farmem.Time(1<<63 - 1)
	for i, o := range ops {
		if !done[i] && o.oc != Unknown {
			first = min(first, o.ret)
		}
	}
	for i, o := range ops {
		if done[i] || o.call > first {
			continue
		}
		want, _ := m.apply(state, o.in)
		switch {
		case o.oc == OK && !m.eqOut(o.in, want, o.out):
			lines[i] = "the model returns " + m.descOut(o.in, want)
		default:
			lines[i] = "fits, but nothing fits after it"
		}
	}
	order := make([]string, 0, len(longest)+1)
	if len(longest) == 0 {
		order = append(order, "none")
	}
	for i, id := range longest {
		if i == 0 && len(longest) > 30 {
			order = append(order, "...")
		}
		if i >= len(longest)-30 {
			order = append(order, fmt.Sprintf("#%d", id+1))
		}
	}
	return lines, fmt.Sprintf("no order of these ops fits the model: the longest linearizable prefix found (%s) leaves state %s, and no marked op can go next.\n",
		strings.Join(order, " "), m.descState(state))
}

// shrink returns a smaller illegal history derived from ops, sorted by call, and how many
// operations its start state stands for. Every step keeps a legal history legal, so the result
// is illegal only if ops is:
//   - cut the history after an event: operations that return later become open, later calls go;
//   - cut its beginning at an event where the operations that returned before it can leave only
//     one configuration (a state, and which operations straddling the cut are linearized): the
//     rest then starts from that state (see cutStart);
//   - drop completed read-only operations.
func (m *Model[I, O]) shrink(ops []cop[I, O], deadline time.Time) (group[I, O], int) {
	illegal := func(g group[I, O]) bool {
		left := time.Until(deadline)
		if left <= 0 {
			return false
		}
		res, _, _ := m.run([]group[I, O]{g}, false, left)
		return res == porcupine.Illegal
	}
	ops = slices.Clone(ops)
	slices.SortStableFunc(ops, func(a, b cop[I, O]) int { return cmp.Compare(a.call, b.call) })
	callAt, retAt, nev := eventOrder(ops)
	best := group[I, O]{ops: ops}
	lo, hi := 1, nev
	for lo < hi {
		mid := (lo + hi) / 2
		if g := (group[I, O]{ops: m.prefix(ops, callAt, retAt, mid)}); illegal(g) {
			hi, best = mid, g
		} else {
			lo = mid + 1
		}
	}
	dropReads := func() {
		for i := len(best.ops) - 1; i >= 0; i-- {
			if time.Now().After(deadline) {
				break
			}
			if best.ops[i].oc != OK || !m.readOnly(best.ops[i].in) {
				continue
			}
			g := best
			g.ops = slices.Delete(slices.Clone(best.ops), i, i+1)
			if illegal(g) {
				best = g
			}
		}
	}
	dropped := 0
	if g, n, ok := m.cutStart(ops, callAt, retAt, hi, minRest, deadline); ok && illegal(g) {
		best, dropped = g, n
	}
	dropReads()
	return best, dropped
}

// prefix cuts ops after event j: operations called later go, and those returning later become
// open.
func (m *Model[I, O]) prefix(ops []cop[I, O], callAt, retAt []int, j int) []cop[I, O] {
	var p []cop[I, O]
	for i, o := range ops {
		if callAt[i] >= j {
			continue
		}
		if retAt[i] >= j && o.oc != Unknown {
			o.oc, o.cut = Unknown, true
		}
		p = append(p, o)
	}
	return m.normalize(p)
}

// eventOrder returns the position of each operation's call and return among the history's
// events in porcupine's order (by time, calls before returns at equal times); open operations
// return at position n, the number of events.
func eventOrder[I, O any](ops []cop[I, O]) (callAt, retAt []int, n int) {
	type event struct {
		t   farmem.Time
		ret bool
		i   int
	}
	evs := make([]event, 0, 2*len(ops))
	for i, o := range ops {
		evs = append(evs, event{o.call, false, i})
		if o.oc != Unknown {
			evs = append(evs, event{o.ret, true, i})
		}
	}
	slices.SortStableFunc(evs, func(a, b event) int {
		if c := cmp.Compare(a.t, b.t); c != 0 {
			return c
		}
		switch {
		case a.ret == b.ret:
			return 0
		case !a.ret:
			return -1
		}
		return 1
	})
	callAt = make([]int, len(ops))
	retAt = make([]int, len(ops))
	for i := range retAt {
		retAt[i] = len(evs)
	}
	for p, e := range evs {
		if e.ret {
			retAt[e.i] = p
		} else {
			callAt[e.i] = p
		}
	}
	return callAt, retAt, len(evs)
}

// minRest is the fewest operations cutStart leaves, so that a counterexample keeps some context.
const minRest = 6

// cutStart looks, from event end backwards, for the latest event after which the operations
// that returned before it leave a single configuration, keeping at least keep operations
// called before end (not counting completed reads). It returns the rest of ops started from that configuration's state and cut
// after event end (see prefix), and how many operations the state stands for.
//
// Why it is sound: split any linearization of the history at the shortest prefix holding every
// operation that returned before the cut. That prefix holds no operation called after the cut
// (real-time order), so it is a linearization of the early operations plus some straddling ones;
// its end is a configuration. The history is linearizable iff the rest is linearizable from one
// of the configurations; with only one, iff it is from that one.
func (m *Model[I, O]) cutStart(ops []cop[I, O], callAt, retAt []int, end, keep int, deadline time.Time) (group[I, O], int, bool) {
	isRet := make([]bool, end+1)
	for i := range ops {
		if retAt[i] < end {
			isRet[retAt[i]+1] = true // cutting at retAt+1 puts that return before the cut
		}
	}
	for j, tries := end-1, 0; j > 0 && tries < 300 && time.Now().Before(deadline); j-- {
		if !isRet[j] {
			continue
		}
		early, kept := 0, 0
		for i := range ops {
			switch {
			case retAt[i] < j:
				early++
			case callAt[i] < end && (ops[i].oc != OK || !m.readOnly(ops[i].in)):
				kept++ // a completed read may be dropped later
			}
		}
		if early == 0 {
			break
		}
		if kept < keep {
			continue
		}
		tries++
		state, rest, ok := m.cutAt(ops, callAt, retAt, j, deadline)
		if !ok {
			continue
		}
		var sub []cop[I, O]
		var subCall, subRet []int
		for _, i := range rest {
			sub = append(sub, ops[i])
			subCall = append(subCall, callAt[i])
			subRet = append(subRet, retAt[i])
		}
		kept = len(sub)
		sub = m.prefix(sub, subCall, subRet, end)
		return group[I, O]{ops: sub, start: state, hasStart: true}, len(ops) - kept, true
	}
	return group[I, O]{}, 0, false
}

// cutAt cuts ops before event j if the operations that returned before it leave a single
// configuration: it returns the state and the indices of the rest (the operations neither
// returned before j nor linearized in that configuration).
func (m *Model[I, O]) cutAt(ops []cop[I, O], callAt, retAt []int, j int, deadline time.Time) (any, []int, bool) {
	var early, straddle []int
	for i := range ops {
		switch {
		case retAt[i] < j:
			early = append(early, i)
		case callAt[i] < j:
			straddle = append(straddle, i)
		}
	}
	state, done, ok := m.configuration(ops, early, straddle, callAt, retAt, deadline)
	if !ok {
		return nil, nil, false
	}
	var rest []int
	for i := range ops {
		if retAt[i] >= j && !done[i] {
			rest = append(rest, i)
		}
	}
	return state, rest, true
}

// configuration explores the linearizations of the early operations (with straddling ones
// allowed in between) and returns the configuration they end in, if there is exactly one: the
// state, and which operations are linearized. (Several configurations with one state will not
// do: the rest may fail from one and pass from another.)
func (m *Model[I, O]) configuration(ops []cop[I, O], early, straddle []int, callAt, retAt []int, deadline time.Time) (any, []bool, bool) {
	idx := append(slices.Clone(early), straddle...)
	n := len(idx)
	isEarly := func(k int) bool { return k < len(early) }
	type node struct {
		set   string // bitset over idx
		state any
	}
	var visited []node
	seen := func(set []byte, s any) bool {
		key := string(set)
		for _, v := range visited {
			if v.set == key && m.eqState(v.state, s) {
				return true
			}
		}
		visited = append(visited, node{key, s})
		return false
	}
	var found *node
	unique := true
	steps := 0
	set := make([]byte, (n+7)/8)
	var dfs func(state any, left int) bool // false: give up
	dfs = func(state any, left int) bool {
		if steps++; steps > 20000 || !unique {
			return false
		}
		if steps%256 == 0 && time.Now().After(deadline) {
			return false
		}
		if left == 0 {
			nd := node{string(set), state}
			if found == nil {
				found = &nd
			} else if found.set != nd.set || !m.eqState(found.state, state) {
				unique = false
				return false
			}
			return true
		}
		if seen(set, state) {
			return true
		}
		// Candidates: not yet linearized, called before the first return among the rest.
		first := 1 << 62
		for k := range n {
			if set[k/8]&(1<<(k%8)) == 0 {
				first = min(first, retAt[idx[k]])
			}
		}
		for k := range n {
			i := idx[k]
			if set[k/8]&(1<<(k%8)) != 0 || callAt[i] > first {
				continue
			}
			out, next := m.apply(state, ops[i].in)
			if ops[i].oc == OK && !m.eqOut(ops[i].in, out, ops[i].out) {
				continue
			}
			set[k/8] |= 1 << (k % 8)
			l := left
			if isEarly(k) {
				l--
			}
			ok := dfs(next, l)
			set[k/8] &^= 1 << (k % 8)
			if !ok {
				return false
			}
		}
		return true
	}
	if !dfs(m.init(), len(early)) || found == nil || !unique {
		return nil, nil, false
	}
	done := make([]bool, len(ops))
	for k := range n {
		if found.set[k/8]&(1<<(k%8)) != 0 {
			done[idx[k]] = true
		}
	}
	return found.state, done, true
}

// writeVisualization writes porcupine's HTML visualization to a new file under dir.
func writeVisualization(dir, name string, pm porcupine.Model, info porcupine.LinearizationInfo) (string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	f, err := os.CreateTemp(dir, sanitize(name)+"-*.html")
	if err != nil {
		return "", err
	}
	if err := porcupine.Visualize(pm, info, f); err != nil {
		_ = f.Close()
		return "", err
	}
	return f.Name(), f.Close()
}

func sanitize(s string) string {
	return strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '-', r == '_', r == '.':
			return r
		}
		return '_'
	}, s)
}
