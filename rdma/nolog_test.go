package rdma

import (
	"context"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/farmem/farmem/farmem"
)

// countingHandler counts the records it is handed.
type countingHandler struct{ n *atomic.Int64 }

func (h countingHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h countingHandler) Handle(context.Context, slog.Record) error {
	h.n.Add(1)
	return nil
}
func (h countingHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h countingHandler) WithGroup(string) slog.Handler      { return h }

// A library does not log to the default logger unless asked: nodes and a fabric given no
// Logger write nothing to slog's (or log's) default, through a dial, verbs, a node going away
// under a client, a shutdown and the fabric's close. Not parallel: it swaps the process's
// default logger, and every other test of the package passes its own.
func TestNoDefaultLogging(t *testing.T) {
	var n atomic.Int64
	prev := slog.Default()
	slog.SetDefault(slog.New(countingHandler{&n}))
	t.Cleanup(func() { slog.SetDefault(prev) })
	slog.Info("the handler counts") // the one record this test writes itself

	cl := &Cluster{DownTimeout: time.Second}
	var servers []*Server
	for i := range 2 {
		s, err := NewServer(ServerOptions{Node: farmem.NodeID(i + 1), Size: 1 << 20, Secret: testSecret})
		require.NoError(t, err)
		addr, err := s.Listen("127.0.0.1:0")
		require.NoError(t, err)
		servers = append(servers, s)
		cl.Memory = append(cl.Memory, NodeAddr{ID: s.Node(), Addr: addr})
	}
	ctx := context.Background()
	f, err := Dial(ctx, cl, Options{Secret: testSecret})
	require.NoError(t, err)
	m, err := f.Open(ctx, f.Hosted()[0])
	require.NoError(t, err)
	for _, node := range []farmem.NodeID{1, 2} {
		_, err = m.FAA(ctx, farmem.MakeAddr(node, 64), 1)
		require.NoError(t, err)
	}
	require.NoError(t, servers[1].Close()) // node 2 goes away under the client
	_, err = m.FAA(ctx, farmem.MakeAddr(2, 64), 1)
	require.ErrorIs(t, err, farmem.ErrNodeDown)
	// A stranger with the wrong secret, which the node refuses (and would log).
	_, err = Dial(ctx, &Cluster{Memory: cl.Memory[:1]}, Options{Secret: []byte("not-the-cluster-secret!")})
	require.Error(t, err)
	require.NoError(t, m.Close())
	require.NoError(t, f.Close())
	require.NoError(t, servers[0].Close())
	require.Equal(t, int64(1), n.Load(), "records written to the default logger")
}
