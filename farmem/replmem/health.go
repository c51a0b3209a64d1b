package replmem

import (
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/farmem/farmem/farmem"
)

// Health is what the handles of one process know of their replicas' reachability: per memory
// node, whether it is suspected down and until when, shared by every handle given it
// (Options.Health). Without it each handle learns on its own that a replica hangs, so a hung,
// paused or cut-off replica costs every handle a down timeout each suspicion period; with it
// the cost is one down timeout per process per probe period, whatever the number of handles.
//
// The rules, per memory node:
//   - A verb to the node failing with farmem.ErrNodeDown suspects it for a period: first
//     Options.Suspect, doubling on each failed probe up to Options.SuspectMax. A failure of a
//     verb sent before the current suspicion was set changes nothing (those are the handles
//     that were already waiting when the node stopped answering).
//   - While suspected, handles leave the node out of their rounds (unless fewer than f+1
//     replicas would be left: then every replica is tried, as without suspicion).
//   - When the period has passed, the first handle to build a round takes the probe: its round
//     includes the node, while every other handle keeps leaving it out until the probe answers
//     (or, should the prober never report, for SuspectMax).
//   - A verb to the node that succeeds, sent after the suspicion was set, clears it and resets
//     the period.
//   - An adoption by the fabric (farmem.Restarts) clears every suspicion.
//
// Health is a decision about whom to ask, never about what a reply means: the protocol's
// quorums and its safety argument do not depend on it. It holds no lock across a verb and
// reads no clock: times come from the handles' farmem.Runtime. The zero Health is ready to
// use; one may serve several replicated memories on the same fabric and compute node (entries
// are per memory node). It must not be copied after first use, and must not be shared between
// compute nodes: reachability is a property of the path from one compute node to a memory
// node (a partition may cut one and not another).
type Health struct {
	nodes sync.Map // farmem.NodeID → *nodeHealth
	// adopted is 1 + the fabric's adoption count when last seen (0: never seen).
	adopted atomic.Uint64
}

// HealthStats count what a Health decided, over every handle sharing it.
type HealthStats struct {
	// Suspicions counts nodes suspected from a healthy state; Resuspicions the failed probes
	// (or other verbs sent while suspected) that suspected them again, with a doubled period.
	Suspicions, Resuspicions uint64
	// Probes counts the rounds that included a suspected node after its period passed.
	Probes uint64
	// Cleared counts suspicions lifted by a verb that succeeded.
	Cleared uint64
	// Missed is the ranges written while a node was left out and not yet copied to it;
	// Dropped those not remembered (beyond 16384 per node).
	Missed, Dropped uint64
}

// Stats returns the Health's counters.
func (h *Health) Stats() HealthStats {
	var s HealthStats
	h.nodes.Range(func(_, v any) bool {
		n := v.(*nodeHealth)
		n.mu.Lock()
		s.Suspicions += n.suspicions
		s.Resuspicions += n.resuspicions
		s.Probes += n.probes
		s.Cleared += n.cleared
		s.Missed += uint64(len(n.missed))
		s.Dropped += n.dropped
		n.mu.Unlock()
		return true
	})
	return s
}

// Suspected reports whether node is suspected down now (whether or not its period has passed:
// a suspicion ends only when a verb to the node succeeds, or with an adoption).
func (h *Health) Suspected(node farmem.NodeID) bool {
	v, ok := h.nodes.Load(node)
	return ok && v.(*nodeHealth).suspected.Load()
}

// node returns node's entry, made on first use.
func (h *Health) node(id farmem.NodeID) *nodeHealth {
	if v, ok := h.nodes.Load(id); ok {
		return v.(*nodeHealth)
	}
	v, _ := h.nodes.LoadOrStore(id, new(nodeHealth))
	return v.(*nodeHealth)
}

// adoptions notes the fabric's adoption count n and clears every suspicion if it changed since
// the last call (exactly one caller clears for each change).
func (h *Health) adoptions(n uint64) {
	old := h.adopted.Load()
	if old == n+1 || !h.adopted.CompareAndSwap(old, n+1) {
		return
	}
	if old == 0 {
		return // the first count seen: nothing was suspected before it
	}
	h.nodes.Range(func(_, v any) bool {
		v.(*nodeHealth).clear(false)
		v.(*nodeHealth).dropMissed()
		return true
	})
}

// nodeHealth is one memory node's suspicion. suspected mirrors the field guarded by mu so that
// the common case (not suspected) costs one atomic load.
type nodeHealth struct {
	suspected atomic.Bool

	mu      sync.Mutex
	until   farmem.Time   // left out until then
	since   farmem.Time   // when the suspicion was last set
	period  time.Duration // the current period
	probeAt farmem.Time   // when a round took the probe (valid with probing)
	probing bool

	suspicions, resuspicions, probes, cleared uint64

	// missed are ranges written while the node was left out (guarded by mu; missedN mirrors
	// their number): at most maxMissed, beyond which they are dropped and counted.
	missed  []span
	missedN atomic.Int64
	dropped uint64
}

// span is a logical range of a replicated memory.
type span struct {
	a farmem.Addr
	n int
}

// maxMissed bounds the ranges a node's entry remembers for it (16 bytes each).
const maxMissed = 1 << 14

func (n *nodeHealth) addMissed(s span) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if len(n.missed) >= maxMissed {
		n.dropped++
		return
	}
	n.missed = append(n.missed, s)
	n.missedN.Store(int64(len(n.missed)))
}

// takeMissed removes and returns the latest range on virtual node v, if any.
func (n *nodeHealth) takeMissed(v farmem.NodeID) (span, bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	for k := len(n.missed) - 1; k >= 0; k-- {
		if s := n.missed[k]; s.a.Node() == v {
			n.missed = slices.Delete(n.missed, k, k+1)
			n.missedN.Store(int64(len(n.missed)))
			return s, true
		}
	}
	return span{}, false
}

// dropMissed forgets the ranges (the node restarted: its owner copies it whole).
func (n *nodeHealth) dropMissed() {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.missed = nil
	n.missedN.Store(0)
}

// admit reports whether a round built at now includes the node: yes when it is not suspected;
// no while its period runs, or while another round's probe is out (for at most wait); else
// this round takes the probe.
func (n *nodeHealth) admit(now farmem.Time, wait time.Duration) bool {
	if !n.suspected.Load() {
		return true
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	switch {
	case !n.suspected.Load():
		return true
	case now < n.until:
		return false
	case n.probing && now < n.probeAt.Add(wait):
		return false
	}
	n.probing, n.probeAt = true, now
	n.probes++
	return true
}

// down notes a verb sent at sent that failed with ErrNodeDown at now: it suspects the node for
// base, or for twice its last period (at most max) if the verb was sent while it was suspected.
// A verb sent before the current suspicion was set changes nothing.
func (n *nodeHealth) down(now, sent farmem.Time, base, max time.Duration) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.suspected.Load() {
		if sent < n.since {
			return
		}
		n.period = min(2*n.period, max)
		n.resuspicions++
	} else {
		n.period = base
		n.suspicions++
	}
	n.since, n.until = now, now.Add(n.period)
	n.probing = false
	n.suspected.Store(true)
}

// up notes a verb sent at sent that succeeded: it clears a suspicion set before it was sent.
func (n *nodeHealth) up(sent farmem.Time) {
	if !n.suspected.Load() {
		return
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.suspected.Load() && sent >= n.since {
		n.clearLocked(true)
	}
}

func (n *nodeHealth) clear(count bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.suspected.Load() {
		n.clearLocked(count)
	}
}

func (n *nodeHealth) clearLocked(count bool) {
	n.suspected.Store(false)
	n.probing = false
	n.period = 0
	if count {
		n.cleared++
	}
}

// note reports to the Health the outcome of a verb to replica i sent at sent: a success clears
// a suspicion, farmem.ErrNodeDown sets or renews one (counted in Stats.Suspected); other
// errors say nothing of reachability, and give back a probe taken.
func (r *Memory) note(i int, sent farmem.Time, err error) {
	switch {
	case err == nil:
		r.hs[i].up(sent)
	case errors.Is(err, farmem.ErrNodeDown):
		r.stats.Suspected++
		r.hs[i].down(r.rt.Now(), sent, r.o.Suspect, r.o.SuspectMax)
	default:
		r.hs[i].unclaim()
	}
}

// unclaim gives back a probe whose verb ended with an error that says nothing of reachability
// (a canceled context, a closed client), so that the next round probes instead of every round
// waiting for the probe's deadline.
func (n *nodeHealth) unclaim() {
	if !n.suspected.Load() {
		return
	}
	n.mu.Lock()
	n.probing = false
	n.mu.Unlock()
}
