package swarm_test

import (
	"context"
	"encoding/binary"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/farmem/farmem/ds/maxreg"
	"github.com/farmem/farmem/ds/swarm"
	"github.com/farmem/farmem/farmem"
)

// lockWordAt is writer c's timestamp-lock word on the replica at a (ts<<1 | mode, mode 1 is
// WRITE).
func lockWordAt(a farmem.Addr, p maxreg.Params, c uint64) farmem.Addr {
	return a + farmem.Addr(maxreg.Size(p)+8*(c-1))
}

func setWord(t *testing.T, ctx context.Context, m farmem.Memory, a farmem.Addr, v uint64) {
	t.Helper()
	_, err := m.MaskedCAS(ctx, a, 0, 0, v, ^uint64(0))
	require.NoError(t, err)
}

func word(t *testing.T, ctx context.Context, m farmem.Memory, a farmem.Addr) uint64 {
	t.Helper()
	b := make([]byte, 8)
	require.NoError(t, m.Read(ctx, a, b))
	return binary.LittleEndian.Uint64(b)
}

// TestRepopulateLockWords: Repopulate raises each writer's lock word on the target to the
// largest the others hold (a timestamp locked in both modes on two of them gives WRITE, the
// larger word), and the register's value is read back with another replica crashed; Heal
// of a replica holding a word raises it only to a larger timestamp, never switching the mode
// of the timestamp it holds.
func TestRepopulateLockWords(t *testing.T) {
	t.Parallel()
	s := newSim(t, 5, 3, 0, 0)
	addrs := create(t, s)
	p := params
	p.Writers = max(p.Writers, 3)
	s.Run(func() {
		ctx := context.Background()
		h := open(t, s, 0, addrs, nil)
		require.NoError(t, h.r.Write(ctx, encode(41)))
		require.NoError(t, h.r.Write(ctx, encode(42)))
		m := h.m
		// Writer 1: (10, READ) on replica 1, (10, WRITE) on replica 2. Writer 2: (7, READ)
		// on replica 1 only. Writer 3: (5, WRITE) on replica 2, and (5, READ) on replica 0,
		// which Heal must keep.
		setWord(t, ctx, m, lockWordAt(addrs[1], p, 1), 10<<1)
		setWord(t, ctx, m, lockWordAt(addrs[2], p, 1), 10<<1|1)
		setWord(t, ctx, m, lockWordAt(addrs[1], p, 2), 7<<1)
		setWord(t, ctx, m, lockWordAt(addrs[2], p, 3), 5<<1|1)

		// Replica 0 lost its memory: zero it as a restart would.
		size, base := swarm.Size(p), maxreg.Size(p)
		in := uint64(128 + 8*p.Words)
		b := new(farmem.Batch)
		b.Write(addrs[0], make([]byte, 128))
		for w := uint64(128); w < in; w += 8 {
			b.MaskedCAS(addrs[0]+farmem.Addr(w), 0, 0, 0, ^uint64(0))
		}
		for off := in; off < base; off += farmem.MaxOpBytes {
			b.Write(addrs[0]+farmem.Addr(off), make([]byte, min(uint64(farmem.MaxOpBytes), base-off)))
		}
		for w := base; w < size; w += 8 {
			b.MaskedCAS(addrs[0]+farmem.Addr(w), 0, 0, 0, ^uint64(0))
		}
		require.NoError(t, m.Do(ctx, b))
		rep, err := swarm.Repopulate(ctx, m, addrs, 0)
		require.NoError(t, err)
		require.Equal(t, 3, rep.Locks)
		require.Equal(t, uint64(10<<1|1), word(t, ctx, m, lockWordAt(addrs[0], p, 1)))
		require.Equal(t, uint64(7<<1), word(t, ctx, m, lockWordAt(addrs[0], p, 2)))
		require.Equal(t, uint64(5<<1|1), word(t, ctx, m, lockWordAt(addrs[0], p, 3)))

		// Heal of replica 1 (as if it had missed the format): writer 3's word there holds
		// (5, READ): it stays; writer 1's holds (10, READ), it stays too; writer 2's is raised
		// from (7, READ) only if another holds a larger timestamp (none does).
		setWord(t, ctx, m, lockWordAt(addrs[1], p, 3), 5<<1)
		setWord(t, ctx, m, lockWordAt(addrs[2], p, 2), 9<<1|1)
		rep, err = swarm.Heal(ctx, m, addrs, 1)
		require.NoError(t, err)
		require.Equal(t, uint64(5<<1), word(t, ctx, m, lockWordAt(addrs[1], p, 3)), "no mode switch at ts 5")
		require.Equal(t, uint64(10<<1), word(t, ctx, m, lockWordAt(addrs[1], p, 1)), "no mode switch at ts 10")
		require.Equal(t, uint64(9<<1|1), word(t, ctx, m, lockWordAt(addrs[1], p, 2)), "raised to a larger timestamp")
		require.Equal(t, 1, rep.Locks)

		require.NoError(t, s.Crash(addrs[2].Node()))
		r := open(t, s, 1, addrs, nil)
		v, err := r.r.Read(ctx)
		require.NoError(t, err)
		require.Equal(t, uint64(42), decode(t, v))
	})
}
