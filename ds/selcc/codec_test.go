package selcc_test

import (
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/farmem/farmem/ds/selcc"
	"github.com/farmem/farmem/farmem"
)

func codecs(t *testing.T) []selcc.Codec {
	g64, err := selcc.NewGroups(64)
	require.NoError(t, err)
	g200, err := selcc.NewGroups(200)
	require.NoError(t, err)
	g255, err := selcc.NewGroups(255)
	require.NoError(t, err)
	return []selcc.Codec{selcc.Bitmap{}, g64, g200, g255}
}

// randomState draws a legal protocol state: either one exclusive holder, or a set of sharers
// (each at most once), plus some nodes with an attempt in flight (a transient +Shared).
func randomState(r *rand.Rand, c selcc.Codec) (x farmem.ComputeID, sharers []farmem.ComputeID) {
	n := c.MaxNodes()
	if r.IntN(3) == 0 {
		return farmem.ComputeID(1 + r.IntN(n)), nil
	}
	for id := 1; id <= n; id++ {
		if r.IntN(4) == 0 {
			sharers = append(sharers, farmem.ComputeID(id))
		}
	}
	return 0, sharers
}

// TestCodecNoCarry: sharers added in any order (with an exclusive field and transient
// attempts of other nodes in flight) decode to a superset of themselves, leave the holder
// field exact, and the final word is the same in every order; removing them all gives 0.
func TestCodecNoCarry(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for _, c := range codecs(t) {
		for range 500 {
			x, sh := randomState(r, c)
			var deltas []uint64
			if x != 0 {
				deltas = append(deltas, c.Exclusive(x))
				// Readers that failed against x and have not undone yet.
				for id := 1; id <= c.MaxNodes(); id++ {
					if r.IntN(5) == 0 && farmem.ComputeID(id) != x {
						sh = append(sh, farmem.ComputeID(id))
					}
				}
			}
			for _, s := range sh {
				deltas = append(deltas, c.Shared(s))
			}
			var w1, w2 uint64
			for _, d := range deltas {
				w1 += d
			}
			r.Shuffle(len(deltas), func(i, j int) { deltas[i], deltas[j] = deltas[j], deltas[i] })
			for _, d := range deltas {
				w2 += d
			}
			require.Equal(t, w1, w2, "%s: order changed the word", c.Name())
			require.Equal(t, x, c.Holder(w1), "%s: a sharer carried into the holder field", c.Name())
			got := c.Sharers(w1, nil)
			in := map[farmem.ComputeID]bool{}
			for _, s := range got {
				in[s] = true
			}
			for _, s := range sh {
				if !in[s] {
					t.Fatalf("%s: sharer %d missing from %#x", c.Name(), s, w1)
				}
			}
			if _, ok := c.(selcc.Bitmap); ok {
				require.ElementsMatch(t, sh, got, "bitmap sharers are exact")
			}
			// Undo every shared delta and release x, in another order: back to zero.
			r.Shuffle(len(deltas), func(i, j int) { deltas[i], deltas[j] = deltas[j], deltas[i] })
			for _, d := range deltas {
				w1 -= d
			}
			require.Zero(t, w1)
		}
	}
}

// TestCodecUpgradeExact: the upgrade CAS's expected word (Shared(me)) equals the word exactly
// when me is the only holder; any other holder, shared or exclusive, makes it differ.
func TestCodecUpgradeExact(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for _, c := range codecs(t) {
		for range 2000 {
			me := farmem.ComputeID(1 + r.IntN(c.MaxNodes()))
			_, others := randomState(r, c)
			others = slices.DeleteFunc(others, func(n farmem.ComputeID) bool { return n == me })
			w := c.Shared(me)
			for _, o := range others {
				w += c.Shared(o)
			}
			if r.IntN(4) == 0 { // a writer's transient exclusive field
				w += c.Exclusive(farmem.ComputeID(1 + r.IntN(c.MaxNodes())))
				require.NotEqual(t, c.Shared(me), w)
				continue
			}
			require.Equal(t, len(others) == 0, w == c.Shared(me), "%s: me=%d others=%v", c.Name(), me, others)
		}
	}
}

// TestCodecTransitions: the transitions of the notes' table, as word arithmetic.
func TestCodecTransitions(t *testing.T) {
	for _, c := range codecs(t) {
		a, b := farmem.ComputeID(1), farmem.ComputeID(c.MaxNodes())
		// Handover M(b) -> M(a).
		w := c.Exclusive(b) + selcc.HandoverDelta(c, b, a)
		require.Equal(t, c.Exclusive(a), w)
		// Downgrade M(b) -> S(a, b).
		w = c.Exclusive(b) + selcc.DowngradeDelta(c, b, a)
		require.Equal(t, farmem.ComputeID(0), c.Holder(w))
		require.Contains(t, c.Sharers(w, nil), a)
		require.Contains(t, c.Sharers(w, nil), b)
		w += selcc.ReleaseSharedDelta(c, a) + selcc.ReleaseSharedDelta(c, b)
		require.Zero(t, w)
		// A handover FAA landing after the new holder's release (another channel) still ends at 0.
		w = c.Exclusive(b) + selcc.ReleaseExclusiveDelta(c, a) + selcc.HandoverDelta(c, b, a)
		require.Zero(t, w)
	}
}

// TestCodecNonHoldersNeverDecrement: with the group codec, an invalidation reaches every member
// of a non-empty group; if a member that holds nothing decremented, the holder's count would
// vanish (another sharer invisible to a writer). The engine's rule (only a holder subtracts, see
// the handler) keeps the count; this checks the rule's premise on the codec: subtracting for a
// non-holder does corrupt the directory, and subtracting only for holders empties it exactly.
func TestCodecNonHoldersNeverDecrement(t *testing.T) {
	g, err := selcc.NewGroups(200)
	require.NoError(t, err)
	holder := farmem.ComputeID(9) // group 0, with 1, 17, 25, ...
	w := g.Shared(holder)
	targets := g.Sharers(w, nil)
	require.Greater(t, len(targets), 1)
	require.Contains(t, targets, holder)
	bad := w
	for _, n := range targets {
		if n != holder {
			bad += selcc.ReleaseSharedDelta(g, n) // a non-holder's decrement
			break
		}
	}
	require.Empty(t, g.Sharers(bad, nil), "a non-holder's decrement hid the real sharer")
	good := w
	for _, n := range targets {
		if n == holder {
			good += selcc.ReleaseSharedDelta(g, n)
		}
	}
	require.Zero(t, good)
}

func TestCodecFor(t *testing.T) {
	c, err := selcc.CodecFor(58)
	require.NoError(t, err)
	require.IsType(t, selcc.Bitmap{}, c)
	c, err = selcc.CodecFor(59)
	require.NoError(t, err)
	require.IsType(t, selcc.Groups{}, c)
	_, err = selcc.CodecFor(256)
	require.ErrorIs(t, err, farmem.ErrInvalid)
	_, err = selcc.CodecFor(0)
	require.ErrorIs(t, err, farmem.ErrInvalid)
}
