package replmem_test

import (
	"context"
	"encoding/binary"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/farmem/farmem/alloc"
	"github.com/farmem/farmem/farmem"
	"github.com/farmem/farmem/farmem/replmem"
	"github.com/farmem/farmem/sim"
)

// hungRun is what runHung measured.
type hungRun struct {
	suspected uint64 // ErrNodeDown results met, summed over the handles: down timeouts paid
	ops       int
	health    replmem.HealthStats
	cleared   bool // the hung replica was no longer suspected at the end
}

const (
	hungHandles = 8
	hungFor     = 400 * time.Millisecond
	hungDown    = 10 * time.Millisecond // the sim's down timeout
	hungSuspect = 20 * time.Millisecond // replmem's default Options.Suspect
	hungThink   = time.Millisecond      // each handle's pause between iterations
)

// runHung runs hungHandles handles on one compute node of the simulator, each adding to a
// shared counter with FAA and to a word of its own with Read and CAS (then pausing
// hungThink), while the first replica
// hangs (fail-silent: verbs to it fail with ErrNodeDown after the down timeout) for hungFor,
// then runs on for long enough after it resumes for a probe to find it. With shared, the
// handles share one Health; otherwise each has its own. Every FAA must return a distinct
// previous value, the counter must end at the number of FAAs and each own word at its CASes.
func runHung(t *testing.T, shared bool) hungRun {
	var out hungRun
	onReplicaSim(t, 11, hungDown, 300*time.Nanosecond, func(s *sim.Sim, m0 farmem.Memory, a0 *alloc.Allocator) {
		ctx := context.Background()
		comp := s.Topology().ComputeNodes()
		mem := s.Topology().MemoryNodes()
		const words = hungHandles + 1
		base := replBlock(t, a0, 8*words)
		opts := replmem.Options{Nodes: mem, Virtual: 0xF3}
		var h *replmem.Health
		if shared {
			h = new(replmem.Health)
			opts.Health = h
		}
		r0, err := replmem.New(m0, opts)
		require.NoError(t, err)
		require.NoError(t, r0.Write(ctx, base, make([]byte, 8*words)))
		start := s.Now()
		s.At(start.Add(time.Millisecond), func() { require.NoError(t, s.Hang(mem[0])) })
		s.At(start.Add(time.Millisecond+hungFor), func() { require.NoError(t, s.Resume(mem[0])) })
		end := start.Add(hungFor + 200*time.Millisecond)
		prevs := make([][]uint64, hungHandles)
		cases := make([]uint64, hungHandles)
		rs := make([]*replmem.Memory, hungHandles)
		for i := range rs {
			m, err := s.Open(ctx, comp[0])
			require.NoError(t, err)
			rs[i], err = replmem.New(m, opts)
			require.NoError(t, err)
		}
		require.NoError(t, s.Parallel(hungHandles, func(i int) {
			r := rs[i]
			own := base.Add(uint64(8 * (i + 1)))
			for s.Now() < end {
				prev, err := r.FAA(ctx, base, 1)
				require.NoError(t, err)
				prevs[i] = append(prevs[i], prev)
				var b [8]byte
				require.NoError(t, r.Read(ctx, own, b[:]))
				v := binary.LittleEndian.Uint64(b[:])
				got, err := r.CAS(ctx, own, v, v+1)
				require.NoError(t, err)
				require.Equal(t, v, got, "handle %d alone writes its word", i)
				cases[i]++
				require.NoError(t, s.Runtime().Sleep(ctx, hungThink))
			}
		}))
		all := slices.Concat(prevs...)
		slices.Sort(all)
		for k, v := range all {
			require.Equal(t, uint64(k), v, "the additions' previous values are not 0..n-1")
		}
		b := make([]byte, 8*words)
		require.NoError(t, r0.Read(ctx, base, b))
		require.Equal(t, uint64(len(all)), binary.LittleEndian.Uint64(b))
		for i := range hungHandles {
			require.Equal(t, cases[i], binary.LittleEndian.Uint64(b[8*(i+1):]), "handle %d's word", i)
		}
		out.ops = 3 * len(all)
		for _, r := range rs {
			out.suspected += r.ProtocolStats().Suspected
		}
		if h != nil {
			out.health = h.Stats()
			out.cleared = !h.Suspected(mem[0])
		}
	})
	return out
}

// TestSharedHealthHungReplica: with one replica of three hung for 400 ms of virtual time, eight
// handles sharing a Health pay at most one down timeout each when the hang begins (the rounds
// already in flight) and one per probe after, a probe at most every Suspect plus down timeout;
// every operation completes and the counters add up. Handles each with their own Health pay a
// down timeout each per period, well past that bound; and the shared Health clears the
// suspicion after the replica resumes.
func TestSharedHealthHungReplica(t *testing.T) {
	sh := runHung(t, true)
	maxProbes := uint64(hungFor/(hungSuspect+hungDown)) + 1
	bound := 2*uint64(hungHandles) + maxProbes
	t.Logf("shared Health: %d operations, %d down timeouts paid, %+v", sh.ops, sh.suspected, sh.health)
	require.NotZero(t, sh.health.Suspicions, "the handles met the hang")
	require.NotZero(t, sh.health.Probes)
	require.LessOrEqual(t, sh.health.Probes, maxProbes+1, "probes (one per period, plus the one after the resume)")
	require.LessOrEqual(t, sh.suspected, bound, "down timeouts paid across the handles")
	require.True(t, sh.cleared, "a probe after the resume clears the suspicion")
	require.NotZero(t, sh.health.Cleared)

	own := runHung(t, false)
	t.Logf("a Health per handle: %d operations, %d down timeouts paid", own.ops, own.suspected)
	require.Greater(t, own.suspected, bound, "handles on their own each pay per period")
	require.Greater(t, sh.ops, own.ops, "shared suspicion leaves the handles more time for work")
}

// TestHolesHealed: blocks laid out while one replica is cut off from the writers (a sim
// partition) are on the other two only, the cut-off replica holding version 0 there. After the
// partition heals and a probe finds the replica back, a read of a block finds its hole and
// copies it, and the writer's handle copies what its writes missed, one range per batch; so
// those blocks survive another replica's crash. A block written during the cut by a handle
// that never runs again, and not read before that crash, is unreadable (ErrNoQuorum), never
// stale.
func TestHolesHealed(t *testing.T) {
	onReplicaSim(t, 5, hungDown, 0, func(s *sim.Sim, m farmem.Memory, a *alloc.Allocator) {
		ctx := context.Background()
		comp := s.Topology().ComputeNodes()
		mem := s.Topology().MemoryNodes()
		const size = 64
		read, written, lost := replBlock(t, a, size), replBlock(t, a, size), replBlock(t, a, size)
		h := new(replmem.Health)
		r, err := replmem.New(m, replmem.Options{Nodes: mem, Virtual: 0xF3, Health: h})
		require.NoError(t, err)
		m2, err := s.Open(ctx, comp[0])
		require.NoError(t, err)
		r2, err := replmem.New(m2, replmem.Options{Nodes: mem, Virtual: 0xF3})
		require.NoError(t, err)
		img := make([]byte, size)
		for i := range img {
			img[i] = byte(i + 1)
		}
		require.NoError(t, s.Partition(m.Info().ID, mem[2]))
		require.NoError(t, s.Partition(m2.Info().ID, mem[2]))
		require.NoError(t, r.Write(ctx, read, img))
		require.NoError(t, r.Write(ctx, written, img))
		require.NoError(t, r2.Write(ctx, lost, img))
		require.NotZero(t, r.ProtocolStats().Suspected, "the writes met the partition")
		require.Equal(t, uint64(2), h.Stats().Missed)
		require.NoError(t, s.Heal(m.Info().ID, mem[2]))
		require.NoError(t, s.Heal(m2.Info().ID, mem[2]))
		// Past the suspicion: the next round probes the replica and finds it back.
		require.NoError(t, s.Runtime().Sleep(ctx, 50*time.Millisecond))
		got := make([]byte, size)
		require.NoError(t, r.Read(ctx, read, got))
		require.Equal(t, img, got)
		require.False(t, h.Suspected(mem[2]))
		st := r.ProtocolStats()
		require.Equal(t, uint64(2), st.Heals, "the read's hole, and one range the writes missed")
		require.Equal(t, uint64(2*size/8), st.Healed, "both blocks copied")
		require.NoError(t, r.Read(ctx, read, got))
		require.Zero(t, h.Stats().Missed, "the handle caught up")
		require.Equal(t, uint64(2*size/8), r.ProtocolStats().Healed, "nothing left to copy")

		require.NoError(t, s.Crash(mem[0]))
		for _, b := range []farmem.Addr{read, written} {
			clear(got)
			require.NoError(t, r.Read(ctx, b, got), "a healed block is on two live replicas")
			require.Equal(t, img, got)
		}
		err = r.Read(ctx, lost, got)
		require.ErrorIs(t, err, replmem.ErrNoQuorum, "the unhealed block is on one live replica")
		// An atomic on it cannot lock a majority holding the word: it says it wrote nothing,
		// and the live replica's copy is indeed unchanged.
		_, err = r.CAS(ctx, lost, binary.LittleEndian.Uint64(img), 7)
		require.ErrorIs(t, err, replmem.ErrNotWritten)
		raw := make([]byte, 8)
		require.NoError(t, m.Read(ctx, r.Phys(1, lost), raw))
		require.Equal(t, img[:8], raw)
	})
}
