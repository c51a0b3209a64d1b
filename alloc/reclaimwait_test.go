package alloc

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/farmem/farmem/farmem"
	"github.com/farmem/farmem/sim"
)

// waitSim is a simulated fabric of one small memory node, formatted, for the reclamation-wait
// tests; run runs f in virtual time.
func waitSim(t *testing.T, seed uint64) (s *sim.Sim, open func(ctx context.Context, i int) farmem.Memory) {
	t.Helper()
	model := sim.ConnectX6()
	model.MemoryNodes, model.ComputeNodes, model.ClientsPerNode, model.MemorySize = 1, 2, 16, 1<<20
	s, err := sim.New(model, seed)
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	comp := s.Topology().ComputeNodes()
	open = func(ctx context.Context, i int) farmem.Memory {
		m, err := s.Open(ctx, comp[i%len(comp)])
		require.NoError(t, err)
		t.Cleanup(func() { _ = m.Close() })
		return m
	}
	return s, open
}

// waitOpts: short leases, so that the test's churn (thousands of blocks per Refresh period)
// outruns reclamation on a 1 MiB node many times over.
var waitOpts = Options{Lease: 20 * time.Millisecond, Refresh: 2 * time.Millisecond}

// Clients replace blocks of a small live set far faster than epochs let retired blocks be
// reused: the heap runs out again and again, and every allocation waits for reclamation and
// succeeds, whether it is made inside a pinned section (as the KV stores do) or outside.
// Outside pinned sections a client waits far less than a lease; two clients that both wait
// inside sections hold each other's blocks back until a lease ends (the bound). A client
// alone, pinned, never waits: its own announcement does not hold back what it retired in
// earlier sections, so the scans it makes as chunks run out reuse its blocks, and its heap
// stays within its live set and the scan backlog (under 24 of the node's 64 chunks, where
// waiting for epochs took all of them).
func TestAllocWaitsForReclamation(t *testing.T) {
	for _, tc := range []struct {
		name    string
		clients int
		pinned  bool
		within  time.Duration
	}{
		{"unpinned", 2, false, waitOpts.Lease / 4},
		{"pinned-alone", 1, true, waitOpts.Lease / 4},
		{"pinned", 2, true, waitOpts.Lease + 4*waitOpts.Refresh + 4*time.Millisecond},
	} {
		name, clients, pinned := tc.name, tc.clients, tc.pinned
		t.Run(name, func(t *testing.T) {
			s, open := waitSim(t, 11)
			const live, size, rounds = 32, 1024, 6000
			waits, chunks := make([]uint64, clients), make([]uint64, clients)
			var longest time.Duration
			s.Run(func() {
				ctx := context.Background()
				require.NoError(t, FormatAll(ctx, open(ctx, 0), FormatOptions{ChunkSize: 16 << 10}))
				require.NoError(t, s.Parallel(clients, func(g int) {
					a, err := New(ctx, open(ctx, g), waitOpts)
					require.NoError(t, err)
					defer func() { require.NoError(t, a.Close()) }()
					set := make([]farmem.Addr, live)
					for i := range set {
						set[i], err = a.Alloc(ctx, size, 0)
						require.NoError(t, err)
					}
					for r := range rounds {
						i := r % live
						require.NoError(t, a.Pin(ctx))
						if !pinned {
							require.NoError(t, a.Retire(ctx, set[i], size))
							require.NoError(t, a.Unpin())
						}
						before := s.Now()
						x, err := a.Alloc(ctx, size, 0)
						require.NoError(t, err, "client %d round %d: the live set (%d KiB) fits", g, r, clients*live*size>>10)
						if d := s.Now().Sub(before); d > longest {
							longest = d
						}
						if pinned {
							require.NoError(t, a.Retire(ctx, set[i], size))
							if err := a.Unpin(); err != nil {
								require.ErrorIs(t, err, ErrPinExpired)
							}
						}
						set[i] = x
					}
					waits[g], chunks[g] = a.Stats().ReclaimWaits, a.Stats().Chunks
				}))
			})
			var all uint64
			for _, w := range waits {
				all += w
			}
			if clients == 1 {
				require.Zero(t, all, "a lone client reuses its own blocks without waiting")
				require.Less(t, chunks[0], uint64(24), "a lone client's heap: live set and scan backlog (of 64 chunks)")
			} else {
				require.Positive(t, all, "churn outran reclamation (else the test shows nothing)")
			}
			require.LessOrEqual(t, longest, tc.within, "each wait bounded, in virtual time")
			t.Logf("%s: %v reclamation retries, %v chunks claimed, longest allocation %v (virtual)", name, waits, chunks, longest)
		})
	}
}

// When the live set does not fit, allocation still fails with ErrNoSpace: at once when nothing
// retired is pending, and within MaxReclaimWait (virtual time) when something is: by default
// about a lease and two refreshes, or Options.ReclaimWait when that is shorter.
func TestAllocNoSpaceBoundedWait(t *testing.T) {
	capped := waitOpts
	capped.ReclaimWait = 5 * time.Millisecond
	for _, tc := range []struct {
		name string
		opts Options
		wait time.Duration
	}{
		{"default", waitOpts, waitOpts.Lease + 2*waitOpts.Refresh + time.Millisecond + 4*(1<<unitShift)},
		{"ReclaimWait", capped, capped.ReclaimWait},
	} {
		t.Run(tc.name, func(t *testing.T) { noSpaceBoundedWait(t, tc.opts, tc.wait) })
	}
}

func noSpaceBoundedWait(t *testing.T, opts Options, wait time.Duration) {
	s, open := waitSim(t, 5)
	s.Run(func() {
		ctx := context.Background()
		require.NoError(t, FormatAll(ctx, open(ctx, 0), FormatOptions{ChunkSize: 16 << 10}))
		a, err := New(ctx, open(ctx, 0), opts)
		require.NoError(t, err)
		require.Equal(t, wait, a.MaxReclaimWait())
		r, err := New(ctx, open(ctx, 1), waitOpts)
		require.NoError(t, err)
		var held []farmem.Addr
		for {
			x, err := a.Alloc(ctx, 1024, 0)
			if err != nil {
				require.ErrorIs(t, err, farmem.ErrNoSpace)
				break
			}
			held = append(held, x)
		}
		require.Greater(t, len(held), 100)
		// Nothing pending: the failure is immediate.
		start := s.Now()
		_, err = a.Alloc(ctx, 1024, 0)
		require.ErrorIs(t, err, farmem.ErrNoSpace)
		require.Less(t, s.Now().Sub(start), time.Millisecond, "no wait without retired blocks")
		require.Zero(t, a.Stats().ReclaimWaits)

		// A reader pinned forever (renewing its lease) holds back what a retires: a waits its
		// bound, then fails.
		require.NoError(t, r.Pin(ctx))
		s.Go(func() {
			for range 20 {
				_ = s.Runtime().Sleep(ctx, waitOpts.Lease/4)
				_ = r.Renew(ctx)
			}
		})
		require.NoError(t, a.Pin(ctx))
		require.NoError(t, a.Retire(ctx, held[0], 1024))
		require.NoError(t, a.Unpin())
		start = s.Now()
		_, err = a.Alloc(ctx, 1024, 0)
		waited := s.Now().Sub(start)
		require.ErrorIs(t, err, farmem.ErrNoSpace)
		require.GreaterOrEqual(t, waited, a.MaxReclaimWait(), "it waited for reclamation")
		require.Less(t, waited, a.MaxReclaimWait()+waitOpts.Refresh+time.Millisecond, "and no longer than its bound")
		require.Positive(t, a.Stats().ReclaimWaits)

		// The reader leaves: the retired block is reused, without waiting long.
		require.NoError(t, r.Unpin())
		require.NoError(t, r.Quiesce(ctx))
		start = s.Now()
		x, err := a.Alloc(ctx, 1024, 0)
		require.NoError(t, err)
		require.Equal(t, held[0], x)
		require.Less(t, s.Now().Sub(start), 4*waitOpts.Refresh)
	})
}

// Options out of range are refused with ErrInvalid, a negative ReclaimWait among them.
func TestOptionsOutOfRange(t *testing.T) {
	for _, o := range []Options{
		{Lease: 4 * time.Millisecond},
		{Lease: time.Second, Refresh: 600 * time.Millisecond},
		{Refresh: -time.Millisecond},
		{ClockSkew: -time.Millisecond},
		{ScanInterval: -time.Millisecond},
		{ReclaimWait: -time.Millisecond},
	} {
		_, err := o.withDefaults()
		require.ErrorIs(t, err, farmem.ErrInvalid, "%+v", o)
	}
	o, err := Options{ReclaimWait: time.Millisecond}.withDefaults()
	require.NoError(t, err)
	require.Equal(t, time.Millisecond, o.ReclaimWait)
}
