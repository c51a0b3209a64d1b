package maxreg_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/farmem/farmem/ds/maxreg"
	"github.com/farmem/farmem/farmem"
	"github.com/farmem/farmem/farmem/farmemtest"
)

// frozen are parameters whose tick (an hour) keeps the clock at timestamp 0 for the test, so
// that each writer's timestamps are its own counter (1, 2, ...) and the order of two writers'
// tags is known in advance: (ts, client id).
var frozen = maxreg.Params{Words: 1, Tick: time.Hour}

// mustCost runs op on h and requires it to cost exactly rtt round trips; it returns the
// register counters' delta.
func mustCost(t *testing.T, h *handle, name string, rtt uint64, op func() error) maxreg.Stats {
	t.Helper()
	var err error
	d, rd := costOf(h, func() { err = op() })
	require.NoError(t, err, name)
	require.Equal(t, rtt, d.RoundTrips, "%s: round trips (%v; %+v)", name, d, rd)
	t.Logf("%-34s %v", name, d)
	return rd
}

// read reads h and requires tag want and value v.
func read(t *testing.T, h *handle, name string, rtt uint64, want maxreg.Tag, v string) maxreg.Stats {
	t.Helper()
	return mustCost(t, h, name, rtt, func() error {
		got, val, err := h.r.Read(context.Background())
		require.Equal(t, want, got, name)
		require.Equal(t, v, string(val), name)
		return err
	})
}

func write(t *testing.T, h *handle, name string, rtt uint64, v string) maxreg.Tag {
	t.Helper()
	var tag maxreg.Tag
	mustCost(t, h, name, rtt, func() error {
		var err error
		tag, err = h.r.Write(context.Background(), []byte(v))
		return err
	})
	return tag
}

// TestRoundTrips asserts each operation's round trips exactly: a write is one (the record and
// the CAS in one batch), a read one when the in-place copy is valid and two when it is torn or
// stale, a lost CAS one more, and a write known to be absorbed none.
func TestRoundTrips(t *testing.T) {
	f := newLocal(t, false)
	addr := create(t, f, frozen)
	ctx := context.Background()
	armed := false
	// The reader's view of the in-place copy can be torn on demand: its first byte (the
	// hash) is flipped in the buffer of its next read of the metadata words (128 bytes into the
	// register) and the copy.
	tearing := func(m farmem.Memory) farmem.Memory {
		return &farmemtest.Interposer{Memory: m, After: func(_ context.Context, v farmemtest.Verb, _ uint64, err error) {
			if op := v.Op(); armed && err == nil && v.Single && op.Kind == farmem.OpRead && op.Addr == addr+128 && len(op.Buf) > 8*frozen.Words {
				op.Buf[8*frozen.Words] ^= 0xff
				armed = false
			}
		}}
	}
	w1 := open(t, f, 0, addr, maxreg.Options{}, nil)
	w2 := open(t, f, 2, addr, maxreg.Options{OutOfPlaceOnly: true}, nil)
	r := open(t, f, 1, addr, maxreg.Options{}, tearing)
	require.Less(t, w1.m.Info().ID, w2.m.Info().ID)

	read(t, r, "read empty", maxreg.ReadRoundTrips, 0, "")
	t1 := write(t, w1, "write", maxreg.WriteRoundTrips, "one")
	require.Equal(t, uint64(1), t1.TS())
	// w1's in-place write was unsignaled: applied before w1's next verb to the node.
	read(t, w1, "read own write, in place", maxreg.ReadRoundTrips, t1, "one")
	rd := read(t, r, "read, in place", maxreg.ReadRoundTrips, t1, "one")
	require.Equal(t, uint64(1), rd.InPlace)

	armed = true
	rd = read(t, r, "read, in-place copy torn", maxreg.ReadChaseRoundTrips, t1, "one")
	require.Equal(t, maxreg.Stats{Reads: 1, Torn: 1, Chased: 1, Refreshes: 1}, rd)

	// w2 has not seen w1's tag in the word they share: its CAS fails once, then wins, since
	// (1, w2) > (1, w1). It never writes the in-place copy.
	var t2 maxreg.Tag
	rd = mustCost(t, w2, "write, lost CAS", maxreg.WriteRoundTrips+maxreg.CASRetryRoundTrips, func() error {
		var err error
		t2, err = w2.r.Write(ctx, []byte("two"))
		return err
	})
	require.Equal(t, uint64(1), rd.CASRetries)
	require.Greater(t, t2, t1)
	rd = read(t, r, "read, in-place copy stale", maxreg.ReadChaseRoundTrips, t2, "two")
	require.Equal(t, maxreg.Stats{Reads: 1, Stale: 1, Chased: 1, Refreshes: 1}, rd)
	// The reader refreshed the copy (unsignaled, applied before its next verb).
	read(t, r, "read after the reader's refresh", maxreg.ReadRoundTrips, t2, "two")

	// w2 runs ahead; w1's next write (ts 2) is absorbed by w2's ts 3 after its CAS, and the
	// one after (ts 3 < w2's (3, w2)) without a verb.
	write(t, w2, "write", maxreg.WriteRoundTrips, "three")
	t4 := write(t, w2, "write", maxreg.WriteRoundTrips, "four")
	rd = mustCost(t, w1, "write absorbed after its CAS", maxreg.WriteRoundTrips, func() error {
		_, err := w1.r.Write(ctx, []byte("x"))
		return err
	})
	require.Equal(t, uint64(1), rd.Absorbed)
	rd = mustCost(t, w1, "write known absorbed", maxreg.WriteAbsorbedRoundTrips, func() error {
		_, err := w1.r.Write(ctx, []byte("y"))
		return err
	})
	require.Equal(t, uint64(1), rd.Absorbed)
	read(t, r, "read", maxreg.ReadChaseRoundTrips, t4, "four")

	// A GUESSED write, then Verify: the copy stays valid across the flag's change.
	var g maxreg.Tag
	mustCost(t, w1, "write guessed", maxreg.WriteRoundTrips, func() error {
		var err error
		g, err = w1.r.WriteFlag(ctx, []byte("five"), false)
		return err
	})
	require.False(t, g.Verified())
	mustCost(t, w1, "verify", maxreg.VerifyRoundTrips, func() error { return w1.r.Verify(ctx, g) })
	read(t, r, "read verified, in place", maxreg.ReadRoundTrips, g|maxreg.VerifiedBit, "five")
}

// TestRoundTripsRefresher: with a Refresher, a write is one round trip on the writer's client
// and the copy lands in the background; once it has, a read is one round trip.
func TestRoundTripsRefresher(t *testing.T) {
	f := newLocal(t, false)
	addr := create(t, f, maxreg.Params{})
	bg, err := f.Open(context.Background(), f.Topology().ComputeNodes()[0])
	require.NoError(t, err)
	t.Cleanup(func() { _ = bg.Close() })
	ref := maxreg.NewRefresher(bg)
	w := open(t, f, 0, addr, maxreg.Options{Refresher: ref}, nil)
	r := open(t, f, 1, addr, maxreg.Options{Refresher: ref}, nil)
	for i, v := range []string{"a", "bb", "ccc"} {
		tag := write(t, w, "write", maxreg.WriteRoundTrips, v)
		require.Eventually(t, ref.Idle, 10*time.Second, time.Millisecond)
		require.Equal(t, uint64(i+1), ref.Stats().Written)
		read(t, r, "read, copy refreshed", maxreg.ReadRoundTrips, tag, v)
	}
	require.Zero(t, w.m.Stats().Unsignaled, "the writer posted its own refresh")
	require.NoError(t, ref.Close())
	require.NoError(t, ref.Close())
}

// TestTimestampsFollowClock: with a fine tick, a writer's timestamps follow the fabric clock
// (at least the ticks elapsed since creation), stay strictly increasing, and rotate through its
// slots.
func TestTimestampsFollowClock(t *testing.T) {
	f := newLocal(t, false)
	addr := create(t, f, maxreg.Params{Slots: 4})
	w := open(t, f, 0, addr, maxreg.Options{}, nil)
	ctx := context.Background()
	var last maxreg.Tag
	for i := range 20 {
		tag, err := w.r.Write(ctx, []byte{byte(i)})
		require.NoError(t, err)
		require.Greater(t, tag.TS(), last.TS())
		require.Equal(t, w.m.Info().ID, tag.Client())
		require.True(t, tag.Verified())
		if last != 0 {
			require.Equal(t, (last.TS()+1)%4, tag.TS()%4, "slot rotation")
		}
		last = tag
	}
	require.NoError(t, f.Runtime().Sleep(ctx, 3*time.Millisecond))
	tag, err := w.r.Write(ctx, []byte("later"))
	require.NoError(t, err)
	require.GreaterOrEqual(t, tag.TS(), last.TS()+3000, "3ms of 1µs ticks later")
	// A new handle of the same client id continues above what the old one wrote.
	w2, err := maxreg.Open(ctx, w.m, addr, maxreg.Options{})
	require.NoError(t, err)
	tag2, err := w2.Write(ctx, []byte("again"))
	require.NoError(t, err)
	require.Greater(t, tag2.TS(), tag.TS())
}
