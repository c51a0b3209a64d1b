package kvstore_test

import (
	"testing"
	"time"

	"github.com/farmem/farmem/farmem"
	"github.com/farmem/farmem/farmem/local"
	"github.com/farmem/farmem/kvstore"
	"github.com/farmem/farmem/kvstore/kvstoretest"
)

// quietAlloc are allocator options under which pins cost no round trip (kvstoretest.QuietAlloc).
var quietAlloc = kvstoretest.QuietAlloc

// newLocal starts a strict local fabric, checked and closed at cleanup (kvstoretest.NewLocal).
func newLocal(t testing.TB, lo local.Options) *local.Fabric {
	t.Helper()
	return kvstoretest.NewLocal(t, lo)
}

// openStore opens a store on f and closes it at cleanup (kvstoretest.OpenStore).
func openStore(t testing.TB, f farmem.Fabric, o kvstore.Options) *kvstore.Store {
	t.Helper()
	return kvstoretest.OpenStore(t, f, o)
}

// key returns the key of index i: "key" and 8 big-endian bytes (kvstoretest.Key).
func key(i uint64) []byte { return kvstoretest.Key(i) }

// val returns a value of n bytes (at least 8) carrying v in its first 8 (kvstoretest.Val).
func val(v uint64, n int) []byte { return kvstoretest.Val(v, n) }

// unval returns the v a value of val carries, checking the rest of it (kvstoretest.Unval).
func unval(b []byte) (uint64, error) { return kvstoretest.Unval(b) }

// crashedSim is a store's run on the simulator with memory nodes crashing mid-run, checked
// twice (kvstoretest.CrashedSim, under the field names of the tests that use it).
type crashedSim struct {
	memNodes int
	memSize  uint64
	opts     kvstore.Options
	down     []farmem.NodeID
	gap      time.Duration
	ops      int
	strict   bool
}

func (c crashedSim) check(t *testing.T) {
	t.Helper()
	kvstoretest.CrashedSim{MemNodes: c.memNodes, MemSize: c.memSize, Opts: c.opts, Down: c.down,
		Gap: c.gap, Ops: c.ops, Strict: c.strict}.Check(t)
}
