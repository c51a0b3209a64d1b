// Package farmemtest is the conformance suite every transport runs: [Run] checks each numbered
// semantic of the farmem package doc, the fault behaviour of [transport.FaultInjector], Wait, Call,
// one-way messages (Send), the method namespace's registration rule, Close, and node quorums
// with a hung node (Pending.WaitNodes, the completion hook, posts to live nodes not held up, no
// late application of what was reported failed). A fault a transport cannot inject is skipped
// with the transport's reason, never
// passed.
//
// The suite starts concurrent work with the fabric's Runtime.Go and measures time with the
// fabric's clock, so it runs unchanged on the simulator, where the test goroutine calls into
// the simulated cluster while it waits for the goroutines it started there.
//
// [Interposer] serves the tests of the structures built on farmem: it shows a test each verb
// one client issues, so that the test can pause or crash that client at a chosen step of a
// protocol, or change what it read, without hooks in the structure's code.
package farmemtest

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/farmem/farmem/farmem"
	"github.com/farmem/farmem/farmem/transport"
)

// Config is the cluster a test asks the transport for.
type Config struct {
	// MemoryNodes memory nodes of MemorySize bytes each.
	MemoryNodes int
	MemorySize  uint64
	// ComputeNodes compute nodes, hosted by one fabric or spread over several.
	ComputeNodes int
	// DownTimeout is the down timeout the cluster's fabrics are to use. The suite sets it:
	// HealthyDownTimeout for a test that injects no fault, so that a healthy node on a loaded
	// machine is never declared down; FaultDownTimeout (or PartialWaitDownTimeout) for a test
	// that waits for a fault to be detected, so that it stays short. A transport in virtual time
	// may ignore it; its own timeout is then the one the suite checks against.
	DownTimeout time.Duration
}

// The down timeouts the suite gives its clusters (Config.DownTimeout). The bounds it checks are
// loose multiples of them plus seconds of slack: they prove that a fault is reported in bounded
// time (never a hang) on a machine ten times slower than an idle one, not how fast.
const (
	HealthyDownTimeout     = 10 * time.Second
	FaultDownTimeout       = time.Second
	PartialWaitDownTimeout = 2 * time.Second
)

// Cluster is what a transport hands the suite for one test.
type Cluster struct {
	// Fabrics are views of one cluster, each hosting at least one compute node; together they
	// host Config.ComputeNodes of them.
	Fabrics []farmem.Fabric
	// Faults injects faults, or is nil if the transport injects none.
	Faults transport.FaultInjector
	// TearsOnPurpose says the transport interleaves long accesses on purpose, so the suite
	// requires that it saw a torn read.
	TearsOnPurpose bool
	// TearingReads bounds the long reads the Tearing test makes while another client rewrites
	// the same words (0: DefaultTearingReads). The test stops sooner once it has checked
	// word by word enough reads that overlapped a write (TearingOverlaps; three on a
	// transport that tears on purpose). A run whose reads rarely overlap a write and whose
	// data path another run of the suite already drives at the default bound (a deployment in
	// separate processes of a server tested in process; a simulator that applies an access at
	// one instant unless its model tears) may lower it: what the reads check is the same.
	TearingReads int
}

// The Tearing test's bounds (Cluster.TearingReads). A read can tear only while a write to the
// same words is in flight, so the test's power lies in the reads that overlapped a write (a
// long read that saw two versions of the words), each checked word by word: it stops after
// TearingOverlaps of them, at the earliest after 200 reads, or after TearingReads reads on a
// transport where overlaps are rare.
const (
	DefaultTearingReads = 20000
	TearingOverlaps     = 100
)

// Open builds a fresh cluster for one test and registers its cleanup with t.
type Open func(t *testing.T, cfg Config) *Cluster

// DefaultConfig is the cluster most tests use.
var DefaultConfig = Config{MemoryNodes: 3, MemorySize: 1 << 20, ComputeNodes: 2}

// Run runs the conformance suite.
func Run(t *testing.T, open Open) {
	tests := []struct {
		name string
		fn   func(t *testing.T, open Open)
		down time.Duration // Config.DownTimeout
	}{
		{"Topology", testTopology, HealthyDownTimeout},
		{"BoundsAndAlignment", testBounds, HealthyDownTimeout},
		{"AtomicsTable", testAtomicsTable, HealthyDownTimeout},
		{"FAASum", testFAASum, HealthyDownTimeout},
		{"CASLoop", testCASLoop, HealthyDownTimeout},
		{"BatchOrder", testBatchOrder, HealthyDownTimeout},
		{"Tearing", testTearing, HealthyDownTimeout},
		{"Unsignaled", testUnsignaled, HealthyDownTimeout},
		{"ExactStats", testExactStats, HealthyDownTimeout},
		{"Wait", testWait, HealthyDownTimeout},
		{"Call", testCall, HealthyDownTimeout},
		{"Send", testSend, HealthyDownTimeout},
		{"HandleCollision", testHandleCollision, HealthyDownTimeout},
		{"Close", testClose, HealthyDownTimeout},
		{"FaultPartialWait", testPartialWait, PartialWaitDownTimeout},
		{"FaultQuorum", testQuorum, FaultDownTimeout},
		{"FaultCrash", testCrash, FaultDownTimeout},
		{"FaultHang", testHang, FaultDownTimeout},
		{"FaultPartition", testPartition, FaultDownTimeout},
		{"FaultCrashMidBatch", testCrashMidBatch, FaultDownTimeout},
		{"FaultCrashClient", testCrashClient, FaultDownTimeout},
		{"FaultComputeCrash", testComputeCrash, FaultDownTimeout},
	}
	for _, tc := range tests {
		withDown := func(t *testing.T, cfg Config) *Cluster {
			cfg.DownTimeout = tc.down
			return open(t, cfg)
		}
		t.Run(tc.name, func(t *testing.T) { tc.fn(t, withDown) })
	}
}

// env is one test's cluster with helpers.
type env struct {
	t  *testing.T
	cl *Cluster
	rt farmem.Runtime
	tp *farmem.Topology
}

func newEnv(t *testing.T, open Open, cfg Config) *env {
	t.Helper()
	cl := open(t, cfg)
	require.NotNil(t, cl)
	require.NotEmpty(t, cl.Fabrics)
	e := &env{t: t, cl: cl, rt: cl.Fabrics[0].Runtime(), tp: cl.Fabrics[0].Topology()}
	require.GreaterOrEqual(t, len(e.tp.MemoryNodes()), cfg.MemoryNodes, "memory nodes")
	require.GreaterOrEqual(t, len(e.hosted()), cfg.ComputeNodes, "hosted compute nodes")
	return e
}

type hostedNode struct {
	f  farmem.Fabric
	id farmem.NodeID
}

func (e *env) hosted() []hostedNode {
	var hs []hostedNode
	for _, f := range e.cl.Fabrics {
		for _, id := range f.Hosted() {
			hs = append(hs, hostedNode{f, id})
		}
	}
	return hs
}

// client opens a client on the i-th hosted compute node (modulo their number).
func (e *env) client(i int) farmem.Memory {
	e.t.Helper()
	hs := e.hosted()
	h := hs[i%len(hs)]
	m, err := h.f.Open(context.Background(), h.id)
	require.NoError(e.t, err)
	e.t.Cleanup(func() { _ = m.Close() })
	return m
}

// mem returns the address of offset off on the i-th memory node.
func (e *env) mem(i int, off uint64) farmem.Addr {
	return farmem.MakeAddr(e.tp.MemoryNodes()[i], off)
}

func (e *env) faults(t *testing.T) transport.FaultInjector {
	t.Helper()
	if e.cl.Faults == nil {
		t.Skip("the transport injects no faults")
	}
	return e.cl.Faults
}

// skipUnsupported skips the test if err says the transport cannot inject the fault.
func skipUnsupported(t *testing.T, err error) {
	t.Helper()
	if errors.Is(err, farmem.ErrNotSupported) {
		t.Skipf("fault not injectable on this transport: %v", err)
	}
	require.NoError(t, err)
}

// parallel runs fn(0..n-1) in goroutines started by the fabric's runtime and returns the
// errors they report, joined. It waits in fabric time, sleeping on the runtime's clock until
// they are done, not on a sync.WaitGroup: a simulated fabric advances its clock only while
// someone waits inside it.
func (e *env) parallel(n int, fn func(i int) error) error { return Parallel(e.rt, n, fn) }

// Parallel runs fn(0..n-1) in goroutines started by rt.Go and returns their errors, joined.
// The caller waits by sleeping in fabric time, never on a Go primitive, so a structure test
// that uses it runs unchanged, and deterministically, on the simulator as well as on real
// transports.
func Parallel(rt farmem.Runtime, n int, fn func(i int) error) error {
	var left atomic.Int64
	errs := make([]error, n)
	left.Store(int64(n))
	for i := range n {
		rt.Go(func() {
			defer left.Add(-1)
			errs[i] = fn(i)
		})
	}
	for left.Load() > 0 {
		_ = rt.Sleep(context.Background(), pollEvery)
	}
	return errors.Join(errs...)
}

// pollEvery is how often Parallel checks whether its goroutines are done.
const pollEvery = time.Millisecond

// ctx returns a context with a generous deadline in fabric time.
func (e *env) ctx() context.Context {
	ctx, cancel := e.rt.WithTimeout(context.Background(), time.Minute)
	e.t.Cleanup(cancel)
	return ctx
}

// downBound is how long after an op starts ErrNodeDown may arrive at the latest: twice the
// down timeout and five seconds of slack for a loaded machine. It bounds the report (no hang),
// it does not time it.
func (e *env) downBound() time.Duration {
	return 2*e.tp.DownTimeout + 5*time.Second
}

func word(b []byte) uint64 {
	var v uint64
	for i := 7; i >= 0; i-- {
		v = v<<8 | uint64(b[i])
	}
	return v
}

func putWord(b []byte, v uint64) {
	for i := range 8 {
		b[i] = byte(v >> (8 * i))
	}
}

func words(vs ...uint64) []byte {
	b := make([]byte, 8*len(vs))
	for i, v := range vs {
		putWord(b[8*i:], v)
	}
	return b
}

func errIs(err, target error) error {
	if !errors.Is(err, target) {
		return fmt.Errorf("got error %v, want %v", err, target)
	}
	return nil
}
