package repro

import (
	"context"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"strings"
	"text/tabwriter"

	"github.com/farmem/farmem/bench/generator"
)

// The key distributions of the CIDER sweep.
const (
	// Scrambled is YCSB's ScrambledZipfianGenerator (bench/generator.ScrambledZipfian): a
	// Zipfian of theta 0.99 over 10^10 items folded onto the keys by FNV-1a. The hottest key
	// draws about 3.8% of requests whatever the key count, which is what makes results
	// insensitive to it; the paper's YCSB runs draw from it.
	Scrambled = "scrambled"
	// Permuted is bench/generator.Permuted: a Zipfian of the configured theta over the keys'
	// ranks, mapped one to one onto the keys. Its hottest key's share falls with the key count
	// (6.5% at 128Ki keys, 4.95% at 60M).
	Permuted = "permuted"
)

// keyDist draws keys; it does not change as it draws, so clients share one, each with its own
// random source.
type keyDist interface {
	Next(r *rand.Rand) uint64
	// hottest returns up to n distinct keys, hottest first.
	hottest(n uint64) []uint64
}

func newKeyDist(dist string, keys uint64, theta float64) (keyDist, error) {
	switch dist {
	case Permuted:
		p, err := generator.NewPermuted(keys, theta)
		if err != nil {
			return nil, fmt.Errorf("%w: %w", ErrConfig, err)
		}
		return permuted{p, keys}, nil
	case Scrambled:
		if theta != generator.ZipfianTheta {
			return nil, fmt.Errorf("%w: the scrambled Zipfian's theta is YCSB's %v, not %v", ErrConfig, generator.ZipfianTheta, theta)
		}
		if keys > 1<<62 {
			return nil, fmt.Errorf("%w: %d keys", ErrConfig, keys)
		}
		return scrambled{generator.NewScrambledZipfian(0, int64(keys)-1)}, nil
	}
	return nil, fmt.Errorf("%w: key distribution %q (want %s or %s)", ErrConfig, dist, Scrambled, Permuted)
}

type permuted struct {
	p    *generator.Permuted
	keys uint64
}

func (p permuted) Next(r *rand.Rand) uint64 { return p.p.Next(r) }

func (p permuted) hottest(n uint64) []uint64 {
	out := make([]uint64, 0, min(n, p.keys))
	for i := range min(n, p.keys) {
		out = append(out, p.p.Key(i))
	}
	return out
}

type scrambled struct{ s *generator.ScrambledZipfian }

func (s scrambled) Next(r *rand.Rand) uint64 { return uint64(s.s.Next(r)) }

// hottest folds the large space's most popular items in rank order and keeps the first n
// distinct keys (several items can fold onto one key; the order is by the first item's rank).
func (s scrambled) hottest(n uint64) []uint64 {
	seen := map[uint64]bool{}
	var out []uint64
	for i := int64(0); uint64(len(out)) < n && i < int64(4*n)+16; i++ {
		k := uint64(s.s.Fold(i))
		if !seen[k] {
			seen[k] = true
			out = append(out, k)
		}
	}
	return out
}

// KeysResult is one sweep run at several key counts: Results[i] ran with Keys[i] keys on the
// array and Keys[i]/8 on RACE.
type KeysResult struct {
	Keys    []uint64
	Results []*CiderResult
}

// RunCiderKeys runs cfg once per key count (the array with each count, RACE with an eighth of
// it), to show how far the figures depend on the key count.
func RunCiderKeys(ctx context.Context, cfg CiderConfig, keys []uint64, progress io.Writer) (*KeysResult, error) {
	if len(keys) == 0 {
		return nil, fmt.Errorf("%w: no key counts", ErrConfig)
	}
	out := &KeysResult{Keys: keys}
	for _, k := range keys {
		c := cfg
		c.ArrayKeys, c.RaceKeys = k, max(2, k/8)
		if progress != nil {
			fmt.Fprintf(progress, "%d keys:\n", k)
		}
		r, err := RunCider(ctx, c, progress)
		if err != nil {
			return nil, err
		}
		out.Results = append(out.Results, r)
	}
	return out, nil
}

// WriteText writes one table per structure and mix: a row per key count, each synchronizer's
// throughput (with its interval) at every client count, and CIDER over optimistic.
func (k *KeysResult) WriteText(w io.Writer) error {
	c := k.Results[0].Config
	fmt.Fprintf(w, "Key-count sensitivity: zipf %.2f (%s), seeds %v; the array holds the keys, RACE an eighth of them\n", c.Theta, c.Dist, c.Seeds)
	for _, st := range c.Structs {
		for _, mx := range c.Mixes {
			fmt.Fprintf(w, "\n%s, %s\n", st, mx)
			tw := tabwriter.NewWriter(w, 0, 0, 1, ' ', tabwriter.AlignRight)
			head := []string{"keys"}
			for _, n := range c.Clients {
				for _, s := range c.Syncs {
					head = append(head, fmt.Sprintf("%s@%d", abbrev(s), n))
				}
				if hasSync(c, CIDER) && hasSync(c, Optimistic) {
					head = append(head, fmt.Sprintf("cider/opt@%d", n))
				}
			}
			fmt.Fprintln(tw, strings.Join(head, "\t")+"\t")
			for i, r := range k.Results {
				keys := k.Keys[i]
				if st == RACE {
					keys = r.Config.RaceKeys
				}
				row := []string{fmt.Sprint(keys)}
				for _, n := range c.Clients {
					for _, s := range c.Syncs {
						row = append(row, fmtTput(r.Point(st, mx, s, n)))
					}
					if hasSync(c, CIDER) && hasSync(c, Optimistic) {
						row = append(row, fmt.Sprintf("%.2f", r.Point(st, mx, CIDER, n).Throughput/math.Max(1, r.Point(st, mx, Optimistic, n).Throughput)))
					}
				}
				fmt.Fprintln(tw, strings.Join(row, "\t")+"\t")
			}
			if err := tw.Flush(); err != nil {
				return err
			}
		}
	}
	return nil
}
