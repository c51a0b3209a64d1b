package swarm_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/farmem/farmem/ds/swarm"
	"github.com/farmem/farmem/farmem"
)

// slowClock is a client's Runtime whose clock, while on, reads step later at each call than
// the one before: a client descheduled for step before every clock read (a loaded machine's
// client between two lines of its code). Timers and sleeps are the fabric's.
type slowClock struct {
	farmem.Runtime
	step  time.Duration
	on    bool
	extra time.Duration
}

func (c *slowClock) Now() farmem.Time {
	if c.on {
		c.extra += c.step
	}
	return c.Runtime.Now().Add(c.extra)
}

// slowMem is a client's memory whose Runtime is a slowClock.
type slowMem struct {
	farmem.Memory
	clock *slowClock
}

func (m *slowMem) Runtime() farmem.Runtime { return m.clock }

// TestWriteReadStalledClient: a client whose write's batch is built more than a lease after
// the write took its start time (its clock reads a step later at every call, as a client
// descheduled between two lines of code) must still see, in the write's read half, the final
// tuple a majority holds: the answers count beside the batch's build time. Counted beside the
// earlier start they were left out, the guess passed for fresh, and the write returned nil
// over a tombstone (kvstore's adoption lincheck under load: an update of a deleted key
// succeeded, a put was lost).
func TestWriteReadStalledClient(t *testing.T) {
	s := newSim(t, 5, 3, 0, 0)
	addrs := create(t, s)
	a := open(t, s, 0, addrs, nil)
	var clock *slowClock
	v := open(t, s, 1, addrs, func(m farmem.Memory) farmem.Memory {
		clock = &slowClock{Runtime: m.Runtime(), step: params.Lease/2 + params.Lease/10}
		return &slowMem{Memory: m, clock: clock}
	})
	s.Run(func() {
		ctx := context.Background()
		require.NoError(t, a.r.WriteBelow(ctx, encode(1), swarm.FinalTS))
		got, err := v.r.Read(ctx)
		require.NoError(t, err)
		require.Equal(t, encode(1), got)
		require.NoError(t, a.r.WriteFinal(ctx, encode(99), swarm.FinalTS))
		clock.on = true
		err = v.r.WriteBelow(ctx, encode(2), swarm.FinalTS)
		clock.on = false
		require.ErrorIs(t, err, swarm.ErrCeiling, "the write's read half holds the final tuple")
		for _, h := range []*handle{a, v} {
			got, err := h.r.Read(ctx)
			require.NoError(t, err)
			require.Equal(t, encode(99), got)
		}
	})
}
