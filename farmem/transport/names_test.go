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

// AdmitWait refuses an unusable client's Wait and bad arguments without counting them, and
// counts and places an admitted one.
func TestAdmitWait(t *testing.T) {
	var c transport.Counters
	self := farmem.ComputeID(1).Node()
	yes := func(uint64) bool { return true }
	_, err := transport.AdmitWait(farmem.ErrClosed, &c, farmem.MakeAddr(self, 64), self, 4096, yes)
	require.ErrorIs(t, err, farmem.ErrClosed)
	_, err = transport.AdmitWait(nil, &c, farmem.MakeAddr(self, 65), self, 4096, yes)
	require.ErrorIs(t, err, farmem.ErrMisaligned)
	_, err = transport.AdmitWait(nil, &c, farmem.MakeAddr(1, 64), self, 4096, yes)
	require.ErrorIs(t, err, farmem.ErrNotLocal)
	_, err = transport.AdmitWait(nil, &c, farmem.MakeAddr(self, 64), self, 4096, nil)
	require.ErrorIs(t, err, farmem.ErrInvalid)
	require.Zero(t, c.Snapshot().Waits)
	off, err := transport.AdmitWait(nil, &c, farmem.MakeAddr(self, 4088), self, 4096, yes)
	require.NoError(t, err)
	require.Equal(t, uint64(4088), off)
	require.Equal(t, uint64(1), c.Snapshot().Waits)
}
