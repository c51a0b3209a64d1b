package kvstore_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/farmem/farmem/farmem"
	"github.com/farmem/farmem/kvstore"
)

// TestBlinkLinearizableSim checks the store's operation mix over the blink kind on the
// simulator (tearing, jitter; two compute nodes sharing the tree through SELCC, 1 KiB lines
// so leaves split), over two seeds.
func TestBlinkLinearizableSim(t *testing.T) {
	t.Parallel()
	for _, seed := range []uint64{1, 2} {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) {
			s := newSim(t, seed)
			h := kvModel.NewHistory(s.Runtime())
			w := mix
			w.keys, w.ops = 64, 150
			s.Run(func() {
				ctx := context.Background()
				st, err := kvstore.Open(ctx, s, kvstore.Options{Alloc: shortLeases, Index: &kvstore.Blink{LineSize: 1024, Frames: 32},
					Nodes: []farmem.NodeID{farmem.ComputeID(1).Node(), farmem.ComputeID(2).Node()}})
				require.NoError(t, err)
				errs := make([]error, 6)
				require.NoError(t, s.Parallel(len(errs), func(g int) {
					errs[g] = w.run(ctx, st, g, s.Runtime().NewRand(), h)
				}))
				for g, err := range errs {
					require.NoError(t, err, "goroutine %d", g)
				}
				require.NoError(t, st.Close())
			})
			h.Check(t)
		})
	}
}
