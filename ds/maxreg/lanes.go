package maxreg

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/farmem/farmem/alloc/nodearea"
	"github.com/farmem/farmem/farmem"
)

// ErrLaneStuck: a per-node lane's latch stayed held for a whole Lanes.Patience by no live
// handle of the process, nobody took it meanwhile, and it is still held (its holder died
// holding it, or its release could not reach the word). It wraps farmem.ErrNodeDown: the operation did not run,
// but callers treat it as an unknown outcome.
var ErrLaneStuck = fmt.Errorf("maxreg: lane latch held past its patience: %w", farmem.ErrNodeDown)

// DefaultLanePatience is Lanes.Patience when it is 0, or 64 reuse delays (Params.Lease +
// Params.Skew) if that is longer: far above a write's critical section (a few round trips, a
// down timeout of the simulator when replicas fail, or, without EarlyReuse, a wait for a
// buffer to age, which the node's other writers of the register wait out behind it).
const DefaultLanePatience = 100 * time.Millisecond

// Lanes holds what the clients of one process share of registers with per-node lanes
// (Params.PerNode): per compute node and register, the lane's state (the writer's last
// timestamp, which tag each record buffer holds and since when it is superseded, the last
// value seen in the node's metadata word on each replica and the CASes in flight there, the
// record writes still in flight per buffer and replica) and the address of its latch word,
// an 8-byte word in the node's shared area (alloc/nodearea) taken with nodearea.Latch. One
// Lanes serves every handle of the process on every register of one fabric: handles on the
// same register from the same compute node must share it, or they would use one lane as two
// writers (a store keeps one per fabric). It is safe for concurrent use; its mutexes guard
// only memory, never a verb.
//
// Memory: per (node, register) touched, the lane state (about 40 bytes per slot and per
// replica) and one 8-byte latch word in the node's area, kept for the Lanes' lifetime.
type Lanes struct {
	// Patience is how long a client waits for its node's lane latch before it looks whether
	// the latch is stuck (0: the larger of DefaultLanePatience and 64 reuse delays): it waits
	// on while a handle of the process holds the latch (a live holder, whose operation ends)
	// or the latch changed hands during the patience, takes it if it is free by then, and
	// fails with ErrLaneStuck otherwise.
	Patience time.Duration

	mu    sync.Mutex
	lanes map[laneKey]*laneState
}

// NewLanes returns an empty set of lanes.
func NewLanes() *Lanes { return &Lanes{} }

// laneKey names one lane: a register (its first replica's address and its header's nonce, so
// that a register formatted later at the same address gets a lane state of its own) and a
// compute node.
type laneKey struct {
	reg   farmem.Addr
	nonce uint64
	node  farmem.NodeID
}

// laneState is one writer's lane state: a client's own (per-client lanes) or shared by the
// handles of one compute node (per-node lanes), whose mu is then every such handle's mutex.
// The fields mu guards are marked; the others belong to the goroutine that holds the lane
// (the owner, or the latch holder).
type laneState struct {
	mu sync.Mutex

	last    uint64        // the writer's last timestamp
	slotTag []Tag         // per slot: the identity of the record last written there (0: never)
	freeAt  []farmem.Time // per slot: when it may be reused (client clock); 0: not superseded yet

	// Under mu.
	lateLast uint64
	lateSlot []Tag
	word     []Tag  // per replica: the last value seen in the writer's metadata word
	unsure   []bool // per replica: a CAS failed there and the word was not seen since
	posted   []Tag  // per replica: the tag of the last CAS posted there, while believed in flight or installed
	// flight, per slot and replica: the last record write posted into the slot there (per-node
	// lanes only): the slot is not rewritten there until that write is done, since writes of
	// two clients to one node are not ordered.
	flight [][]inFlight

	latch farmem.Addr // per-node lanes: the latch word (0 until allocated)
	// Under mu: holders counts the handles of this process that took the latch and have not
	// released it yet, turns the times one took it. While one holds it, its holder is alive
	// (its operation runs, and every verb of it ends, at worst after a down timeout); while
	// turns move, the latch changes hands (a waiter can lose every race for it for a while:
	// the latch is not fair). Either way a waiter keeps waiting.
	holders int
	turns   uint64
}

// inFlight is a posted record write: its batch's Pending and the op's index.
type inFlight struct {
	p  *farmem.Pending
	op int
}

func newLaneState(slots, replicas int) *laneState {
	ls := &laneState{slotTag: make([]Tag, slots), freeAt: make([]farmem.Time, slots), lateSlot: make([]Tag, slots),
		word: make([]Tag, replicas), unsure: make([]bool, replicas), posted: make([]Tag, replicas)}
	ls.flight = make([][]inFlight, slots)
	for s := range ls.flight {
		ls.flight[s] = make([]inFlight, replicas)
	}
	return ls
}

// lane returns the state of node's lane on the register at reg, made on first use.
func (ls *Lanes) lane(reg farmem.Addr, nonce uint64, node farmem.NodeID, slots, replicas int) *laneState {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	if ls.lanes == nil {
		ls.lanes = map[laneKey]*laneState{}
	}
	k := laneKey{reg: reg, nonce: nonce, node: node}
	st := ls.lanes[k]
	if st == nil || len(st.slotTag) != slots || len(st.word) != replicas {
		st = newLaneState(slots, replicas)
		ls.lanes[k] = st
	}
	return st
}

func (ls *Lanes) patience(reuse time.Duration) time.Duration {
	if ls.Patience > 0 {
		return ls.Patience
	}
	return max(DefaultLanePatience, 64*reuse)
}

// writerOf returns the writer id of client id: itself, or with per-node lanes its compute
// node's compute id (client ids are numbered node by node: farmem.Topology).
func writerOf(t *farmem.Topology, id farmem.ClientID, perNode bool) farmem.ClientID {
	if !perNode || t.ClientsPerNode <= 0 || id == 0 {
		return id
	}
	return farmem.ClientID((uint64(id)-1)/uint64(t.ClientsPerNode) + 1)
}

// wordFor returns the metadata word writer c updates: with per-node lanes (c-1) mod k (a
// compute id per node, so nodes up to k each own one), else wordOf's interleaving.
func (r *Replicated) wordFor(c farmem.ClientID) uint64 {
	if r.h.p.PerNode {
		if c == 0 {
			return 0
		}
		return (uint64(c) - 1) % uint64(r.h.p.Words)
	}
	return wordOf(r.m.Topology(), c, r.h.p.Words)
}

// Writer returns the id this handle writes under: the tag's writer field, the lane and the
// metadata word it uses (its client id, or its compute node's compute id with per-node
// lanes).
func (r *Replicated) Writer() farmem.ClientID { return r.id }

// HoldLane takes the handle's lane for the caller's whole operation, so that the writes and
// write-backs it makes meanwhile take it no more: with per-node lanes, the node's latch
// (waiting while another client of the node holds it, at most Lanes.Patience: ErrLaneStuck);
// otherwise nothing. It returns the release, which the caller must call once (on the owner
// goroutine). Safe-Guess's write holds the lane from its first batch to its rewrite, so that
// a node's writes to one register are sequential, as one writer's.
func (r *Replicated) HoldLane(ctx context.Context) (func(), error) {
	if !r.h.p.PerNode || r.held {
		return func() {}, nil
	}
	if err := r.ensureLatch(ctx); err != nil {
		return nil, err
	}
	l, err := nodearea.NewLatch(r.m, r.ls.latch)
	if err != nil {
		return nil, fmt.Errorf("maxreg: lane latch: %w", err)
	}
	r.mu.Lock()
	turns := r.ls.turns
	r.mu.Unlock()
	for {
		lctx, cancel := r.rt.WithTimeout(ctx, r.lanes.patience(r.reuse))
		err = l.Lock(lctx)
		cancel()
		if err == nil {
			break
		}
		// A Lock cut short by its context may have taken the latch all the same: a transport
		// may apply a CAS whose context ends before its answer returns. The latch then names
		// this client as its holder, and Unlock (which checks the holder, changing nothing
		// otherwise) releases exactly that hold; left, it would block the node's writes to
		// the register for good.
		mine := l.Unlock(context.WithoutCancel(ctx)) == nil
		if ctx.Err() != nil || !errors.Is(err, context.DeadlineExceeded) {
			return nil, fmt.Errorf("maxreg: lane latch: %w", err)
		}
		if mine {
			continue // the latch was this client's: it is free now, take it again
		}
		// Patience ran out. A holder of this process that has not released is alive and
		// its operation will end, and a latch that changed hands meanwhile is not stuck:
		// wait on. Only a latch that no live handle holds and that nobody took for a whole
		// patience (its holder's client died, or its release could not reach the word) is
		// stuck.
		r.mu.Lock()
		live := r.ls.holders > 0 || r.ls.turns != turns
		turns = r.ls.turns
		r.mu.Unlock()
		if !live {
			// A latch found free is not stuck (the Lock may have been cut short before its
			// CAS ran: a client descheduled for the whole patience).
			if ok, err := l.TryLock(context.WithoutCancel(ctx)); err == nil && ok {
				break
			}
			return nil, fmt.Errorf("maxreg: lane of writer %d on %v: %w", r.id, r.addrs[0], ErrLaneStuck)
		}
	}
	// The latch orders the holders' accesses in far memory; the lane mutex orders them for Go.
	r.mu.Lock()
	r.held = true
	r.ls.holders++
	r.ls.turns++
	r.mu.Unlock()
	r.stats.LaneLatches++
	return func() {
		r.mu.Lock()
		r.held = false
		r.mu.Unlock()
		_ = l.Unlock(context.WithoutCancel(ctx))
		r.mu.Lock()
		r.ls.holders--
		r.mu.Unlock()
	}, nil
}

// ensureLatch allocates the lane's latch word in the node's shared area if no handle of the
// process has (verbs to the node's own region only, no round trip).
func (r *Replicated) ensureLatch(ctx context.Context) error {
	r.mu.Lock()
	have := r.ls.latch != 0
	r.mu.Unlock()
	if have {
		return nil
	}
	if r.area == nil {
		a, err := nodearea.Open(ctx, r.m)
		if err != nil {
			return fmt.Errorf("maxreg: lane latch: %w", err)
		}
		r.area = a
	}
	w, err := r.area.AllocZeroed(ctx, 8)
	if err != nil {
		return fmt.Errorf("maxreg: lane latch: %w", err)
	}
	r.mu.Lock()
	won := r.ls.latch == 0
	if won {
		r.ls.latch = w
	}
	r.mu.Unlock()
	if !won {
		_ = r.area.Free(ctx, w, 8)
	}
	return nil
}

// slotOfOff returns the slot of this writer's lane at offset off, or -1 if off is not in it.
func (r *Replicated) slotOfOff(off uint64) int {
	lane := r.l.slotOff(MakeTag(0, r.id, false))
	if off < lane || off >= lane+uint64(r.h.p.Slots)*r.l.recSize {
		return -1
	}
	return int((off - lane) / r.l.recSize)
}

// busy reports whether a record write into slot s may still be in flight to replica i (per-node
// lanes only; under mu).
func (r *Replicated) busy(s, i int) bool {
	if !r.h.p.PerNode || s < 0 {
		return false
	}
	f := r.ls.flight[s][i]
	return f.p != nil && !f.p.OpDone(f.op)
}

// noteFlight records the record writes of parts (posted in p) into slot s (per-node lanes
// only; under mu).
func (r *Replicated) noteFlight(s int, p *farmem.Pending, parts []install) {
	if !r.h.p.PerNode || s < 0 {
		return
	}
	for i := range parts {
		if parts[i].write >= 0 {
			r.ls.flight[s][i] = inFlight{p: p, op: parts[i].write}
		}
	}
}
