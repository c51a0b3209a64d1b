package atomics_test

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/farmem/farmem/atomics"
	"github.com/farmem/farmem/farmem"
	"github.com/farmem/farmem/farmem/transport"
)

// An external test: farmem/transport counts with atomics, so a test of atomics' own package
// cannot import it.
func TestErrorsWrapSentinels(t *testing.T) {
	require.True(t, errors.Is(atomics.ErrUnsupported, farmem.ErrNotSupported))
	require.Equal(t, transport.CodeNotSupported, transport.CodeOf(atomics.ErrUnsupported))
}
