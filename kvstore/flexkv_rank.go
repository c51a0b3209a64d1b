package kvstore

import (
	"cmp"
	"math"
	"slices"

	"github.com/farmem/farmem/farmem"
)

// FlexKV's manager policies as pure functions: Algorithm 1's ranks, displacement and
// rank-based assignment, and Algorithm 2's throughput-guided knob. The manager (flexkv_manager.go)
// feeds them the counters it gathers and applies what they decide.

// Ranks returns each partition's rank (0 the hottest) under hotness: partitions sorted by
// hotness, hottest first (ties by partition number, so equal counts rank deterministically),
// cut into ranks of nodes partitions each. With P partitions not a multiple of nodes the last
// rank is partial (the paper's P = 8192 over 20 nodes leaves it open; a partial rank is the
// natural reading of "R = P/C contiguous ranks"). nodes < 1 counts as one.
func Ranks(hotness []uint64, nodes int) []int {
	nodes = max(1, nodes)
	order := hotOrder(hotness)
	ranks := make([]int, len(hotness))
	for i, p := range order {
		ranks[p] = i / nodes
	}
	return ranks
}

// hotOrder returns the partitions sorted by hotness, hottest first, ties by number.
func hotOrder(hotness []uint64) []int {
	order := make([]int, len(hotness))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int { return cmp.Compare(hotness[b], hotness[a]) })
	return order
}

// Displacement is Algorithm 1's D: the sum over partitions of |new rank - old rank|. Slices of
// different lengths compare over the shorter.
func Displacement(newRanks, oldRanks []int) int {
	d := 0
	for i := range min(len(newRanks), len(oldRanks)) {
		x := newRanks[i] - oldRanks[i]
		if x < 0 {
			x = -x
		}
		d += x
	}
	return d
}

// DisplacementBaseline is Algorithm 1's B: the expected displacement of a uniformly random
// reshuffle, partitions * E|X-Y| for X, Y uniform on R = ceil(partitions/nodes) ranks,
// E|X-Y| = (R²-1)/(3R); it is C(R²-1)/3 when nodes divides partitions, as in the paper.
func DisplacementBaseline(partitions, nodes int) float64 {
	nodes = max(1, nodes)
	r := float64((partitions + nodes - 1) / nodes)
	if r < 1 {
		return 0
	}
	return float64(partitions) * (r*r - 1) / (3 * r)
}

// Reassign reports whether Algorithm 1 triggers a reassignment: D >= threshold * B (the
// paper's threshold is 0.25). With B zero (one rank) nothing ever moves between ranks, and
// it never triggers.
func Reassign(newRanks, oldRanks []int, nodes int, threshold float64) bool {
	b := DisplacementBaseline(len(newRanks), nodes)
	return b > 0 && float64(Displacement(newRanks, oldRanks)) >= threshold*b
}

// AssignByRank is Algorithm 1's rank-based assignment: each node gets exactly one partition of
// every full rank (at most one of the partial last rank), and its list runs hot to cold. The
// assignment is sticky within a rank: a partition stays with prev's owner (prev[p], 0 for none)
// when that owner is among nodes and has no partition of the rank yet; the others go to the
// rank's remaining nodes, hottest partition first, each to the node whose partitions of the
// ranks before sum to the least hotness (ties: the order nodes lists them). The paper leaves
// the choice within a rank open; filling the lightest node first keeps the rank-to-rank
// differences from piling up on the nodes listed first, which with few ranks (each node's
// list a handful of partitions) decides the balance. It returns each node's list, indexed like
// nodes. Cost: O(P·C) for P partitions over C nodes.
func AssignByRank(hotness []uint64, nodes []farmem.NodeID, prev []farmem.NodeID) [][]int {
	c := len(nodes)
	lists := make([][]int, c)
	if c == 0 {
		return lists
	}
	at := make(map[farmem.NodeID]int, c)
	for i, n := range nodes {
		at[n] = i
	}
	order := hotOrder(hotness)
	load := make([]uint64, c) // each node's hotness over the ranks placed so far
	for lo := 0; lo < len(order); lo += c {
		rank := order[lo:min(lo+c, len(order))]
		taken := make([]bool, c)
		placed := make([]int, len(rank)) // node index per partition of the rank, -1 unplaced
		for j, p := range rank {
			placed[j] = -1
			if p < len(prev) {
				if i, ok := at[prev[p]]; ok && !taken[i] {
					taken[i], placed[j] = true, i
				}
			}
		}
		for j := range rank {
			if placed[j] >= 0 {
				continue
			}
			least := -1
			for i := range c {
				if !taken[i] && (least < 0 || load[i] < load[least]) {
					least = i
				}
			}
			taken[least], placed[j] = true, least
		}
		for j, p := range rank {
			lists[placed[j]] = append(lists[placed[j]], p)
			load[placed[j]] += hotness[p]
		}
	}
	return lists
}

// AssignStatic is the ablation's static assignment (no hotness): partition p goes to node
// p mod len(nodes), each list in partition order, so a ratio r offloads about the first r of
// the partitions (the paper's "+Proxy" step offloads the first 20%).
func AssignStatic(partitions int, nodes []farmem.NodeID) [][]int {
	lists := make([][]int, len(nodes))
	if len(nodes) == 0 {
		return lists
	}
	for p := range partitions {
		lists[p%len(nodes)] = append(lists[p%len(nodes)], p)
	}
	return lists
}

// Offloaded returns the owner of every partition at the unified index-offload ratio: the
// first round(ratio * partitions) partitions of the lists taken rank by rank (every node's
// first partition, then every node's second, ...; lists indexed like nodes), the rest on the
// memory nodes (owner 0). Each node then proxies the head of its hot-to-cold list and no node
// proxies more than one partition more than another; with few partitions per node this keeps
// the ratio's granularity at one partition rather than one per node (the paper has 8192
// partitions over 20 nodes, where the two readings agree).
func Offloaded(partitions int, nodes []farmem.NodeID, lists [][]int, ratio float64) []farmem.NodeID {
	owners := make([]farmem.NodeID, partitions)
	ratio = math.Min(1, math.Max(0, ratio))
	k := int(math.Round(ratio * float64(partitions)))
	for j := 0; k > 0; j++ {
		any := false
		for i, l := range lists {
			if j >= len(l) || k == 0 {
				continue
			}
			any = true
			if p := l[j]; p >= 0 && p < partitions {
				owners[p] = nodes[i]
				k--
			}
		}
		if !any {
			break
		}
	}
	return owners
}

// Knob is Algorithm 2, the throughput-guided hill climber of the unified index-offload ratio,
// as a state machine fed one throughput sample per period: Ratio is the ratio to run the next
// period at, Observe gives the throughput that period measured. A round starts at the
// current ratio (Restart, also at creation), samples it, probes one step in the search
// direction (flipping the direction if that probe is worse), then keeps stepping while
// throughput improves and ends after two successive probes that do not beat the best, at the
// best ratio, where it stays (Settled) until the next Restart.
//
// Choices where the paper is silent: a probe outside [0, 1] is a non-improving probe that
// costs no period; when the first probe is not worse, it is also the loop's first step
// (Algorithm 2 samples i+sδ again at line 12; the two are the same ratio, so the knob keeps
// the first sample instead of spending a period on a second one).
type Knob struct {
	step float64
	i, s float64
	// round state
	phase         int // 0: sample i; 1: first probe; 2: stepping; 3: settled
	best, tBest   float64
	unimproved    int
	probe         float64
	periods       int // periods sampled since the round started
	settledPeriod int // periods the round took to settle (0 while searching)
}

// NewKnob returns a knob at ratio start (clamped to [0, 1]) with step δ (0.1 if not positive),
// searching upward first, its first round started.
func NewKnob(start, step float64) *Knob {
	if step <= 0 {
		step = 0.1
	}
	k := &Knob{step: step, i: clampRatio(start), s: 1}
	k.Restart()
	return k
}

func clampRatio(r float64) float64 {
	// Round to the step grid's precision so that repeated additions of 0.1 stay exact
	// enough to compare.
	return math.Round(math.Min(1, math.Max(0, r))*1e6) / 1e6
}

// Restart begins a new round at the current ratio (a workload shift or a reassignment).
func (k *Knob) Restart() {
	k.phase, k.unimproved, k.periods, k.settledPeriod = 0, 0, 0, 0
	k.probe = k.i
}

// Ratio is the ratio the next period runs at.
func (k *Knob) Ratio() float64 { return k.probe }

// Settled reports whether the round has ended, and after how many sampled periods.
func (k *Knob) Settled() (bool, int) { return k.phase == 3, k.settledPeriod }

// Observe takes the throughput measured over the period just run at Ratio and decides the
// next ratio.
func (k *Knob) Observe(t float64) {
	if k.phase == 3 {
		return
	}
	k.periods++
	switch k.phase {
	case 0:
		k.best, k.tBest = k.i, t
		k.phase = 1
		k.probe = clampRatio(k.i + k.s*k.step)
		if k.probe == k.i {
			// The first probe would leave [0, 1]: search the other way.
			k.s = -k.s
			k.probe = clampRatio(k.i + k.s*k.step)
			k.phase = 2
			if k.probe == k.i {
				k.finish()
			}
		}
		return
	case 1:
		if t < k.tBest {
			k.s = -k.s
			k.phase = 2
			k.advance(k.i)
			return
		}
		k.phase = 2
	}
	// A probe of the stepping loop at k.probe measured t.
	if t <= k.tBest {
		k.unimproved++
	} else {
		k.best, k.tBest, k.unimproved = k.probe, t, 0
	}
	k.advance(k.probe)
}

// advance moves to the next probe from the ratio from, or ends the round.
func (k *Knob) advance(from float64) {
	for k.unimproved < 2 {
		next := clampRatio(from + k.s*k.step)
		if next != from {
			k.probe = next
			return
		}
		k.unimproved++ // off the end: a non-improving probe that costs no period
	}
	k.finish()
}

func (k *Knob) finish() {
	k.i, k.probe, k.phase, k.settledPeriod = k.best, k.best, 3, k.periods
}
