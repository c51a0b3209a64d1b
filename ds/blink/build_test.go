package blink_test

import (
	"context"
	"fmt"
	"sort"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/farmem/farmem/ds/blink"
	"github.com/farmem/farmem/ds/selcc"
	"github.com/farmem/farmem/farmem"
	"github.com/farmem/farmem/farmem/local"
)

// TestBuild bulk-loads trees of 0 to 2,000 pairs on 256-byte lines (several levels) at two
// fills, then checks Gets of every 7th pair, a full scan, far memory's leaf chain, and that inserts after
// the load (splits of built nodes) and SEL's 2 round trips per level still hold.
func TestBuild(t *testing.T) {
	for _, tc := range []struct {
		n    int
		fill float64
	}{{0, 0.7}, {1, 1}, {2000, 0.7}, {1500, 1}} {
		n, fill := tc.n, tc.fill
		{
			t.Run(fmt.Sprintf("%d/%v", n, fill), func(t *testing.T) {
				r := localRig(t, local.Options{Shape: local.Shape{MemoryNodes: 2, ComputeNodes: 1}}, selcc.Options{Mode: selcc.SEL, LineSize: 256})
				c := r.client(t, 0)
				ctx := context.Background()
				var pairs []blink.Pair
				for i := range n {
					pairs = append(pairs, blink.Pair{Key: ycsbKey(uint64(i)), Value: fmt.Appendf(nil, "v%d", i)})
				}
				sort.Slice(pairs, func(i, j int) bool { return string(pairs[i].Key) < string(pairs[j].Key) })
				cl, err := r.c.Client(ctx, c.m)
				require.NoError(t, err)
				root, err := blink.Build(ctx, r.c, cl, func(ctx context.Context) (selcc.GCL, error) { return cl.Alloc(ctx, c.a) }, pairs, fill)
				require.NoError(t, err)
				tr, err := blink.Open(r.c, cl, c.a, root)
				require.NoError(t, err)
				for i := 0; i < len(pairs); i += 7 { // every 7th: the scan below checks the rest
					p := pairs[i]
					v, err := tr.Get(ctx, p.Key)
					require.NoError(t, err)
					require.Equal(t, p.Value, v)
				}
				ps, err := tr.Scan(ctx, nil, nil, 0)
				require.NoError(t, err)
				require.Equal(t, len(pairs), len(ps))
				for i := range ps {
					require.Equal(t, pairs[i], ps[i])
				}
				far, err := blink.FarPairs(ctx, c.m, root, 256)
				require.NoError(t, err)
				require.Len(t, far, n)
				h, err := blink.FarHeight(ctx, c.m, root, 256)
				require.NoError(t, err)
				if n >= 1500 {
					require.GreaterOrEqual(t, h, 3)
					k := pairs[n/2].Key
					before := c.m.Stats()
					_, err := tr.Get(ctx, k)
					require.NoError(t, err)
					require.Equal(t, uint64(2*h), c.m.Stats().Sub(before).RoundTrips)
				}
				for i := n; i < n+200; i++ {
					require.NoError(t, tr.Insert(ctx, ycsbKey(uint64(i)), []byte("new")))
				}
				far, err = blink.FarPairs(ctx, c.m, root, 256)
				require.NoError(t, err)
				require.Len(t, far, n+200)
			})
		}
	}
	// Bad input is an error.
	r := localRig(t, local.Options{Shape: local.Shape{MemoryNodes: 1, ComputeNodes: 1}}, selcc.Options{Mode: selcc.SEL, LineSize: 256})
	c := r.client(t, 0)
	ctx := context.Background()
	cl, err := r.c.Client(ctx, c.m)
	require.NoError(t, err)
	nl := func(ctx context.Context) (selcc.GCL, error) { return cl.Alloc(ctx, c.a) }
	_, err = blink.Build(ctx, r.c, cl, nl, []blink.Pair{{Key: []byte("b")}, {Key: []byte("a")}}, 1)
	require.ErrorIs(t, err, farmem.ErrInvalid)
	_, err = blink.Build(ctx, r.c, cl, nl, nil, 0)
	require.ErrorIs(t, err, farmem.ErrInvalid)
	_, err = blink.Build(ctx, r.c, cl, nl, []blink.Pair{{Key: make([]byte, 200)}}, 1)
	require.ErrorIs(t, err, blink.ErrKey)
}
