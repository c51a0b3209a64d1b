package transport_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/farmem/farmem/farmem"
	"github.com/farmem/farmem/farmem/transport"
)

func TestMethodNameAndRole(t *testing.T) {
	require.Equal(t, "ds/race.3", transport.MethodName(farmem.OwnerRace.Method(3)))
	require.Equal(t, "app.0", transport.MethodName(farmem.OwnerApp.Method(0)))
	require.Equal(t, "owner(0xf0).255", transport.MethodName(0xf0ff))
	require.Equal(t, farmem.RoleCompute, transport.RoleOf(farmem.ComputeID(2).Node()))
	require.Equal(t, farmem.RoleMemory, transport.RoleOf(3))
}
