package kvstore

import (
	"context"
	"encoding/binary"
	"fmt"
	"reflect"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"
	"weak"

	"github.com/farmem/farmem/alloc"
	"github.com/farmem/farmem/ds/maxreg"
	"github.com/farmem/farmem/ds/swarm"
	"github.com/farmem/farmem/farmem"
	"github.com/farmem/farmem/farmem/replmem"
	"github.com/farmem/farmem/farmem/transport"
)

// Adopting a restarted replica under a Swarm store.
//
// A replica's node that restarted lost every object's copy there, and with it writes it had
// acknowledged: a write that completed on {A, C} before C crashed is on A alone, and a read
// answered by {B, C} would miss it. So the objects must not count C in a quorum again until
// C holds, for each object, a state at least as new as what a majority of the others hold.
// Store.Adopt does, for a node holding the store's replicas:
//
//  1. before the fabric adopts the node, it fences the node in every compute node's view of the
//     store, and of every other Swarm store of the process on the fabric (swarmView, shared by a
//     store's handles on a compute node; created if need be), and waits until no register verb
//     that looked at a view before is in flight (swarmFenceAhead); if the fabric adopted the node
//     already (another store's adoption came first) there is nothing to precede, and the
//     incarnation check below fences it. A view records, per replica node, the incarnation at
//     which the store's objects are whole there, and the register handles' memory (fencedMemory)
//     fails every op to a node fenced ahead or whose incarnation in the fabric differs from it, as
//     a down node's. So register operations leave the node out from before the fabric's adoption
//     (they run on the other f+1 or more, as with a crashed node), while the index's replicated
//     memory, the allocator and the copy itself reach it once the fabric adopted it. The order
//     matters: a verb reaches the incarnation the fabric adopted when the verb was posted
//     (farmem.Restarts), so a register verb that found the view clear and reached the transport
//     after the fabric's adoption would read the new, zeroed memory as the replica's state (an
//     Open's "replicas' headers differ", or a zero tag counted); the wait makes every register
//     verb posted after the adoption one that found the node fenced;
//  2. the store's metadata, the allocator and the index are restored as for any replicated
//     kind (adoptRep; the index by race.Table.Repopulate through replmem, whose version-0 rule
//     keeps the node out of the index's quorums word by word until copied);
//  3. it waits the fabric's down timeout, the objects' Lease and twice their Skew (ops posted to
//     the lost incarnation that apply late have then applied or never will, and so has every op an
//     operation pairs with an answer from the lost incarnation: swarmAdoptWait), then copies every
//     object the index names onto the node (swarm.Repopulate: header, metadata words, the largest
//     tuple's record, timestamp-lock words) and its life word (replmem); a second walk, a Lease
//     and a Skew later, copies the objects indexed while the first ran;
//  4. it records the new incarnation in every view of the store and lifts the fence: register
//     handles count the node again (an adoption that fails lifts the fence raised ahead, and the
//     fabric's incarnations decide again; other stores' views keep the node fenced by the
//     incarnation check until their own adoption). Each client handle, at its first operation
//     after the node was found fenced, makes its cached register handles forget what they knew of
//     the node's replicas (swarm.Register.Forget: their per-replica caches describe the lost
//     memory); the handles are kept, with their buffer-recycling state, so no write waits for a
//     buffer anew.
//
// Why a concurrent write cannot be lost: while the node is left out, a write completes only
// on f+1 of the others (a majority of 2f+1 without the node); every majority afterwards, the
// node included, shares one of them with it. A write completed before the copy read the others
// is at most the largest tag the copy wrote (the copy reads f+1 of the others, which share a
// replica with that write's majority). So once the node counts again, every completed write is
// held by a majority, and the next f crashes are tolerated. See swarm.Repopulate for the lock
// words. A client paused across the whole adoption in the middle of an operation cannot pair
// the lost replica's answer with a later one: a TRYLOCK counts only answers to rounds posted
// within the registers' Lease of its attempt's first, and starts over past it (swarm's
// tryLock); the max register counts a replica toward a majority holding a tag only on an
// answer to a batch built within the Lease of the others it counts (maxreg's evidence, for
// writes, write-backs and deferred write-backs alike). swarmAdoptWait says why that suffices.
//
// Views are per process: another process's clients keep the node fenced (its fabric still
// names the old incarnation) until it calls Adopt too, which finds the adoption done
// (Already) and records the incarnation in its own views. Likewise another Swarm store on the
// same fabric in this process fences the node from the moment this store's adoption begins
// (step 1 fences it in every store's views) until that store adopts it too. Handles opened
// outside a Store (an IndexEnv without Health or Fabric) have views fenced only from the
// fabric's adoption on: the race step 1 closes stays open for them.

// swarmView is one compute node's view of a Swarm store's replicas, shared by the store's
// handles there (keyed by the store's replmem.Health for that compute node).
type swarmView struct {
	r     farmem.Restarts // nil: the transport has no restarts, nothing is ever fenced
	fab   farmem.Fabric   // the store's fabric (nil: unknown; the view is never fenced ahead)
	nodes []farmem.NodeID

	mu    sync.Mutex
	good  map[farmem.NodeID]uint64 // incarnation at which the objects are whole on the node
	gen   map[farmem.NodeID]uint64 // per node, how often it was found fenced anew (under mu)
	ahead map[farmem.NodeID]bool   // fenced ahead of the fabric's adoption (swarmFenceAhead)

	// Verbs of the register handles in flight, by the parity of the fence generation fgen
	// they began in (enter): swarmFenceAhead raises fgen and waits for the older parity to
	// drain, so that no verb that looked at the view before the fence was raised is still
	// being posted when the fabric adopts the node.
	fgen   atomic.Uint64
	flight [2]atomic.Int64

	seen   atomic.Uint64 // r.Adoptions() when fenced was computed, plus one (0: never)
	fenced atomic.Pointer[[]farmem.NodeID]
	epoch  atomic.Uint64 // raised whenever a node is found fenced anew
}

// swarmViews holds the views, keyed weakly by the Health they belong to (a store's, per
// compute node), so that a closed store's views go with it. A view is added under
// swarmAheadMu.
var swarmViews sync.Map // weak.Pointer[replmem.Health] -> *swarmView

// The adoptions of Swarm replicas' nodes under way in the process (swarmFenceAhead to
// swarmEndAdopt), per fabric and node, and the lock under which they change and views are
// added: a view made during one starts fenced ahead.
var (
	swarmAheadMu sync.Mutex
	swarmAhead   = map[swarmAheadKey]int{}
	// swarmAdopting serializes the waits of swarmFenceAhead (a view's generations hold the
	// verbs of one wait at a time).
	swarmAdopting atomic.Bool
)

type swarmAheadKey struct {
	fab  farmem.Fabric
	node farmem.NodeID
}

// swarmViewOf returns the view shared by the handles using h, on fabric fab, created from the
// current incarnations of nodes that x (fab or a client of it) knows, the first time. With h
// nil (no store to share it with) the view is the caller's own. A view with fab nil (a fabric
// unknown) is fenced from the fabric's adoption of a node only, not ahead of it.
func swarmViewOf(h *replmem.Health, fab farmem.Fabric, x any, nodes []farmem.NodeID) *swarmView {
	var k weak.Pointer[replmem.Health]
	if h != nil {
		k = weak.Make(h)
		if old, ok := swarmViews.Load(k); ok {
			return old.(*swarmView)
		}
	}
	v := &swarmView{nodes: slices.Clone(nodes), good: map[farmem.NodeID]uint64{}, gen: map[farmem.NodeID]uint64{},
		ahead: map[farmem.NodeID]bool{}}
	if r, ok := x.(farmem.Restarts); ok {
		v.r = r
		for _, n := range nodes {
			v.good[n] = farmem.StatusOf(r, n).Incarnation
		}
	}
	if h == nil {
		return v
	}
	fab = comparableFabric(fab)
	v.fab = fab
	swarmAheadMu.Lock()
	defer swarmAheadMu.Unlock()
	if old, ok := swarmViews.Load(k); ok {
		return old.(*swarmView)
	}
	for _, n := range nodes {
		if fab != nil && swarmAhead[swarmAheadKey{fab, n}] > 0 {
			v.ahead[n] = true
		}
	}
	swarmViews.Store(k, v)
	runtime.AddCleanup(h, func(k weak.Pointer[replmem.Health]) { swarmViews.Delete(k) }, k)
	return v
}

// comparableFabric returns fab, or nil if its dynamic type cannot be compared (a fabric that
// is a struct value holding slices or maps, say): views are matched to fabrics by ==, and
// such a fabric's views are never fenced ahead.
func comparableFabric(fab farmem.Fabric) farmem.Fabric {
	if fab == nil || !reflect.TypeOf(fab).Comparable() {
		return nil
	}
	return fab
}

// swarmViewsOn returns the views of every store in the process on fabric fab that hold
// replicas on node (swarmAheadMu held).
func swarmViewsOn(fab farmem.Fabric, node farmem.NodeID) []*swarmView {
	var out []*swarmView
	swarmViews.Range(func(_, x any) bool {
		if v := x.(*swarmView); v.fab != nil && v.fab == fab && slices.Contains(v.nodes, node) {
			out = append(out, v)
		}
		return true
	})
	return out
}

// fencedSet returns the nodes whose ops register handles must fail: one atomic load when no
// adoption happened since the last look.
func (v *swarmView) fencedSet() []farmem.NodeID {
	if v.r == nil {
		return nil
	}
	a := v.r.Adoptions() + 1
	if v.seen.Load() == a {
		if f := v.fenced.Load(); f != nil {
			return *f
		}
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	v.recompute(a)
	return *v.fenced.Load()
}

// recompute sets fenced from the fabric's incarnations (under mu).
func (v *swarmView) recompute(a uint64) {
	var out []farmem.NodeID
	for _, n := range v.nodes {
		if st := farmem.StatusOf(v.r, n); st.Incarnation != v.good[n] || v.ahead[n] {
			out = append(out, n)
		}
	}
	var old []farmem.NodeID
	if p := v.fenced.Load(); p != nil {
		old = *p
	}
	for _, n := range out {
		if !slices.Contains(old, n) {
			v.gen[n]++
			v.epoch.Add(1)
		}
	}
	v.fenced.Store(&out)
	v.seen.Store(a)
}

// whole records that the objects are whole on node at the fabric's current incarnation, and
// lifts the fence raised ahead of its adoption.
func (v *swarmView) whole(node farmem.NodeID) {
	if v.r == nil {
		return
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	a := v.r.Adoptions() + 1
	v.recompute(a) // a fence nobody looked at yet still counts as one
	v.good[node] = farmem.StatusOf(v.r, node).Incarnation
	delete(v.ahead, node)
	v.recompute(a)
}

// swarmDrainPoll is how often swarmFenceAhead looks whether the verbs it waits for are done.
const swarmDrainPoll = 20 * time.Microsecond

// swarmFenceAhead fences node, before the fabric fab adopts it, in the views of every Swarm
// store of the process on fab that holds replicas there (and in those made until
// swarmEndAdopt), and returns once no register verb that may have looked at one of them before
// is in flight (counted by enter: posted, or for a verb that waits, done). Every register verb
// that reaches the transport from then on fails the node's ops (errFenced), so none posted
// after the fabric's adoption, which is bound to the new incarnation (farmem.Restarts: a verb
// reaches the incarnation adopted when it was posted), takes the new memory for the replica's
// state. Without the wait a verb that found its view clear just before the adoption and
// reached the transport just after it would. The fence stays until swarmEndAdopt. The wait is
// that of the verbs in flight (a round trip each, or a down timeout for one that meets a
// silent node), polled every swarmDrainPoll of rt's time, with no lock held; the process's
// waits run one at a time.
func swarmFenceAhead(ctx context.Context, rt farmem.Runtime, fab farmem.Fabric, node farmem.NodeID) error {
	if fab = comparableFabric(fab); fab == nil {
		return nil
	}
	swarmAheadMu.Lock()
	swarmAhead[swarmAheadKey{fab, node}]++ // views made from now on start fenced
	swarmAheadMu.Unlock()
	for !swarmAdopting.CompareAndSwap(false, true) {
		if err := rt.Sleep(ctx, swarmDrainPoll); err != nil {
			return err // the caller ends the adoption (swarmEndAdopt)
		}
	}
	defer swarmAdopting.Store(false)
	swarmAheadMu.Lock()
	vs := swarmViewsOn(fab, node)
	gs := make([]uint64, len(vs))
	for i, v := range vs {
		gs[i] = v.raise(node)
	}
	swarmAheadMu.Unlock()
	for i, v := range vs {
		for v.flight[gs[i]&1].Load() != 0 {
			if err := rt.Sleep(ctx, swarmDrainPoll); err != nil {
				return err // the caller ends the adoption (swarmEndAdopt)
			}
		}
	}
	return nil
}

// raise fences node ahead in the view and returns the fence generation whose verbs in flight
// may not have seen it.
func (v *swarmView) raise(node farmem.NodeID) uint64 {
	if v.r == nil {
		return 0 // no verb is counted
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	v.ahead[node] = true
	v.recompute(v.r.Adoptions() + 1)
	return v.fgen.Add(1) - 1
}

// swarmEndAdopt ends an adoption of node on fab that swarmFenceAhead began: the views in
// whole (those of the store that adopted it, once its objects are repopulated there) record
// the node's current incarnation as whole and lift the fence; every other view lifts it once
// no other adoption of the node is under way, and the fabric's incarnations decide again (a
// view of a store that did not adopt the node yet fences it until that store does).
func swarmEndAdopt(fab farmem.Fabric, node farmem.NodeID, whole []*swarmView) {
	if fab = comparableFabric(fab); fab == nil {
		for _, v := range whole {
			v.whole(node)
		}
		return
	}
	swarmAheadMu.Lock()
	defer swarmAheadMu.Unlock()
	k := swarmAheadKey{fab, node}
	if swarmAhead[k]--; swarmAhead[k] <= 0 {
		delete(swarmAhead, k)
	}
	for _, v := range whole {
		v.whole(node)
	}
	if swarmAhead[k] > 0 {
		return
	}
	for _, v := range swarmViewsOn(fab, node) {
		v.unfence(node)
	}
}

// unfence lifts the fence raised ahead on node: the fabric's incarnations decide again.
func (v *swarmView) unfence(node farmem.NodeID) {
	if v.r == nil {
		return
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	delete(v.ahead, node)
	v.recompute(v.r.Adoptions() + 1)
}

// enter begins a register verb: it counts the verb in flight (see swarmFenceAhead) and
// returns the nodes whose ops it must fail and the generation to hand to exit once the verb is
// posted (or done, for a verb that waits). Two atomic additions and three loads more than
// fencedSet.
func (v *swarmView) enter() ([]farmem.NodeID, uint64) {
	if v.r == nil {
		return nil, 0
	}
	for {
		g := v.fgen.Load()
		v.flight[g&1].Add(1)
		if v.fgen.Load() == g {
			// Counted in g: a swarmFenceAhead that raised the fence before this load of fgen
			// is seen below; one that raises it later waits for exit.
			return v.fencedSet(), g
		}
		v.flight[g&1].Add(-1)
	}
}

// exit ends a verb enter began.
func (v *swarmView) exit(g uint64) {
	if v.r != nil {
		v.flight[g&1].Add(-1)
	}
}

// Epoch changes whenever a node is found fenced anew: the handles' caches of it then describe
// memory it lost.
func (v *swarmView) Epoch() uint64 {
	v.fencedSet()
	return v.epoch.Load()
}

// gens returns a copy of how often each node was found fenced anew.
func (v *swarmView) gens() map[farmem.NodeID]uint64 {
	v.mu.Lock()
	defer v.mu.Unlock()
	out := make(map[farmem.NodeID]uint64, len(v.gen))
	for n, g := range v.gen {
		out[n] = g
	}
	return out
}

// errFenced is the error of an op a register handle sent to a fenced node.
var errFenced = fmt.Errorf("kvstore: swarm: the replica's node restarted and its objects are not repopulated yet: %w", farmem.ErrNodeLost)

// fencedMemory is the memory of a Swarm store's register handles: m, whose ops to the nodes its
// view fences fail at once with errFenced (wrapping farmem.ErrNodeLost, hence farmem.ErrNodeDown:
// the registers treat the node as down). With no node fenced (always, but during a replica's
// adoption) it adds a few atomic loads, two atomic additions (the count of verbs in flight,
// swarmView.enter) and a comparison per verb. While one is, a batch runs to completion before
// Post returns (the other ops through m's Do), so operations wait for every replica that answers,
// not for the first majority: a replica that hangs meanwhile costs them a down timeout.
type fencedMemory struct {
	farmem.Memory
	v *swarmView
}

func isFenced(fs []farmem.NodeID, n farmem.NodeID) bool {
	return len(fs) > 0 && slices.Contains(fs, n)
}

// Post implements farmem.Memory.
func (f *fencedMemory) Post(ctx context.Context, b *farmem.Batch) *farmem.Pending {
	fs, g := f.v.enter()
	defer f.v.exit(g)
	if len(fs) == 0 {
		return f.Memory.Post(ctx, b)
	}
	_ = f.do(ctx, b, fs)
	p, c := transport.NewPendingOn(b, nil, f.Runtime())
	for i, op := range b.Ops {
		if op.Unsignaled {
			continue
		}
		v, err := b.Result(i)
		c.Complete(i, v, err)
	}
	return p
}

// Do implements farmem.Memory.
func (f *fencedMemory) Do(ctx context.Context, b *farmem.Batch) error {
	fs, g := f.v.enter()
	defer f.v.exit(g)
	if len(fs) == 0 {
		return f.Memory.Do(ctx, b)
	}
	return f.do(ctx, b, fs)
}

// do runs b's ops to unfenced nodes through m's Do and fails the others.
func (f *fencedMemory) do(ctx context.Context, b *farmem.Batch, fs []farmem.NodeID) error {
	inner := new(farmem.Batch) // the transport's until its unsignaled ops are done
	var idx []int
	var first error
	for i, op := range b.Ops {
		if isFenced(fs, op.Addr.Node()) {
			transport.SetResult(&b.Ops[i], 0, errFenced)
			if first == nil && !op.Unsignaled {
				first = errFenced
			}
			continue
		}
		inner.Ops = append(inner.Ops, op)
		idx = append(idx, i)
	}
	if len(inner.Ops) > 0 {
		err := f.Memory.Do(ctx, inner)
		for j, i := range idx {
			if inner.Ops[j].Unsignaled {
				continue // never waited for: the transport may still be applying it
			}
			v, e := inner.Result(j)
			transport.SetResult(&b.Ops[i], v, e)
		}
		if first == nil {
			first = err
		}
	}
	return first
}

// check begins a single verb to a (enter): it returns errFenced if a's node is fenced, and
// the generation to hand to exit once the verb is done.
func (f *fencedMemory) check(a farmem.Addr) (uint64, error) {
	fs, g := f.v.enter()
	if isFenced(fs, a.Node()) {
		f.v.exit(g)
		return 0, errFenced
	}
	return g, nil
}

// Read implements farmem.Memory.
func (f *fencedMemory) Read(ctx context.Context, src farmem.Addr, dst []byte) error {
	g, err := f.check(src)
	if err != nil {
		return err
	}
	defer f.v.exit(g)
	return f.Memory.Read(ctx, src, dst)
}

// Write implements farmem.Memory.
func (f *fencedMemory) Write(ctx context.Context, dst farmem.Addr, src []byte) error {
	g, err := f.check(dst)
	if err != nil {
		return err
	}
	defer f.v.exit(g)
	return f.Memory.Write(ctx, dst, src)
}

// CAS implements farmem.Memory.
func (f *fencedMemory) CAS(ctx context.Context, a farmem.Addr, old, new uint64) (uint64, error) {
	g, err := f.check(a)
	if err != nil {
		return 0, err
	}
	defer f.v.exit(g)
	return f.Memory.CAS(ctx, a, old, new)
}

// FAA implements farmem.Memory.
func (f *fencedMemory) FAA(ctx context.Context, a farmem.Addr, delta uint64) (uint64, error) {
	g, err := f.check(a)
	if err != nil {
		return 0, err
	}
	defer f.v.exit(g)
	return f.Memory.FAA(ctx, a, delta)
}

// MaskedCAS implements farmem.Memory.
func (f *fencedMemory) MaskedCAS(ctx context.Context, a farmem.Addr, cmp, cmpMask, swap, swapMask uint64) (uint64, error) {
	g, err := f.check(a)
	if err != nil {
		return 0, err
	}
	defer f.v.exit(g)
	return f.Memory.MaskedCAS(ctx, a, cmp, cmpMask, swap, swapMask)
}

// swarmStoreViews returns the store's views on every compute node of the topology (creating
// them).
func (s *Store) swarmStoreViews() []*swarmView {
	var out []*swarmView
	for _, c := range s.fabric.Topology().ComputeNodes() {
		out = append(out, swarmViewOf(s.healthOf(c), s.fabric, s.fabric, s.meta))
	}
	return out
}

// swarmAdoption is what swarmPrepareAdopt did for an adoption: whether the node holds the
// store's replicas (replica), and whether it fenced the node ahead (ahead).
type swarmAdoption struct{ replica, ahead bool }

// swarmPrepareAdopt runs before the fabric adopts node (Store.Adopt with replicated
// metadata): for a Swarm store and one of its replicas' nodes, it creates the store's views
// and, if the fabric has not adopted the node's new incarnation yet (it is lost), fences the
// node in them and in every other Swarm store's views on the fabric, once no register verb
// that may have found it unfenced is in flight (swarmFenceAhead). The fence stays until
// swarmAdopted, or swarmAbortAdopt. A node the fabric adopted already (another store's
// adoption came first) is fenced in the views that did not record its incarnation by the
// incarnation check alone, and the views that did keep counting it. (A restart during the
// adoption, after this look, is fenced from the fabric's adoption on only.)
func (s *Store) swarmPrepareAdopt(ctx context.Context, node farmem.NodeID) (swarmAdoption, error) {
	if _, ok := swarmKind(s.opts.Index); !ok || !slices.Contains(s.meta, node) {
		return swarmAdoption{}, nil
	}
	s.swarmStoreViews()
	if farmem.StatusOf(s.fabric, node).State != farmem.NodeLost {
		return swarmAdoption{replica: true}, nil
	}
	return swarmAdoption{replica: true, ahead: true}, swarmFenceAhead(ctx, s.fabric.Runtime(), s.fabric, node)
}

// swarmAbortAdopt lifts the fences swarmPrepareAdopt raised on node, whose adoption failed:
// the fabric's incarnations decide again (a node the fabric adopted stays fenced until an
// adoption completes).
func (s *Store) swarmAbortAdopt(node farmem.NodeID, a swarmAdoption) {
	if a.ahead {
		swarmEndAdopt(s.fabric, node, nil)
	}
}

// swarmAdopted records, once node's objects are repopulated (or another client of the
// incarnation did it: Already), node's current incarnation in every view of the store, and
// lifts the fences swarmPrepareAdopt raised.
func (s *Store) swarmAdopted(node farmem.NodeID, a swarmAdoption) {
	if !a.ahead {
		for _, v := range s.swarmStoreViews() {
			v.whole(node)
		}
		return
	}
	swarmEndAdopt(s.fabric, node, s.swarmStoreViews())
}

// Repopulate implements Repopulator. A node outside the objects' replicas holds nothing of
// the store (Store.Adopt formats it again). On one of them (see the comment above swarmView):
// the index (race.Table.Repopulate), then, after the fabric's down timeout and the objects'
// Skew, every object the index names and its life word, in two passes.
func (x *swarmIndex) Repopulate(ctx context.Context, node farmem.NodeID) error {
	target := slices.Index(x.nodes, node)
	if target < 0 {
		return nil
	}
	if _, err := x.t.Repopulate(ctx, node); err != nil {
		return fmt.Errorf("kvstore: swarm: repopulate the index on %v: %w", node, err)
	}
	rt := x.m.Runtime()
	if err := rt.Sleep(ctx, swarmAdoptWait(x.m.Topology().DownTimeout, x.p)); err != nil {
		return err
	}
	// An object copied once stays whole on the node: every write to it since went to all the
	// others (the node is left out), so the second pass copies only objects the first missed.
	done := map[alloc.SymOffset]bool{}
	for pass := range 2 {
		if pass == 1 {
			if err := rt.Sleep(ctx, x.p.Lease+x.p.Skew); err != nil {
				return err
			}
		}
		err := x.t.Each(ctx, func(key, ref []byte) error {
			if len(key) == 0 || key[0] != swarmKeyPrefix || len(ref) != swarmRefSize {
				return nil
			}
			off := alloc.SymOffset(binary.LittleEndian.Uint64(ref))
			if done[off] {
				return nil
			}
			done[off] = true
			return x.repopulateObject(ctx, off, target)
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// swarmAdoptWait is how long Repopulate waits, from the start of its objects' copy, before
// reading the other replicas: the fabric's down timeout and the registers' Skew (ops posted
// to the lost incarnation that apply late have then applied or never will), plus their Lease
// and one more Skew. An operation pairs an answer of the lost replica (to a batch posted
// before the loss) only with answers to batches posted within Lease of it (ds/swarm's TRYLOCK
// attempts, maxreg's evidence), and a batch applies within the down timeout and a Skew of its
// post or never, so every op whose answer is paired with the lost replica's has applied on the
// replicas the copy reads before the copy reads them: the copy carries it, and no answer from
// before the loss is ever counted with one from the copy.
func swarmAdoptWait(down time.Duration, p maxreg.Params) time.Duration {
	return down + p.Lease + 2*p.Skew
}

// repopulateObjectTries bounds the copies of an object's life word while it is being written.
const repopulateObjectTries = 10

// repopulateObject copies the object at off onto replica target: its register and life word.
func (x *swarmIndex) repopulateObject(ctx context.Context, off alloc.SymOffset, target int) error {
	if _, err := swarm.Repopulate(ctx, x.m, x.addrs(off), target); err != nil {
		return fmt.Errorf("kvstore: swarm: repopulate the object at %#x on %v: %w", uint64(off), x.nodes[target], err)
	}
	life := x.lifeAddr(&swarmObj{off: off})
	for try := range repopulateObjectTries {
		c, err := x.rm.Repopulate(ctx, x.nodes[target], life, 8)
		if err != nil {
			return fmt.Errorf("kvstore: swarm: repopulate the life word of the object at %#x: %w", uint64(off), err)
		}
		if c.Skipped == 0 || try == repopulateObjectTries-1 {
			return nil // a word left locked is brought over by the write that holds it
		}
		if err := x.m.Runtime().Sleep(ctx, x.p.Lease); err != nil {
			return err
		}
	}
	return nil
}

// forgetFenced makes the cached register handles forget the replicas of the nodes found
// fenced anew since the cache was last valid (their memory was lost), and records the view's
// epoch e.
func (x *swarmIndex) forgetFenced(e uint64) {
	g := x.view.gens()
	for i, n := range x.nodes {
		if g[n] == x.gens[n] {
			continue
		}
		for _, o := range x.cache {
			o.reg.Forget(i)
		}
	}
	x.epoch, x.gens = e, g
}

// heal completes the object at off on the replicas whose register block was never formatted
// (a replica unreachable, paused or cut off, when the object was created: its header is still
// all zero), as Open's "headers differ" reports once such a replica answers in a majority. The
// block's memory there is fresh (zero), so the replica merely lags: it lost nothing it had
// acknowledged, and it counts in quorums whatever is copied; swarm.Heal gives it the header,
// the words, the top record and the lock words from the replicas that answer. A replica whose header is another
// register's (a block reused after a failed insert) is left alone: its words may hold that
// register's tags. A Skew's pause, one round trip reading the headers, then
// swarm.Heal's per replica.
func (x *swarmIndex) heal(ctx context.Context, off alloc.SymOffset) error {
	// The format the object's creator sent there and saw fail (ErrNodeDown) applies, if
	// ever, within the fabric's late-application bound, Skew beyond its failure, which came
	// before the object was indexed: wait that out, so that it cannot zero what is copied.
	if err := x.m.Runtime().Sleep(ctx, x.p.Skew); err != nil {
		return err
	}
	addrs := x.addrs(off)
	b := new(farmem.Batch)
	hs := make([][]byte, len(addrs))
	for i, a := range addrs {
		hs[i] = make([]byte, 8)
		b.Read(a, hs[i])
	}
	_ = x.fm.Do(ctx, b)
	healed := 0
	for i := range addrs {
		if _, err := b.Result(i); err != nil || binary.LittleEndian.Uint64(hs[i]) != 0 {
			continue
		}
		if _, err := swarm.Heal(ctx, x.fm, addrs, i); err != nil {
			return err
		}
		healed++
	}
	if healed == 0 {
		return fmt.Errorf("kvstore: swarm: the object at %#x: no unformatted replica to heal: %w", uint64(off), ErrBadRoot)
	}
	return nil
}
