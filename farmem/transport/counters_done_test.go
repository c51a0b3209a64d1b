package transport_test

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/farmem/farmem/farmem"
	"github.com/farmem/farmem/farmem/transport"
)

// TestCountDone: counting a completed batch at once gives the same Stats as counting it when
// posted and then each op's outcome, for batches of every verb, outcomes of every kind, local
// and remote targets, and unsignaled ops.
func TestCountDone(t *testing.T) {
	self := farmem.ComputeID(1).Node()
	mem, other := farmem.MakeAddr(1, 64), farmem.MakeAddr(self, 64)
	fail := errors.New("down")
	batches := map[string]func() *farmem.Batch{
		"reads": func() *farmem.Batch {
			var b farmem.Batch
			for _, n := range []int{128, 128, 8} {
				b.Read(mem, make([]byte, n))
			}
			return &b
		},
		"mixed": func() *farmem.Batch {
			var b farmem.Batch
			b.Write(mem, make([]byte, 40))
			b.Read(mem, make([]byte, 16))
			b.CAS(mem, 1, 2)
			b.CAS(mem, 3, 4)
			b.MaskedCAS(mem, 5, 0xff, 6, 0xff)
			b.FAA(mem, 9)
			b.Unsignaled(b.CAS(mem, 7, 8))
			b.Read(other, make([]byte, 24))
			return &b
		},
		"local only": func() *farmem.Batch {
			var b farmem.Batch
			b.Read(other, make([]byte, 24))
			b.Unsignaled(b.Write(mem, make([]byte, 8)))
			return &b
		},
	}
	for name, mk := range batches {
		t.Run(name, func(t *testing.T) {
			b := mk()
			// Outcomes: a CAS that swaps, one that does not, a MaskedCAS that does not, an op
			// that failed (counts no result).
			for i := range b.Ops {
				op := &b.Ops[i]
				var val uint64
				var err error
				switch {
				case op.Kind == farmem.OpCAS && op.Cmp == 1:
					val = 1
				case op.Kind == farmem.OpCAS && op.Cmp == 3:
					val = 0
				case op.Kind == farmem.OpMaskedCAS:
					val = 0x10
				case op.Kind == farmem.OpRead && len(op.Buf) == 16:
					err = fail
				}
				transport.SetResult(op, val, err)
			}
			var each, once transport.Counters
			each.CountBatch(b, self)
			for i := range b.Ops {
				val, err := b.Result(i)
				each.CountResult(&b.Ops[i], val, err)
			}
			once.CountDone(b, self)
			require.Equal(t, each.Snapshot(), once.Snapshot())
		})
	}
}
