package dstest

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/farmem/farmem/farmem"
)

// Cost runs f, requires its error to wrap wantErr (nil: no error), and returns what f did on m
// (the difference of m's Stats around it), for a test that asserts an operation's exact round
// trips and verbs; name labels the failure.
func Cost(t testing.TB, m farmem.Memory, name string, f func() error, wantErr error) farmem.Stats {
	t.Helper()
	before := m.Stats()
	err := f()
	if wantErr != nil {
		require.ErrorIs(t, err, wantErr, name)
	} else {
		require.NoError(t, err, name)
	}
	return m.Stats().Sub(before)
}
