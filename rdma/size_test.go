package rdma

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/farmem/farmem/farmem"
)

// Sizes up to 8EiB parse, and the errors say what is wrong.
func TestParseSizeLargeAndErrors(t *testing.T) {
	for s, want := range map[string]uint64{"1PiB": 1 << 50, "3P": 3 << 50, "1EiB": 1 << 60, "8E": 8 << 60} {
		got, err := ParseSize(s)
		require.NoError(t, err, s)
		require.Equal(t, want, got, s)
	}
	for s, says := range map[string]string{
		"9EiB": "too large", "99999999999999999999": "too large", "16777216T": "too large",
		"1ZiB": "unknown suffix", "1.5GiB": "not a byte count", "GiB": "not a byte count", "-1": "not a byte count",
	} {
		_, err := ParseSize(s)
		require.ErrorIs(t, err, farmem.ErrInvalid, s)
		require.ErrorContains(t, err, says, s)
	}
}
