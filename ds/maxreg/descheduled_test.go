package maxreg_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/farmem/farmem/ds/maxreg"
	"github.com/farmem/farmem/farmem"
	"github.com/farmem/farmem/internal/dstest"
)

// TestInstallDescheduled: a writer descheduled longer than the lease before each batch it
// posts (a loaded machine), on three replicas of which one never answers it (cut off, as a
// node paused with SIGSTOP is), whose first round installs its tag on one replica only (the
// other's word had moved: another writer sharing it wrote there). The second round must ask
// again the replica that installed, whose evidence will be older than the lease beside that
// round's answers, and wait for both: the write completes in two rounds. (Asking only the
// one replica still missing, as once, each round's answer replaced the other replica's
// expired one, and the write gave up with ErrContended after MaxInstallRounds rounds.)
func TestInstallDescheduled(t *testing.T) {
	s := newSimN(t, 1, 3)
	s.Run(func() {
		ctx := context.Background()
		p := repParams
		p.Words = 1 // x and y share the word
		addrs := createRep(t, s, p)
		b, c := addrs[1].Node(), addrs[2].Node()
		xm, _ := dstest.OpenClient(t, s, 0, nil)
		slow := &descheduled{Memory: xm, pause: 3 * p.Lease}
		x, err := maxreg.OpenReplicated(ctx, slow, addrs, maxreg.ReplicatedOptions{})
		require.NoError(t, err)
		defer x.Close()
		y := openRep(t, s, 1, addrs)
		// y's write moves the shared word on replica a only (x's belief of it goes stale).
		yid := y.m.Info().ID
		require.NoError(t, s.Partition(yid, b))
		require.NoError(t, s.Partition(yid, c))
		_, err = y.r.Write(ctx, []byte("y"))
		require.ErrorIs(t, err, maxreg.ErrNoQuorum)
		require.NoError(t, s.Heal(yid, b))
		require.NoError(t, s.Heal(yid, c))
		// x never hears from c.
		require.NoError(t, s.Partition(xm.Info().ID, c))
		slow.on = true
		wctx, cancel := s.Runtime().WithTimeout(ctx, time.Second)
		defer cancel()
		before := x.Stats().Rounds
		tag, err := x.WriteAbove(wctx, []byte("x"), true, 1<<30)
		require.NoError(t, err, "a descheduled writer's install")
		require.Equal(t, uint64(2), x.Stats().Rounds-before, "rounds: a, b and c; then a and b (c never answers)")
		got, val, err := y.r.Read(ctx)
		require.NoError(t, err)
		require.Equal(t, tag, got)
		require.Equal(t, "x", string(val))
	})
}

// descheduled is a Memory whose client, once on is set, stalls pause (on its runtime's
// clock) before each batch it posts: a goroutine descheduled between building a batch and
// posting it.
type descheduled struct {
	farmem.Memory
	pause time.Duration
	on    bool
}

func (d *descheduled) Post(ctx context.Context, b *farmem.Batch) *farmem.Pending {
	if d.on {
		_ = d.Memory.Runtime().Sleep(ctx, d.pause)
	}
	return d.Memory.Post(ctx, b)
}
