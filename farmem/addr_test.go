package farmem_test

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/farmem/farmem/farmem"
)

func TestAddr(t *testing.T) {
	a := farmem.MakeAddr(3, 0x1f40)
	require.Equal(t, farmem.NodeID(3), a.Node())
	require.Equal(t, uint64(0x1f40), a.Offset())
	require.Equal(t, "n3+0x1f40", a.String())
	require.Equal(t, "nil", farmem.Addr(0).String())
	c := farmem.MakeAddr(farmem.ComputeID(2).Node(), 0x40)
	require.Equal(t, "c2+0x40", c.String())
	require.True(t, c.Node().IsCompute())
	require.Equal(t, farmem.ComputeID(2), c.Node().ComputeID())
	require.False(t, a.Node().IsCompute())
	require.Equal(t, farmem.MakeAddr(3, 0x1f48), a.Add(8))
	require.Equal(t, farmem.MakeAddr(1, 7), farmem.MakeAddr(1, farmem.MaxOffset+8), "a wider offset is truncated")
	require.Equal(t, farmem.NodeID(0), farmem.ComputeID(0).Node())
}

func TestParseAddr(t *testing.T) {
	for s, want := range map[string]farmem.Addr{
		"nil":                   0,
		"n0+0":                  0,
		"n3+0x1f40":             farmem.MakeAddr(3, 0x1f40),
		"n3+8000":               farmem.MakeAddr(3, 8000),
		"c1+0x0":                farmem.MakeAddr(farmem.ComputeID(1).Node(), 0),
		"n32767+0xffffffffffff": farmem.MakeAddr(32767, farmem.MaxOffset),
	} {
		got, err := farmem.ParseAddr(s)
		require.NoError(t, err, s)
		require.Equal(t, want, got, s)
	}
	for _, s := range []string{"", "n", "n3", "n3+", "x3+0", "n+0", "n-1+0", "n3+-1", "n3+0x", "n3+0x-1",
		"n32768+0", "c32768+0", "n3+0x1000000000000", "n3+1+2", "n3+0xg", "n 3+0", "n3+0x+1", "c+1+0"} {
		_, err := farmem.ParseAddr(s)
		require.ErrorIs(t, err, farmem.ErrInvalid, "%q", s)
	}
}

func FuzzAddr(f *testing.F) {
	for _, s := range []string{"nil", "n3+0x1f40", "c2+64", "n0+0", "n32767+0xffffffffffff", "c+", "n3+0x"} {
		f.Add(s, uint64(0))
	}
	f.Add("", uint64(0x8001_0000_0000_0040))
	f.Fuzz(func(t *testing.T, s string, raw uint64) {
		// Every address formats to a string that parses back to it.
		a := farmem.Addr(raw)
		back, err := farmem.ParseAddr(a.String())
		if err != nil || back != a {
			t.Fatalf("%#x formats as %q, which parses to %#x, %v", raw, a.String(), back, err)
		}
		// Any string parses without panicking, and a parsed address formats and parses back.
		p, err := farmem.ParseAddr(s)
		if err != nil {
			if !errors.Is(err, farmem.ErrInvalid) {
				t.Fatalf("%q: error %v does not wrap ErrInvalid", s, err)
			}
			return
		}
		again, err := farmem.ParseAddr(p.String())
		if err != nil || again != p {
			t.Fatalf("%q parses to %v, which does not round-trip: %v %v", s, p, again, err)
		}
	})
}
