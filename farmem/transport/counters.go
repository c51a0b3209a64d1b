package transport

import (
	"sync/atomic"

	"github.com/farmem/farmem/farmem"
)

// TargetOf classifies node n as seen from a client on compute node self.
func TargetOf(n, self farmem.NodeID) farmem.Target {
	switch {
	case n == self:
		return farmem.TargetLocal
	case n.IsCompute():
		return farmem.TargetCompute
	}
	return farmem.TargetMemory
}

// Counters accumulate farmem.Stats from several goroutines (a client's own, and the completions a
// transport reports from elsewhere). The zero value is ready to use.
type Counters struct {
	roundTrips   atomic.Uint64
	verbs        [farmem.NumTargets][farmem.NumOpKinds]atomic.Uint64
	unsignaled   atomic.Uint64
	bytesOut     atomic.Uint64
	bytesIn      atomic.Uint64
	failedCAS    atomic.Uint64
	calls        atomic.Uint64
	callBytesOut atomic.Uint64
	callBytesIn  atomic.Uint64
	waits        atomic.Uint64
	messages     atomic.Uint64
	messageBytes atomic.Uint64
	messageFails atomic.Uint64
}

// CountBatch counts a batch posted by a client on compute node self: its verbs, bytes sent, and
// one round trip if any signaled op leaves self. Outcomes are counted by [Counters.CountResult].
func (c *Counters) CountBatch(b *farmem.Batch, self farmem.NodeID) {
	rt := false
	for i := range b.Ops {
		rt = c.countOp(&b.Ops[i], self) || rt
	}
	if rt {
		c.roundTrips.Add(1)
	}
}

// CountOp counts a one-op batch: the same as CountBatch of a batch holding only op.
func (c *Counters) CountOp(op *farmem.Op, self farmem.NodeID) {
	if c.countOp(op, self) {
		c.roundTrips.Add(1)
	}
}

// countOp counts op's verb and bytes sent, and reports whether it puts a round trip on the
// critical path.
func (c *Counters) countOp(op *farmem.Op, self farmem.NodeID) bool {
	t := TargetOf(op.Addr.Node(), self)
	if op.Kind < farmem.NumOpKinds {
		c.verbs[t][op.Kind].Add(1)
	}
	switch op.Kind {
	case farmem.OpWrite:
		c.bytesOut.Add(uint64(len(op.Buf)))
	case farmem.OpCAS, farmem.OpMaskedCAS:
		c.bytesOut.Add(16)
	case farmem.OpFAA:
		c.bytesOut.Add(8)
	}
	if op.Unsignaled {
		c.unsignaled.Add(1)
		return false
	}
	return t != farmem.TargetLocal
}

// CountResult counts an op's outcome: bytes received and failed comparisons. Ops that failed
// with an error, and unsignaled ops (no answer comes back), count nothing here.
func (c *Counters) CountResult(op *farmem.Op, val uint64, err error) {
	if err != nil || op.Unsignaled {
		return
	}
	switch op.Kind {
	case farmem.OpRead:
		c.bytesIn.Add(uint64(len(op.Buf)))
	case farmem.OpCAS, farmem.OpMaskedCAS:
		c.bytesIn.Add(8)
		if _, ok := Apply(op, val); !ok {
			c.failedCAS.Add(1)
		}
	case farmem.OpFAA:
		c.bytesIn.Add(8)
	}
}

// CountCall counts one Call with its request and reply sizes; it is one round trip.
func (c *Counters) CountCall(reqBytes, replyBytes int) {
	c.roundTrips.Add(1)
	c.calls.Add(1)
	c.callBytesOut.Add(uint64(reqBytes))
	c.callBytesIn.Add(uint64(replyBytes))
}

// AddRoundTrips counts n more critical-path round trips that a transport spent beyond the one
// CountBatch or CountOp counted for a batch: a provider without masked atomics counts each
// retry of its MaskedCAS compare-and-swap loop here.
func (c *Counters) AddRoundTrips(n uint64) { c.roundTrips.Add(n) }

// CountMessage counts one one-way message sent with its request size; it is no round trip.
func (c *Counters) CountMessage(reqBytes int) {
	c.messages.Add(1)
	c.messageBytes.Add(uint64(reqBytes))
}

// CountMessageFailure counts, on the callee's handler client, a message whose handler failed
// or that found no handler.
func (c *Counters) CountMessageFailure() { c.messageFails.Add(1) }

// CountWait counts one Wait.
func (c *Counters) CountWait() { c.waits.Add(1) }

// Snapshot returns the current totals.
func (c *Counters) Snapshot() farmem.Stats {
	var s farmem.Stats
	s.RoundTrips = c.roundTrips.Load()
	for t := range farmem.NumTargets {
		for k := range farmem.NumOpKinds {
			s.Verbs[t][k] = c.verbs[t][k].Load()
		}
	}
	s.Unsignaled = c.unsignaled.Load()
	s.BytesOut = c.bytesOut.Load()
	s.BytesIn = c.bytesIn.Load()
	s.FailedCAS = c.failedCAS.Load()
	s.Calls = c.calls.Load()
	s.CallBytesOut = c.callBytesOut.Load()
	s.CallBytesIn = c.callBytesIn.Load()
	s.Waits = c.waits.Load()
	s.Messages = c.messages.Load()
	s.MessageBytes = c.messageBytes.Load()
	s.MessageFailures = c.messageFails.Load()
	return s
}
