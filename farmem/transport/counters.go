package transport

import (
	"sync/atomic"

	"github.com/farmem/farmem/atomics"
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
// transport reports from elsewhere). The zero value is ready to use. The methods that count a
// batch the client's own goroutine runs inline (CountAhead, CountReads, CountDone,
// UncountFailed) must be called only from that goroutine: they count without locked
// instructions (see own).
type Counters struct {
	roundTrips atomic.Uint64
	verbs      [farmem.NumTargets][farmem.NumOpKinds]atomic.Uint64
	// lone counts, per target and kind, batches of one signaled op that leaves the compute
	// node: each is one verb and one round trip, which Snapshot adds to both, so that counting
	// such a batch (every single verb, and most pipelined posts) takes one atomic addition
	// where verbs and roundTrips would take two.
	lone         [farmem.NumTargets][farmem.NumOpKinds]atomic.Uint64
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

	// own holds what the client's own goroutine counts of the batches it runs inline, the
	// ones CountAhead, CountReads, CountDone and UncountFailed count (a transport calls them
	// only there, and a farmem.Memory is one goroutine's), added with atomics.AddOwned: a
	// plain load and store where the shared counters above take a locked addition, a full
	// fence, each. Snapshot adds them in.
	own ownCounts
}

// ownCounts are the counters of Counters.own, words of one writer that any goroutine may load.
type ownCounts struct {
	roundTrips                               uint64
	verbs, lone                              [farmem.NumTargets][farmem.NumOpKinds]uint64
	unsignaled, bytesOut, bytesIn, failedCAS uint64
	// plain counts the plain batches CountTally counts (verbs of memory nodes): words 0 to
	// NumOpKinds-1 are verbs by kind, then the round trips and the bytes in and out.
	plain [plainWords]uint64
}

// The words of ownCounts.plain and of a Tally after the verbs by kind.
const (
	plainRoundTrips = int(farmem.NumOpKinds) + iota
	plainBytesIn
	plainBytesOut
	plainWords
)

// A Tally is added with atomics.AddOwned8.
var _ [8 - plainWords]struct{}
var _ [plainWords - 8]struct{}

// add adds n to w, one of o's words.
func (o *ownCounts) add(w *uint64, n uint64) { atomics.AddOwned(w, n) }

// CountBatch counts a batch posted by a client on compute node self: its verbs, bytes sent, and
// one round trip if any signaled op leaves self. Outcomes are counted by [Counters.CountResult].
func (c *Counters) CountBatch(b *farmem.Batch, self farmem.NodeID) {
	if len(b.Ops) == 1 {
		c.CountOp(&b.Ops[0], self)
		return
	}
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
	t := TargetOf(op.Addr.Node(), self)
	if op.Unsignaled || t == farmem.TargetLocal || op.Kind >= farmem.NumOpKinds {
		if c.countOp(op, self) {
			c.roundTrips.Add(1)
		}
		return
	}
	c.lone[t][op.Kind].Add(1)
	c.countBytesOut(op)
}

// countBytesOut counts the bytes op sends: a Write's data, an atomic's operands.
func (c *Counters) countBytesOut(op *farmem.Op) {
	switch op.Kind {
	case farmem.OpWrite:
		c.bytesOut.Add(uint64(len(op.Buf)))
	case farmem.OpCAS, farmem.OpMaskedCAS:
		c.bytesOut.Add(16)
	case farmem.OpFAA:
		c.bytesOut.Add(8)
	}
}

// countOp counts op's verb and bytes sent, and reports whether it puts a round trip on the
// critical path.
func (c *Counters) countOp(op *farmem.Op, self farmem.NodeID) bool {
	t := TargetOf(op.Addr.Node(), self)
	if op.Kind < farmem.NumOpKinds {
		c.verbs[t][op.Kind].Add(1)
	}
	c.countBytesOut(op)
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

// ResultBytes is what CountResult adds to the bytes received for op if it succeeds: its
// buffer for a signaled read, 8 for a signaled atomic, else 0.
func ResultBytes(op *farmem.Op) uint64 {
	if op.Unsignaled {
		return 0
	}
	switch op.Kind {
	case farmem.OpRead:
		return uint64(len(op.Buf))
	case farmem.OpCAS, farmem.OpMaskedCAS, farmem.OpFAA:
		return 8
	}
	return 0
}

// ReceiveAhead counts n bytes received ahead of the outcomes of the ops they belong to: a
// transport that completes a run of answers together adds their [ResultBytes] once, before it
// completes any of them, and then counts each op's outcome with [Counters.CountResultAhead]
// before completing it, so that an op's bytes are counted by the time its waiter sees it done,
// with one atomic addition per run instead of one per op.
func (c *Counters) ReceiveAhead(n uint64) {
	if n != 0 {
		c.bytesIn.Add(n)
	}
}

// CountResultAhead counts the outcome of an op whose ResultBytes ReceiveAhead counted: a
// failure takes them back, a failed comparison is counted; a success of anything else counts
// nothing more (no atomic operation).
func (c *Counters) CountResultAhead(op *farmem.Op, val uint64, err error) {
	if op.Unsignaled {
		return
	}
	if err != nil {
		if n := ResultBytes(op); n != 0 {
			c.bytesIn.Add(-n)
		}
		return
	}
	if op.Kind == farmem.OpCAS || op.Kind == farmem.OpMaskedCAS {
		if _, ok := Apply(op, val); !ok {
			c.failedCAS.Add(1)
		}
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
	o := &c.own
	s.RoundTrips = c.roundTrips.Load() + atomic.LoadUint64(&o.roundTrips)
	for t := range farmem.NumTargets {
		for k := range farmem.NumOpKinds {
			lone := c.lone[t][k].Load() + atomic.LoadUint64(&o.lone[t][k])
			s.Verbs[t][k] = c.verbs[t][k].Load() + atomic.LoadUint64(&o.verbs[t][k]) + lone
			s.RoundTrips += lone
		}
	}
	for k := range farmem.NumOpKinds {
		s.Verbs[farmem.TargetMemory][k] += atomic.LoadUint64(&o.plain[k])
	}
	s.RoundTrips += atomic.LoadUint64(&o.plain[plainRoundTrips])
	s.Unsignaled = c.unsignaled.Load() + atomic.LoadUint64(&o.unsignaled)
	s.BytesOut = c.bytesOut.Load() + atomic.LoadUint64(&o.bytesOut) + atomic.LoadUint64(&o.plain[plainBytesOut])
	// The plain bytes in are loaded after own.bytesIn, from which UncountFailed takes back a
	// plain batch's lost bytes once they were added to plain: the sum never runs ahead of them.
	s.BytesIn = c.bytesIn.Load() + atomic.LoadUint64(&o.bytesIn) + atomic.LoadUint64(&o.plain[plainBytesIn])
	s.FailedCAS = c.failedCAS.Load() + atomic.LoadUint64(&o.failedCAS)
	s.Calls = c.calls.Load()
	s.CallBytesOut = c.callBytesOut.Load()
	s.CallBytesIn = c.callBytesIn.Load()
	s.Waits = c.waits.Load()
	s.Messages = c.messages.Load()
	s.MessageBytes = c.messageBytes.Load()
	s.MessageFailures = c.messageFails.Load()
	return s
}
