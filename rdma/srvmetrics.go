package rdma

import (
	"github.com/farmem/farmem/farmem"
	"github.com/farmem/farmem/internal/wire"
)

// ServerMetrics is a snapshot of a memory node's counters, for an operator's monitoring (farmemd
// exports them in the Prometheus exposition format). Counters only grow over the node's life;
// gauges are the value at the snapshot. Taking one costs a few dozen atomic loads and the
// node's connection lock once.
type ServerMetrics struct {
	// ConnsAuthenticated and ConnsHandshaking are the open connections by state (gauges); the
	// first is bounded by ServerOptions.MaxConns, the second by ServerOptions.MaxUnauth.
	ConnsAuthenticated int
	ConnsHandshaking   int
	// Refused counts connections turned away or closed before they authenticated, by reason:
	// "busy" (at the connection limit), "evicted" (pushed out of the handshake budget by a
	// newer connection), "handshake_timeout", "protocol", "auth" (no secret), "wrong_node".
	Refused map[string]uint64
	// Violations counts connections closed for protocol errors after the handshake;
	// WriteTimeouts those closed because the client did not read its replies in time;
	// FrameTimeouts those closed because a large request's payload did not arrive in time.
	Violations, WriteTimeouts, FrameTimeouts uint64
	// AcceptErrors counts failed accepts the node recovered from (out of file descriptors).
	AcceptErrors uint64
	// Batches counts batch frames; BatchesRefused those refused whole, by reason: "bad_op" (an
	// op out of range, misaligned or with a stale key), "reply_too_large" and "expired" (it
	// arrived after the expiry its client set, which is past the time the client reports it
	// failed) and "unbound" (on a shared connection, for a channel not attached to a client).
	Batches        uint64
	BatchesRefused map[string]uint64
	// Ops counts applied verbs by kind ("read", "write", "cas", "faa", "mcas") and OpBytes their
	// data bytes (8 per atomic).
	Ops, OpBytes map[string]uint64
	// BytesIn and BytesOut count the traffic of authenticated connections.
	BytesIn, BytesOut uint64
	// OutputWriting is the reply bytes being written to clients right now (a gauge); the part
	// a client does not read stays here until it does or the write timeout closes it.
	OutputWriting int64
	// InputBuffered and OutputBuffered are the bytes of the node-wide budgets in use (gauges),
	// each at most BufferLimit; InputWaits and OutputWaits count the times a connection waited
	// for its budget (and stopped reading its client meanwhile).
	InputBuffered, OutputBuffered int64
	BufferLimit                   int64
	// InputKept and OutputKept are the bytes of idle buffers each budget keeps for reuse
	// (gauges): charged to the budget, at most a quarter of it, none while a connection waits.
	InputKept, OutputKept   int64
	InputWaits, OutputWaits uint64
	// RegionBytes is the size of the region the node serves.
	RegionBytes uint64
}

// Metrics returns a snapshot of the node's counters.
func (sv *Server) Metrics() ServerMetrics { return sv.s.metrics() }

func (s *srv) metrics() ServerMetrics {
	s.mu.Lock()
	m := ServerMetrics{ConnsAuthenticated: s.nAuth, ConnsHandshaking: len(s.unauth)}
	s.mu.Unlock()
	m.Refused = make(map[string]uint64, numRefuse)
	for r := range s.refusedBy {
		m.Refused[refuseNames[r]] = s.refusedBy[r].Load()
	}
	m.Violations, m.WriteTimeouts, m.FrameTimeouts = s.violations.Load(), s.writeTimeouts.Load(), s.frameTimeouts.Load()
	m.AcceptErrors = s.acceptErrs.Load()
	m.Batches = s.batches.Load()
	m.BatchesRefused = map[string]uint64{"bad_op": s.batchesBadOp.Load(), "reply_too_large": s.batchesTooBig.Load(), "expired": s.batchesLate.Load(),
		"unbound": s.batchesUnbound.Load()}
	m.Ops = make(map[string]uint64, farmem.NumOpKinds)
	m.OpBytes = make(map[string]uint64, farmem.NumOpKinds)
	for k := range farmem.NumOpKinds {
		m.Ops[k.String()] = s.kindOps[k].Load()
		m.OpBytes[k.String()] = s.kindBytes[k].Load()
	}
	m.BytesIn, m.BytesOut = s.bytesIn.Load(), s.bytesOut.Load()
	m.OutputWriting = s.writing.Load()
	m.InputBuffered, m.OutputBuffered = s.inBuf.inUse.Load(), s.outBuf.inUse.Load()
	m.BufferLimit = s.lim.maxBuffer
	m.InputKept, m.OutputKept = s.inBuf.keptB.Load(), s.outBuf.keptB.Load()
	m.InputWaits, m.OutputWaits = s.inBuf.waits.Load(), s.outBuf.waits.Load()
	m.RegionBytes = s.reg.size
	return m
}

// ErrReplyTooLarge: a memory node refused an op because its batch's results would exceed the
// frame limit the node announced; nothing of the batch was applied. A Fabric splits its batches
// so that it never sends such a batch; a client speaking the protocol by hand can. It wraps
// farmem.ErrInvalid.
var ErrReplyTooLarge = wire.ErrReplyTooLarge
