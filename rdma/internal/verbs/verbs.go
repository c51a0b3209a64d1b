// Package verbs is the queue-pair logic of the rdma package's ibverbs provider, in pure Go,
// over a thin device layer (Device, DevQP) that package rdma/internal/ibv implements with cgo
// over rdma-core's libibverbs and that FakeNet implements in Go for tests without a NIC.
//
// A QP is one client's reliable-connected (RC) queue pair to one memory node. It turns
// farmem ops into work requests (WR) — RDMA READ, RDMA WRITE, ATOMIC_CMP_AND_SWP and
// ATOMIC_FETCH_AND_ADD, one per op — and:
//
//   - chains the work requests of a batch and posts the chain with one device call (one
//     doorbell), unless the send queue or the staging ring fills first;
//   - sets IBV_SEND_FENCE on a work request that must observe an earlier READ or atomic still
//     in flight: a WRITE or atomic after a READ or atomic, and a READ after an atomic (a READ
//     after a READ, and anything after a WRITE, needs none: an RC queue pair executes them in
//     order);
//   - signals only what it must: the last work request of a chain holding an op somebody
//     waits for, a MaskedCAS attempt, and — so the send queue and the staging ring are always
//     recycled — at least every Config.SignalEvery work requests and every half ring of
//     staging; RC completions arrive in posting order, so one completion retires every work
//     request before it;
//   - polls completions up to Config.PollBatch at a time with one device call;
//   - stages every local buffer in memory the device registered (never the Go heap): a ring
//     of Config.Staging bytes, and a one-off registration for ops larger than a quarter of
//     it;
//   - fails its outstanding work with farmem.ErrNodeDown if nothing completes for
//     Config.DownTimeout, and maps error completions to farmem errors.
//
// MaskedCAS has no verb in upstream libibverbs. With a full compare mask it is one CAS, with
// an empty swap mask one FETCH_AND_ADD of 0; otherwise it is a CAS loop: the first attempt
// guesses that the word's bits outside the compare mask are those of the compare value, and
// each retry (the word differed only outside the mask) is one more round trip, reported to
// Config.OnExtraRoundTrip. Until the loop has settled nothing posted after it is sent, so
// later ops still observe it; if its own batch had ops after it that somebody waits for,
// sending them costs one more round trip, reported likewise.
package verbs

import (
	"errors"
	"fmt"
	"time"

	"github.com/farmem/farmem/farmem"
	"github.com/farmem/farmem/internal/wire"
)

// Opcode is a work request's operation.
type Opcode uint32

// Opcodes; the device layer maps them to IBV_WR_*.
const (
	OpRead  Opcode = 1 // IBV_WR_RDMA_READ
	OpWrite Opcode = 2 // IBV_WR_RDMA_WRITE
	OpCAS   Opcode = 3 // IBV_WR_ATOMIC_CMP_AND_SWP
	OpFAA   Opcode = 4 // IBV_WR_ATOMIC_FETCH_AND_ADD
)

func (o Opcode) String() string {
	switch o {
	case OpRead:
		return "READ"
	case OpWrite:
		return "WRITE"
	case OpCAS:
		return "CMP_AND_SWP"
	case OpFAA:
		return "FETCH_AND_ADD"
	}
	return fmt.Sprintf("opcode(%d)", uint32(o))
}

// IsAtomic reports whether o is an 8-byte atomic.
func (o Opcode) IsAtomic() bool { return o == OpCAS || o == OpFAA }

// Work request flags; the device layer maps them to IBV_SEND_*.
const (
	FlagSignaled uint32 = 1 << 0 // IBV_SEND_SIGNALED: a completion is generated
	FlagFence    uint32 = 1 << 1 // IBV_SEND_FENCE: wait for earlier READs and atomics
	FlagInline   uint32 = 1 << 2 // IBV_SEND_INLINE: the data is copied at post time
)

// WR is one work request as the device layer receives it. It holds no Go pointers, so a slice
// of them may be handed to C; its layout (56 bytes) is mirrored by the C side.
type WR struct {
	// ID is the work request's id (wr_id): its sequence number on its queue pair.
	ID     uint64
	Opcode Opcode
	Flags  uint32
	// LAddr, Len and LKey are the local buffer (one scatter-gather entry; none when Len is 0).
	LAddr uint64
	Len   uint32
	LKey  uint32
	// RAddr and RKey are the remote address and its region's key.
	RAddr uint64
	RKey  uint32
	_     uint32
	// Compare is CMP_AND_SWP's compare value and FETCH_AND_ADD's addend; Swap is
	// CMP_AND_SWP's new value.
	Compare uint64
	Swap    uint64
}

// Signaled reports whether the work request generates a completion.
func (w *WR) Signaled() bool { return w.Flags&FlagSignaled != 0 }

// Fenced reports whether the work request carries IBV_SEND_FENCE.
func (w *WR) Fenced() bool { return w.Flags&FlagFence != 0 }

// Status is a work completion's status; its values are those of enum ibv_wc_status.
type Status uint32

// Completion statuses (enum ibv_wc_status).
const (
	StatusSuccess       Status = 0
	StatusLocLenErr     Status = 1
	StatusLocQPOpErr    Status = 2
	StatusLocEECOpErr   Status = 3
	StatusLocProtErr    Status = 4
	StatusWRFlushErr    Status = 5
	StatusMWBindErr     Status = 6
	StatusBadRespErr    Status = 7
	StatusLocAccessErr  Status = 8
	StatusRemInvReqErr  Status = 9
	StatusRemAccessErr  Status = 10
	StatusRemOpErr      Status = 11
	StatusRetryExcErr   Status = 12
	StatusRNRRetryExc   Status = 13
	StatusLocRDDViolErr Status = 14
	StatusRemInvRdReq   Status = 15
	StatusRemAbortErr   Status = 16
	StatusInvEECNErr    Status = 17
	StatusInvEECState   Status = 18
	StatusFatalErr      Status = 19
	StatusRespTimeout   Status = 20
	StatusGeneralErr    Status = 21
)

var statusNames = [...]string{"success", "local length error", "local QP operation error",
	"local EE context operation error", "local protection error", "work request flushed",
	"memory window bind error", "bad response", "local access error", "remote invalid request",
	"remote access error", "remote operation error", "transport retry counter exceeded",
	"RNR retry counter exceeded", "local RDD violation", "remote invalid RD request",
	"remote aborted", "invalid EE context number", "invalid EE context state", "fatal error",
	"response timeout", "general error"}

func (s Status) String() string {
	if int(s) < len(statusNames) {
		return statusNames[s]
	}
	return fmt.Sprintf("status(%d)", uint32(s))
}

// ErrBadKey is what an op gets when the node refused its region key (a remote access error
// after every bound was checked before posting: the node restarted and registered new
// memory). It is the tcp provider's error for the same case (wire.ErrBadKey) and wraps
// farmem.ErrOutOfRange.
var ErrBadKey = wire.ErrBadKey

// Err maps a failed completion's status to a farmem error: a remote access error to
// ErrBadKey, an invalid request to ErrInvalid, and everything that means the node or the
// path to it failed (retries exhausted, flushes, timeouts) to ErrNodeDown.
func (s Status) Err() error {
	switch s {
	case StatusSuccess:
		return nil
	case StatusRemAccessErr:
		return fmt.Errorf("verbs: %v: %w", s, ErrBadKey)
	case StatusRemInvReqErr, StatusLocLenErr, StatusLocQPOpErr, StatusLocProtErr, StatusLocAccessErr, StatusRemInvRdReq:
		return fmt.Errorf("verbs: %v: %w", s, farmem.ErrInvalid)
	}
	return fmt.Errorf("verbs: %v: %w", s, farmem.ErrNodeDown)
}

// WC is one work completion as the device layer reports it (16 bytes, mirrored by C).
type WC struct {
	ID        uint64
	Status    Status
	VendorErr uint32
}

// Endpoint is what a peer needs to connect a queue pair to this one; it crosses the control
// connection as JSON.
type Endpoint struct {
	QPN uint32 `json:"qpn"`
	PSN uint32 `json:"psn"`
	LID uint16 `json:"lid"`
	// GID is the port's global id (RoCE, or InfiniBand across subnets); all zero when the
	// link needs none.
	GID [16]byte `json:"gid"`
	// MTU is the port's active MTU as enum ibv_mtu (1: 256 bytes ... 5: 4096 bytes).
	MTU int `json:"mtu"`
}

// Attr describes a device.
type Attr struct {
	Name string
	// MaxQPWR is the largest send queue a queue pair may have.
	MaxQPWR int
	// MaxInline is the most bytes a WRITE may carry inline (0: none).
	MaxInline int
	// MaxRdAtomic is how many READs and atomics a queue pair may have in flight at the
	// responder (the rest wait in the send queue).
	MaxRdAtomic int
	// Atomics reports whether the device does remote atomics at all.
	Atomics bool
}

// Region is memory registered with a device: mapped memory, never the Go heap, on a real
// device.
type Region struct {
	// Bytes is the memory; Addr its address as work requests name it.
	Bytes []byte
	Addr  uint64
	LKey  uint32
	RKey  uint32
	// Release deregisters the region and, for memory Alloc mapped, unmaps it.
	Release func() error
}

// QPConfig configures a device queue pair.
type QPConfig struct {
	// Depth is the send queue's size and its completion queue's.
	Depth int
	// MaxInline is the inline data the send queue must take.
	MaxInline int
	// Timeout is about how long the queue pair's transport may retry an unanswered request
	// before it fails with StatusRetryExcErr (0: the device's default); see RetryParams.
	Timeout time.Duration
}

// Device is the device layer: a NIC port with its protection domain.
type Device interface {
	Attr() Attr
	// Alloc maps n zeroed bytes and registers them for local writes: staging buffers.
	Alloc(n int) (*Region, error)
	// Register registers mem, which must be mapped memory that stays mapped until the region
	// is released, for remote reads, writes and atomics.
	Register(mem []byte) (*Region, error)
	// CreateQP creates an RC queue pair in its initial state, with its own completion queue.
	CreateQP(cfg QPConfig) (DevQP, error)
	// Close releases the device.
	Close() error
}

// DevQP is a device queue pair with its own completion queue.
type DevQP interface {
	// Endpoint is what the peer needs to connect to this queue pair.
	Endpoint() Endpoint
	// MaxInline is the most bytes a WRITE may carry inline on this queue pair.
	MaxInline() int
	// Connect moves the queue pair to ready-to-send, connected to remote.
	Connect(remote Endpoint) error
	// Post posts wrs as one chain (one doorbell) and returns how many were posted: all of
	// them unless err says why not.
	Post(wrs []WR) (int, error)
	// Poll moves up to len(wcs) completions into wcs and returns how many.
	Poll(wcs []WC) (int, error)
	// Break moves the queue pair to the error state: it executes nothing more, and requests
	// reaching it are dropped.
	Break() error
	// Close destroys the queue pair and its completion queue; after it returns the device
	// touches none of the queue pair's buffers.
	Close() error
}

// Notifier is implemented by device queue pairs that can say when a completion may be ready,
// so a poller can sleep instead of backing off.
type Notifier interface {
	Notify() <-chan struct{}
}

// Sink receives the outcomes of posted ops: each signaled op's exactly once.
type Sink interface {
	Complete(i int, val uint64, err error)
}

// errDead is the error of work posted on a queue pair that was closed without one.
var errDead = errors.New("verbs: queue pair closed")
