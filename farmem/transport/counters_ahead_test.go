package transport_test

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/farmem/farmem/farmem"
	"github.com/farmem/farmem/farmem/transport"
)

// TestCountAhead: a batch of reads and writes counted before it runs, with the failed reads
// taken back after, gives CountDone's Stats, with and without failures, local and remote
// targets and unsignaled ops; a batch holding an atomic is not counted ahead.
func TestCountAhead(t *testing.T) {
	self := farmem.ComputeID(1).Node()
	mem, local := farmem.MakeAddr(1, 64), farmem.MakeAddr(self, 64)
	fail := errors.New("down")
	mk := func() *farmem.Batch {
		var b farmem.Batch
		b.Write(mem, make([]byte, 40))
		b.Read(mem, make([]byte, 128))
		b.Read(mem, make([]byte, 16))
		b.Unsignaled(b.Read(mem, make([]byte, 8)))
		b.Read(local, make([]byte, 24))
		b.Unsignaled(b.Write(local, make([]byte, 8)))
		return &b
	}
	for _, failing := range []int{-1, 1, 2, 3, 4} {
		b := mk()
		var ahead, done transport.Counters
		require.True(t, ahead.CountAhead(b, self))
		anyFailed := false
		for i := range b.Ops {
			var err error
			if i == failing {
				err = fail
				anyFailed = anyFailed || !b.Ops[i].Unsignaled
			}
			transport.SetResult(&b.Ops[i], 0, err)
		}
		if anyFailed {
			ahead.UncountFailed(b)
		}
		done.CountDone(b, self)
		require.Equal(t, done.Snapshot(), ahead.Snapshot(), "failing op %d", failing)
	}
	var b farmem.Batch
	b.Read(mem, make([]byte, 8))
	b.CAS(mem, 1, 2)
	var c transport.Counters
	require.False(t, c.CountAhead(&b, self))
	require.Equal(t, farmem.Stats{}, c.Snapshot())
}

// A one-op batch (counted ahead through the lone counter) gives CountDone's Stats too: reads
// and writes, to a memory node, another compute node and self, signaled or not, failed or not.
func TestCountAheadOneOp(t *testing.T) {
	self := farmem.ComputeID(1).Node()
	targets := []farmem.Addr{farmem.MakeAddr(1, 64), farmem.MakeAddr(farmem.ComputeID(2).Node(), 64),
		farmem.MakeAddr(self, 64)}
	for _, a := range targets {
		for _, write := range []bool{false, true} {
			for _, unsignaled := range []bool{false, true} {
				for _, failed := range []bool{false, true} {
					var b farmem.Batch
					if write {
						b.Write(a, make([]byte, 40))
					} else {
						b.Read(a, make([]byte, 56))
					}
					b.Ops[0].Unsignaled = unsignaled
					var ahead, done transport.Counters
					require.True(t, ahead.CountAhead(&b, self))
					var err error
					if failed {
						err = errors.New("down")
					}
					transport.SetResult(&b.Ops[0], 0, err)
					if failed && !unsignaled {
						ahead.UncountFailed(&b)
					}
					done.CountDone(&b, self)
					require.Equal(t, done.Snapshot(), ahead.Snapshot(), "%v write %v unsignaled %v failed %v",
						a, write, unsignaled, failed)
				}
			}
		}
	}
}

// CountTally, given the tally of a plain batch (signaled verbs of memory nodes), then the
// failed comparisons and, if an op failed, UncountFailed, counts what CountDone counts for it
// once run: one op of each kind, several of one, a mix, none; every op succeeding, comparisons
// that do not swap, ops failing with an error.
func TestCountTally(t *testing.T) {
	self := farmem.ComputeID(1).Node()
	mem, other := farmem.MakeAddr(1, 64), farmem.MakeAddr(2, 128)
	fail := errors.New("down")
	all := []farmem.OpKind{farmem.OpRead, farmem.OpWrite, farmem.OpCAS, farmem.OpFAA, farmem.OpMaskedCAS}
	shapes := [][]farmem.OpKind{{}, {farmem.OpRead, farmem.OpRead}, {farmem.OpWrite, farmem.OpRead, farmem.OpRead},
		{farmem.OpWrite, farmem.OpCAS}, all, {farmem.OpCAS, farmem.OpMaskedCAS, farmem.OpCAS, farmem.OpFAA, farmem.OpRead}}
	for _, k := range all {
		shapes = append(shapes, []farmem.OpKind{k})
	}
	for _, shape := range shapes {
		// outcome 0: all succeed and swap; 1: comparisons fail; 2 and up: op outcome-2 fails.
		for outcome := 0; outcome < 2+len(shape); outcome++ {
			var b farmem.Batch
			var tally transport.Tally
			for i, k := range shape {
				n := 8 * (i + 1)
				a := mem
				if i%2 == 1 {
					a = other
				}
				switch k {
				case farmem.OpRead:
					b.Read(a, make([]byte, n))
					tally.Read(uint64(n))
				case farmem.OpWrite:
					b.Write(a, make([]byte, n))
					tally.Write(uint64(n))
				case farmem.OpCAS:
					b.CAS(a, 5, 6)
					tally.Atomic(k)
				case farmem.OpFAA:
					b.FAA(a, 1)
					tally.Atomic(k)
				case farmem.OpMaskedCAS:
					b.MaskedCAS(a, 5, 0xf, 6, 0xf)
					tally.Atomic(k)
				}
			}
			var tallied, done transport.Counters
			tallied.CountTally(&tally)
			var failed uint64
			anyFailed := false
			for i := range b.Ops {
				op := &b.Ops[i]
				val, err := uint64(5), error(nil)
				if outcome == 1 {
					val = 9
				}
				if outcome == 2+i {
					val, err = 0, fail
					anyFailed = true
				}
				if _, ok := transport.Apply(op, val); !ok && err == nil && op.Kind >= farmem.OpCAS {
					failed++
				}
				transport.SetResult(op, val, err)
			}
			tallied.CountFailedCAS(failed)
			if anyFailed {
				tallied.UncountFailed(&b)
			}
			done.CountDone(&b, self)
			require.Equal(t, done.Snapshot(), tallied.Snapshot(), "batch %v, outcome %d", shape, outcome)
		}
	}
}

// CountLone counts a signaled verb of a memory node as CountOp then CountResult do: every kind,
// succeeded, failed with an error, and a CAS that did not swap.
func TestCountLone(t *testing.T) {
	self := farmem.ComputeID(1).Node()
	a := farmem.MakeAddr(2, 64)
	ops := []farmem.Op{
		{Kind: farmem.OpRead, Addr: a, Buf: make([]byte, 24)},
		{Kind: farmem.OpWrite, Addr: a, Buf: make([]byte, 40)},
		{Kind: farmem.OpCAS, Addr: a, Cmp: 3, Swap: 4},
		{Kind: farmem.OpMaskedCAS, Addr: a, Cmp: 3, CmpMask: 0xff, Swap: 4, SwapMask: 0xff},
		{Kind: farmem.OpFAA, Addr: a, Swap: 1},
	}
	for _, op := range ops {
		for _, val := range []uint64{3, 9} {
			for _, err := range []error{nil, errors.New("down")} {
				var lone, general transport.Counters
				lone.CountLone(&op, val, err)
				general.CountOp(&op, self)
				general.CountResult(&op, val, err)
				require.Equal(t, general.Snapshot(), lone.Snapshot(), "%v found %d, err %v", op.Kind, val, err)
			}
		}
	}
}
