package qlock

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/farmem/farmem/farmem"
)

func TestWordRoundTrip(t *testing.T) {
	tk := MakeTicket(513, 1<<SeqBits-1)
	require.Equal(t, farmem.ClientID(513), tk.Client())
	require.Equal(t, uint32(1<<SeqBits-1), tk.Seq())
	w := MakeWord(tk, true, 1<<GenBits-1)
	require.Equal(t, tk, w.Tail())
	require.True(t, w.Closed())
	require.Equal(t, uint32(1<<GenBits-1), w.Gen())
	r := w.reset()
	require.True(t, r.Tail().IsZero())
	require.False(t, r.Closed())
	require.Equal(t, uint32(0), r.Gen(), "the generation wraps")
	require.Equal(t, uint32(5), MakeWord(tk, false, 4).reset().Gen())

	m := Msg{Kind: Combined, Word: 0xdeadbeef12345678, From: MakeTicket(7, 99), Aux: 1<<AuxBits - 1}
	b := wordB(m)
	g := grantWord(m.Kind, 12345, m.Word, b)
	k, seq, _ := decodeGrant(g)
	require.Equal(t, Combined, k)
	require.Equal(t, uint32(12345), seq)
	require.Equal(t, m, decodeMsg(g, m.Word, b))
	require.True(t, decodeMsg(g, m.Word+1, b).Damaged)
	require.True(t, decodeMsg(g, m.Word, b^1).Damaged)

	l := linkWord(1<<20+5, tk)
	got, ok := decodeLink(l, 1<<20+5)
	require.True(t, ok)
	require.Equal(t, tk, got)
	_, ok = decodeLink(l, 1<<20+6)
	require.False(t, ok)
	_, ok = decodeLink(0, 0)
	require.False(t, ok, "an empty link word names nobody")
}

// FuzzDecode: the decoders of words read from far memory and from peers never panic and
// agree with their encoders.
func FuzzDecode(f *testing.F) {
	f.Add(uint64(0), uint64(0), uint64(0), uint32(0))
	f.Add(^uint64(0), ^uint64(0), ^uint64(0), ^uint32(0))
	f.Fuzz(func(t *testing.T, g, a, b uint64, seq uint32) {
		m := decodeMsg(g, a, b)
		if !m.Damaged {
			k, s, _ := decodeGrant(g)
			require.Equal(t, g, grantWord(k, s, a, wordB(m)))
		}
		if tk, ok := decodeLink(g, seq); ok {
			require.Equal(t, g, linkWord(seq, tk)|g&(1<<63))
		}
		w := Word(a)
		require.Equal(t, w, MakeWord(w.Tail(), w.Closed(), w.Gen()))
		_ = w.String()
		_ = Kind(b).String()
	})
}
