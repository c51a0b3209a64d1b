package rdma

import (
	"context"
	"encoding/binary"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/farmem/farmem/farmem"
	"github.com/farmem/farmem/farmem/farmemtest"
	"github.com/farmem/farmem/rdma/internal/verbs"
)

// The verbs provider over a fake device (package verbs' FakeNet), so its logic — setup over
// the control connection, the memory node's registered region, the queue-pair engine, fault
// injection — runs in every build, with no NIC. "fakeverbs" has the ibverbs defaults;
// "fakeverbs-tight" a send queue of 8 and a 4 KiB staging ring, so batches are split and
// staging wraps.
var (
	fakeNet = verbs.NewFakeNet()
	fakeDev = fakeNet.NewDevice(verbs.FakeAttr)
)

func init() {
	open := func(string) (verbs.Device, error) { return fakeDev, nil }
	newVerbsProvider("fakeverbs", open, verbs.Config{}).register()
	newVerbsProvider("fakeverbs-tight", open, verbs.Config{Depth: 8, SignalEvery: 4, Staging: 4096}).register()
}

func requireNoFakeViolations(t *testing.T) {
	t.Helper()
	require.Empty(t, fakeNet.Violations(), "the fake device saw breaches")
}

func verbsConformance(t *testing.T, provider string) {
	farmemtest.Run(t, func(t *testing.T, cfg farmemtest.Config) *farmemtest.Cluster {
		servers, cl := startProviderServers(t, cfg.MemoryNodes, cfg.MemorySize, provider)
		cl.DownTimeout = cfg.DownTimeout
		fs := dialN(t, cl, cfg.ComputeNodes, Options{Provider: provider})
		var fabs []farmem.Fabric
		for _, f := range fs {
			fabs = append(fabs, f)
		}
		return &farmemtest.Cluster{Fabrics: fabs, Faults: NewInjector(servers, fs)}
	})
	requireNoFakeViolations(t)
}

func TestVerbsProviderConformance(t *testing.T) {
	t.Parallel() // mostly waiting for down timeouts: overlap it with the other suites
	verbsConformance(t, "fakeverbs")
}

func TestVerbsProviderConformanceTight(t *testing.T) {
	if testing.Short() {
		t.Skip("short")
	}
	t.Parallel() // mostly waiting for down timeouts: overlap it with the other suites
	verbsConformance(t, "fakeverbs-tight")
}

func verbsFabric(t *testing.T, provider string, nodes int) ([]*Server, *Fabric, farmem.Memory) {
	t.Helper()
	servers, cl := startProviderServers(t, nodes, 1<<20, provider)
	cl.DownTimeout = 500 * time.Millisecond
	f := dialN(t, cl, 1, Options{Provider: provider})[0]
	m, err := f.Open(context.Background(), f.Hosted()[0])
	require.NoError(t, err)
	t.Cleanup(func() { _ = m.Close() })
	return servers, f, m
}

// The data path bypasses the memory node's CPU: its tcp server applies no batch, yet the
// verbs land in its memory.
func TestVerbsDataPathBypassesTheNode(t *testing.T) {
	servers, _, m := verbsFabric(t, "fakeverbs", 1)
	ctx := context.Background()
	a := farmem.MakeAddr(1, 1<<16)
	require.NoError(t, m.Write(ctx, a, []byte("far and fast")))
	got := make([]byte, 12)
	require.NoError(t, m.Read(ctx, a, got))
	require.Equal(t, "far and fast", string(got))
	prev, err := m.FAA(ctx, a+64, 5)
	require.NoError(t, err)
	require.Zero(t, prev)
	require.Equal(t, uint64(5), binary.LittleEndian.Uint64(servers[0].s.reg.mapped[1<<16+64:]), "the node's mapped memory")
	st := servers[0].Status()
	require.Zero(t, st.Batches, "no batch went through the node's CPU")
	require.Equal(t, "fakeverbs", st.Provider)
	requireNoFakeViolations(t)
}

// MaskedCAS round trips, as the package doc states them.
func TestVerbsMaskedCASRoundTrips(t *testing.T) {
	_, _, m := verbsFabric(t, "fakeverbs", 1)
	ctx := context.Background()
	a := farmem.MakeAddr(1, 1<<16)
	_, err := m.CAS(ctx, a, 0, 0xaabb)
	require.NoError(t, err)
	rt := func(fn func()) uint64 {
		before := m.Stats()
		fn()
		return m.Stats().Sub(before).RoundTrips
	}
	require.Equal(t, uint64(2), rt(func() {
		prev, err := m.MaskedCAS(ctx, a, 0xbb, 0xff, 0x1100, 0xff00)
		require.NoError(t, err)
		require.Equal(t, uint64(0xaabb), prev)
	}), "the guess missed outside the mask: one retry")
	require.Equal(t, uint64(1), rt(func() {
		prev, err := m.MaskedCAS(ctx, a, 0x11bb, 0xffff, 0x22bb, 0xffff)
		require.NoError(t, err)
		require.Equal(t, uint64(0x11bb), prev)
	}), "the guess was the word")
	require.Equal(t, uint64(1), rt(func() {
		_, err := m.MaskedCAS(ctx, a, 0xcc, 0xff, 0, ^uint64(0))
		require.NoError(t, err)
	}), "a miss inside the mask is one CAS")
	require.Equal(t, uint64(1), rt(func() {
		_, err := m.MaskedCAS(ctx, a, 0x22bb, ^uint64(0), 0x33, 0xff)
		require.NoError(t, err)
	}), "a full compare mask is one CAS")
	got := make([]byte, 8)
	require.Equal(t, uint64(3), rt(func() {
		var b farmem.Batch
		b.MaskedCAS(a, 0x33, 0xff, 0x4400, 0xff00)
		b.Read(a, got)
		require.NoError(t, m.Do(ctx, &b))
	}), "a retry, and the read sent once the MaskedCAS settled")
	require.Equal(t, uint64(0x4433), binary.LittleEndian.Uint64(got))
	require.Equal(t, uint64(1), m.Stats().VerbsOf(farmem.OpMaskedCAS)-4, "verbs count ops, not attempts")
	requireNoFakeViolations(t)
}

// A client that closes has the node destroy its queue pairs.
func TestVerbsQueuePairsReleased(t *testing.T) {
	servers, f, m := verbsFabric(t, "fakeverbs", 2)
	ctx := context.Background()
	for _, n := range []farmem.NodeID{1, 2} {
		_, err := m.FAA(ctx, farmem.MakeAddr(n, 1<<16), 1)
		require.NoError(t, err)
	}
	vs := func(i int) *verbsServer { return servers[i].sp.(*verbsServer) }
	require.Equal(t, 1, vs(0).queuePairs())
	require.Equal(t, 1, vs(1).queuePairs())
	require.NoError(t, m.Close())
	require.Eventually(t, func() bool { return vs(0).queuePairs() == 0 && vs(1).queuePairs() == 0 }, 5*time.Second, time.Millisecond)
	m2, err := f.Open(ctx, f.Hosted()[0])
	require.NoError(t, err)
	defer m2.Close()
	_, err = m2.FAA(ctx, farmem.MakeAddr(1, 1<<16), 1)
	require.NoError(t, err)
	require.Equal(t, 1, vs(0).queuePairs())
}

// A node that restarted at the same address has new memory: a client that knew the old one
// is fenced with ErrNodeLost, as on tcp, until it adopts the node.
func TestVerbsRestartedNodeRefusesStaleClients(t *testing.T) {
	servers, _, m := verbsFabric(t, "fakeverbs", 1)
	ctx := context.Background()
	a := farmem.MakeAddr(1, 1<<16)
	_, err := m.FAA(ctx, a, 1)
	require.NoError(t, err)
	restartFakeVerbsNode(t, servers[0])
	_, err = m.FAA(ctx, a, 1)
	require.ErrorIs(t, err, farmem.ErrNodeDown, "the old queue pair's node is gone")
	_, err = m.FAA(ctx, a, 1)
	require.ErrorIs(t, err, farmem.ErrNodeLost)
	require.NotErrorIs(t, err, farmem.ErrOutOfRange)
	require.NoError(t, m.(farmem.Restarts).Adopt(ctx, 1))
	prev, err := m.FAA(ctx, a, 1)
	require.NoError(t, err)
	require.Zero(t, prev, "the new incarnation's memory")
}

// A provider that is not built in says why.
func TestVerbsProviderNotBuilt(t *testing.T) {
	if _, ok := providers["ibverbs"]; ok {
		t.Skip("this build has the ibverbs provider")
	}
	_, err := NewServer(ServerOptions{Node: 1, Size: 1 << 20, Secret: testSecret, Provider: "ibverbs"})
	require.ErrorIs(t, err, farmem.ErrNotSupported)
	require.Contains(t, err.Error(), "-tags rdma")
	_, cl := startServers(t, 1, 1<<20)
	_, err = Dial(context.Background(), cl, Options{Secret: testSecret, Provider: "ibverbs", Logger: testLogger()})
	require.ErrorIs(t, err, farmem.ErrNotSupported)
}

// farmem.Restarts on the verbs provider: a queue pair made before the node restarted, whose
// setup meets the new process only after the fabric adopted it (through another client), fails
// what was posted to it with ErrNodeLost rather than carrying it to the new memory.
func TestVerbsPostedBeforeAdoptNeverReachesNewMemory(t *testing.T) {
	servers, f, late := verbsFabric(t, "fakeverbs", 1)
	ctx := context.Background()
	other, err := f.Open(ctx, f.Hosted()[0])
	require.NoError(t, err)
	defer other.Close()
	a := farmem.MakeAddr(1, 1<<16)
	for _, m := range []farmem.Memory{late, other} {
		_, err := m.FAA(ctx, a, 1)
		require.NoError(t, err)
	}
	c := late.(*client)
	p := c.f.peer(ctx, 1)
	require.NotNil(t, p)

	// late's next queue pair is made now, for the region key known now; its setup is held
	// back while the node restarts and the fabric adopts the new process.
	q := newVerbsQP(c.f.prov.(*verbsProvider), c, p)
	installQP(c, 1, q)
	done := faaAsync(ctx, late, a, 100)

	s2 := restartFakeVerbsNode(t, servers[0])
	_, err = other.FAA(ctx, a, 1)
	if errors.Is(err, farmem.ErrNodeDown) && !errors.Is(err, farmem.ErrNodeLost) {
		_, err = other.FAA(ctx, a, 1)
	}
	require.ErrorIs(t, err, farmem.ErrNodeLost, "the new incarnation fences the node")
	require.NoError(t, f.Adopt(ctx, 1))

	go q.setup() // meets the new process, which the fabric has adopted
	r := <-done
	require.ErrorIs(t, r.err, farmem.ErrNodeLost, "an FAA posted to the old incarnation reached the new memory (it returned %d)", r.v)
	require.Zero(t, binary.LittleEndian.Uint64(s2.s.reg.mapped[1<<16:]), "the new incarnation's memory was touched")

	v, err := late.FAA(ctx, a, 1)
	require.NoError(t, err, "a new queue pair reaches the adopted process")
	require.Zero(t, v)
	requireNoFakeViolations(t)
}

// restartFakeVerbsNode closes s, a memory node of 1 MiB on the fake verbs device, and starts a
// new process of it at the same address (closed at cleanup): new memory, a new incarnation.
func restartFakeVerbsNode(t *testing.T, s *Server) *Server {
	t.Helper()
	addr := s.Addr()
	require.NoError(t, s.Close())
	s2, err := NewServer(ServerOptions{Node: 1, Size: 1 << 20, Secret: testSecret, Logger: testLogger(), Provider: "fakeverbs"})
	require.NoError(t, err)
	t.Cleanup(func() { _ = s2.Close() })
	require.Eventually(t, func() bool { _, err := s2.Listen(addr); return err == nil }, 5*time.Second, 10*time.Millisecond)
	return s2
}
