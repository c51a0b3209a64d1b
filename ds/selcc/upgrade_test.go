package selcc_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/farmem/farmem/ds/selcc"
	"github.com/farmem/farmem/farmem"
	"github.com/farmem/farmem/farmem/farmemtest"
)

// TestUpgradeStorm: clients on two nodes read a line (both nodes hold it S) and then write it,
// again and again: their upgrade CASes fail each other until the fallback (release S, acquire
// M); every increment lands.
func TestUpgradeStorm(t *testing.T) {
	for seed := uint64(1); seed <= 3; seed++ {
		r := simRig(t, simModel(2, 2), seed, selcc.Options{LineSize: 64, Frames: 4, UpgradeTries: 2})
		gs := r.lines(t, 1)
		const n, k = 4, 50
		ms := make([]farmem.Memory, n)
		cls := make([]*selcc.Client, n)
		for i := range n {
			ms[i], cls[i] = r.client(t, i)
		}
		upgrades := uint64(0)
		r.do(func() {
			before := r.f.Stats().FailedCAS
			require.NoError(t, farmemtest.Parallel(r.f.Runtime(), n, func(i int) error {
				ctx := context.Background()
				for range k {
					gd, err := cls[i].RLock(ctx, gs[0])
					if err != nil {
						return err
					}
					if err := gd.Unlock(ctx); err != nil {
						return err
					}
					if gd, err = cls[i].Lock(ctx, gs[0]); err != nil {
						return err
					}
					v, err := gd.ReadUint64(ctx, 0)
					if err == nil {
						err = gd.WriteUint64(ctx, 0, v+1)
					}
					if err != nil {
						return err
					}
					if err := gd.Unlock(ctx); err != nil {
						return err
					}
				}
				return nil
			}))
			upgrades = r.f.Stats().FailedCAS - before
		})
		r.quiescentAgreement(t, gs)
		r.do(func() { require.NoError(t, r.c.Close()) })
		_, ctrs := r.farWords(t, gs)
		require.Equal(t, uint64(n*k), ctrs[0])
		t.Logf("seed %d: failed CASes %d", seed, upgrades)
		require.Positive(t, upgrades)
	}
}
