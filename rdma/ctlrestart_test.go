package rdma

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A status query answered by a node, which then restarts at the same address, reaches the new
// incarnation at the first try: the control connection the first query left open ends at its
// first use, and a read-only request is sent again on a new one.
func TestStatusAcrossRestart(t *testing.T) {
	servers, cl := startServers(t, 1, 1<<20)
	cl.DownTimeout = 2 * time.Second
	f := dialN(t, cl, 1, Options{})[0]
	ctx := context.Background()
	st, err := f.Status(ctx, 1)
	require.NoError(t, err)
	old := st.Incarnation

	s := restartNode1(t, servers, cl)

	st, err = f.Status(ctx, 1)
	require.NoError(t, err, "the first query after the restart")
	require.NotEqual(t, old, st.Incarnation)
	require.Equal(t, s.s.inc, st.Incarnation)
}

// restartNode1 closes node 1's server (the first of servers) and starts a new one, empty, at
// its address: the node restarted, as a new incarnation.
func restartNode1(t *testing.T, servers []*Server, cl *Cluster) *Server {
	t.Helper()
	require.NoError(t, servers[0].Close())
	s, err := NewServer(ServerOptions{Node: 1, Size: 1 << 20, Secret: testSecret, Logger: testLogger()})
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	_, err = s.Listen(cl.Memory[0].Addr)
	require.NoError(t, err)
	return s
}
