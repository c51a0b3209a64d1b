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
