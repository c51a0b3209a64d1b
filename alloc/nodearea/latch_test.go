package nodearea_test

import (
	"context"
	"encoding/binary"
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/farmem/farmem/alloc/nodearea"
	"github.com/farmem/farmem/farmem"
)

// TestLatchExclusion: on every transport, writers and readers of one compute node share a
// latch allocated in the node's shared area; writers increment a counter beside it with a
// read and a write (not atomic), readers read the counter twice. No increment is lost, no
// reader sees the counter move while it holds the latch, and nothing leaves the node.
func TestLatchExclusion(t *testing.T) {
	for _, c := range clusters(t) {
		t.Run(c.name, func(t *testing.T) {
			ctx := context.Background()
			const writers, readers, rounds = 4, 3, 40
			ms := make([]farmem.Memory, writers+readers)
			for i := range ms {
				ms[i] = c.client(t, 0)
			}
			var blk farmem.Addr
			c.within(func() {
				a, err := nodearea.Open(ctx, ms[0])
				require.NoError(t, err)
				blk, err = a.AllocZeroed(ctx, 16)
				require.NoError(t, err)
			})
			counter := blk.Add(8)
			var e errs
			yield := func(m farmem.Memory) {
				if c.sim != nil {
					m.Runtime().Compute(100) // let the simulator switch
				} else {
					runtime.Gosched()
				}
			}
			c.within(func() {
				c.par(len(ms), func(i int) {
					m := ms[i]
					l, err := nodearea.NewLatch(m, blk)
					if err != nil {
						e.add("latch: %w", err)
						return
					}
					buf := make([]byte, 8)
					read := func() uint64 {
						if err := m.Read(ctx, counter, buf); err != nil {
							e.add("read: %w", err)
						}
						return binary.LittleEndian.Uint64(buf)
					}
					for range rounds {
						if i < writers {
							if err := l.Lock(ctx); err != nil {
								e.add("lock: %w", err)
								return
							}
							v := read()
							yield(m)
							if err := m.Write(ctx, counter, binary.LittleEndian.AppendUint64(nil, v+1)); err != nil {
								e.add("write: %w", err)
							}
							if err := l.Unlock(ctx); err != nil {
								e.add("unlock: %w", err)
								return
							}
						} else {
							if err := l.RLock(ctx); err != nil {
								e.add("rlock: %w", err)
								return
							}
							v := read()
							yield(m)
							if w := read(); w != v {
								e.add("reader %d saw the counter move from %d to %d under the latch", i, v, w)
							}
							if err := l.RUnlock(ctx); err != nil {
								e.add("runlock: %w", err)
								return
							}
						}
						yield(m)
					}
				})
			})
			e.check(t)
			c.within(func() {
				buf := make([]byte, 16)
				require.NoError(t, ms[0].Read(ctx, blk, buf))
				require.Zero(t, binary.LittleEndian.Uint64(buf), "the latch is free at the end")
				require.EqualValues(t, writers*rounds, binary.LittleEndian.Uint64(buf[8:]), "lost increments")
			})
			var st farmem.Stats
			for _, m := range ms {
				st = st.Add(m.Stats())
			}
			require.Zero(t, st.RoundTrips)
			require.Zero(t, st.VerbsTo(farmem.TargetMemory)+st.VerbsTo(farmem.TargetCompute))
			t.Logf("%d local verbs, %d Waits, %d failed CASes", st.VerbsTo(farmem.TargetLocal), st.Waits, st.FailedCAS)
		})
	}
}

// TestLatchModes: TryLock and TryRLock never wait and respect each other and the pending bit;
// Unlock by a client that does not hold the latch changes nothing and fails; a latch outside
// the caller's region is refused.
func TestLatchModes(t *testing.T) {
	for _, c := range clusters(t) {
		t.Run(c.name, func(t *testing.T) {
			ctx := context.Background()
			m1, m2 := c.client(t, 0), c.client(t, 0)
			other := c.client(t, 1)
			c.within(func() {
				a, err := nodearea.Open(ctx, m1)
				require.NoError(t, err)
				blk, err := a.AllocZeroed(ctx, 8)
				require.NoError(t, err)
				l1, err := nodearea.NewLatch(m1, blk)
				require.NoError(t, err)
				l2, err := nodearea.NewLatch(m2, blk)
				require.NoError(t, err)
				_, err = nodearea.NewLatch(other, blk)
				require.ErrorIs(t, err, farmem.ErrNotLocal)
				_, err = nodearea.NewLatch(m1, blk+4)
				require.ErrorIs(t, err, farmem.ErrMisaligned)

				ok, err := l1.TryLock(ctx)
				require.NoError(t, err)
				require.True(t, ok)
				ok, err = l2.TryLock(ctx)
				require.NoError(t, err)
				require.False(t, ok, "held exclusively")
				ok, err = l2.TryRLock(ctx)
				require.NoError(t, err)
				require.False(t, ok, "held exclusively")
				require.ErrorIs(t, l2.Unlock(ctx), farmem.ErrInvalid, "not the holder")
				require.NoError(t, l1.Unlock(ctx))
				require.ErrorIs(t, l1.Unlock(ctx), farmem.ErrInvalid, "not held")

				for _, l := range []nodearea.Latch{l1, l2} {
					ok, err = l.TryRLock(ctx)
					require.NoError(t, err)
					require.True(t, ok, "shared holders coexist")
				}
				ok, err = l1.TryLock(ctx)
				require.NoError(t, err)
				require.False(t, ok, "held shared")
				require.NoError(t, l1.RUnlock(ctx))
				require.NoError(t, l2.RUnlock(ctx))
				require.ErrorIs(t, l2.RUnlock(ctx), farmem.ErrInvalid, "no shared holder left")
				// Undo the bad decrement and check the word is usable again.
				_, err = m1.FAA(ctx, blk, 1)
				require.NoError(t, err)
				require.NoError(t, l2.Lock(ctx))
				require.NoError(t, l2.Unlock(ctx))

				// A writer that gives up waiting (its context ends) while a reader holds the
				// latch does not leave its pending bit behind to keep later readers out.
				require.NoError(t, l1.RLock(ctx))
				wctx, cancel := m2.Runtime().WithTimeout(ctx, 5*time.Millisecond)
				err = l2.Lock(wctx)
				cancel()
				require.ErrorIs(t, err, context.DeadlineExceeded)
				ok, err = l2.TryRLock(ctx)
				require.NoError(t, err)
				require.True(t, ok, "a reader enters after the writer gave up")
				require.NoError(t, l1.RUnlock(ctx))
				require.NoError(t, l2.RUnlock(ctx))

				// The latch's block goes back to the area and comes out again as plain data:
				// on local's strict mode, neither the free list's link nor the new owner's
				// plain write is a violation, though the word was a target of atomics.
				require.NoError(t, a.Free(ctx, blk, 8))
				again, err := a.Alloc(ctx, 8)
				require.NoError(t, err)
				require.Equal(t, blk, again)
				require.NoError(t, m1.Write(ctx, again, []byte("plaindat")))

				st := m1.Stats().Add(m2.Stats())
				require.Zero(t, st.RoundTrips)
			})
		})
	}
}
