package farmem

import (
	"fmt"
	"strings"
	"sync/atomic"
)

// Target classifies the node a verb goes to.
type Target uint8

const (
	// TargetMemory is a memory node.
	TargetMemory Target = iota
	// TargetCompute is another compute node's region.
	TargetCompute
	// TargetLocal is the caller's own compute node's region. Verbs to it are counted, but a batch
	// that touches only it is not a round trip.
	TargetLocal
	// NumTargets is the number of targets.
	NumTargets
)

var targetNames = [NumTargets]string{"memory", "compute", "local"}

func (t Target) String() string {
	if t < NumTargets {
		return targetNames[t]
	}
	return fmt.Sprintf("target(%d)", uint8(t))
}

// TargetOf classifies node n as seen from a client on compute node self.
func TargetOf(n, self NodeID) Target {
	switch {
	case n == self:
		return TargetLocal
	case n.IsCompute():
		return TargetCompute
	}
	return TargetMemory
}

// Stats are the counted costs of a client (or, summed, of a fabric). Counting is deterministic:
// it depends only on the ops posted and their outcomes, never on timing.
type Stats struct {
	// RoundTrips counts batches (single verbs are one-op batches) with at least one signaled op
	// to a node other than the caller's own compute node, plus Calls. A batch is one round trip
	// however many nodes it reaches.
	RoundTrips uint64
	// Verbs counts ops by target and kind, signaled or not.
	Verbs [NumTargets][NumOpKinds]uint64
	// Unsignaled counts fire-and-forget ops (also counted in Verbs).
	Unsignaled uint64
	// BytesOut counts bytes sent: Write payloads and 8 bytes per atomic operand.
	BytesOut uint64
	// BytesIn counts bytes received: Read payloads and 8 bytes per atomic result.
	BytesIn uint64
	// FailedCAS counts CAS and MaskedCAS ops whose comparison failed.
	FailedCAS uint64
	// Calls counts Calls made; CallBytesOut and CallBytesIn their request and reply bytes.
	Calls                     uint64
	CallBytesOut, CallBytesIn uint64
	// Waits counts Wait calls.
	Waits uint64
}

// VerbsTo returns the number of verbs sent to target t.
func (s Stats) VerbsTo(t Target) uint64 {
	var n uint64
	for _, v := range s.Verbs[t] {
		n += v
	}
	return n
}

// VerbsOf returns the number of verbs of kind k, to any target.
func (s Stats) VerbsOf(k OpKind) uint64 {
	var n uint64
	for t := range NumTargets {
		n += s.Verbs[t][k]
	}
	return n
}

// TotalVerbs returns the number of verbs of every kind to every target.
func (s Stats) TotalVerbs() uint64 {
	var n uint64
	for t := range NumTargets {
		n += s.VerbsTo(t)
	}
	return n
}

// Add returns s + o, field by field.
func (s Stats) Add(o Stats) Stats {
	s.RoundTrips += o.RoundTrips
	for t := range NumTargets {
		for k := range NumOpKinds {
			s.Verbs[t][k] += o.Verbs[t][k]
		}
	}
	s.Unsignaled += o.Unsignaled
	s.BytesOut += o.BytesOut
	s.BytesIn += o.BytesIn
	s.FailedCAS += o.FailedCAS
	s.Calls += o.Calls
	s.CallBytesOut += o.CallBytesOut
	s.CallBytesIn += o.CallBytesIn
	s.Waits += o.Waits
	return s
}

// Sub returns s - o, field by field: the cost of what ran between two snapshots.
func (s Stats) Sub(o Stats) Stats {
	s.RoundTrips -= o.RoundTrips
	for t := range NumTargets {
		for k := range NumOpKinds {
			s.Verbs[t][k] -= o.Verbs[t][k]
		}
	}
	s.Unsignaled -= o.Unsignaled
	s.BytesOut -= o.BytesOut
	s.BytesIn -= o.BytesIn
	s.FailedCAS -= o.FailedCAS
	s.Calls -= o.Calls
	s.CallBytesOut -= o.CallBytesOut
	s.CallBytesIn -= o.CallBytesIn
	s.Waits -= o.Waits
	return s
}

// String renders the nonzero counters on one line.
func (s Stats) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "rtt=%d", s.RoundTrips)
	for t := range NumTargets {
		for k := range NumOpKinds {
			if v := s.Verbs[t][k]; v != 0 {
				fmt.Fprintf(&b, " %s.%s=%d", t, k, v)
			}
		}
	}
	for _, f := range []struct {
		name string
		v    uint64
	}{{"unsignaled", s.Unsignaled}, {"out", s.BytesOut}, {"in", s.BytesIn}, {"failedcas", s.FailedCAS},
		{"calls", s.Calls}, {"callout", s.CallBytesOut}, {"callin", s.CallBytesIn}, {"waits", s.Waits}} {
		if f.v != 0 {
			fmt.Fprintf(&b, " %s=%d", f.name, f.v)
		}
	}
	return b.String()
}

// Counters accumulate Stats from several goroutines (a client's own, and the completions a
// transport reports from elsewhere). The zero value is ready to use.
type Counters struct {
	roundTrips   atomic.Uint64
	verbs        [NumTargets][NumOpKinds]atomic.Uint64
	unsignaled   atomic.Uint64
	bytesOut     atomic.Uint64
	bytesIn      atomic.Uint64
	failedCAS    atomic.Uint64
	calls        atomic.Uint64
	callBytesOut atomic.Uint64
	callBytesIn  atomic.Uint64
	waits        atomic.Uint64
}

// CountBatch counts a batch posted by a client on compute node self: its verbs, bytes sent, and
// one round trip if any signaled op leaves self. Outcomes are counted by [Counters.CountResult].
func (c *Counters) CountBatch(b *Batch, self NodeID) {
	rt := false
	for i := range b.Ops {
		rt = c.countOp(&b.Ops[i], self) || rt
	}
	if rt {
		c.roundTrips.Add(1)
	}
}

// CountOp counts a one-op batch: the same as CountBatch of a batch holding only op.
func (c *Counters) CountOp(op *Op, self NodeID) {
	if c.countOp(op, self) {
		c.roundTrips.Add(1)
	}
}

// countOp counts op's verb and bytes sent, and reports whether it puts a round trip on the
// critical path.
func (c *Counters) countOp(op *Op, self NodeID) bool {
	t := TargetOf(op.Addr.Node(), self)
	if op.Kind < NumOpKinds {
		c.verbs[t][op.Kind].Add(1)
	}
	switch op.Kind {
	case OpWrite:
		c.bytesOut.Add(uint64(len(op.Buf)))
	case OpCAS, OpMaskedCAS:
		c.bytesOut.Add(16)
	case OpFAA:
		c.bytesOut.Add(8)
	}
	if op.Unsignaled {
		c.unsignaled.Add(1)
		return false
	}
	return t != TargetLocal
}

// CountResult counts an op's outcome: bytes received and failed comparisons. Ops that failed
// with an error, and unsignaled ops (no answer comes back), count nothing here.
func (c *Counters) CountResult(op *Op, val uint64, err error) {
	if err != nil || op.Unsignaled {
		return
	}
	switch op.Kind {
	case OpRead:
		c.bytesIn.Add(uint64(len(op.Buf)))
	case OpCAS, OpMaskedCAS:
		c.bytesIn.Add(8)
		if _, ok := op.Apply(val); !ok {
			c.failedCAS.Add(1)
		}
	case OpFAA:
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

// CountWait counts one Wait.
func (c *Counters) CountWait() { c.waits.Add(1) }

// Snapshot returns the current totals.
func (c *Counters) Snapshot() Stats {
	var s Stats
	s.RoundTrips = c.roundTrips.Load()
	for t := range NumTargets {
		for k := range NumOpKinds {
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
	return s
}
