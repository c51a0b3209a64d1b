package farmem

import (
	"fmt"
	"strings"
)

// Target classifies the node a verb goes to. Stats.String names the targets memory, compute
// and local.
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
	// Messages counts one-way messages sent (Send), and MessageBytes their request bytes. A
	// message is no round trip.
	Messages, MessageBytes uint64
	// MessageFailures counts, on the callee, messages whose handler failed or that found no
	// handler: it is kept in the Stats of the handler client that took the message (a
	// fabric's Stats include it), since the sender never learns.
	MessageFailures uint64
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
	s.Messages += o.Messages
	s.MessageBytes += o.MessageBytes
	s.MessageFailures += o.MessageFailures
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
	s.Messages -= o.Messages
	s.MessageBytes -= o.MessageBytes
	s.MessageFailures -= o.MessageFailures
	return s
}

// String renders the nonzero counters on one line.
func (s Stats) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "rtt=%d", s.RoundTrips)
	for t := range NumTargets {
		for k := range NumOpKinds {
			if v := s.Verbs[t][k]; v != 0 {
				fmt.Fprintf(&b, " %s.%s=%d", targetNames[t], k, v)
			}
		}
	}
	for _, f := range []struct {
		name string
		v    uint64
	}{{"unsignaled", s.Unsignaled}, {"out", s.BytesOut}, {"in", s.BytesIn}, {"failedcas", s.FailedCAS},
		{"calls", s.Calls}, {"callout", s.CallBytesOut}, {"callin", s.CallBytesIn}, {"waits", s.Waits},
		{"msgs", s.Messages}, {"msgout", s.MessageBytes}, {"msgfail", s.MessageFailures}} {
		if f.v != 0 {
			fmt.Fprintf(&b, " %s=%d", f.name, f.v)
		}
	}
	return b.String()
}
