package maxreg

import (
	"bytes"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/farmem/farmem/farmem"
)

// TestTagLayout: the fields round-trip, tags order by (timestamp, client, flag), and the
// identity drops only the flag.
func TestTagLayout(t *testing.T) {
	tag := MakeTag(MaxTS, 0xffff, true)
	require.Equal(t, Tag(^uint64(0)), tag)
	require.Equal(t, uint64(MaxTS), tag.TS())
	require.Equal(t, farmem.ClientID(0xffff), tag.Client())
	require.True(t, tag.Verified())
	a := MakeTag(5, 9, false)
	require.Equal(t, uint64(5), a.TS())
	require.Equal(t, farmem.ClientID(9), a.Client())
	require.False(t, a.Verified())
	require.Less(t, a, a|VerifiedBit)
	require.Less(t, a|VerifiedBit, MakeTag(5, 10, false))
	require.Less(t, MakeTag(5, 0xffff, true), MakeTag(6, 1, false))
	require.Equal(t, a.identity(), (a | VerifiedBit).identity())
	require.True(t, Tag(0).IsZero())
	// 2^47 ticks of the default tick last more than four years.
	require.Greater(t, time.Duration(MaxTS)*DefaultTick, 4*365*24*time.Hour)
}

// TestNextStamp: a writer's timestamps strictly increase and take its slots in turn, whether
// the clock runs ahead, stands still or steps back.
func TestNextStamp(t *testing.T) {
	for _, slots := range []uint64{2, 3, 4, 16} {
		last := uint64(0)
		clock := []uint64{0, 0, 100, 100, 101, 50, 7, 1000, 999, 0, 2000, 2001, 2002}
		for i, now := range clock {
			ts := nextStamp(last, now, slots)
			require.Greater(t, ts, last, "slots %d step %d", slots, i)
			require.GreaterOrEqual(t, ts, now, "follows the clock")
			require.Less(t, ts, max(last+1, now)+slots, "at most slots-1 ticks ahead")
			require.Equal(t, (last+1)%slots, ts%slots, "slot rotation")
			last = ts
		}
	}
}

// TestRecord: a sealed record opens to its identity and value, and any flipped byte of its
// used part, a wrong seed or a short buffer fails.
func TestRecord(t *testing.T) {
	const seed = 42
	tag := MakeTag(77, 3, true)
	val := []byte("hello, far memory")
	buf := make([]byte, recHeader+64)
	rec := sealRecord(buf, seed, tag, val)
	id, v, err := openRecord(buf, seed, 64)
	require.NoError(t, err)
	require.Equal(t, tag.identity(), id)
	require.Equal(t, val, v)
	for i := range rec {
		c := bytes.Clone(buf)
		c[i] ^= 1
		_, _, err := openRecord(c, seed, 64)
		require.Error(t, err, "byte %d flipped", i)
	}
	_, _, err = openRecord(buf, seed+1, 64)
	require.Error(t, err)
	_, _, err = openRecord(buf[:20], seed, 64)
	require.Error(t, err)
	_, _, err = openRecord(buf, seed, 4)
	require.Error(t, err, "length above the register's value size")
}

// FuzzOpenRecord: no input panics, and whatever validates re-seals to the same bytes.
func FuzzOpenRecord(f *testing.F) {
	buf := make([]byte, recHeader+16)
	f.Add(sealRecord(buf, 1, MakeTag(1, 1, true), []byte("x")))
	f.Add(make([]byte, 40))
	f.Fuzz(func(t *testing.T, b []byte) {
		id, v, err := openRecord(b, 1, 64)
		if err != nil {
			return
		}
		again := sealRecord(make([]byte, recHeader+len(v)), 1, Tag(id), v)
		require.Equal(t, again, b[:len(again)])
	})
}

// FuzzDecodeHeader: no input panics, and what decodes has parameters in range.
func FuzzDecodeHeader(f *testing.F) {
	p, _ := Params{}.withDefaults()
	good := make([]byte, hdrSize)
	header{p: p, base: 12, nonce: 34}.encode(good, true)
	f.Add(good)
	f.Add(make([]byte, hdrUsed))
	f.Fuzz(func(t *testing.T, b []byte) {
		h, err := decodeHeader(b)
		if err != nil {
			return
		}
		q, err := h.p.withDefaults()
		require.NoError(t, err)
		require.Equal(t, h.p, q)
		require.NotZero(t, layoutOf(h.p).size)
	})
}

// TestHeaderRoundTrip: encode then decode gives the same header; a header without its magic
// does not decode.
func TestHeaderRoundTrip(t *testing.T) {
	p, err := Params{Words: 4, Slots: 8, ValueSize: 1000, Writers: 3, Tick: time.Hour}.withDefaults()
	require.NoError(t, err)
	h := header{p: p, base: -5, nonce: 99}
	b := make([]byte, hdrSize)
	h.encode(b, true)
	got, err := decodeHeader(b)
	require.NoError(t, err)
	require.Equal(t, h, got)
	h.encode(b, false)
	_, err = decodeHeader(b)
	require.ErrorIs(t, err, ErrNotFormatted)
}
