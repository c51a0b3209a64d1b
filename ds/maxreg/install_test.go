package maxreg_test

import (
	"context"
	"encoding/binary"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/farmem/farmem/ds/maxreg"
	"github.com/farmem/farmem/farmem"
	"github.com/farmem/farmem/internal/dstest"
)

// TestInstallNeverLowersWord: a handle's own CAS still in flight to a replica (the write-back
// of a larger tag v that a read returned) is followed by a write of a smaller tag t (a
// Safe-Guess guess below v, in a WriteRead, whose first round always posts). The second CAS
// expects the first's tag; it must not replace v by t on that replica: a metadata word only
// rises. Then, with another replica crashed, the handle writes above v, which needs the
// replica whose word it saw: the write returns (it once looped forever there, its belief of
// the word above the word itself).
func TestInstallNeverLowersWord(t *testing.T) {
	for seed := uint64(1); seed <= 3; seed++ {
		s := newSimN(t, seed, 3)
		s.Run(func() {
			ctx := context.Background()
			addrs := createRep(t, s, repParams)
			a, b, c := addrs[0].Node(), addrs[1].Node(), addrs[2].Node()
			x := openRep(t, s, 0, addrs)
			y := openRep(t, s, 1, addrs)
			down := s.Topology().DownTimeout
			// y's tag v, far above x's clock, reaches replica a only.
			yid := y.m.Info().ID
			require.NoError(t, s.Partition(yid, b))
			require.NoError(t, s.Partition(yid, c))
			_, err := y.r.WriteAbove(ctx, []byte("y"), true, x.r.Ticks()+1_000_000)
			require.ErrorIs(t, err, maxreg.ErrNoQuorum)
			require.NoError(t, s.Heal(yid, b))
			require.NoError(t, s.Heal(yid, c))
			// c is far from x: its ops land there after a and b answered.
			require.NoError(t, s.DelayLink(x.m.Info().Node, c, down/8))
			// x reads v: its write-back of v reaches b, and is still in flight to c.
			v, got, err := x.r.Read(ctx)
			require.NoError(t, err)
			require.Equal(t, "y", string(got))
			// x's guess lies below v: its first round still posts to c, behind the write-back.
			w, m, err := x.r.WriteRead(ctx, []byte("x"), false, 0)
			require.NoError(t, err)
			require.Less(t, w, v)
			require.Equal(t, v, m)
			require.NoError(t, s.Runtime().Sleep(ctx, down))
			// c's words hold v or more.
			words := make([]byte, 8*repParams.Words)
			require.NoError(t, x.m.Read(ctx, addrs[2]+128, words))
			var top maxreg.Tag
			for i := range repParams.Words {
				top = max(top, maxreg.Tag(binary.LittleEndian.Uint64(words[8*i:])))
			}
			require.GreaterOrEqual(t, top, v, "replica c's words went below v (seed %d)", seed)
			// a crashes: a write above v needs b and c.
			require.NoError(t, s.Crash(a))
			wctx, cancel := s.Runtime().WithTimeout(ctx, 100*down)
			defer cancel()
			w2, err := x.r.WriteAbove(wctx, []byte("z"), true, v.TS()+1)
			require.NoError(t, err)
			require.Greater(t, w2, v)
			got2, val, err := y.r.Read(ctx)
			require.NoError(t, err)
			require.Equal(t, w2, got2)
			require.Equal(t, "z", string(val))
		})
	}
}

// TestInstallRoundsBounded: a write whose metadata word another writer keeps moving gives up
// with ErrContended (an ErrNoQuorum, outcome unknown) once it has posted MaxInstallRounds
// rounds for longer than the lease, instead of spinning. The word's other writer is played by
// a client that CASes the word on every replica to a new value below the write's tag after
// every round the writer posts.
func TestInstallRoundsBounded(t *testing.T) {
	s := newSimN(t, 1, 3)
	s.Run(func() {
		ctx := context.Background()
		p := repParams
		p.Words = 1 // every writer shares the one word
		addrs := createRep(t, s, p)
		xm, _ := dstest.OpenClient(t, s, 0, nil)
		mate := openRep(t, s, 1, addrs)
		// The word's other writer: after each of x's batches, it raises the word by one tick of
		// its own tags (always below x's tag), so that each of x's CASes expects a stale value.
		var cur uint64 = 1
		mover := &moveAfter{Memory: xm, move: func() {
			cur++
			nb := new(farmem.Batch)
			for _, a := range addrs {
				nb.CAS(a+128, 0, 0) // learn
			}
			_ = mate.m.Do(ctx, nb)
			set := new(farmem.Batch)
			for i, a := range addrs {
				prev, _ := nb.Result(i)
				set.CAS(a+128, prev, uint64(maxreg.MakeTag(cur, mate.m.Info().ID, true)))
			}
			_ = mate.m.Do(ctx, set)
		}}
		r, err := maxreg.OpenReplicated(ctx, mover, addrs, maxreg.ReplicatedOptions{})
		require.NoError(t, err)
		_, err = r.WriteAbove(ctx, []byte("x"), true, 1<<40)
		require.ErrorIs(t, err, maxreg.ErrContended)
		require.ErrorIs(t, err, maxreg.ErrNoQuorum)
		require.ErrorIs(t, err, farmem.ErrNodeDown)
		require.GreaterOrEqual(t, r.Stats().Rounds, uint64(maxreg.MaxInstallRounds))
		require.False(t, errors.Is(err, context.DeadlineExceeded))
	})
}

// moveAfter is a Memory that runs move after each batch it posts completes, and sleeps a
// lease's worth between batches so that the rounds' bound in time is reached.
type moveAfter struct {
	farmem.Memory
	move func()
}

func (m *moveAfter) Post(ctx context.Context, b *farmem.Batch) *farmem.Pending {
	_ = m.Memory.Runtime().Sleep(ctx, 10*time.Microsecond)
	p := m.Memory.Post(ctx, b)
	_ = p.Wait(ctx, 0)
	m.move()
	return p
}
