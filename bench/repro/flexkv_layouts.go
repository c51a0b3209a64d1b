package repro

import (
	"fmt"
	"math/rand/v2"
	"slices"

	"github.com/farmem/farmem/bench/generator"
	"github.com/farmem/farmem/farmem"
	"github.com/farmem/farmem/kvstore"
)

// FlexLayouts is Fig. 19's balance computed from the key distribution rather than simulated:
// the partitions' hotness is counted from draws of YCSB's scrambled Zipfian over Keys keys,
// the keys are laid on Partitions partitions by a random hash (one per layout), and the
// manager's own assignment code places BalanceRatio of the partitions on 20 compute nodes,
// statically by number (kvstore.AssignStatic) and by Algorithm 1's ranks
// (kvstore.AssignByRank, sticky to the static owners). A node's load is the hotness of the
// partitions it proxies. It shows how much of the simulated reduction is the layout of the
// keys on the partitions (one layout per key set: the simulated seeds share it) and what bounds
// the CV after the reassignment: the hottest key, whose partition no assignment of whole
// partitions splits.
type FlexLayouts struct {
	Keys, Partitions, Layouts, Draws int
	// Before, After are the mean over layouts of the CV of the nodes' loads under the static
	// and the rank assignment; Floor the mean of the CV the nodes would have if every node
	// carried an even share of the proxied load but the hottest key's, which adds to one
	// node; HotShare the hottest key's share of the draws; Proxied the mean share of the
	// draws on proxied partitions after the reassignment.
	Before, After, Floor, HotShare, Proxied float64
	// Reductions are the layouts' reductions of the CV (1 - After/Before), ascending.
	Reductions []float64
}

// Median is the median of the layouts' reductions (0 with none).
func (l FlexLayouts) Median() float64 {
	n := len(l.Reductions)
	switch {
	case n == 0:
		return 0
	case n%2 == 1:
		return l.Reductions[n/2]
	}
	return (l.Reductions[n/2-1] + l.Reductions[n/2]) / 2
}

// flexLayouts computes FlexLayouts for keys keys on parts partitions over layouts random
// layouts, the hotness from draws draws of the key distribution with a fixed seed (the output
// is deterministic). Cost: O(draws + layouts·(distinct keys drawn + parts·20)) time, a map of
// the distinct keys drawn.
func flexLayouts(keys, parts, layouts, draws int) (FlexLayouts, error) {
	out := FlexLayouts{Keys: keys, Partitions: parts, Layouts: layouts, Draws: draws}
	dist, err := newKeyDist(Scrambled, uint64(keys), generator.ZipfianTheta)
	if err != nil {
		return out, err
	}
	r := rand.New(rand.NewPCG(19, 27))
	counts := map[uint64]uint64{}
	for range draws {
		counts[dist.Next(r)]++
	}
	type keyCount struct{ key, n uint64 }
	drawn := make([]keyCount, 0, len(counts))
	var hottest uint64
	for k, n := range counts {
		drawn = append(drawn, keyCount{k, n})
		hottest = max(hottest, n)
	}
	slices.SortFunc(drawn, func(a, b keyCount) int {
		switch {
		case a.key < b.key:
			return -1
		case a.key > b.key:
			return 1
		}
		return 0
	})
	out.HotShare = float64(hottest) / float64(draws)
	nodes := make([]farmem.NodeID, flexNodes)
	index := map[farmem.NodeID]int{}
	for i := range nodes {
		nodes[i] = farmem.NodeID(flexMNs + 1 + i)
		index[nodes[i]] = i
	}
	load := func(hot []uint64, owners []farmem.NodeID) ([]uint64, uint64) {
		l := make([]uint64, len(nodes))
		var proxied uint64
		for p, o := range owners {
			if i, ok := index[o]; ok {
				l[i] += hot[p]
				proxied += hot[p]
			}
		}
		return l, proxied
	}
	var before, after, floor, proxied []float64
	for range layouts {
		salt := r.Uint64()
		hot := make([]uint64, parts)
		for _, d := range drawn {
			hot[mix64(d.key^salt)%uint64(parts)] += d.n // mix64: SplitMix64's finalizer (dolphin.go)
		}
		static := kvstore.Offloaded(parts, nodes, kvstore.AssignStatic(parts, nodes), BalanceRatio)
		lb, _ := load(hot, static)
		ranked := kvstore.Offloaded(parts, nodes, kvstore.AssignByRank(hot, nodes, static), BalanceRatio)
		la, onProxies := load(hot, ranked)
		cb, ca := kvstore.CV(lb), kvstore.CV(la)
		even := make([]uint64, len(nodes))
		for i := range even {
			even[i] = (onProxies - min(hottest, onProxies)) / uint64(len(nodes))
		}
		even[0] += min(hottest, onProxies)
		before, after, floor = append(before, cb), append(after, ca), append(floor, kvstore.CV(even))
		proxied = append(proxied, float64(onProxies)/float64(draws))
		if cb > 0 {
			out.Reductions = append(out.Reductions, 1-ca/cb)
		}
	}
	slices.Sort(out.Reductions)
	out.Before, _ = MeanCI(before)
	out.After, _ = MeanCI(after)
	out.Floor, _ = MeanCI(floor)
	out.Proxied, _ = MeanCI(proxied)
	if len(out.Reductions) == 0 {
		return out, fmt.Errorf("%w: no layout with a load to balance", ErrConfig)
	}
	return out, nil
}
