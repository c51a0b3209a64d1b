package selcc

import (
	"fmt"
	"time"

	"github.com/farmem/farmem/farmem"
)

// Mode is how a client reaches GCLs.
type Mode uint8

const (
	// Cached is SELCC: a coherent cache per compute node with lazy release of the global latch.
	Cached Mode = iota
	// SEL is the paper's baseline on the same latch words with no cache: every access acquires
	// the global latch and reads the line (one round trip), and releases it, writing back what
	// it changed (one more).
	SEL
)

// String names the mode.
func (m Mode) String() string {
	switch m {
	case Cached:
		return "selcc"
	case SEL:
		return "sel"
	}
	return fmt.Sprintf("mode(%d)", uint8(m))
}

// Durability says when a cached line's changes reach far memory.
type Durability uint8

const (
	// WriteBack keeps changes in the cache until the line is evicted, downgraded for a reader
	// or lost to the lease: the paper's behaviour and the fastest. Dirty lines of a compute
	// node that dies are lost (an exclusive hand-over forwards a dirty line to the next writer
	// without writing it back, so the newest copy lives on one compute node only).
	WriteBack Durability = iota
	// WriteBackOnRelease also writes the dirty range back when an exclusive guard is released
	// (one more round trip per releasing writer that changed something), so far memory holds
	// every released write and a compute node's death loses only what its open guards had
	// not released. The ordered structures that keep their only copy in far memory (the
	// store's index) take this mode; a structure that can rebuild its content (a cache of a
	// replicated store) takes WriteBack.
	WriteBackOnRelease
)

// Options configure a Cluster. The zero value is a 2 KiB line, a 256-frame cache per compute
// node in Cached mode with WriteBack, γ = 256.
type Options struct {
	// Mode is Cached (default) or SEL.
	Mode Mode
	// Durability is WriteBack (default) or WriteBackOnRelease.
	Durability Durability
	// LineSize is the bytes of a GCL's body (default 2048; a multiple of 8, at most 32 KiB).
	// A GCL takes LineSize+8 bytes of far memory: its latch word, then its body.
	LineSize int
	// Frames is the number of cache frames per compute node (default 256); each takes
	// LineSize+64 bytes of the node's shared area.
	Frames int
	// EvictBatch is how many victims one eviction releases at once, in one batch (default
	// Frames/4, at least 1); the background evictor keeps min(2·EvictBatch, Frames/8) frames
	// free.
	EvictBatch int
	// Gamma is the hand-over budget γ: once invalidations of a line were dropped because local
	// clients held it, and local clients then waited for its local latch more than γ times
	// (reads count 1/Threads), the node gives the line up. Negative means never (γ = ∞); the
	// zero value means 256, the paper's balance.
	Gamma int
	// Threads is the P of the lease formula R_c/P + W_c (default 8).
	Threads int
	// Codec encodes latch words (default CodecFor the number of compute nodes).
	Codec Codec
	// SliceOffset is where, in each client's slice of its compute node's region, the client's
	// reply flags live: 8 bytes per compute node the codec encodes, then its grant word
	// (default 0).
	SliceOffset uint64
	// Backoff is the resend interval constant C·RTT: a node's k-th retry of one acquisition
	// waits Backoff/k (priority aging: the longer a node waits, the more often it retries;
	// default 4µs).
	Backoff time.Duration
	// UpgradeTries is how many failed S→M upgrade CASes a writer makes before it releases its
	// shared hold and acquires from scratch (default 2).
	UpgradeTries int
	// WriterHoldoff is how long, per unit of a starving writer's priority, a node that gave up
	// its shared hold to that writer keeps its own readers from taking the line again (spin
	// waiting, §5.3.2; default 1µs, capped at 64 units; negative turns spin waiting off).
	WriterHoldoff time.Duration
	// StarvationTries is the retry count from which a writer counts as starving (§5.3.2: its
	// invalidations are "high-priority"): spin waiting and priority matching act only for
	// writers that retried this often. A writer that merely found sharers and retried once or
	// twice is ordinary contention, not starvation; treating it as starving would make every
	// contended write refuse the readers that follow it and hold their nodes off the line
	// (default 20, as the paper's artifact: its storage/rdma.cc gives a writer starvation
	// level 0 below 20 retries, and only a writer with a nonzero level records a priority
	// for priority matching and spin waiting).
	StarvationTries int
	// NoPriorityMatching turns off priority matching (§5.3.2): by default a node that needed k
	// retries to get a line exclusive keeps it against readers whose invalidation carries a
	// priority (their retry count) below k, so a writer that starved is not robbed at once.
	NoPriorityMatching bool
	// ReplyTimeout bounds the wait for a peer's answer to an invalidation (default: 200 times
	// the fabric's down timeout, at least 1s); past it the acquisition fails with an error
	// wrapping farmem.ErrNodeDown.
	ReplyTimeout time.Duration
	// NoForwarding and NoDirtyBounds turn two of the paper's optimizations off, for its
	// ablation (§7.2.3; the third, batched eviction, is EvictBatch 1). Without forwarding an M
	// holder asked for its line writes it back and releases it (PeerWr) or downgrades (PeerRd)
	// and acknowledges, and the requester retries its atomic and READ: one more round trip
	// and a write-back per conflict. Without dirty bounds a write marks the whole line dirty, so
	// every write-back carries LineSize bytes. Neither changes correctness.
	NoForwarding, NoDirtyBounds bool
	// EagerForward makes an M holder that a writer asks for its line (case 1) post the
	// hand-over FAA and the forward of the line in one batch, so the writer has the line one
	// round trip sooner: the paper's order (§4.4.1: the holder "can immediately forward the
	// dirty GCL to the sender's local buffer without waiting for the ownership handover
	// round-trip"). By default the holder waits for the FAA before it forwards, so the word
	// names the new holder before the new holder can use the line. Under EagerForward the word
	// can lag behind: the new holder may use the line, and even release or hand it on, before
	// the FAA lands (the deltas commute, so the word ends right; an attempt that meets a
	// transient word naming a node that holds nothing gets a dropped message and retries), and
	// if the old holder crashes (or the FAA fails) in that window the FAA may never land,
	// leaving the new hold out of the word. Repair therefore refuses a cluster opened with it
	// (farmem.ErrInvalid): it is for runs without compute-node crashes, such as the paper's
	// experiments. The priority hand-over of the lease (see Fairness) keeps the default order.
	EagerForward bool
}

func (o Options) withDefaults(t *farmem.Topology) (Options, error) {
	if o.LineSize == 0 {
		o.LineSize = 2048
	}
	if o.LineSize < 8 || o.LineSize%8 != 0 || o.LineSize > 32<<10 {
		return o, fmt.Errorf("selcc: line size %d: %w", o.LineSize, farmem.ErrInvalid)
	}
	if o.Frames == 0 {
		o.Frames = 256
	}
	if o.Frames < 1 {
		return o, fmt.Errorf("selcc: %d frames: %w", o.Frames, farmem.ErrInvalid)
	}
	if o.EvictBatch <= 0 {
		o.EvictBatch = max(1, o.Frames/4)
	}
	if o.Gamma == 0 {
		o.Gamma = 256
	}
	if o.Threads <= 0 {
		o.Threads = 8
	}
	nodes := len(t.ComputeNodes())
	if o.Codec == nil {
		c, err := CodecFor(nodes)
		if err != nil {
			return o, err
		}
		o.Codec = c
	}
	for _, n := range t.ComputeNodes() {
		if int(n.ComputeID()) > o.Codec.MaxNodes() {
			return o, fmt.Errorf("selcc: compute node %v past codec %s: %w", n, o.Codec.Name(), farmem.ErrInvalid)
		}
	}
	if o.SliceOffset%8 != 0 || o.SliceOffset+8*uint64(o.Codec.MaxNodes()+1) > t.SliceSize {
		return o, fmt.Errorf("selcc: reply flags at %d (+%d) do not fit a %d-byte slice: %w",
			o.SliceOffset, 8*(o.Codec.MaxNodes()+1), t.SliceSize, farmem.ErrInvalid)
	}
	if o.Backoff == 0 {
		o.Backoff = 4 * time.Microsecond
	}
	if o.UpgradeTries <= 0 {
		o.UpgradeTries = 2
	}
	if o.StarvationTries <= 0 {
		o.StarvationTries = 20
	}
	if o.WriterHoldoff == 0 {
		o.WriterHoldoff = time.Microsecond
	}
	if o.WriterHoldoff < 0 {
		o.WriterHoldoff = 0
	}
	if o.ReplyTimeout == 0 {
		o.ReplyTimeout = max(time.Second, 200*t.DownTimeout)
	}
	return o, nil
}
