package kvstore

import (
	"encoding/binary"
	"fmt"

	"github.com/farmem/farmem/ds/race"
	"github.com/farmem/farmem/farmem"
)

// FlexKV's methods, in farmem.OwnerFlexKV's block.
const (
	flexSearch   = 1  // index read: the key's committed fingerprint matches in the proxy's copy
	flexWrite    = 2  // index write: commit a slot change with the proxy's local CAS
	flexInval    = 3  // drop a key's cached pair (a proxy's one-way message to a sharer)
	flexPause    = 4  // stop routing a partition (returns at once; flexDrain waits for its operations)
	flexLoad     = 5  // take a partition over: load its subtables from the memory nodes
	flexResume   = 6  // route a partition to its new owner
	flexHandOver = 7  // run a hand-over (on the coordinator, the lowest compute node)
	flexInvalAck = 8  // a sharer's one-way acknowledgement of an invalidation (the write's ticket)
	flexCommit   = 9  // a writer's poll of its pending write (the ticket): commit it if ready
	flexRenew    = 10 // a proxy renews its lease on a partition (on the coordinator)
	flexRoute    = 11 // a node asks the coordinator for a partition's settled route
	flexRecover  = 12 // a client that found a partition's proxy down asks the coordinator to un-proxy it
	flexMgrStats = 13 // the manager reads a node's access counters (and resets them)
	flexMgrSplit = 14 // the manager sets a node's memory budget for index and cache
	flexMgrElect = 15 // a manager takes or renews the manager's lease (on the coordinator)
	flexDrain    = 16 // wait until a paused partition's operations have finished, clear the node's cache
)

// Replies' status bytes.
const (
	stOK        = 0
	stConflict  = 1 // the slot holds another word (the reply carries it): resolve again
	stBusy      = 2 // a write of the key or the slot is in flight at the proxy: retry
	stStale     = 3 // the partition is not this proxy's in the request's epoch: route again
	stFull      = 4 // hand-over refused (rolled back)
	stPending   = 5 // the write awaits its sharers' acknowledgements (the reply carries its ticket)
	stForgotten = 6 // the polled ticket was forgotten (ticketBook's bounds): outcome unknown
	stSplit     = 7 // hand-over refused: a split held the partition (race.ErrBusy); the requester finishes its splits and asks again
)

// Write kinds.
const (
	wInsert = 1
	wUpdate = 2
	wDelete = 3
)

var le = binary.LittleEndian

var errWire = fmt.Errorf("kvstore: flexkv: malformed message: %w", farmem.ErrInvalid)

// reader decodes a message without panicking.
type reader struct {
	b   []byte
	bad bool
}

func (r *reader) u64() uint64 {
	if len(r.b) < 8 {
		r.bad = true
		return 0
	}
	v := le.Uint64(r.b)
	r.b = r.b[8:]
	return v
}

func (r *reader) u8() uint8 {
	if len(r.b) < 1 {
		r.bad = true
		return 0
	}
	v := r.b[0]
	r.b = r.b[1:]
	return v
}

func (r *reader) rest() []byte { b := r.b; r.b = nil; return b }

// noCacheFlag in a search request's read increments asks for the key's slots only: a writer
// confirming an answer of the memory nodes' copy, which neither counts as a read nor caches.
const noCacheFlag = 1 << 63

// searchReq: epoch, partition, read increments, key.
func encSearch(epoch uint64, p int, reads uint64, key []byte) []byte {
	b := le.AppendUint64(nil, epoch)
	b = le.AppendUint64(b, uint64(p))
	b = le.AppendUint64(b, reads)
	return append(b, key...)
}

// searchResp: status, cacheIt, n, then n pairs (word, slot address).
func encSearchResp(st uint8, cacheIt bool, words []race.Slot, slots []farmem.Addr) []byte {
	b := []byte{st, 0, uint8(len(words))}
	if cacheIt {
		b[1] = 1
	}
	for i := range words {
		b = le.AppendUint64(b, uint64(words[i]))
		b = le.AppendUint64(b, uint64(slots[i]))
	}
	return b
}

func decSearchResp(b []byte) (st uint8, cacheIt bool, words []race.Slot, slots []farmem.Addr, err error) {
	r := reader{b: b}
	st, ci, n := r.u8(), r.u8(), int(r.u8())
	for range n {
		words = append(words, race.Slot(r.u64()))
		slots = append(slots, farmem.Addr(r.u64()))
	}
	if r.bad {
		return 0, false, nil, nil, errWire
	}
	return st, ci == 1, words, slots, nil
}

// writeReq is an index write.
type writeReq struct {
	epoch  uint64
	p      int
	kind   uint8
	slot   farmem.Addr // the slot on the memory node
	expect race.Slot
	new    race.Slot
	others []race.Slot // an insert's committed fingerprint matches the client found not the key
	begun  farmem.Time // when the writer's node dropped its own pair (its clock)
	// learnt is when the writer last knew the slot held the key's word (its clock; the
	// shortcut's cache entry, or the start of its resolution; 0 for an insert).
	learnt farmem.Time
	key    []byte
}

func (w *writeReq) enc() []byte {
	b := le.AppendUint64(nil, w.epoch)
	b = le.AppendUint64(b, uint64(w.p))
	b = append(b, w.kind, uint8(len(w.others)))
	b = le.AppendUint64(b, uint64(w.slot))
	b = le.AppendUint64(b, uint64(w.expect))
	b = le.AppendUint64(b, uint64(w.new))
	b = le.AppendUint64(b, uint64(w.begun))
	b = le.AppendUint64(b, uint64(w.learnt))
	for _, o := range w.others {
		b = le.AppendUint64(b, uint64(o))
	}
	return append(b, w.key...)
}

func decWrite(b []byte) (writeReq, error) {
	r := reader{b: b}
	w := writeReq{epoch: r.u64(), p: int(r.u64())}
	w.kind = r.u8()
	n := int(r.u8())
	w.slot, w.expect, w.new = farmem.Addr(r.u64()), race.Slot(r.u64()), race.Slot(r.u64())
	w.begun = farmem.Time(r.u64())
	w.learnt = farmem.Time(r.u64())
	for range n {
		w.others = append(w.others, race.Slot(r.u64()))
	}
	w.key = r.rest()
	if r.bad || w.kind < wInsert || w.kind > wDelete || len(w.key) == 0 || w.p < 0 {
		return w, errWire
	}
	return w, nil
}

// status-and-word reply.
func encWord(st uint8, w race.Slot) []byte { return le.AppendUint64([]byte{st}, uint64(w)) }

func decWord(b []byte) (uint8, race.Slot, error) {
	r := reader{b: b}
	st, w := r.u8(), race.Slot(r.u64())
	if r.bad {
		return 0, 0, errWire
	}
	return st, w, nil
}

// control messages: partition, epoch, owner, root, attempt.
type ctlReq struct {
	p     int
	epoch uint64
	owner farmem.NodeID
	root  farmem.Addr
	// attempt is the epoch of the hand-over sending a pause or resume: a rolled-back one
	// resumes with the old route (epoch) and its own attempt.
	attempt uint64
}

func (c ctlReq) enc() []byte {
	b := le.AppendUint64(nil, uint64(c.p))
	b = le.AppendUint64(b, c.epoch)
	b = le.AppendUint64(b, uint64(c.owner))
	b = le.AppendUint64(b, uint64(c.root))
	return le.AppendUint64(b, c.attempt)
}

func decCtl(b []byte) (ctlReq, error) {
	r := reader{b: b}
	c := ctlReq{p: int(r.u64()), epoch: r.u64(), owner: farmem.NodeID(r.u64()), root: farmem.Addr(r.u64()), attempt: r.u64()}
	if r.bad || c.p < 0 {
		return c, errWire
	}
	return c, nil
}

// routeResp is the coordinator's answer to a route query or a recovery request: its status
// (ok: settled; busy: a hand-over of the partition is running or, for a recovery, the dead
// owner's lease is not fenced yet), the partition's route (owner, epoch), and the epoch of the
// last hand-over attempt that ended (a node paused by an attempt no later than it may resume
// with the route).
type routeResp struct {
	st    uint8
	owner farmem.NodeID
	epoch uint64
	ended uint64
}

func (r routeResp) enc() []byte {
	b := le.AppendUint64([]byte{r.st}, uint64(r.owner))
	b = le.AppendUint64(b, r.epoch)
	return le.AppendUint64(b, r.ended)
}

func decRoute(b []byte) (routeResp, error) {
	r := reader{b: b}
	x := routeResp{st: r.u8(), owner: farmem.NodeID(r.u64()), epoch: r.u64(), ended: r.u64()}
	if r.bad {
		return x, errWire
	}
	return x, nil
}
