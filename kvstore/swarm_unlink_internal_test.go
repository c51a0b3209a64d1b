package kvstore

import (
	"context"
	"encoding/binary"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/farmem/farmem/alloc"
	"github.com/farmem/farmem/ds/maxreg"
	"github.com/farmem/farmem/ds/race"
	"github.com/farmem/farmem/farmem"
	"github.com/farmem/farmem/farmem/farmemtest"
	"github.com/farmem/farmem/farmem/local"
)

// unlinkEnv is a Swarm store on a local fabric holding one key, and what the tests below
// need to stop a Delete of it at its unlink.
type unlinkEnv struct {
	f    *local.Fabric
	s    *Store
	key  []byte
	off  alloc.SymOffset // the key's object
	size uint64          // an object's register bytes per replica (swarmIndex.size)
}

func newUnlinkEnv(t *testing.T) *unlinkEnv {
	t.Helper()
	ctx := context.Background()
	f, err := local.New(local.Options{Shape: local.Shape{MemoryNodes: 3, ComputeNodes: 1, MemorySize: 32 << 20, ClientsPerNode: 16}})
	require.NoError(t, err)
	t.Cleanup(func() { _ = f.Close() })
	s, err := Open(ctx, f, Options{Index: Swarm{Params: maxreg.Params{ValueSize: 64, Slots: 2}}})
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	e := &unlinkEnv{f: f, s: s, key: []byte("orphan")}
	require.NoError(t, s.Insert(ctx, e.key, []byte("first")))
	e.off = e.indexed(t)
	c, err := s.acquire(ctx)
	require.NoError(t, err)
	e.size = c.idx.(*swarmIndex).size
	s.release(c, nil)
	return e
}

// indexed returns the object the index names for the key (0 if none), read with a pooled
// client.
func (e *unlinkEnv) indexed(t *testing.T) alloc.SymOffset {
	t.Helper()
	ctx := context.Background()
	c, err := e.s.acquire(ctx)
	require.NoError(t, err)
	defer e.s.release(c, nil)
	x := c.idx.(*swarmIndex)
	ref, err := x.t.Search(ctx, x.ikey(e.key))
	if err != nil {
		require.ErrorIs(t, err, race.ErrNotFound)
		return 0
	}
	return alloc.SymOffset(binary.LittleEndian.Uint64(ref))
}

// life returns the life word of the object at off.
func (e *unlinkEnv) life(t *testing.T, off alloc.SymOffset) uint64 {
	t.Helper()
	ctx := context.Background()
	c, err := e.s.acquire(ctx)
	require.NoError(t, err)
	defer e.s.release(c, nil)
	x := c.idx.(*swarmIndex)
	var b [8]byte
	require.NoError(t, x.rm.Read(ctx, x.lifeAddr(&swarmObj{off: off}), b[:]))
	return binary.LittleEndian.Uint64(b[:])
}

// deleter opens a session on a new client of the fabric whose verbs an Interposer watches:
// once the client has written UNLINKED into the life word of the key's object (the write
// round of its CAS DEAD→UNLINKED, seen on a replica), act runs before its first verb that
// touches that word no more, the first verb of the index entry's removal, on the deleter's
// goroutine, given the client's Memory. It returns the session and whether act ran.
func (e *unlinkEnv) deleter(t *testing.T, act func(m farmem.Memory)) (*Session, *bool) {
	t.Helper()
	ctx := context.Background()
	m, err := e.f.Open(ctx, e.f.Hosted()[0])
	require.NoError(t, err)
	t.Cleanup(func() { _ = m.Close() })
	// An object's life word is the first logical word after its register; replmem keeps a
	// logical word's value at Stride times its offset on each replica, which for an object's
	// 256-aligned block is the same offset.
	lifeOff := uint64(e.off) + e.size
	touches := func(v farmemtest.Verb) bool {
		for _, op := range v.Batch.Ops {
			if o := op.Addr.Offset(); o >= lifeOff && o < lifeOff+32 {
				return true
			}
		}
		return false
	}
	unlinked, fired := false, new(bool)
	ip := &farmemtest.Interposer{Memory: m}
	ip.Before = func(_ context.Context, v farmemtest.Verb) {
		switch {
		case *fired:
		case unlinked && !touches(v):
			*fired = true
			act(m)
		case !unlinked:
			for _, op := range v.Batch.Ops {
				if op.Kind == farmem.OpWrite && op.Addr.Offset() == lifeOff && len(op.Buf) >= 8 &&
					binary.LittleEndian.Uint64(op.Buf) == swarmUnlinked {
					unlinked = true
				}
			}
		}
	}
	ss, err := e.s.SessionOn(ctx, ip)
	require.NoError(t, err)
	return ss, fired
}

// TestSwarmUnlinkerDies: the client of a Delete dies after winning the object's life word
// DEAD→UNLINKED and before removing the index entry (the fabric crashes it there). The key
// reads as absent, and the next Insert of it removes the dead object's entry itself and
// succeeds at once (no wait for the dead client), with its value read back by every client.
func TestSwarmUnlinkerDies(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := newUnlinkEnv(t)
	del, fired := e.deleter(t, func(m farmem.Memory) { require.NoError(t, e.f.CrashClient(m.Info().ID)) })
	err := del.Delete(ctx, e.key)
	require.True(t, *fired, "the deleter reached its entry's removal")
	require.ErrorIs(t, err, farmem.ErrNodeDown, "the deleter died in its Delete")
	require.Equal(t, swarmUnlinked, e.life(t, e.off), "the dead client won the unlinking")
	require.Equal(t, e.off, e.indexed(t), "and left the entry in the index")

	ss, err := e.s.Session(ctx)
	require.NoError(t, err)
	defer ss.Close()
	_, err = ss.Get(ctx, e.key)
	require.ErrorIs(t, err, ErrNotFound)
	before := ss.Stats()
	require.NoError(t, ss.Insert(ctx, e.key, []byte("second")))
	t.Logf("the insert that removed the orphaned entry: %v", ss.Stats().Sub(before))
	now := e.indexed(t)
	require.NotZero(t, now)
	require.NotEqual(t, e.off, now, "the key names the new object")
	for _, c := range []getter{ss, e.s} {
		got, err := c.Get(ctx, e.key)
		require.NoError(t, err)
		require.Equal(t, "second", string(got))
	}
	require.ErrorIs(t, ss.Insert(ctx, e.key, []byte("third")), ErrExists)
	// The dead client cannot withdraw its allocator's announcement; its session closes
	// anyway (the store would wait for it).
	require.ErrorIs(t, del.Close(), farmem.ErrNodeDown)
}

// TestSwarmUnlinkerLate: the client of a Delete stalls after winning the object's life word
// DEAD→UNLINKED and before removing the index entry; meanwhile another client inserts the
// key again (removing the dead object's entry itself), and then the stalled deleter removes
// its entry, conditionally: the newer object's entry stays, and so does its value. And when
// the key was inserted and deleted again meanwhile, the late removal finds it absent.
func TestSwarmUnlinkerLate(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, again := range []bool{false, true} {
		e := newUnlinkEnv(t)
		ss, err := e.s.Session(ctx)
		require.NoError(t, err)
		del, fired := e.deleter(t, func(farmem.Memory) {
			require.NoError(t, ss.Insert(ctx, e.key, []byte("newer")), "an insert while the deleter stalls")
			if again {
				require.NoError(t, ss.Delete(ctx, e.key))
			}
		})
		require.NoError(t, del.Delete(ctx, e.key), "the late deleter")
		require.True(t, *fired)
		require.Equal(t, swarmUnlinked, e.life(t, e.off))
		for _, c := range []getter{ss, del, e.s} {
			got, err := c.Get(ctx, e.key)
			if again {
				require.ErrorIs(t, err, ErrNotFound)
				continue
			}
			require.NoError(t, err, "the late removal left the newer object's entry")
			require.Equal(t, "newer", string(got))
		}
		if !again {
			require.NotEqual(t, e.off, e.indexed(t))
		} else {
			require.Zero(t, e.indexed(t))
		}
		require.NoError(t, del.Close())
		require.NoError(t, ss.Close())
	}
}

// getter is what the tests read the key back through: a Store or a Session.
type getter interface {
	Get(ctx context.Context, key []byte) ([]byte, error)
}
