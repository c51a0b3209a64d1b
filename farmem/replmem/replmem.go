package replmem

import (
	"context"
	"encoding/binary"
	"fmt"
	"slices"
	"time"

	"github.com/farmem/farmem/farmem"
	"github.com/farmem/farmem/farmem/transport"
)

// Errors of a replicated memory.
var (
	// ErrNoQuorum: fewer than f+1 replicas answered (more than f are down), or the replicas
	// never agreed within the attempts allowed. It wraps farmem.ErrNodeDown: the outcome of
	// the operation is unknown.
	ErrNoQuorum = fmt.Errorf("replmem: no quorum of replicas: %w", farmem.ErrNodeDown)
	// ErrNotWritten is the ErrNoQuorum of an atomic that never locked a majority of the
	// word's replicas holding it: it wrote nothing anywhere (its locks were given back), so
	// unlike ErrNoQuorum in general its outcome is known, and a caller may retry it elsewhere
	// or through other knowledge without the risk of applying it twice.
	ErrNotWritten = fmt.Errorf("%w: nothing written", ErrNoQuorum)
)

// Each replicated word is four words on each replica (the stride): its value, its control
// word, its version word and a pending value. A version is a counter (bits 62..16) and the
// client id of its writer (bits 15..0), ordered as an unsigned word. The control word holds
// the replica's version while the word is free, and lockedBit with the version its holder
// will write while locked. The version word holds the version of the value in the value word,
// or dirtyBit with the version of the pending value while a holder overwrites the value. The
// all-zero word is version 0, the version of every word a plain Write stores.
const (
	lockedBit    = 1 << 63
	dirtyBit     = 1 << 63
	counterShift = 16
	counterMask  = 1<<47 - 1
	stride       = 32 // bytes per replicated word on each replica
	ctlOff       = 8
	verOff       = 16
	pendOff      = 24
)

func versionWord(counter uint64, id farmem.ClientID) uint64 {
	return (counter&counterMask)<<counterShift | uint64(id)
}

func counterOf(c uint64) uint64 { return c >> counterShift & counterMask }

func isLocked(c uint64) bool { return c&lockedBit != 0 }

// Options configure one client's replicated memory.
type Options struct {
	// Nodes are the replicas: 2f+1 distinct memory nodes (3, 5 or 7), in the order the
	// physical layout uses.
	Nodes []farmem.NodeID
	// Virtual is the node id the replicated addresses carry. It must not be a node of the
	// fabric.
	Virtual farmem.NodeID
	// Lease bounds how long a client holds a word's replica locks (default 50ms of fabric
	// time); a lock past its lease plus ClockSkew is taken over by the next writer.
	Lease time.Duration
	// ClockSkew bounds clock differences between clients and the time a verb takes to land
	// (default 1ms).
	ClockSkew time.Duration
	// Backoff is the first pause after a lost lock round or a read that found no agreeing
	// quorum; pauses double up to 1ms (default 2µs), with random jitter.
	Backoff time.Duration
	// Suspect is how long a replica that failed with farmem.ErrNodeDown is first left out
	// of rounds before one round tries it again (default 20ms), so that a crashed or hung
	// replica costs one down timeout per period, not one per operation. Each failed try
	// doubles the period, up to SuspectMax; a success resets it. On a fabric with restarts
	// (farmem.Restarts), every replica is tried again as soon as the fabric adopts a node.
	Suspect time.Duration
	// SuspectMax caps the suspicion period (default four times the fabric's down timeout,
	// farmem.Topology.DownTimeout, and at least Suspect): a replica that stays unreachable
	// is tried about once per down timeout plus SuspectMax.
	SuspectMax time.Duration
	// Health, if set, is shared by the handles of one process (one compute node) on the same
	// fabric, so that they suspect a replica together: one handle's failure leaves it out of
	// every handle's rounds, and one handle at a time tries it again (see Health). Nil gives
	// the handle a Health of its own: each handle then pays a down timeout of its own per
	// period.
	Health *Health
}

// maxAttempts bounds the rounds of one operation.
const maxAttempts = 1 << 16

// maxBackoff caps the pause between rounds.
const maxBackoff = time.Millisecond

// repairAfter is how many reads finding no agreeing quorum (and no lock) a read makes before
// it repairs the words that disagree (an identity write under the locks).
const repairAfter = 8

// maxCached bounds the control words a handle remembers.
const maxCached = 1 << 14

// Stats count one handle's protocol work.
type Stats struct {
	// Reads and Writes count plain logical reads and writes, Atomics read-modify-writes.
	Reads, Writes, Atomics uint64
	// ReadRetries counts read rounds that found no f+1 replicas agreeing; Repairs the
	// identity writes that followed.
	ReadRetries, Repairs uint64
	// LockRetries counts lock rounds that got no majority; Takeovers the expired locks taken
	// over.
	LockRetries, Takeovers uint64
	// Expired counts the times this client held locks past its lease before it could write
	// under them (descheduled, or verbs slower than the lease allows): it gave them back and
	// started over, a lock round and a release more. A count that keeps growing says the
	// Lease is short for the machine or the fabric.
	Expired uint64
	// Settled counts atomics whose write reached at most f replicas' releases (a locked replica
	// failed in the write round) that an identity round then committed (see the package doc).
	Settled uint64
	// Suspected counts the verbs to a replica that failed with farmem.ErrNodeDown: each a
	// down timeout waited for (unless the node failed at once, as a crashed one may), and
	// each reported to the Health (see Health for which of them set or renew a suspicion).
	Suspected uint64
	// Heals counts the ranges copied to a replica that lacked them: found by a read as a hole
	// (words written on the others that it holds at version 0), or written while it was left
	// out (caught up one per batch once it is back); Healed the words copied.
	Heals, Healed uint64
}

// Memory is one client's view of a replicated virtual memory node: a farmem.Memory whose
// addresses on Options.Virtual are replicated on Options.Nodes, and whose other addresses pass
// through to the client's Memory. Like that Memory, it belongs to one goroutine.
type Memory struct {
	m    farmem.Memory
	rt   farmem.Runtime
	o    Options
	f    int
	id   farmem.ClientID
	ctl  map[farmem.Addr][]uint64 // the last control words seen, per logical word
	seen map[uint64]farmem.Time   // lock words of others, when first seen
	hs   []*nodeHealth            // per replica: its suspicion, in o.Health
	// probeWait is how long a round leaves a suspected replica out while another round's probe
	// of it has not answered.
	probeWait time.Duration
	last      uint64 // the last counter this handle wrote
	stats     Stats
	closed    bool
}

// New returns a replicated view of client m's memory. m stays the caller's (Close does not
// close it).
func New(m farmem.Memory, o Options) (*Memory, error) {
	n := len(o.Nodes)
	if n < 3 || n%2 == 0 || n > 7 {
		return nil, fmt.Errorf("replmem: %d replicas (want 3, 5 or 7): %w", n, farmem.ErrInvalid)
	}
	topo := m.Topology()
	for i, id := range o.Nodes {
		if !slices.Contains(topo.MemoryNodes(), id) || slices.Contains(o.Nodes[:i], id) {
			return nil, fmt.Errorf("replmem: replica %v is not a distinct memory node: %w", id, farmem.ErrInvalid)
		}
	}
	if slices.Contains(topo.MemoryNodes(), o.Virtual) || slices.Contains(topo.ComputeNodes(), o.Virtual) {
		return nil, fmt.Errorf("replmem: virtual node %v is a node of the fabric: %w", o.Virtual, farmem.ErrInvalid)
	}
	if o.Lease == 0 {
		o.Lease = 50 * time.Millisecond
	}
	if o.ClockSkew == 0 {
		o.ClockSkew = time.Millisecond
	}
	if o.Backoff == 0 {
		o.Backoff = 2 * time.Microsecond
	}
	if o.Suspect == 0 {
		o.Suspect = 20 * time.Millisecond
	}
	if o.SuspectMax == 0 {
		o.SuspectMax = max(o.Suspect, 4*topo.DownTimeout)
	}
	if o.Lease <= 2*o.ClockSkew || o.Backoff < 0 || o.Suspect < 0 || o.SuspectMax < o.Suspect {
		return nil, fmt.Errorf("replmem: options %+v: %w", o, farmem.ErrInvalid)
	}
	if o.Health == nil {
		o.Health = new(Health)
	}
	r := &Memory{m: m, rt: m.Runtime(), o: o, f: n / 2, id: m.Info().ID,
		ctl: make(map[farmem.Addr][]uint64), seen: make(map[uint64]farmem.Time),
		probeWait: o.SuspectMax + 2*topo.DownTimeout}
	for _, id := range o.Nodes {
		r.hs = append(r.hs, o.Health.node(id))
	}
	return r, nil
}

// Replicas returns the replica nodes.
func (r *Memory) Replicas() []farmem.NodeID { return slices.Clone(r.o.Nodes) }

// Virtual returns the virtual node id.
func (r *Memory) Virtual() farmem.NodeID { return r.o.Virtual }

// Underlying returns the client's own Memory.
func (r *Memory) Underlying() farmem.Memory { return r.m }

// ProtocolStats returns the handle's protocol counters.
func (r *Memory) ProtocolStats() Stats { return r.stats }

// Stride is the bytes each replica keeps per replicated byte: a replicated block of n bytes
// at logical offset o occupies Stride*n bytes at physical offset Stride*o on every replica.
const Stride = stride / 8

// Phys returns the physical address on replica i of logical address a's group of words
// (value, control, version, pending).
func (r *Memory) Phys(i int, a farmem.Addr) farmem.Addr {
	return farmem.MakeAddr(r.o.Nodes[i], Stride*a.Offset())
}

// virtual reports whether a is a replicated address.
func (r *Memory) virtual(a farmem.Addr) bool { return a.Node() == r.o.Virtual }

// targets returns the replicas a round built now goes to: those its Health admits (not
// suspected, or this round's probe of one), or all of them when fewer than f+1 are admitted.
func (r *Memory) targets() []int {
	if rs, ok := r.m.(farmem.Restarts); ok {
		// A node adopted since is reachable again: stop leaving it out.
		r.o.Health.adoptions(rs.Adoptions())
	}
	now := r.rt.Now()
	var ts []int
	for i := range r.o.Nodes {
		if r.hs[i].admit(now, r.probeWait) {
			ts = append(ts, i)
		}
	}
	if len(ts) <= r.f {
		ts = ts[:0]
		for i := range r.o.Nodes {
			ts = append(ts, i)
		}
	}
	return ts
}

// controls returns the remembered control words of logical word a.
func (r *Memory) controls(a farmem.Addr) []uint64 {
	c, ok := r.ctl[a]
	if !ok {
		if len(r.ctl) >= maxCached {
			clear(r.ctl)
		}
		c = make([]uint64, len(r.o.Nodes))
		r.ctl[a] = c
	}
	return c
}

func (r *Memory) sleep(ctx context.Context, d *time.Duration) error {
	if *d == 0 {
		*d = r.o.Backoff
	}
	j := time.Duration(r.rt.Rand().Int64N(int64(*d) + 1))
	if err := r.rt.Sleep(ctx, *d/2+j); err != nil {
		return err
	}
	*d = min(2**d, maxBackoff)
	return nil
}

func (r *Memory) usable() error {
	if r.closed {
		return fmt.Errorf("replmem: closed: %w", farmem.ErrClosed)
	}
	return nil
}

func checkWords(a farmem.Addr, n int) error {
	if a.Offset()%8 != 0 || n%8 != 0 {
		return fmt.Errorf("replmem: access of %d bytes at %v: %w", n, a, farmem.ErrMisaligned)
	}
	return nil
}

// Read implements farmem.Memory.
func (r *Memory) Read(ctx context.Context, src farmem.Addr, dst []byte) error {
	var b farmem.Batch
	b.Read(src, dst)
	return r.Do(ctx, &b)
}

// Write implements farmem.Memory.
func (r *Memory) Write(ctx context.Context, dst farmem.Addr, src []byte) error {
	var b farmem.Batch
	b.Write(dst, src)
	return r.Do(ctx, &b)
}

// CAS implements farmem.Memory.
func (r *Memory) CAS(ctx context.Context, a farmem.Addr, old, new uint64) (uint64, error) {
	var b farmem.Batch
	b.CAS(a, old, new)
	err := r.Do(ctx, &b)
	v, _ := b.Result(0)
	return v, err
}

// FAA implements farmem.Memory.
func (r *Memory) FAA(ctx context.Context, a farmem.Addr, delta uint64) (uint64, error) {
	var b farmem.Batch
	b.FAA(a, delta)
	err := r.Do(ctx, &b)
	v, _ := b.Result(0)
	return v, err
}

// MaskedCAS implements farmem.Memory.
func (r *Memory) MaskedCAS(ctx context.Context, a farmem.Addr, cmp, cmpMask, swap, swapMask uint64) (uint64, error) {
	var b farmem.Batch
	b.MaskedCAS(a, cmp, cmpMask, swap, swapMask)
	err := r.Do(ctx, &b)
	v, _ := b.Result(0)
	return v, err
}

// Post implements farmem.Memory. It runs the batch to completion before it returns (the
// protocol's rounds depend on each other), so the Pending it returns is already done.
func (r *Memory) Post(ctx context.Context, b *farmem.Batch) *farmem.Pending {
	_ = r.Do(ctx, b)
	p, c := transport.NewPending(b, nil)
	for i := range b.Ops {
		v, err := b.Result(i)
		c.Complete(i, v, err)
	}
	return p
}

// Do implements farmem.Memory: ops on other nodes go to the client's Memory in one batch, posted
// first; runs of plain reads and writes on the virtual node take one round of the protocol
// each; each atomic takes its own (see the package doc). The first error is returned; every op
// has its own result.
func (r *Memory) Do(ctx context.Context, b *farmem.Batch) error {
	if err := r.usable(); err != nil {
		for i := range b.Ops {
			transport.SetResult(&b.Ops[i], 0, err)
		}
		return err
	}
	var pass farmem.Batch
	var passIdx []int
	for i := range b.Ops {
		if !r.virtual(b.Ops[i].Addr) {
			pass.Ops = append(pass.Ops, b.Ops[i])
			passIdx = append(passIdx, i)
		}
	}
	var pp *farmem.Pending
	if len(pass.Ops) > 0 {
		pp = r.m.Post(ctx, &pass)
	}
	var first error
	note := func(err error) {
		if err != nil && first == nil {
			first = err
		}
	}
	var seg []int
	flush := func() {
		if len(seg) > 0 {
			note(r.plain(ctx, b, seg))
			seg = seg[:0]
		}
	}
	served := make([]bool, len(b.Ops))
	for i := range b.Ops {
		op := &b.Ops[i]
		if !r.virtual(op.Addr) || served[i] {
			continue
		}
		switch op.Kind {
		case farmem.OpRead, farmem.OpWrite:
			seg = append(seg, i)
		default:
			flush()
			// The reads that follow the atomic in the batch ride its write round.
			var follow []int
			for j := i + 1; j < len(b.Ops); j++ {
				fo := &b.Ops[j]
				if !r.virtual(fo.Addr) {
					continue
				}
				if fo.Kind != farmem.OpRead || checkWords(fo.Addr, len(fo.Buf)) != nil {
					break
				}
				follow = append(follow, j)
			}
			v, ok, err := r.atomic(ctx, op, b, follow)
			transport.SetResult(op, v, err)
			note(err)
			if ok {
				for _, j := range follow {
					served[j] = true
				}
			}
		}
	}
	flush()
	if pp != nil {
		err := transport.Finish(ctx, pp)
		for k, i := range passIdx {
			v, e := pass.Result(k)
			transport.SetResult(&b.Ops[i], v, e)
		}
		note(err)
	}
	r.catchUp(ctx)
	return first
}

// atomic runs one CAS, MaskedCAS or FAA on a replicated word, and the reads follow of b in
// its write round if they agree there (it reports whether they did: their results are set).
func (r *Memory) atomic(ctx context.Context, op *farmem.Op, b *farmem.Batch, follow []int) (uint64, bool, error) {
	if err := checkWords(op.Addr, 8); err != nil {
		return 0, false, err
	}
	r.stats.Atomics++
	var f func(uint64) (uint64, bool)
	switch op.Kind {
	case farmem.OpCAS:
		cmp, swap := op.Cmp, op.Swap
		f = func(old uint64) (uint64, bool) { return swap, old == cmp }
	case farmem.OpMaskedCAS:
		cmp, cm, swap, sm := op.Cmp, op.CmpMask, op.Swap, op.SwapMask
		f = func(old uint64) (uint64, bool) { return old&^sm | swap&sm, old&cm == cmp&cm }
	case farmem.OpFAA:
		d := op.Swap
		f = func(old uint64) (uint64, bool) { return old + d, true }
	default:
		return 0, false, fmt.Errorf("replmem: op kind %v: %w", op.Kind, farmem.ErrInvalid)
	}
	return r.rmwThen(ctx, op.Addr, f, b, follow)
}

// Wait implements farmem.Memory (the caller's own region: passed through).
func (r *Memory) Wait(ctx context.Context, a farmem.Addr, until func(uint64) bool) (uint64, error) {
	return r.m.Wait(ctx, a, until)
}

// Call implements farmem.Memory (passed through).
func (r *Memory) Call(ctx context.Context, node farmem.NodeID, method uint16, req []byte) ([]byte, error) {
	return r.m.Call(ctx, node, method, req)
}

// Send implements farmem.Memory (passed through).
func (r *Memory) Send(ctx context.Context, node farmem.NodeID, method uint16, req []byte) error {
	return r.m.Send(ctx, node, method, req)
}

// Stats implements farmem.Memory: the client's own counters (every physical verb).
func (r *Memory) Stats() farmem.Stats { return r.m.Stats() }

// Info implements farmem.Memory.
func (r *Memory) Info() farmem.ClientInfo { return r.m.Info() }

// Topology implements farmem.Memory: the fabric's (the virtual node is not in it).
func (r *Memory) Topology() *farmem.Topology { return r.m.Topology() }

// Runtime implements farmem.Memory.
func (r *Memory) Runtime() farmem.Runtime { return r.rt }

// Close marks the view closed; it is idempotent and leaves the client's Memory open.
func (r *Memory) Close() error {
	r.closed = true
	return nil
}

var le = binary.LittleEndian
