package selcc_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/farmem/farmem/ds/selcc"
	"github.com/farmem/farmem/farmem"
)

// TestRepairLineCrashedHolder: node 1 holds one line exclusively and another shared, then
// crashes. A survivor's acquisition of either fails with a HolderDownError naming node 1 and the
// line; two survivors repair each line at once and remove each hold exactly once; then both
// lines are acquired, and what node 1 wrote back before the crash is read.
func TestRepairLineCrashedHolder(t *testing.T) {
	r := simRig(t, simModel(3, 2), 5, selcc.Options{LineSize: 64, Frames: 8, Durability: selcc.WriteBackOnRelease})
	lines := r.lines(t, 2)
	_, c1 := r.client(t, 0) // node 1
	_, c2 := r.client(t, 1) // node 2
	_, c3 := r.client(t, 2) // node 3
	r.do(func() {
		ctx := context.Background()
		gd, err := c1.Lock(ctx, lines[0])
		require.NoError(t, err)
		require.NoError(t, gd.WriteUint64(ctx, 0, 42))
		require.NoError(t, gd.Unlock(ctx)) // written back: node 1 keeps it M
		gd, err = c1.RLock(ctx, lines[1])
		require.NoError(t, err)
		require.NoError(t, gd.Unlock(ctx)) // node 1 keeps it S
		require.NoError(t, r.s.Crash(r.comp[0]))

		for _, g := range lines {
			_, err := c2.Lock(ctx, g)
			var hd *selcc.HolderDownError
			require.True(t, errors.As(err, &hd), "%v", err)
			require.ErrorIs(t, err, farmem.ErrNodeDown)
			require.Equal(t, r.comp[0].ComputeID(), hd.Node)
			require.Equal(t, g, hd.Line)
			var n2, n3 int
			var e2, e3 error
			require.NoError(t, r.s.Parallel(2, func(i int) {
				if i == 0 {
					n2, e2 = c2.RepairLine(ctx, hd.Node, g)
				} else {
					n3, e3 = c3.RepairLine(ctx, hd.Node, g)
				}
			}))
			require.NoError(t, e2)
			require.NoError(t, e3)
			require.Equal(t, 1, n2+n3, "one hold, removed once")
			gd, err := c2.Lock(ctx, g)
			require.NoError(t, err)
			v, err := gd.ReadUint64(ctx, 0)
			require.NoError(t, err)
			if g == lines[0] {
				require.EqualValues(t, 42, v, "the write node 1 released before crashing")
			}
			require.NoError(t, gd.Unlock(ctx))
		}
	})
}

// TestHungHolderNotRepaired: a holder that is only silent (hung, then resumed) is never
// reported down: a survivor's acquisition fails with farmem.ErrNodeDown after ReplyTimeout but
// not with a HolderDownError, so nothing removes the live node's hold; once it runs again the
// survivor gets the line from it, with what it wrote.
func TestHungHolderNotRepaired(t *testing.T) {
	r := simRig(t, simModel(2, 2), 9, selcc.Options{LineSize: 64, Frames: 8, Durability: selcc.WriteBackOnRelease,
		ReplyTimeout: 2 * time.Millisecond})
	lines := r.lines(t, 1)
	g := lines[0]
	_, c1 := r.client(t, 0) // node 1
	_, c2 := r.client(t, 1) // node 2
	r.do(func() {
		ctx := context.Background()
		gd, err := c1.Lock(ctx, g)
		require.NoError(t, err)
		require.NoError(t, gd.WriteUint64(ctx, 0, 7))
		require.NoError(t, gd.Unlock(ctx))
		require.NoError(t, r.s.Hang(r.comp[0]))
		_, err = c2.Lock(ctx, g)
		require.ErrorIs(t, err, farmem.ErrNodeDown)
		var hd *selcc.HolderDownError
		require.False(t, errors.As(err, &hd), "a silent node is not reported down: %v", err)
		require.NoError(t, r.s.Resume(r.comp[0]))
		gd, err = c2.Lock(ctx, g)
		require.NoError(t, err)
		v, err := gd.ReadUint64(ctx, 0)
		require.NoError(t, err)
		require.EqualValues(t, 7, v)
		require.NoError(t, gd.WriteUint64(ctx, 0, 8))
		require.NoError(t, gd.Unlock(ctx))
		gd, err = c1.RLock(ctx, g)
		require.NoError(t, err)
		v, err = gd.ReadUint64(ctx, 0)
		require.NoError(t, err)
		require.EqualValues(t, 8, v, "node 1 lost its hold to node 2 by the protocol, not by a repair")
		require.NoError(t, gd.Unlock(ctx))
	})
}
